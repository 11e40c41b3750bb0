"""Special files for output tests: a FIFO with a reader, and a character device node made in the
test's own folder with the null device's numbers (the machine's /dev is never touched)."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

NULL_DEVICE = os.makedev(1, 3)


def null_node(path: Path) -> Path:
    """A character device node at `path` with the null device's numbers (skips where that is not allowed)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, NULL_DEVICE)
        with open(path, "wb") as fh:
            fh.write(b"x")
    except OSError as exc:  # not root, or a filesystem mounted nodev
        path.unlink(missing_ok=True)
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


class FifoReader:
    """Reads everything written into a FIFO, in a thread (a FIFO's writer waits for a reader)."""

    def __init__(self, path: Path):
        os.mkfifo(path)
        self.path, self.data = path, b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            self.data = fh.read()

    def result(self) -> bytes:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the FIFO's reader is still waiting"
        return self.data
