"""Suffix-array search over the memory-mapped files of one index shard.

Sort order, counts, rank ranges and document windows are exactly those of infini-gram's engine
(byte order of little-endian token ids), and both neighbours of every insertion point count, rank 0
included. The bounds come from native code (`native_search.py`: one C call searches a batch of
query rows in every shard) wherever it was compiled; else all rows of a query are searched together
with numpy, one vectorized step at a time, as below.

For shards larger than memory, the files are mapped for random access (no read-around of megabytes
per page fault); both searches run the first steps of every search on an in-memory sample of the
suffix array (`toplevel.py`) and request the pages each remaining step needs from the disk together
(one batch of read-ahead hints per step) instead of one page fault after another.
"""
from __future__ import annotations

import mmap
import os
import resource
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from propme_metrics.core.errors import IndexFormatError
from propme_metrics.index.format import (
    ShardFile,
    document_bounds,
    metadata_line,
    parse_metadata,
    pointer_size,
    pointer_weights,
    read_unigrams,
    shard_file,
    token_layout,
)
from propme_metrics.index.native_search import NativeBounds, native_search, native_shard
from propme_metrics.index.native_search import available as native_available
from propme_metrics.index.toplevel import TopLevel, load_toplevel


class SearchedIndex(Protocol):
    """What the search reads of an index (`reader.Index`, which imports this module): its folder,
    token width, manifest (the shards' document counts) and shard order."""

    path: Path
    token_width: int
    manifest: Any
    engine_shards: list[int]

_Q_END = -1    #: key past the end of a query (the suffix starts with the whole query)
_DS_END = -3   #: key past the end of a shard's token array (the suffix is a prefix of the query)
_CHUNK = 8    #: tokens compared in the first vectorized step of a comparison
_CHUNK_GROWTH = 4  #: each further step compares this many times more (long matches end in few steps)
_MAX_CHUNK = 1024
_FANOUT = 4    #: a search step splits every row's rank range into this many parts
#: packed top-level keys (`_packed_samples`): every key shifted by this much, so that 0 sorts below
#: every token and the end of the shard (1) below every token too, but above a query's end
_SHIFT = 2 - _DS_END
_PAGE = mmap.PAGESIZE
_OFFSETS_PER_PAGE = _PAGE // 8  #: document offsets (8 bytes each) per page of `offset.N`
_RUSAGE_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def _major_faults() -> int:
    """Page faults that had to read the disk so far (this thread where the system tells)."""
    return resource.getrusage(_RUSAGE_WHO).ru_majflt


def damaged_table(shard: int, table: Path, what: str) -> IndexFormatError:
    """The error for a suffix array that a search or the bytes it leads to contradict (a damaged `table.N`)."""
    return IndexFormatError(f"shard {shard}: the suffix array {table} is damaged: {what}",
                            f"run `propme index verify {table.parent} --full`, then rebuild the index "
                            "(or restore the file)")


class SearchBounds(NamedTuple):
    """`ShardSearcher.search` of the same query rows in several shards: one row of each array per
    shard (engine order), one column per query row. hi is the bound's rank, lo = hi - 1, and
    max(llo, lhi) the row's longest match with a suffix of that shard."""

    lo: np.ndarray
    hi: np.ndarray
    llo: np.ndarray
    lhi: np.ndarray

    def longest(self) -> np.ndarray:
        """Per query row: its longest match with a suffix of any of the shards."""
        return np.maximum(self.llo, self.lhi).max(axis=0, initial=0)

    @staticmethod
    def join(parts: Sequence[SearchBounds]) -> SearchBounds:
        """The bounds of several groups of shards, in the order given."""
        return SearchBounds(*(np.concatenate(x) for x in zip(*parts)))


class Occurrences(NamedTuple):
    """Where a token sequence occurs: total count and the rank range [lo, hi) in each engine shard."""

    count: int
    segment_by_shard: list[tuple[int, int]]


