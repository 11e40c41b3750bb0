"""Suffix-array search over the memory-mapped files of one index shard, with numpy.

Sort order, counts, rank ranges and document windows are exactly those of infini-gram's engine
(byte order of little-endian token ids), but all start positions of a query are searched together,
one vectorized step at a time, and both neighbours of every insertion point count, rank 0 included.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from .index import pointer_size
from .manifest import shard_file

_Q_END = -1    #: key past the end of a query (the suffix starts with the whole query)
_DS_END = -3   #: key past the end of a shard's token array (the suffix is a prefix of the query)
_CHUNK = 16    #: tokens compared per vectorized step
_AR = np.arange(_CHUNK, dtype=np.int64)


class Occurrences(NamedTuple):
    """Where a token sequence occurs: total count and the rank range [lo, hi) in each engine shard."""

    count: int
    segment_by_shard: list[tuple[int, int]]


class DocWindow(NamedTuple):
    """A document window around an occurrence, as the engine's `get_doc_by_rank_2` returns it."""

    shard: int            #: shard id (as in the manifest)
    doc_ix: int           #: document index over all shards in engine order
    doc_len: int
    token_ids: np.ndarray
    needle_offset: int
    metadata: str


def _map(path: Path, dtype) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r").view(np.ndarray)


class ShardSearcher:
    """One shard's files, memory-mapped: suffix-array search and document windows with numpy."""

    def __init__(self, folder: Path, sid: int, width: int, doc_base: int):
        self.id = sid
        self.width = width
        self.dtype = np.dtype("<u2" if width == 2 else "<u4")
        self.ds = _map(shard_file(folder, "tokenized", sid), self.dtype)
        self.n = len(self.ds)  # suffixes (token positions, separators included)
        self.ptr_size = pointer_size(self.n * width)
        self.sa = _map(shard_file(folder, "table", sid), np.uint8)
        self._weights = (256 ** np.arange(self.ptr_size, dtype=np.int64)).astype(np.int64)
        self._ptr_cols = np.arange(self.ptr_size, dtype=np.int64)
        self.offsets = _map(shard_file(folder, "offset", sid), np.dtype("<u8"))
        self.metaoff = _map(shard_file(folder, "metaoff", sid), np.dtype("<u8"))
        self.meta = _map(shard_file(folder, "metadata", sid), np.uint8)
        self.doc_base = doc_base
        self.blocks = self._first_token_blocks(shard_file(folder, "unigram", sid))

    # keys: a token's little-endian bytes read as a big-endian number sort like the engine's suffixes
    def keys(self, tokens: np.ndarray) -> np.ndarray:
        return np.asarray(tokens, dtype=self.dtype).byteswap().astype(np.int64)

    def ranks_to_token_pos(self, ranks: np.ndarray) -> np.ndarray:
        raw = self.sa[ranks[:, None] * self.ptr_size + self._ptr_cols]
        return (raw.astype(np.int64) @ self._weights) // self.width

    def _first_token_blocks(self, unigram: Path):
        """Rank range of the suffixes starting with each token (counts from `unigram.N`, checked)."""
        try:
            pairs = np.loadtxt(unigram, dtype=np.int64, ndmin=2)
        except (OSError, ValueError):
            return None
        if pairs.size == 0 or int(pairs[:, 1].sum()) != self.n:
            return None
        keys = self.keys(pairs[:, 0])
        order = np.argsort(keys, kind="stable")
        keys, counts = keys[order], pairs[order, 1]
        ends = np.cumsum(counts)
        starts = ends - counts
        # spot check: the largest block really starts and ends where the counts say
        big = int(np.argmax(counts))
        probe = [r for r in (starts[big] - 1, starts[big], ends[big] - 1, ends[big]) if 0 <= r < self.n]
        first = self.keys(self.ds[self.ranks_to_token_pos(np.asarray(probe, dtype=np.int64))])
        inside = (np.asarray(probe) >= starts[big]) & (np.asarray(probe) < ends[big])
        if not np.array_equal(first == keys[big], inside):
            return None
        return keys, starts, ends

    def initial_bounds(self, first_keys: np.ndarray):
        """(lo, hi, lcp_lo, lcp_hi): S(lo) < q <= S(hi); every suffix strictly between shares
        min(lcp_lo, lcp_hi) tokens with the query. Narrowed by the query's first token when possible."""
        m = len(first_keys)
        if self.blocks is None:
            return (np.full(m, -1, np.int64), np.full(m, self.n, np.int64),
                    np.zeros(m, np.int64), np.zeros(m, np.int64))
        keys, starts, ends = self.blocks
        i = np.searchsorted(keys, first_keys)
        ic = np.minimum(i, len(keys) - 1)
        present = keys[ic] == first_keys
        after = np.where(i < len(keys), starts[ic], self.n)  # first rank with a larger first token
        hi = np.where(present, ends[ic], after)
        lo = np.where(present, starts[ic] - 1, after - 1)
        # inside a block every suffix shares the first token (a bound only: the result takes the max)
        lcp = present.astype(np.int64)
        return lo.astype(np.int64), hi.astype(np.int64), lcp, lcp.copy()

    def compare(self, ranks, qkeys, qstart, qend, skip, upper):
        """For each row: common-prefix length of query qkeys[qstart:qend] with the suffix at `ranks`
        (at least `skip`), and whether that suffix lies right of the bound searched: lower bound:
        suffix >= query; upper bound: suffix > query and not starting with it."""
        tpos = self.ranks_to_token_pos(ranks)
        m = len(ranks)
        lcp = np.empty(m, np.int64)
        right = np.empty(m, bool)
        rows = np.arange(m)
        off = skip.astype(np.int64)
        last_q = len(qkeys) - 1
        while rows.size:
            cpos = tpos[rows, None] + off[:, None] + _AR
            ck = self.keys(self.ds[np.minimum(cpos, self.n - 1)])
            ck[cpos >= self.n] = _DS_END
            qpos = qstart[rows, None] + off[:, None] + _AR
            qk = np.where(qpos < qend[rows, None], qkeys[np.minimum(qpos, last_q)], _Q_END)
            neq = ck != qk
            done = neq.any(1)
            j = neq.argmax(1)
            d = np.flatnonzero(done)
            if d.size:
                cj, qj = ck[d, j[d]], qk[d, j[d]]
                r = rows[d]
                lcp[r] = off[d] + j[d]
                up = upper[r]
                right[r] = np.where(up, (qj != _Q_END) & (cj > qj), (qj == _Q_END) | (cj > qj))
            keep = ~done
            rows, off = rows[keep], off[keep] + _CHUNK
        return lcp, right

    def search(self, qkeys, qstart, qend, upper):
        """Vectorized binary search of every query row; returns (lo, hi, lcp_lo, lcp_hi) at the end:
        hi is the bound's rank, lo = hi - 1, and max(lcp_lo, lcp_hi) the longest match with a suffix."""
        lo, hi, llo, lhi = self.initial_bounds(qkeys[qstart])
        active = np.flatnonzero(hi - lo > 1)
        while active.size:
            mid = (lo[active] + hi[active]) // 2
            lcp, right = self.compare(mid, qkeys, qstart[active], qend[active],
                                      np.minimum(llo[active], lhi[active]), upper[active])
            a, b = active[right], active[~right]
            hi[a], lhi[a] = mid[right], lcp[right]
            lo[b], llo[b] = mid[~right], lcp[~right]
            active = active[hi[active] - lo[active] > 1]
        return lo, hi, llo, lhi

    def windows(self, ranks: list[int], max_disp_len: int) -> list[DocWindow]:
        """Document windows of `max_disp_len` tokens around each occurrence, clipped to its document:
        tokens [p - floor(M/2), p + ceil(M/2)) for an occurrence at p (the engine's `get_doc_by_rank`)."""
        w = self.width
        pos = self.ranks_to_token_pos(np.asarray(ranks, dtype=np.int64))
        ptrs = (pos * w).astype(np.uint64)
        local = np.searchsorted(self.offsets, ptrs, side="right").astype(np.int64) - 1
        before, after = max_disp_len // 2, max_disp_len - max_disp_len // 2
        out = []
        n_docs = len(self.offsets)
        for p, doc in zip(pos.tolist(), local.tolist()):
            doc_start = int(self.offsets[doc]) // w + 1  # skip the separator
            doc_end = int(self.offsets[doc + 1]) // w if doc + 1 < n_docs else self.n
            start, end = max(doc_start, p - before), min(doc_end, p + after)
            meta_end = int(self.metaoff[doc + 1]) if doc + 1 < n_docs else len(self.meta)
            out.append(DocWindow(shard=self.id, doc_ix=self.doc_base + doc, doc_len=doc_end - doc_start,
                                 token_ids=np.array(self.ds[start:end]), needle_offset=p - start,
                                 metadata=bytes(self.meta[int(self.metaoff[doc]):meta_end]).decode("utf-8", "replace")))
        return out
