"""Suffix-array bounds in native code: PropMe's C extension `native_ext` (`native_ext.c`, compiled at
install), which searches a batch of query rows in every shard of an index in one call.

Per shard and row it narrows the range with the first token's rank block and the in-memory
top-level samples, then binary-searches the mapped suffix array with all rows in lockstep, asking
for the pages every row needs next together (one round of parallel disk reads per step when the
shard is not in memory); a few threads take the shards (never one per row). Pointers of 1 to 8
bytes are read in place, so shards of 2 GiB of tokens and more are served too (5-byte pointers
from 4 GiB). Each row's two neighbours are checked against the query from its first token: a
suffix array found out of order there stops the search with the shard and its file named.

Where the extension could not be compiled or loaded (`available()` is False), `search.py` keeps its
numpy search, which gives the same results.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

try:
    from propme_metrics.index import native_ext
except ImportError:  # not compiled here (no C compiler at install, another platform)
    native_ext = None


def available() -> bool:
    """Whether the native search was compiled and loads on this system (little-endian hosts only)."""
    return native_ext is not None and sys.byteorder == "little"


def _threads() -> int:
    """Threads one search may use: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


THREADS = _threads()
#: compare each row's two neighbours with the query again (off only to measure what the check costs)
CHECK_NEIGHBOURS = True
#: None: each shard's searches take the disk route (batched page requests, wider steps) while its
#: pages are not in memory, else the memory route; True or False forces one (for tests)
DISK_ROUTE: bool | None = None


class NativeShard(NamedTuple):
    """One shard as the extension holds it, with what names it in an error."""

    handle: object     #: `native_ext.Shard` over the shard's mapped files and in-memory samples
    shard: int         #: shard id
    table: Path        #: the shard's suffix-array file


def native_shard(tokens: np.ndarray, table: np.ndarray, width: int, ptr_size: int, blocks, top, shard: int,
                 table_path: Path) -> NativeShard | None:
    """The native search of a shard, or None when it cannot serve it (no extension, an empty shard).
    `tokens` and `table` are the mapped `tokenized.N` and `table.N` (bytes); `blocks` the rank
    blocks of first tokens (keys, starts, ends) or None; `top` the top-level samples or None."""
    if not available() or not tokens.size:
        return None
    bk = bs = be = sk = sl = None
    if blocks is not None:
        bk, bs, be = (np.ascontiguousarray(a, dtype=np.int64) for a in blocks)
    stride = 0
    if top is not None:
        sk, sl, stride = np.ascontiguousarray(top.keys), np.ascontiguousarray(top.lengths, dtype=np.uint8), top.stride
    handle = native_ext.Shard(tokens, table, width, ptr_size, bk, bs, be, sk, sl, stride)
    return NativeShard(handle, shard, table_path)


class NativeBounds(NamedTuple):
    """Per shard (first axis) and row (second): the bound's rank and the common-prefix lengths of the
    row with the suffixes at hi - 1 and hi (0 where there is none)."""

    hi: np.ndarray
    lcp_lo: np.ndarray
    lcp_hi: np.ndarray
    out_of_order: list[int]  #: per shard: a rank where the suffix array was found out of order, or -1


def native_search(shards: tuple[NativeShard, ...], qkeys: np.ndarray, qstart: np.ndarray, qend: np.ndarray,
                  upper: np.ndarray) -> NativeBounds:
    """Bounds of every row qkeys[qstart:qend] (lower, or `upper`: the first suffix after all that
    start with the row) in every shard, in one call. `qkeys` are the rows' sort keys (`keys`)."""
    m, s = len(qstart), len(shards)
    hi, llo, lhi = (np.empty((s, m), dtype=np.int64) for _ in range(3))
    bad = [-1] * s
    if m and s:
        bad = native_ext.search(tuple(x.handle for x in shards), np.ascontiguousarray(qkeys, dtype=np.uint32),
                             np.ascontiguousarray(qstart, dtype=np.int64), np.ascontiguousarray(qend, dtype=np.int64),
                             np.ascontiguousarray(upper, dtype=np.uint8), hi, llo, lhi, min(THREADS, s), CHECK_NEIGHBOURS,
                             -1 if DISK_ROUTE is None else int(DISK_ROUTE))
    return NativeBounds(hi, llo, lhi, bad)