class DocWindow(NamedTuple):
    """Part of a corpus document (a window around an occurrence, or its start), as the engine's
    `get_doc_by_rank_2` / `get_doc_by_ix_2` return it."""

    shard: int            #: shard id (as in the manifest)
    doc_ix: int           #: document index over all shards in engine order
    doc_len: int
    token_ids: np.ndarray
    needle_offset: int
    metadata: str         #: the stored metadata line

    @property
    def meta(self) -> dict[str, Any]:
        """The metadata line parsed (JSON as the build wrote it; of an adopted infini-gram index,
        the document's own record inside the line: `format.unwrap_metadata`)."""
        return parse_metadata(self.metadata, unwrap=True)


def _map(path: Path, dtype, random_access: bool = True) -> np.ndarray:
    """The file as a read-only array over a memory map; `random_access` turns the kernel's
    read-around off (it would read megabytes around every page a binary search touches)."""
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return np.zeros(0, dtype=dtype)
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    if random_access and hasattr(mm, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mm.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mm, dtype=dtype)


class _Prefetcher:
    """Asks the kernel to start reading, all at once, the pages of a file that a step will touch."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY)

    def __call__(self, byte_offsets: np.ndarray) -> None:
        for page in np.unique(byte_offsets // _PAGE).tolist():
            os.posix_fadvise(self.fd, page * _PAGE, _PAGE, os.POSIX_FADV_WILLNEED)

    def __del__(self):
        try:
            os.close(self.fd)
        except (OSError, AttributeError):
            pass


def _packed_samples(top: TopLevel) -> np.ndarray:
    """The samples' keys as one sortable row each: big-endian unsigned integers, every key plus
    `_SHIFT`, the shard's end as 1 (what `_sample_compare` compares, as rows of bytes in the same
    order), so that one `np.searchsorted` over byte strings replaces a binary search step by step."""
    dtype = np.dtype(">u4") if top.keys.dtype.itemsize <= 2 else np.dtype(">u8")
    keys = top.keys.astype(np.int64) + _SHIFT
    keys[np.arange(top.tokens)[None, :] >= top.lengths[:, None].astype(np.int64)] = _DS_END + _SHIFT
    return np.ascontiguousarray(keys.astype(dtype))  # the byte order last: arithmetic gives native order


def _key_limit(top: TopLevel) -> int:
    """A packed key above every key of a real token."""
    return int(np.iinfo(top.keys.dtype).max) + _SHIFT + 1


class ShardSearcher:
    """One shard's files, memory-mapped: suffix-array search and document windows.

    The bounds come from native code when it was compiled (`native_search.py`); `native=False`
    gives the numpy search, and `accelerate=False` the plain numpy search (no in-memory top
    level, no read-ahead hints, the kernel's default read-around): the same results, kept for
    comparison, for tests and for systems without the native search."""

    def __init__(self, folder: Path, sid: int, width: int, doc_base: int, accelerate: bool = True,
                 native: bool = True):
        self.id = sid
        self.width = width
        self.dtype = token_layout(width).dtype
        ds_path, sa_path = shard_file(folder, ShardFile.TOKENIZED, sid), shard_file(folder, ShardFile.TABLE, sid)
        self.table_path = sa_path
        self.ds = _map(ds_path, self.dtype, accelerate)
        self.n = len(self.ds)  # suffixes (token positions, separators included)
        self.ptr_size = pointer_size(self.n * width)
        self.sa = _map(sa_path, np.uint8, accelerate)
        self._weights = pointer_weights(self.ptr_size)
        self._ptr_cols = np.arange(self.ptr_size, dtype=np.int64)
        self.offsets = _map(shard_file(folder, ShardFile.OFFSET, sid), np.dtype("<u8"), accelerate)
        self.metaoff = _map(shard_file(folder, ShardFile.METAOFF, sid), np.dtype("<u8"), accelerate)
        self.meta = _map(shard_file(folder, ShardFile.METADATA, sid), np.uint8, accelerate)
        self.doc_base = doc_base
        self.native = None
        self._native_wanted = accelerate and native and native_available()
        self.blocks = self._first_token_blocks(shard_file(folder, ShardFile.UNIGRAM, sid))
        self.use_toplevel(None)
        self._fetch_sa = self._fetch_ds = None
        self._reading_disk = True  # whether the last step read from the disk (then the next prefetches)
        self._window_fetch: dict[str, _Prefetcher] | None = None
        self._windows_cold = True  # whether the last windows read from the disk (then the next prefetch)
        if accelerate and self.n:
            self.use_toplevel(load_toplevel(folder, sid, width, self.n, self._toplevel_ok))
            if hasattr(os, "posix_fadvise"):  # elsewhere searches and windows just fault pages in
                self._fetch_sa, self._fetch_ds = _Prefetcher(sa_path), _Prefetcher(ds_path)
                self._window_fetch = {"offsets": _Prefetcher(shard_file(folder, ShardFile.OFFSET, sid)),
                                      "metaoff": _Prefetcher(shard_file(folder, ShardFile.METAOFF, sid)),
                                      "meta": _Prefetcher(shard_file(folder, ShardFile.METADATA, sid))}
        self._offsets_path = shard_file(folder, ShardFile.OFFSET, sid)

    # keys: a token's little-endian bytes read as a big-endian number sort like the engine's suffixes
    def keys(self, tokens: np.ndarray) -> np.ndarray:
        return np.asarray(tokens, dtype=self.dtype).byteswap().astype(np.int64)

    def ranks_to_token_pos(self, ranks: np.ndarray) -> np.ndarray:
        if self._pointer_array is not None:
            return self._pointer_array[ranks].astype(np.int64) // self.width
        raw = self.sa[ranks[:, None] * self.ptr_size + self._ptr_cols]
        return (raw.astype(np.int64) @ self._weights) // self.width

    @cached_property
    def _pointer_array(self) -> np.ndarray | None:
        """The suffix array as one unsigned integer per pointer when pointers have a numpy width
        (1, 2, 4 or 8 bytes): one gather per rank instead of one per byte; else None."""
        if self.ptr_size not in (1, 2, 4, 8) or len(self.sa) % self.ptr_size:
            return None
        return self.sa.view(np.dtype(f"<u{self.ptr_size}"))

    def _first_token_blocks(self, unigram: Path):
        """Rank range of the suffixes starting with each token (counts from `unigram.N`, checked)."""
        try:
            pairs = read_unigrams(unigram)
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

    def _toplevel_ok(self, top: TopLevel) -> bool:
        """Spot check: a few samples, spread over the shard, equal the suffixes they stand for."""
        idx = np.unique(np.linspace(0, len(top.keys) - 1, num=min(16, len(top.keys))).astype(np.int64))
        pos = self.ranks_to_token_pos(idx * top.stride)
        lengths = np.minimum(top.tokens, self.n - pos)
        cols = np.arange(top.tokens)
        real = self.keys(self.ds[np.minimum(pos[:, None] + cols, self.n - 1)])
        stored = top.keys[idx].astype(np.int64)
        valid = cols[None, :] < lengths[:, None]
        return bool(np.array_equal(top.lengths[idx], lengths) and np.array_equal(real[valid], stored[valid]))

    def use_toplevel(self, top: TopLevel | None) -> None:
        """Start every search on these samples of the suffix array (None: the plain search). The
        native search holds them as they are, the numpy one only their packed form (`_packed_samples`)."""
        self.stride = top.stride if top is not None else 0
        if self._native_wanted:
            self.native = native_shard(self.ds, self.sa, self.width, self.ptr_size, self.blocks, top, self.id,
                                       self.table_path)
        numpy_top = top if self.native is None else None
        self.samples = _packed_samples(numpy_top) if numpy_top is not None else None
        self._key_limit = _key_limit(numpy_top) if numpy_top is not None else 0
        self._top_bytes = 0 if top is None else self.samples.nbytes if self.samples is not None else top.nbytes

    @property
    def toplevel_bytes(self) -> int:
        """Memory held by the samples (0 for the plain search)."""
        return self._top_bytes

    def _sample_compare(self, idx, qkeys, qstart, qend, upper):
        """`compare` against the in-memory samples `idx`: (lcp, right, determined); a row is not
        determined when the query and the sample agree on every sampled token (lcp >= tokens)."""
        t = self.samples.shape[1]
        ck = self.samples[idx].astype(np.int64) - _SHIFT  # the shard's end comes back as _DS_END
        qpos = qstart[:, None] + np.arange(t)
        qk = np.where(qpos < qend[:, None], qkeys[np.minimum(qpos, len(qkeys) - 1)], _Q_END)
        neq = ck != qk
        done = neq.any(1)
        j = neq.argmax(1)
        rows = np.arange(len(idx))
        cj, qj = ck[rows, j], qk[rows, j]
        right = np.where(upper, (qj != _Q_END) & (cj > qj), (qj == _Q_END) | (cj > qj))
        # all sampled tokens equal and the query no longer: the sample starts with the whole query
        whole = ~done & (qend - qstart <= t)
        right = np.where(whole, ~upper, right)
        lcp = np.where(done, j, np.where(whole, qend - qstart, t))
        return lcp, right, done | whole

    def toplevel_bounds(self, qkeys, qstart, qend, upper, lo, hi, llo, lhi):
        """Narrow (lo, hi) with the in-memory samples: the last sample left of the bound and the first
        one right of it, both found by one binary search of the packed samples (`_packed_samples`),
        with their exact lcps; rows whose query agrees with several samples on all sampled tokens
        keep the samples around those as bounds."""
        samples = self.samples
        stride, (count, t) = self.stride, samples.shape
        m = len(lo)
        qlen = qend - qstart
        # the query's first t keys, packed like the samples; past its end a key below every sample
        # key (a lower bound: a sample starting with the whole query lies right of it) or above
        # every one (an upper bound: such a sample lies left)
        qpos = qstart[:, None] + np.arange(t)
        packed = qkeys[np.minimum(qpos, len(qkeys) - 1)] + _SHIFT
        packed = np.where(qpos < qend[:, None], packed, np.where(upper, self._key_limit, 0)[:, None])
        as_bytes = f"S{samples.itemsize * t}"  # rows of big-endian keys compare as byte strings
        packed = np.ascontiguousarray(packed.astype(samples.dtype)).view(as_bytes)[:, 0]
        rows_sorted = samples.view(as_bytes)[:, 0]
        below, through = np.searchsorted(rows_sorted, packed, "left"), np.searchsorted(rows_sorted, packed, "right")
        # samples equal to the query's first t tokens: when the query has no more tokens they start
        # with it (right of a lower bound, left of an upper one); else they are not determined
        whole = qlen <= t
        last_left = np.where(upper & whole, through, below) - 1
        first_right = np.where(~upper & whole, below, through)
        both = np.concatenate((np.maximum(last_left, 0), np.minimum(first_right, count - 1)))
        rows = np.tile(np.arange(m), 2)
        lcp = self._sample_compare(both, qkeys, qstart[rows], qend[rows], upper[rows])[0]
        new_lo = last_left * stride
        tighter = (last_left >= 0) & (new_lo > lo)
        lo, llo = np.where(tighter, new_lo, lo), np.where(tighter, lcp[:m], llo)
        new_hi = first_right * stride
        tighter = (first_right < count) & (new_hi < hi)
        hi, lhi = np.where(tighter, new_hi, hi), np.where(tighter, lcp[m:], lhi)
        return lo, hi, llo, lhi

    def compare(self, ranks, qkeys, qstart, qend, skip, upper):
        """For each row: common-prefix length of query qkeys[qstart:qend] with the suffix at `ranks`
        (at least `skip`), and whether that suffix lies right of the bound searched: lower bound:
        suffix >= query; upper bound: suffix > query and not starting with it."""
        m = len(ranks)
        prefetch = self._fetch_sa is not None and self._reading_disk
        if prefetch:
            self._fetch_sa(ranks * self.ptr_size)
        faults = _major_faults()  # counted, not timed: on a busy machine a slow step is often just a preempted one
        tpos = self.ranks_to_token_pos(ranks)
        lcp = np.empty(m, np.int64)
        right = np.empty(m, bool)
        rows = np.arange(m)
        off = skip.astype(np.int64)
        last_q = len(qkeys) - 1
        if prefetch:  # later chunks of a suffix mostly lie on the page of its first
            first = tpos + off
            self._fetch_ds(np.concatenate((first, first + _CHUNK - 1)) * self.width)
        timed = True
        chunk = _CHUNK
        while rows.size:
            ar = np.arange(chunk, dtype=np.int64)
            cpos = tpos[rows, None] + off[:, None] + ar
            ck = self.keys(self.ds[np.minimum(cpos, self.n - 1)])
            if timed:  # both reads of this step fault only when the pages are not in memory
                self._reading_disk = _major_faults() > faults
                timed = False
            ck[cpos >= self.n] = _DS_END
            qpos = qstart[rows, None] + off[:, None] + ar
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
            rows, off = rows[keep], off[keep] + chunk
            chunk = min(chunk * _CHUNK_GROWTH, _MAX_CHUNK)
        return lcp, right

    def search(self, qkeys, qstart, qend, upper):
        """Search of every query row qkeys[qstart:qend] for its lower or (`upper`) upper bound; returns
        (lo, hi, lcp_lo, lcp_hi): hi is the bound's rank, lo = hi - 1, and max(lcp_lo, lcp_hi) the
        longest match of the row with a suffix. Natively where compiled, else with numpy."""
        if self.native is not None:
            b = checked_native_search((self,), qkeys, qstart, qend, upper)
            return b.hi[0] - 1, b.hi[0], b.lcp_lo[0], b.lcp_hi[0]
        return self._numpy_search(qkeys, qstart, qend, upper)

    def _numpy_search(self, qkeys, qstart, qend, upper):
        """Vectorized k-ary search of every query row: `search` with numpy.

        Each step compares up to `_FANOUT` - 1 suffixes spread over every row's range at once (the
        bound lies after the last one left of it), so a range of R ranks takes log_FANOUT(R)
        vectorized steps instead of log2(R); the result is that of a binary search."""
        lo, hi, llo, lhi = self.initial_bounds(qkeys[qstart])
        if self.samples is not None and len(lo):
            lo, hi, llo, lhi = self.toplevel_bounds(qkeys, qstart, qend, upper, lo, hi, llo, lhi)
        active = np.flatnonzero(hi - lo > 1)
        while active.size:
            a_lo, width = lo[active], hi[active] - lo[active]
            k = int(min(_FANOUT, width.max()))  # k - 1 probes per row, all strictly inside its range
            probes = a_lo[:, None] + np.maximum(1, width[:, None] * np.arange(1, k) // k)
            rows = np.repeat(active, k - 1)
            lcp, right = self.compare(probes.ravel(), qkeys, qstart[rows], qend[rows],
                                      np.minimum(llo[rows], lhi[rows]), upper[rows])
            lcp, right = lcp.reshape(-1, k - 1), right.reshape(-1, k - 1)
            # `right` grows with the rank: the first right probe is the new hi, the one before it the new lo
            first = np.where(right.any(1), right.argmax(1), k - 1)
            at = np.arange(len(active))
            moved = first < k - 1
            hi[active[moved]], lhi[active[moved]] = probes[at[moved], first[moved]], lcp[at[moved], first[moved]]
            moved = first > 0
            lo[active[moved]], llo[active[moved]] = (probes[at[moved], first[moved] - 1],
                                                     lcp[at[moved], first[moved] - 1])
            active = active[hi[active] - lo[active] > 1]
        return lo, hi, llo, lhi

    @cached_property
    def _offset_sample(self) -> np.ndarray:
        """Every `_OFFSETS_PER_PAGE`-th document offset, in memory (read once, front to back): which
        page of `offset.N` holds a position's document, without a binary search over the disk."""
        return np.fromfile(self._offsets_path, dtype="<u8")[::_OFFSETS_PER_PAGE].copy()

    def _documents_of(self, byte_pos: np.ndarray) -> np.ndarray:
        """Local document of each byte position in `tokenized.N`: the sample's page, then that page."""
        page = np.searchsorted(self._offset_sample, byte_pos, side="right").astype(np.int64) - 1
        out = np.empty(len(byte_pos), dtype=np.int64)
        for i, (pg, b) in enumerate(zip(page.tolist(), byte_pos.tolist())):
            first = pg * _OFFSETS_PER_PAGE
            out[i] = first + int(np.searchsorted(self.offsets[first:first + _OFFSETS_PER_PAGE], b, side="right")) - 1
        return out

    def windows(self, ranks: list[int], max_disp_len: int) -> list[DocWindow]:
        """Document windows of `max_disp_len` tokens around each occurrence, clipped to its document:
        tokens [p - floor(M/2), p + ceil(M/2)) for an occurrence at p (the engine's `get_doc_by_rank`).

        When the shard's last windows had to read the disk, the pages of all windows are requested
        together, file by file (pointers; then offsets and tokens; then metadata offsets; then
        metadata), so a cold call waits for a few rounds of parallel reads."""
        before, after = max_disp_len // 2, max_disp_len - max_disp_len // 2
        ranks_a = np.asarray(ranks, dtype=np.int64)
        cold = self._window_fetch is not None and self._windows_cold and len(ranks_a) > 0
        faults = _major_faults()
        if cold:
            self._fetch_sa(ranks_a * self.ptr_size)
        pos = self.ranks_to_token_pos(ranks_a)
        byte_pos = (pos * self.width).astype(np.uint64)
        if cold:
            page = np.searchsorted(self._offset_sample, byte_pos, side="right").astype(np.int64) - 1
            self._window_fetch["offsets"](np.concatenate((page, page + 1)) * mmap.PAGESIZE)
            ends = np.minimum(pos + after, self.n - 1)
            spans = [np.arange(a, b + 1, _PAGE // self.width) for a, b in zip(np.maximum(pos - before, 0).tolist(),
                                                                                 ends.tolist())]
            self._fetch_ds(np.concatenate(spans + [ends]) * self.width)
        local = self._documents_of(byte_pos)
        if cold:
            self._window_fetch["metaoff"](np.concatenate((local, local + 1)) * 8)
            starts = np.asarray(self.metaoff[local], dtype=np.int64)
            self._window_fetch["meta"](np.concatenate((starts, starts + 256)))
        out = []
        for p, doc in zip(pos.tolist(), local.tolist()):
            doc_start, doc_end = document_bounds(self.offsets, self.n, self.width, doc)
            out.append(self._window(doc, (doc_start, doc_end), max(doc_start, p - before), min(doc_end, p + after), p))
        if self._window_fetch is not None:
            self._windows_cold = _major_faults() > faults
        return out

    def document(self, doc: int, max_tokens: int | None = None) -> DocWindow:
        """The first `max_tokens` tokens (all if None) of local document `doc` (the engine's `get_doc_by_ix`)."""
        start, end = document_bounds(self.offsets, self.n, self.width, doc)
        return self._window(doc, (start, end), start, end if max_tokens is None else min(end, start + max_tokens), start)

    def _window(self, doc: int, bounds: tuple[int, int], start: int, end: int, needle: int) -> DocWindow:
        """Tokens [start, end) of local document `doc`, whose own token range is `bounds`."""
        doc_start, doc_end = bounds
        return DocWindow(shard=self.id, doc_ix=self.doc_base + doc, doc_len=doc_end - doc_start,
                         token_ids=np.array(self.ds[start:end]), needle_offset=needle - start,
                         metadata=metadata_line(self.metaoff, self.meta, doc))


