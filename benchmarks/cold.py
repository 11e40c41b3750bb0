"""Cold and warm tracing per generation on one large index: the native search, the numpy search
and an older checkout, in one run.

    python benchmarks/cold.py --index DIR [--gens GENS] [--generations 30] [--frozen CHECKOUT] [--rounds 2]

Cold: before each generation every file of the index is evicted from the page cache (the process's
mappings dropped with madvise(MADV_DONTNEED), then posix_fadvise(POSIX_FADV_DONTNEED) on each file:
`_common.evict`; no global cache drop), so every page a search touches comes from the disk.
Warm: the same generations after one untimed pass, each generation's best of 3. Routes, each in a fresh process:

  native           this code's search (`index/native_ext.c`);
  native, no check the same without the neighbours' check (issue 44 item 3: what the check costs);
  numpy            this code with `ShardSearcher(native=False)` (in-memory top level, read-ahead hints);
  frozen           the checkout given with --frozen (e.g. `git worktree add /tmp/base 26f563c`), first
                   on PYTHONPATH, its default search.

Rounds alternate the routes (slow phases of other load fall on all of them); per route the best
round's mean counts. Results of every route are compared line by line with the native route's.
GENS defaults to `trace.py`'s generations drawn from the index (written beside it in --work).
Load averages are printed with every measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import evict, resident_fraction  # noqa: E402
from shards import trace_script  # noqa: E402

ROUTES = ("native", "native, no check", "numpy", "frozen")
WARM_PASSES = 3


def measure(route: str, index: str, gens: str, out: str, cache: str) -> None:
    """In this process: trace every generation (cold: each after evicting the index); JSON on stdout."""
    from propme_metrics.trace.tracer import Tracer

    tracer = Tracer(index)
    if route == "numpy":
        from propme_metrics.index.search import ShardSearcher

        tracer.search.shards = [ShardSearcher(tracer.index.path, s.id, s.width, s.doc_base, native=False)
                                for s in tracer.search.shards]
    if route == "native, no check":
        from propme_metrics.index import native_search

        native_search.CHECK_NEIGHBOURS = False
    texts = [json.loads(x)["text"] for x in open(gens, encoding="utf-8")]
    tracer.trace(texts[:1])  # lazy tables, tokenizer
    times, results = [], []
    if cache == "warm":
        tracer.trace(texts)
    for text in texts:
        best = float("inf")
        for _ in range(WARM_PASSES if cache == "warm" else 1):  # warm: each generation's best of a few
            if cache == "cold":
                evict(tracer)
            t0 = time.perf_counter()
            result = tracer.trace_one(text)
            best = min(best, time.perf_counter() - t0)
        results.append(result)
        times.append(best)
    residency = resident_fraction(next(Path(index).glob("table.*")))
    serialize = trace_script().serialize_line
    with open(out, "wb") as fh:
        for r in results:
            fh.write(serialize(r))
    times.sort()
    print(json.dumps({"mean_ms": 1000 * sum(times) / len(times), "median_ms": 1000 * times[len(times) // 2],
                      "table_resident_after": residency}))


def run_route(route: str, frozen: Path | None, index: Path, gens: Path, out: Path, cache: str) -> dict:
    env = dict(os.environ)  # the code timed first on the path: the checkout's, or this one's
    cwd = frozen if route == "frozen" else HERE.parent
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, __file__, "--measure", route, "--index", str(index), "--gens", str(gens),
                           "--out", str(out), "--cache", cache], capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode:
        raise SystemExit(f"route {route} ({cache}) failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["load"] = os.getloadavg()
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--gens", type=Path, default=None)
    p.add_argument("--work", type=Path, default=None, help="where generations and results go (default: beside the index)")
    p.add_argument("--generations", type=int, default=30)
    p.add_argument("--gen-tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--frozen", type=Path, default=None)
    p.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cache", default="cold", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        measure(args.measure, str(args.index), str(args.gens), args.out, args.cache)
        return
    work = args.work or args.index.parent / "cold-bench"
    work.mkdir(parents=True, exist_ok=True)
    gens = args.gens or work / f"generations-{args.generations}.jsonl"
    if not gens.exists():
        trace_script().make_generations(gens, args.index, args.generations, args.gen_tokens, 5000, seed=0)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
    frozen_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                   cwd=args.frozen).stdout.strip() if args.frozen else None
    print(f"commit {commit}, frozen {frozen_commit}; index {args.index}; load average at start {os.getloadavg()}",
          flush=True)
    routes = [r for r in ROUTES if r != "frozen" or args.frozen]
    best: dict[tuple[str, str], dict] = {}
    for rnd in range(args.rounds):
        for cache in ("cold", "warm"):
            for route in routes:
                if route == "native, no check" and cache == "cold":
                    continue
                out = work / f"results-{route.replace(', ', '-').replace(' ', '-')}-{cache}.jsonl"
                res = run_route(route, args.frozen, args.index, gens, out, cache)
                print(f"  round {rnd + 1}, {cache}, {route}: {res['mean_ms']:.1f} ms mean, {res['median_ms']:.1f} ms "
                      f"median per generation (table resident after: {res['table_resident_after']:.3f}; load "
                      f"{res['load'][0]:.1f})", flush=True)
                key = (route, cache)
                if key not in best or res["mean_ms"] < best[key]["mean_ms"]:
                    best[key] = res
    print(f"\n{args.generations} generations; best of {args.rounds} rounds; load average at end {os.getloadavg()}\n")
    print("| route | cold ms/generation | warm ms/generation | cold vs native | warm vs native | results equal native's |")
    print("|---|---:|---:|---:|---:|---|")
    nat = {c: best[("native", c)]["mean_ms"] for c in ("cold", "warm")}
    for route in routes:
        cells = []
        for cache in ("cold", "warm"):
            r = best.get((route, cache))
            cells.append(f"{r['mean_ms']:.1f}" if r else "-")
        ratios = [f"{best[(route, c)]['mean_ms'] / nat[c]:.2f}x" if (route, c) in best else "-" for c in ("cold", "warm")]
        tag = route.replace(", ", "-").replace(" ", "-")
        same = all((work / f"results-{tag}-{c}.jsonl").read_bytes() == (work / f"results-native-{c}.jsonl").read_bytes()
                   for c in ("cold", "warm") if (route, c) in best)
        print(f"| {route} | {cells[0]} | {cells[1]} | {ratios[0]} | {ratios[1]} | {same} |")
    if args.frozen:
        cold = best[("frozen", "cold")]["mean_ms"] / nat["cold"]
        warm = best[("frozen", "warm")]["mean_ms"] / nat["warm"]
        print(f"\ngoal (issue 42 item 2): cold at least 3x faster than {frozen_commit}: {cold:.2f}x "
              f"({'met' if cold >= 3 else 'NOT met'}); never slower warm: {warm:.2f}x ({'met' if warm >= 1 else 'NOT met'})")
    check = best[("native, no check", "warm")]["mean_ms"]
    print(f"the neighbours' check (issue 44 item 3): warm {nat['warm']:.2f} ms with it, {check:.2f} ms without "
          f"({100 * (nat['warm'] / check - 1):+.1f}%)")


if __name__ == "__main__":
    main()
