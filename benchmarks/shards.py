"""Warm tracing cost against the number of shards: one corpus built at 1, 4, 16 and 64 shards.

    python benchmarks/shards.py --work DIR [--tokens 15M] [--shards 1,4,16,64] [--generations 60]
                                [--rounds 3] [--frozen CHECKOUT]

The corpus (generated documents, GPT-2 tokenizer) is built once per shard count into DIR (kept for
the next run); the generations are `trace.py`'s (a third copied, a third edited, a third new). Each
round traces all generations with every index in turn, each in a fresh process (warm: one pass
first, then timed passes), so slow phases of other load fall on every shard count alike; the best
round counts. Printed per shard count: ms per generation (wall and CPU), and the marginal cost
per shard (least-squares slope over the shard counts) and the ratio of the largest count to one
shard, against the goals of issue 42 item 3 (slope at most 0.3 ms, ratio at most 5). With
--frozen (a checkout, e.g. `git worktree add /tmp/base 26f563c`), the same for that code, first on
PYTHONPATH, in the same rounds; results are compared line by line with it. Load averages are
printed with every measurement.
"""
from __future__ import annotations

import argparse
import importlib.util
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
from _common import parse_size, size_name  # noqa: E402


def trace_script():
    """benchmarks/trace.py as a module (its name is the standard library's `trace`)."""
    spec = importlib.util.spec_from_file_location("propme_bench_trace", HERE / "trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(work: Path, tokens: int, shards: int) -> Path:
    """The corpus of `tokens` tokens in `shards` shards (built unless DIR has it)."""
    from propme.demo.synthetic import generate_corpus
    from propme_metrics.index.build import build_index
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.testing import gpt2_tokenizer

    out = work / f"{size_name(tokens)}-{shards}"
    if (out / "propme-manifest.json").exists():
        return out
    corpus = work / f"corpus-{size_name(tokens)}.jsonl"
    if not corpus.exists():
        with open(corpus, "w", encoding="utf-8") as fh:
            for rec in generate_corpus(max(100, tokens // 300), seed=0):  # about 305 tokens a document
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    t = time.time()
    m = build_index(CorpusSource(str(corpus)), out, tokenizer=str(gpt2_tokenizer(work / "gpt2")), num_shards=shards,
                    progress=False, check_space=False)
    print(f"  built {out}: {m.total_tokens:,} tokens in {shards} shard(s), {time.time() - t:.0f} s", flush=True)
    return out


def measure(index: str, gens: str, out: str, passes: int) -> None:
    """In this process: one warm-up pass, then `passes` timed passes; JSON on stdout."""
    from propme_metrics.trace.tracer import Tracer

    texts = [json.loads(x)["text"] for x in open(gens, encoding="utf-8")]
    tracer = Tracer(index)
    results = tracer.trace(texts)
    best_wall = best_cpu = float("inf")
    for _ in range(passes):
        w0, c0 = time.perf_counter(), time.process_time()
        results = tracer.trace(texts)
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    serialize = trace_script().serialize_line
    with open(out, "wb") as fh:
        for r in results:
            fh.write(serialize(r))
    print(json.dumps({"wall_ms": 1000 * best_wall / len(texts), "cpu_ms": 1000 * best_cpu / len(texts),
                      "failed": sum(r.error is not None for r in results)}))


def run_measure(code: Path | None, index: Path, gens: Path, out: Path, passes: int) -> dict:
    env = dict(os.environ)  # the code timed first on the path: the checkout's, or this one's
    env["PYTHONPATH"] = os.pathsep.join([str(code or HERE.parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, __file__, "--measure", str(index), "--gens", str(gens), "--out", str(out),
                           "--passes", str(passes)], capture_output=True, text=True, env=env, cwd=code or HERE.parent)
    if proc.returncode:
        raise SystemExit(f"measuring {index} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["load"] = os.getloadavg()
    return res


def slope(xs: list[int], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--tokens", type=parse_size, default=parse_size("15M"))
    p.add_argument("--shards", default="1,4,16,64")
    p.add_argument("--generations", type=int, default=60)
    p.add_argument("--gen-tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--frozen", type=Path, default=None, help="a checkout of older code to time the same way")
    p.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    p.add_argument("--gens", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        measure(args.measure, args.gens, args.out, args.passes)
        return
    if args.work is None:
        p.error("--work is required")
    args.work.mkdir(parents=True, exist_ok=True)
    counts = [int(x) for x in args.shards.split(",")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip()
    print(f"commit {commit}; load average at start {os.getloadavg()}", flush=True)
    indexes = {n: build(args.work, args.tokens, n) for n in counts}
    gens = args.work / f"generations-{args.generations}.jsonl"
    if not gens.exists():
        trace_script().make_generations(gens, indexes[counts[0]], args.generations, args.gen_tokens, 2000, seed=0)
    codes = {"this code": None, **({f"frozen {args.frozen}": args.frozen} if args.frozen else {})}
    best: dict[tuple[str, int], dict] = {}
    for rnd in range(args.rounds):
        for n in counts:
            for name, code in codes.items():
                res = run_measure(code, indexes[n], gens, args.work / f"results-{name.split()[0]}-{n}.jsonl", args.passes)
                print(f"  round {rnd + 1}, {n} shard(s), {name}: {res['wall_ms']:.2f} ms wall, {res['cpu_ms']:.2f} ms "
                      f"CPU per generation (load {res['load'][0]:.1f})", flush=True)
                key = (name, n)
                if key not in best or res["wall_ms"] < best[key]["wall_ms"]:
                    best[key] = res
    print(f"\n{args.generations} generations of {args.gen_tokens} tokens, {args.tokens:,} tokens in 1 to {counts[-1]} "
          f"shards, best of {args.rounds} rounds; load average at end {os.getloadavg()}\n")
    print("| code | " + " | ".join(f"{n} shard(s) ms wall / CPU" for n in counts) +
          " | marginal ms per shard (wall / CPU) | largest / 1 shard |")
    print("|---|" + "---:|" * (len(counts) + 2))
    for name in codes:
        wall = [best[(name, n)]["wall_ms"] for n in counts]
        cells = " | ".join(f"{best[(name, n)]['wall_ms']:.2f} / {best[(name, n)]['cpu_ms']:.2f}" for n in counts)
        cpu = [best[(name, n)]["cpu_ms"] for n in counts]
        print(f"| {name} | {cells} | {slope(counts, wall):.3f} / {slope(counts, cpu):.3f} | {wall[-1] / wall[0]:.2f}x |")
    mine = [best[("this code", n)]["wall_ms"] for n in counts]
    s, ratio = slope(counts, mine), mine[-1] / mine[0]
    print(f"\ngoal (issue 42 item 3): marginal cost per shard <= 0.3 ms: {s:.3f} ms ({'met' if s <= 0.3 else 'NOT met'}); "
          f"{counts[-1]} shards <= 5x one shard: {ratio:.2f}x ({'met' if ratio <= 5 else 'NOT met'})")
    if args.frozen:
        for n in counts:
            same = (args.work / f"results-this-{n}.jsonl").read_text() == (args.work / f"results-frozen-{n}.jsonl").read_text()
            print(f"results at {n} shard(s) identical to the frozen checkout's: {same}")


if __name__ == "__main__":
    main()
