"""Files written safely: never half-written (atomic replacement), never by two processes at once (locks)."""
from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

#: where PropMe caches what it computes once (prompt sets, per-source counts) unless `cache_dir` /
#: PROPME_CACHE_DIR names another folder
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "propme"


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


def open_locked(path: Path, mode: str, busy: Exception) -> IO:
    """`path` opened (created if needed; text as UTF-8) and locked for this process alone, without
    waiting; `busy` is raised when another process holds the lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise busy from None
    return fh


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