def checked_native_search(searchers: Sequence[ShardSearcher], qkeys: np.ndarray, qstart: np.ndarray,
                          qend: np.ndarray, upper: np.ndarray) -> NativeBounds:
    """`native_search` of these (natively served) shards; a suffix array found out of order raises."""
    b = native_search(tuple(s.native for s in searchers), qkeys, qstart, qend, upper)
    for s, rank in zip(searchers, b.out_of_order):
        if rank >= 0:
            raise damaged_table(s.id, s.table_path, f"the suffix at rank {rank:,} does not sort where it stands")
    return b


def search_group(searchers: Sequence[ShardSearcher], arr: np.ndarray, qstart: np.ndarray, qend: np.ndarray,
                 upper: np.ndarray) -> SearchBounds:
    """`ShardSearcher.search` of the query rows (token ids `arr`) in each of these shards: the shards
    the native search serves in one call, threads over shards inside it; any other one by itself."""
    m = len(qstart)
    out = SearchBounds(*(np.zeros((len(searchers), m), dtype=np.int64) for _ in range(4)))
    native = [i for i, s in enumerate(searchers) if s.native is not None]
    if native:
        b = checked_native_search([searchers[i] for i in native], searchers[native[0]].keys(arr), qstart, qend, upper)
        out.hi[native], out.llo[native], out.lhi[native] = b.hi, b.lcp_lo, b.lcp_hi
        out.lo[native] = b.hi - 1
    for i, s in enumerate(searchers):
        if s.native is None:
            for column, part in zip(out, s.search(s.keys(arr), qstart, qend, upper)):
                column[i] = part
    return out


