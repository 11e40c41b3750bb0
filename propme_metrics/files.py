"""Writing a file so that it is either absent, the old version, or complete: never half-written."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to a temporary file beside `path`, then rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(tmp, path)
