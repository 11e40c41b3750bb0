"""Suffix-array bounds in native code: libdivsufsort's `sa_search`, the C library that pydivsufsort
ships compiled in its wheel (the index build's suffix sorter already), over a shard's mapped files.

One C call per query row does the whole binary search of that row, skipping the prefix both bounds
already share, instead of one numpy step for all rows at a time (`search.ShardSearcher.search`).
It compares suffixes byte by byte, as the engine orders them, so its bounds are the engine's.
libdivsufsort indexes with 32-bit signed integers: it serves a shard whose `tokenized.N` is under
2 GiB, whose 4-byte pointers it reads in place (smaller shards' pointers are widened in memory
once); a larger shard, or a system without the library, keeps the numpy search.
"""
from __future__ import annotations

import ctypes

import numpy as np

from propme_metrics.index.format import pointers

_MAX_BYTES = 2**31 - 1  #: libdivsufsort's 32-bit signed sizes and offsets
_C_INT, _C_PTR = ctypes.c_int32, ctypes.c_void_p


def _sa_search():
    """libdivsufsort's `sa_search` with its C signature, or None when the library cannot be loaded.

    A `CDLL` of its own, so that setting the signature leaves pydivsufsort's function object alone."""
    try:
        from pydivsufsort.dll import PATH_LIBDIVSUFSORT
        fn = ctypes.CDLL(str(PATH_LIBDIVSUFSORT)).sa_search
    except (ImportError, OSError, AttributeError, StopIteration):
        return None
    fn.restype = _C_INT
    fn.argtypes = [_C_PTR, _C_INT, _C_PTR, _C_INT, _C_PTR, _C_INT, ctypes.POINTER(_C_INT)]
    return fn


_SA_SEARCH = _sa_search()


def available() -> bool:
    """Whether libdivsufsort could be loaded on this system."""
    return _SA_SEARCH is not None


class NativeBounds:
    """Rank bounds of query rows in one shard: `tokens` (the mapped `tokenized.N`) and its suffix
    array as 32-bit pointers (`pointers_of`)."""

    def __init__(self, tokens: np.ndarray, table: np.ndarray):
        self._tokens, self.table = tokens, table  # held: the C calls read their memory
        self._t, self._t_bytes = tokens.ctypes.data, tokens.nbytes
        self._sa = table.ctypes.data
        self._call = _SA_SEARCH

    def bounds(self, query: np.ndarray, qstart: np.ndarray, qend: np.ndarray, upper: np.ndarray,
               first: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each row: the rank of its bound (lower: the first suffix >= query[qstart:qend];
        upper: the first one > it and not starting with it), searched among ranks [first, stop),
        which must hold it or end right before it, and the row's count there. `query` holds
        little-endian token ids."""
        query = np.ascontiguousarray(query)
        width, base = query.itemsize, query.ctypes.data
        call, t, t_bytes, sa = self._call, self._t, self._t_bytes, self._sa
        left = _C_INT()
        ref = ctypes.byref(left)
        out, counts = [], []
        for s, e, a, b, up in zip(qstart.tolist(), qend.tolist(), first.tolist(), stop.tolist(), upper.tolist()):
            if b <= a:  # an empty range: the bound is where it ends (the library answers -1 there)
                out.append(a)
                counts.append(0)
                continue
            count = call(t, t_bytes, base + s * width, (e - s) * width, sa + 4 * a, b - a, ref)
            out.append(a + left.value + (count if up else 0))
            counts.append(count)
        return np.asarray(out, dtype=np.int64), np.asarray(counts, dtype=np.int64)


def native_bounds(tokens: np.ndarray, table: np.ndarray, ptr_size: int) -> NativeBounds | None:
    """The native search of a shard, or None when it cannot serve it (no library, an empty shard,
    `tokenized.N` of 2 GiB or more). `table` is the raw suffix array (bytes)."""
    if _SA_SEARCH is None or not tokens.size or tokens.nbytes > _MAX_BYTES:
        return None
    if ptr_size == 4:
        as_int32 = table.view("<i4")  # in place: every byte offset is below 2**31
    else:  # under 16 MiB of tokens (pointers of 1 to 3 bytes): widened once, at most 32 MiB
        as_int32 = pointers(np.asarray(table), ptr_size).astype("<i4")
    return NativeBounds(tokens, as_int32)

