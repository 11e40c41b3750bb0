"""How much memory the machine can give a command now, to check sizes before any work."""
from __future__ import annotations

import os
from pathlib import Path


def available_memory() -> int:
    """Bytes of memory free for new work now (MemAvailable; total RAM, else 8 GiB, when unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return total_memory()


def total_memory() -> int:
    """Bytes of RAM the machine has (8 GiB when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 2**30