class IndexSearch:
    """The one search path over an index: every shard (in engine order) searched at once.

    Tracing and prompt building both go through it. A cluster backend (`trace/ray_search.py`)
    replaces `open_shards`, `search_shards` and `shard_windows`; the rest is shared.
    """

    def __init__(self, index: SearchedIndex):
        self.index = index
        self.separator = token_layout(index.token_width).separator
        self.shards = self.open_shards()

    def shard_bases(self) -> list[tuple[int, int]]:
        """(shard id, doc_ix of its first document) of every shard, in engine order."""
        docs = {s.id: s.documents for s in self.index.manifest.shards}
        bases = np.cumsum([0] + [docs[sid] for sid in self.index.engine_shards]).tolist()
        return list(zip(self.index.engine_shards, bases))

    def open_shards(self) -> list[Any]:
        """One searcher per shard in engine order (doc_ix and segment_by_shard follow it)."""
        return [ShardSearcher(self.index.path, sid, self.index.token_width, base) for sid, base in self.shard_bases()]

    def search_shards(self, arr: np.ndarray, qstart: np.ndarray, qend: np.ndarray, upper: np.ndarray) -> SearchBounds:
        """`ShardSearcher.search` of the query rows in every shard, in engine order (`search_group`)."""
        return search_group(self.shards, arr, qstart, qend, upper)

    def match_lengths(self, arr: np.ndarray, qstart: np.ndarray, qend: np.ndarray) -> np.ndarray:
        """Per query row arr[qstart:qend]: the length of its longest prefix that occurs in the corpus."""
        return self.search_shards(arr, qstart, qend, np.zeros(len(qstart), dtype=bool)).longest()

    def shard_windows(self, by_shard: dict[int, list[int]], max_disp_len: int) -> dict[int, list[DocWindow]]:
        """`ShardSearcher.windows` of the ranks asked of each engine shard."""
        return {s: self.shards[s].windows(ranks, max_disp_len) for s, ranks in by_shard.items()}

    def query(self, ids: Sequence[int]) -> np.ndarray:
        arr = np.asarray(list(ids), dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.separator):
            raise ValueError(f"token ids must lie in [0, {self.separator}) for this index")
        return arr

    def longest_matches(self, ids: Sequence[int], starts: Sequence[int] | None = None) -> np.ndarray:
        """For each start (all by default): the end of the longest prefix of ids[start:] occurring
        in the corpus. Both suffix-array neighbours of the insertion point, all shards."""
        arr = self.query(ids)
        starts = np.arange(len(arr), dtype=np.int64) if starts is None else np.asarray(starts, dtype=np.int64)
        if not len(starts):
            return starts
        return starts + self.match_lengths(arr, starts, np.full(len(starts), len(arr), dtype=np.int64))

    def longest_match_bounds(self, ids: Sequence[int]) -> tuple[int, int]:
        """(start, end) of the longest sub-sequence of `ids` that occurs in the corpus, the leftmost
        of equally long ones; (0, 0) when not even one token occurs."""
        if not len(ids):
            return 0, 0
        ends = self.longest_matches(ids)
        lengths = ends - np.arange(len(ends))
        start = int(np.argmax(lengths))
        return (start, int(ends[start])) if lengths[start] > 0 else (0, 0)

    def locate(self, ids: Sequence[int], spans: Sequence[tuple[int, int]]) -> list[Occurrences]:
        """Count and suffix-array ranges of each span ids[start:end] (what the engine's `find` returns)."""
        arr = self.query(ids)
        if not spans:
            return []
        asked, spans = spans, list(dict.fromkeys(spans))  # each distinct span searched once
        m = len(spans)
        qstart = np.asarray([s for s, _ in spans] * 2, dtype=np.int64)
        qend = np.asarray([e for _, e in spans] * 2, dtype=np.int64)
        if (qend <= qstart).any() or qstart.min() < 0 or qend.max() > len(arr):
            raise ValueError("spans must be non-empty ranges inside the ids")
        upper = np.repeat([False, True], m)
        hi = self.search_shards(arr, qstart, qend, upper).hi
        lo_b, hi_b = hi[:, :m], hi[:, m:]
        counts = (hi_b - lo_b).sum(axis=0)
        segments = [list(zip(a, b)) for a, b in zip(lo_b.T.tolist(), hi_b.T.tolist())]
        found = dict(zip(spans, (Occurrences(int(c), seg) for c, seg in zip(counts.tolist(), segments))))
        return [found[sp] for sp in asked]

    def count(self, ids: Sequence[int]) -> int:
        """Occurrences of a token sequence in the corpus (0 for an empty one)."""
        return self.locate(ids, [(0, len(ids))])[0].count if len(ids) else 0

    def windows(self, occurrences: list[tuple[int, int]], max_disp_len: int) -> list[DocWindow]:
        """Windows of `max_disp_len` tokens around (engine shard, rank) occurrences, in their order
        (the engine's `get_doc_by_rank(s, rank, max_disp_len)`)."""
        by_shard: dict[int, list[int]] = {}
        for s, rank in occurrences:
            by_shard.setdefault(s, []).append(rank)
        fetched = {s: iter(wins) for s, wins in self.shard_windows(by_shard, max_disp_len).items()}
        return [next(fetched[s]) for s, _ in occurrences]

    def check_holds(self, windows: Sequence[DocWindow], span: Sequence[int]) -> None:
        """Raise when a window fetched for an occurrence of the token sequence `span` does not hold
        it at its needle: the suffix array sent the search to the wrong place (it is damaged)."""
        want = list(span)
        for w in windows:
            got = w.token_ids[w.needle_offset:w.needle_offset + len(want)].tolist()
            if not got or got != want[:len(got)]:
                raise damaged_table(w.shard, shard_file(self.index.path, ShardFile.TABLE, w.shard),
                                    f"it places an occurrence of a {len(want)}-token span in document {w.doc_ix:,}, "
                                    "which does not hold it there")

    def check_found(self, occurrences: Sequence[Occurrences]) -> None:
        """Raise when a span that the longest-match search found in the corpus has no occurrences."""
        if any(o.count == 0 for o in occurrences):
            raise IndexFormatError(
                f"the suffix arrays of {self.index.path} are damaged: a span found by the longest-match search "
                "has no occurrences", f"run `propme index verify {self.index.path} --full`, then rebuild the index")

    def document(self, doc_ix: int, max_tokens: int | None = None) -> DocWindow:
        """The first `max_tokens` tokens (all if None) of document `doc_ix` (engine order) with its metadata."""
        total = self.index.manifest.total_documents
        if not 0 <= doc_ix < total:
            raise IndexError(f"document {doc_ix} is not in the index ({total} documents)")
        sid, base = next((sid, base) for sid, base in reversed(self.shard_bases()) if base <= doc_ix)
        return self.shards_by_id[sid].document(doc_ix - base, max_tokens)

    @cached_property
    def shards_by_id(self) -> dict[int, ShardSearcher]:
        """This process's searchers by shard id (documents are read here, also with a cluster backend)."""
        local = all(isinstance(s, ShardSearcher) for s in self.shards)
        return {s.id: s for s in (self.shards if local else IndexSearch.open_shards(self))}
