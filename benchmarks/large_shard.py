"""One shard above 4 GiB of tokens (5-byte suffix-array pointers), searched natively and with numpy.

    python benchmarks/large_shard.py --work DIR [--tokens 1082130432] [--queries 200] [--keep]

A shard that large needs 2.15B 16-bit tokens and about 39 GB of memory to sort, more than a small
machine has; this script writes one whose suffix array is known without sorting, so that the 5-byte
pointer path is exercised at real offsets (above 2^32 bytes) on a real-size table:

- 4-byte tokens; document d is the separator (0xFFFFFFFF) and then one id per position p, the id
  whose little-endian bytes are p's big-endian bytes (suffixes compare as bytes, as the engine's
  do, so these ids sort in position order, and every suffix is told apart by its first token);
- hence the suffix array: the positions that hold no separator in increasing order, then the
  separators' positions in increasing order (a separator sorts above every id, and what follows
  each is the increasing id of the next position);
- offsets, metadata and metaoff files as the index format has them (one `{}` line per document),
  no `unigram.N` (its rank blocks are then not used, as for an adopted index without one).

Checks (each query a random three-token row, half of them at byte offsets above 2^32, a tenth
of them separator rows): the native search's bounds equal the numpy search's and the ranks the layout gives,
and the pointer at each found rank is the query's position. Times per query batch, warm (files in
the page cache) and cold (before each batch the searchers' mappings dropped with
`madvise(MADV_DONTNEED)`, then `posix_fadvise(DONTNEED)` on the shard's files; the share of
table.0 still cached after that is printed), for
the native search and the numpy search, in the same run; the 1-minute load average is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from _common import commit, drop_mappings, drop_page_cache, resident_fraction

from propme_metrics.index.format import pointer_bytes, pointer_size

SEP = 0xFFFFFFFF
WIDTH = 4
CHUNK = 1 << 24  #: positions written per step


def layout(n_tokens: int, doc_len: int) -> tuple[int, int]:
    """(documents, tokens) of the shard: whole documents of `doc_len` ids after their separator."""
    docs = -(-n_tokens // (doc_len + 1))
    return docs, docs * (doc_len + 1)


def token_at(p: np.ndarray, doc_len: int) -> np.ndarray:
    """The token at each position: the separator, or the id whose little-endian bytes are p's
    big-endian bytes (suffixes compare as bytes, so ids in position order sort in position order)."""
    return np.where(p % (doc_len + 1) == 0, SEP, p.astype(">u4").view("<u4")).astype("<u4")


def rank_of(p: np.ndarray, docs: int, doc_len: int) -> np.ndarray:
    """The suffix-array rank of position p: ids in position order, then the separators."""
    d = p // (doc_len + 1)
    return np.where(p % (doc_len + 1) == 0, docs * doc_len + d, p - d - 1)


def write_shard(folder: Path, docs: int, doc_len: int, ptr: int) -> None:
    """tokenized.0, table.0 (`ptr`-byte pointers), offset.0, metadata.0 and metaoff.0 of the layout."""
    folder.mkdir(parents=True, exist_ok=True)
    n = docs * (doc_len + 1)
    with open(folder / "tokenized.0", "wb") as fh:
        for first in range(0, n, CHUNK):
            fh.write(token_at(np.arange(first, min(n, first + CHUNK), dtype=np.int64), doc_len).tobytes())
    with open(folder / "table.0", "wb") as fh:
        ids = docs * doc_len
        for first in range(0, ids, CHUNK):  # ranks 0 .. ids-1: the positions without a separator
            r = np.arange(first, min(ids, first + CHUNK), dtype=np.int64)
            fh.write(pointer_bytes((r + r // doc_len + 1) * WIDTH, ptr))
        for first in range(0, docs, CHUNK):  # then the separators
            d = np.arange(first, min(docs, first + CHUNK), dtype=np.int64)
            fh.write(pointer_bytes(d * (doc_len + 1) * WIDTH, ptr))
    (folder / "offset.0").write_bytes((np.arange(docs, dtype=np.int64) * (doc_len + 1) * WIDTH).astype("<u8").tobytes())
    (folder / "metadata.0").write_bytes(b"{}\n" * docs)
    (folder / "metaoff.0").write_bytes((np.arange(docs, dtype=np.int64) * 3).astype("<u8").tobytes())
    for f in folder.iterdir():  # on the disk: a page not yet written back cannot be evicted for a cold run
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def queries(rng: np.random.Generator, docs: int, doc_len: int, count: int) -> np.ndarray:
    """Start positions of three-token query rows inside documents: half anywhere, half at byte
    offsets above 2^32, and a separator row every tenth."""
    n = docs * (doc_len + 1)
    high = (1 << 32) // WIDTH if (1 << 32) // WIDTH < n - 3 else n // 2  # a small dry run: its second half
    p = np.concatenate([rng.integers(0, n - 3, count // 2), rng.integers(high, n - 3, count - count // 2)])
    d, off = p // (doc_len + 1), p % (doc_len + 1)
    p = np.where(off > doc_len - 2, d * (doc_len + 1) + 1, p)  # three tokens inside one document
    p[::10] = d[::10] * (doc_len + 1)  # separator rows: [SEP, first id, second id]
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="folder for the shard (about 10 GB at the default size)")
    ap.add_argument("--tokens", type=int, default=1_082_130_432, help="tokens (default: 4.33 GB of 4-byte tokens)")
    ap.add_argument("--doc-len", type=int, default=1023, help="ids per document, after its separator")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batches", type=int, default=5, help="timed batches per route and cache state")
    ap.add_argument("--keep", action="store_true", help="keep the shard for another run")
    args = ap.parse_args()
    from propme_metrics.index import native_search
    from propme_metrics.index.search import ShardSearcher

    if not native_search.available():
        sys.exit("the native search is not compiled here (make install builds it)")
    docs, n = layout(args.tokens, args.doc_len)
    ptr = pointer_size(n * WIDTH)
    folder = args.work / "large-shard"
    mark = folder / "layout.json"  #: what a kept shard was written as (reused only when it is this one)
    wanted = json.dumps({"tokens": n, "doc_len": args.doc_len, "ids": "big-endian positions"})
    if not (mark.is_file() and mark.read_text() == wanted):
        shutil.rmtree(folder, ignore_errors=True)
        t = time.time()
        write_shard(folder, docs, args.doc_len, ptr)
        mark.write_text(wanted)
        print(f"wrote {folder} in {time.time() - t:.0f} s", flush=True)
    ds_bytes = (folder / "tokenized.0").stat().st_size
    print(f"commit {commit()}, load {os.getloadavg()[0]:.1f}: {n:,} tokens in {docs:,} documents, tokenized.0 "
          f"{ds_bytes / 2**30:.2f} GiB, {pointer_size(ds_bytes)}-byte pointers, table.0 "
          f"{(folder / 'table.0').stat().st_size / 2**30:.2f} GiB")
    if ptr != 5:
        print(f"note: {ptr}-byte pointers (a shard of at most 4 GiB of tokens): a dry run of the checks")
    native, numpy = ShardSearcher(folder, 0, WIDTH, 0), ShardSearcher(folder, 0, WIDTH, 0, native=False)
    assert native.native is not None and numpy.native is None, "the native search did not take the shard"
    rng = np.random.default_rng(0)
    starts = queries(rng, docs, args.doc_len, args.queries)
    arr = token_at((starts[:, None] + np.arange(3)).reshape(-1), args.doc_len)
    qstart = np.arange(0, 3 * len(starts), 3)
    qend = qstart + 3
    want = rank_of(starts, docs, args.doc_len)
    above = int((starts * WIDTH >= 1 << 32).sum())
    for upper in (False, True):
        u = np.full(len(starts), upper)
        got_native, got_numpy = native.search(native.keys(arr), qstart, qend, u), numpy.search(numpy.keys(arr), qstart, qend, u)
        for a, b in zip(got_native, got_numpy):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(got_native[1], want + upper)  # lower bound: its rank; upper: one past it
    np.testing.assert_array_equal(native.ranks_to_token_pos(want), starts)
    print(f"checked: {len(starts)} query rows ({above} at byte offsets above 2^32, {len(starts[::10])} separator "
          f"rows): native bounds == numpy bounds == the layout's ranks, and each rank's pointer is its position")
    print("\n| route | cache | µs per query row (median of batches) | table.0 in the page cache | load |\n"
          "|---|---|---:|---:|---:|")
    lower = np.zeros(len(starts), bool)
    for cache in ("warm", "cold"):
        for name, s in (("native", native), ("numpy", numpy)):
            times, resident = [], []
            for _ in range(args.batches):
                if cache == "cold":  # the process's mappings first: a mapped page stays in the cache
                    drop_mappings((native, numpy))
                    drop_page_cache(folder)
                    resident.append(resident_fraction(folder / "table.0"))
                t = time.perf_counter()
                s.search(s.keys(arr), qstart, qend, lower)
                times.append((time.perf_counter() - t) * 1e6 / len(starts))
            print(f"| {name} | {cache} | {sorted(times)[len(times) // 2]:.1f} | "
                  f"{f'{max(resident):.1%}' if resident else '-'} | {os.getloadavg()[0]:.1f} |", flush=True)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
