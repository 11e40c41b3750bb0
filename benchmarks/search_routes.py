"""The suffix-array search's routes side by side, on the trace benchmark's index and generations.

    python benchmarks/search_routes.py --index I20 --gens GENS [--generations 120] [--repeat 2]

GENS is the generations file `trace.py` writes in its work folder (`generations-*.jsonl`), I20 its
index. Per generation (every k-th of the file, so that `--generations` of them are timed), in one
process, each route's best of `--repeat`:

  step 1  the longest corpus match from every start (`IndexSearch.longest_matches`, mixed mode);
  spans   count and rank range of each maximal span of step 1 (`IndexSearch.locate`).

Routes: the numpy search (`ShardSearcher(native=False)`: vectorized k-ary steps, the yardstick);
the native one (`ShardSearcher`: `index/native_ext.c`, one C call for all rows and shards); infini-gram's
engine over the same files: `creativity` (its longest match from every start) for step 1, `find`
per span one after another and batched over a thread pool (the engine releases the GIL), and
`attribute` (OLMoTrace's maximal spans with every occurrence) on one generation; libdivsufsort's
`sa_search` through pydivsufsort's own wrapper cannot be used (it takes the suffix array to have one
entry per byte). Every route's results are checked against numpy's. When numba is installed, a
fresh process measures what compiling one binary-search loop with it costs (import and first call,
RssAnon): numba is not a dependency, and these costs decided against it.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

NUMBA_PROBE = r"""
import re, sys, time
def anon():
    return int(re.search(r"RssAnon:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024
import numpy as np
base, t0 = anon(), time.perf_counter()
import numba
@numba.njit(nogil=True, cache=False)
def lower_bound(sa, ds, q):
    lo, hi = 0, len(sa)
    while lo < hi:
        mid = (lo + hi) // 2
        p, j = sa[mid], 0
        while j < len(q) and p + j < len(ds) and ds[p + j] == q[j]:
            j += 1
        if j < len(q) and (p + j >= len(ds) or ds[p + j] < q[j]):
            lo = mid + 1
        else:
            hi = mid
    return lo
ds = np.arange(1000, dtype=np.uint16)
lower_bound(np.arange(1000, dtype=np.int64), ds, ds[5:9].copy())
print(time.perf_counter() - t0, anon() - base, numba.__version__)
"""


def best_of(repeat: int, fn):
    """(fastest seconds, result of the last run)."""
    best, out = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def numba_cost() -> dict | None:
    """Seconds and RssAnon MiB that importing numba and compiling one loop add to a fresh process."""
    proc = subprocess.run([sys.executable, "-c", NUMBA_PROBE], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    seconds, mib, version = proc.stdout.split()
    return {"seconds": float(seconds), "anon_mib": float(mib), "version": version}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--gens", type=Path, required=True, help="generations file of benchmarks/trace.py")
    p.add_argument("--generations", type=int, default=120)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()

    from propme_metrics.index.search import IndexSearch, ShardSearcher
    from propme_metrics.trace.tracer import Tracer

    lines = open(args.gens, encoding="utf-8").read().splitlines()
    rows = [json.loads(x) for x in lines[::max(1, len(lines) // args.generations)]][:args.generations]
    tracer = Tracer(args.index)
    index = tracer.index
    native = IndexSearch(index)
    numpy_search = IndexSearch(index)
    numpy_search.shards = [ShardSearcher(index.path, s.id, s.width, s.doc_base, native=False) for s in native.shards]
    assert all(s.native is not None for s in native.shards), "the native search does not serve this index"
    all_ids = [index.encode(r["text"]) for r in rows]
    starts = [list(range(len(ids) - 1)) for ids in all_ids]
    engine = index.engine
    n = len(all_ids)
    res: dict[str, tuple[float, bool | None]] = {}

    t, want_ends = best_of(args.repeat, lambda: [numpy_search.longest_matches(ids, s) for ids, s in zip(all_ids, starts)])
    res["step 1: numpy"] = (t, None)
    t, ends = best_of(args.repeat, lambda: [native.longest_matches(ids, s) for ids, s in zip(all_ids, starts)])
    res["step 1: native (native_ext.c)"] = (t, all(np.array_equal(a, b) for a, b in zip(ends, want_ends)))
    t, rs = best_of(args.repeat, lambda: [engine.creativity(input_ids=ids)["rs"] for ids in all_ids])
    res["step 1: engine `creativity`"] = (t, all(list(a) == list(r[:len(a)]) for a, r in zip(want_ends, rs)))
    delims = sorted(index.manifest.delimiter_ids)
    t0 = time.perf_counter()
    engine.attribute(input_ids=all_ids[0], delim_ids=delims, min_len=1, max_cnt=2**62, enforce_bow=True)
    res["step 1: engine `attribute` (first generation only)"] = ((time.perf_counter() - t0) * n, None)

    spans = [tracer.clean_spans(ids, list(zip(s, e.tolist()))) for ids, s, e in zip(all_ids, starts, want_ends)]
    t, want = best_of(args.repeat, lambda: [numpy_search.locate(ids, sp) for ids, sp in zip(all_ids, spans)])
    res["spans: numpy"] = (t, None)
    t, got = best_of(args.repeat, lambda: [native.locate(ids, sp) for ids, sp in zip(all_ids, spans)])
    res["spans: native (native_ext.c)"] = (t, got == want)

    def find(job):
        ids, (s, e) = job
        f = engine.find(input_ids=ids[s:e])
        return f["cnt"], [tuple(x) for x in f["segment_by_shard"]]

    jobs = [(ids, sp) for ids, sps in zip(all_ids, spans) for sp in sps]
    flat = [(o.count, o.segment_by_shard) for occ in want for o in occ]
    t, got = best_of(args.repeat, lambda: [find(j) for j in jobs])
    res["spans: engine `find`, one after another"] = (t, got == flat)
    for threads in (2, 4):
        with ThreadPoolExecutor(threads) as pool:
            t, got = best_of(args.repeat, lambda: list(pool.map(find, jobs, chunksize=16)))  # noqa: B023
        res[f"spans: engine `find`, batched over {threads} threads"] = (t, got == flat)

    print(f"{n} generations, {sum(map(len, all_ids)) / n:.0f} tokens and {len(jobs) / n:.1f} maximal spans each "
          f"({args.index}); best of {args.repeat}:")
    print()
    print("| route | ms/generation | speed-up vs numpy | results equal numpy's |")
    print("|---|---:|---:|---|")
    for name, (t, same) in res.items():
        ref = res["step 1: numpy" if name.startswith("step 1") else "spans: numpy"][0]
        print(f"| {name} | {t * 1000 / n:.2f} | {ref / t:.2f}x | {'-' if same is None else same} |")
    cost = numba_cost()
    print()
    print("numba: not installed (not a dependency)" if cost is None else
          f"numba {cost['version']}: import and one compiled loop take {cost['seconds']:.2f} s and "
          f"{cost['anon_mib']:.0f} MiB RssAnon in a fresh process (what every process that traces would add)")


if __name__ == "__main__":
    main()
