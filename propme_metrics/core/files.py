"""Files written safely: never half-written (atomic replacement), never by two processes at once (locks).

An output that is a character device or a FIFO (`/dev/null`, `/dev/stdout`, a named pipe) is
written in place, as a stream: renaming a file over it would replace the device or the pipe.
"""
from __future__ import annotations

import os
import stat
import tempfile
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

#: where PropMe caches what it computes once (prompt sets, per-source counts) unless `cache_dir` /
#: PROPME_CACHE_DIR names another folder
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "propme"


def cache_dir() -> Path:
    """PropMe's cache folder: PROPME_CACHE_DIR, else DEFAULT_CACHE_DIR."""
    return Path(os.environ.get("PROPME_CACHE_DIR") or DEFAULT_CACHE_DIR)


def is_stream(path: str | Path) -> bool:
    """Whether `path` (followed through symlinks) is a character device or a FIFO: written in place."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


@contextmanager
def atomic_output(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """A file to write `path` through: a uniquely named temporary file beside it, flushed to disk and
    renamed into place on success, deleted on failure. Concurrent writers never share a temporary
    file; the last one to finish wins. A character device or FIFO is opened and written in place."""
    path = Path(path)
    if is_stream(path):
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
        return
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


#: the files this process holds locked (`open_locked`): a forked child lets go of them at once
_HELD_LOCKS: weakref.WeakSet[IO] = weakref.WeakSet()


def open_locked(path: Path, mode: str, busy: Exception) -> IO:
    """`path` opened (created if needed; text as UTF-8) and locked for this process alone, without
    waiting; `busy` is raised when another process holds the lock.

    The lock is `filelock`'s native lock on the file's own descriptor (flock on Unix), released by
    the kernel when the file is closed or its process ends, however it ends (a SIGKILL included): a
    lock left by a dead process is free again. A forked child (a tracing worker) would share it and
    keep it alive after its parent died: every child lets go of it as it starts
    (`_drop_inherited_locks`). filelock's `FileLock` keeps its descriptor private, so it could not
    be let go of in a child; the file locked is also the file written (a trace's journal)."""
    from filelock import lock_descriptor  # about 35 ms: loaded by the first lock, not by importing PropMe

    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    try:
        locked = lock_descriptor(fh.fileno(), blocking=False)
    except BaseException:
        fh.close()
        raise
    if not locked:
        fh.close()
        raise busy
    _HELD_LOCKS.add(fh)
    return fh


#: the lock files held through `hold_lock`, with the thread holding each (its nested hold passes)
_HELD_PATHS: set[tuple[str, int]] = set()


@contextmanager
def hold_lock(path: Path, busy: Exception) -> Iterator[None]:
    """Hold the lock file `path` (`open_locked`) for the block, then remove it; `busy` is raised at
    once when another process holds it. A process that finds the file unlinked under its lock (the
    holder before it removing it) tries again. A nested hold of the same path in the same thread
    passes (a command that locks its output folder around a library call that locks it too); any
    other thread or process gets `busy`."""
    key = (os.path.realpath(path), threading.get_ident())
    if key in _HELD_PATHS:
        yield
        return
    while True:
        fh = open_locked(path, "a", busy)
        try:
            same = os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        fh.close()
    _HELD_PATHS.add(key)
    try:
        yield
    finally:
        _HELD_PATHS.discard(key)
        path.unlink(missing_ok=True)
        fh.close()


def _drop_inherited_locks() -> None:
    """In a freshly forked child: point every inherited lock descriptor at /dev/null (opened read-only),
    so the lock's file is no longer shared with the child and ends with its parent. The descriptor
    numbers stay valid, so nothing the child inherited closes another file by mistake."""
    held = [fh for fh in _HELD_LOCKS if not fh.closed]
    _HELD_LOCKS.clear()
    _HELD_PATHS.clear()
    if not held:
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        for fh in held:
            os.dup2(null, fh.fileno())
    finally:
        os.close(null)


os.register_at_fork(after_in_child=_drop_inherited_locks)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
