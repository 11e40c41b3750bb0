"""Helpers the benchmark scripts share: sizes written as 10M / 1B, peak memory, per-phase build
timings, and evicting an index from the page cache (for cold measurements)."""
from __future__ import annotations

import mmap
import os
import resource
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


def commit() -> str:
    """The short hash of the checked-out commit, for a run's header ('?' where git cannot tell)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(__file__)).stdout.strip() or "?"
    except OSError:
        return "?"


def parse_size(text: str) -> int:
    """'10M' -> 10,000,000; '1B' (or '1G') -> 10^9; a plain number as it is."""
    text = text.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9}.get(text[-1:], 1)
    return int(float(text.rstrip("KMBG")) * mult)


def size_name(n: int) -> str:
    """The inverse of `parse_size` for round sizes (10,000,000 -> '10M')."""
    for unit, div in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def maxrss_mib(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident memory in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(who).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10


def status_kb(field_name: str) -> int:
    """A field of /proc/self/status in KiB (e.g. RssAnon), or -1 where the system does not tell."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


@dataclass
class PhaseTimes:
    """The build's `on_phase` callback: seconds per phase (summed over shards) and the peak RSS
    right after each phase."""

    seconds: dict[str, float] = field(default_factory=dict)
    rss_mib: dict[str, float] = field(default_factory=dict)

    def __call__(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
        self.rss_mib[phase] = maxrss_mib()


def drop_mappings(searchers) -> None:
    """madvise(MADV_DONTNEED) on every file mapping of these shard searchers."""
    for shard in searchers:
        for arr in (shard.ds, shard.sa, shard.offsets, shard.metaoff, shard.meta):
            base = arr.base
            while base is not None and not isinstance(base, mmap.mmap):  # array -> memoryview -> mmap
                base = getattr(base, "obj", None) if isinstance(base, memoryview) else getattr(base, "base", None)
            if isinstance(base, mmap.mmap):
                base.madvise(mmap.MADV_DONTNEED)


def drop_page_cache(folder: Path) -> None:
    """posix_fadvise(POSIX_FADV_DONTNEED) on every file of the folder (unmapped pages leave the cache)."""
    for p in Path(folder).iterdir():
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def evict(tracer) -> None:
    """Drop every page of a tracer's index from the page cache (the process's mappings first)."""
    drop_mappings(tracer.search.shards)
    drop_page_cache(tracer.index.path)


def resident_fraction(path: Path) -> float:
    """Share of a file's pages in the page cache (`fincore`), or -1 when it cannot be told."""
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE", str(path)],
                             capture_output=True, text=True, timeout=30).stdout.split()
        return int(out[0]) / max(1, int(out[1]))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return -1.0
