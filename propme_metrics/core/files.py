"""Writing a file so that it is either absent, the old version, or complete: never half-written."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_output(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """A file to write `path` through: a uniquely named temporary file beside it, flushed to disk and
    renamed into place on success, deleted on failure. Concurrent writers never share a temporary
    file; the last one to finish wins."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; a written file gets the usual mode
        with open(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to `path` through `atomic_output`."""
    with atomic_output(path, "wb") as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
