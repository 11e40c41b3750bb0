"""How much memory the machine can give a command now, to check sizes before any work, and
what running out of it looks like."""
from __future__ import annotations

import errno
import os
from pathlib import Path

from propme_metrics.core.errors import OutOfMemoryError

#: what a failed allocation says when it is not a MemoryError: a shared library that cannot be
#: mapped (ImportError / OSError), a Rust or C allocation error
_OUT_OF_MEMORY_WORDS = ("failed to map segment", "cannot allocate memory", "out of memory", "memory allocation")


def available_memory() -> int:
    """Bytes of memory free for new work now: MemAvailable (total RAM, else 8 GiB, when unknown),
    at most what an address-space limit (`ulimit -v`, prlimit --as) leaves this process."""
    free = _meminfo("/proc/meminfo", "MemAvailable:")
    free = total_memory() if free is None else free
    limit = address_space_limit()
    used = _meminfo("/proc/self/status", "VmSize:")
    if limit is not None and used is not None:
        free = min(free, max(0, limit - used))
    return free


def _meminfo(path: str, key: str) -> int | None:
    """A "<key> <n> kB" line of a /proc file, in bytes (None when unreadable)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def address_space_limit() -> int | None:
    """The process's address-space limit in bytes (`ulimit -v`, prlimit --as), None when unlimited."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` means the process ran out of memory (not a bad input or a bug)."""
    if isinstance(exc, MemoryError) or isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return True
    return any(w in str(exc).lower() for w in _OUT_OF_MEMORY_WORDS)


def out_of_memory(doing: str) -> OutOfMemoryError:
    """The one message for running out of memory while `doing` something, naming the limit in force."""
    limit = address_space_limit()
    where = (f"the process's address-space limit ({limit / 2**30:,.1f} GiB: ulimit -v / prlimit --as)"
             if limit is not None else "the machine's memory")
    return OutOfMemoryError(f"out of memory while {doing}: it needs more than {where} allows",
                            "raise the limit or free memory (a build with more --shards needs less per shard); "
                            "re-run the same command to resume")


def total_memory() -> int:
    """Bytes of RAM the machine has (8 GiB when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 2**30
