"""Benchmark of PropMe on Ray against the local build and the local tracer, in one run.

    python benchmarks/ray_trace.py                      # ~2M tokens, 4 shards, a local Ray cluster
    python benchmarks/ray_trace.py --docs 20000 --shards 8 --actors 1,2,4,8 --address auto

What it does:
  1. writes a generated corpus (generate_corpus, seed 0) of --docs documents and builds it with
     --shards shards locally (`build_index`) and on Ray (`build_index_on_ray`, one task per
     shard, --cpus-per-task each), checks that every shard file is byte-identical, prints both
     wall times and their ratio;
  2. makes --generations texts (a third copies of corpus passages, a third with words shuffled,
     a third new text) and traces them with the local Tracer (one process: the baseline) and
     with the Ray tracer for each number of actors in --actors, with one driver thread and with
     two per actor, checks that every result equals the local one, and prints generations/s and
     the ratio;
  3. the driver limit (`ray_study.py`): search steps and actor calls per generation, the
     tracer's own CPU (which the driver spends whatever the backend), the round trip per step,
     the driver's and the actors' CPU per actor call, the driver's CPU per generation and the
     generations per second one driver core can sustain at that cost; then, labelled as an
     extrapolation, the actor count at which the driver becomes the bound.

Start-up (cluster start, actor creation) is excluded from the tracing rates and reported apart.
The rates hold for this machine only (the driver, the actors and Ray share its cores); the CPU
costs per generation and per call are what carries over to a cluster.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ray_study import build_on_ray, driver_limit, print_driver_limit, project, ray_call_cost, timed_pass  # noqa: E402


def make_generations(records: list[dict], n: int, seed: int = 1) -> list[str]:
    from propme.demo.synthetic import generate_corpus

    rng = random.Random(seed)
    picked = rng.sample(records, n)
    fresh = [r["text"] for r in generate_corpus(n, seed=seed + 100)]
    out = []
    for i, rec in enumerate(picked):
        words = rec["text"].split()[:180]
        if i % 3 == 0:
            out.append(" ".join(words))
        elif i % 3 == 1:
            rng.shuffle(words)
            out.append(" ".join(words))
        else:
            out.append(" ".join(fresh[i].split()[:180]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=6000, help="generated documents (about 300 GPT-2 tokens each)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--generations", type=int, default=60)
    ap.add_argument("--actors", default="1,2", help="comma-separated actor counts to measure")
    ap.add_argument("--cpus-per-task", type=int, default=1)
    ap.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    ap.add_argument("--work", default=None, help="folder for corpus and indexes (default: a temporary one)")
    args = ap.parse_args()

    import ray

    from propme.demo.synthetic import generate_corpus
    from propme_metrics.core.cluster import connect
    from propme_metrics.index.build import build_index
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.testing import gpt2_tokenizer
    from propme_metrics.trace.ray_search import ray_tracer
    from propme_metrics.trace.tracer import Tracer

    work = Path(args.work or tempfile.mkdtemp(prefix="propme-ray-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    tok = gpt2_tokenizer(work / "tokenizer")
    records = list(generate_corpus(args.docs, seed=0))
    corpus = work / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    for name in ("local", "ray"):
        shutil.rmtree(work / name, ignore_errors=True)

    started = time.time()
    connect(args.address)
    cluster_cpus = int(ray.cluster_resources().get("CPU", 0))
    ray_start = time.time() - started

    say = lambda text: print(f"[{time.time() - started:6.1f} s] {text}", file=sys.stderr, flush=True)  # noqa: E731
    say("local build")
    t = time.time()
    manifest = build_index(CorpusSource(str(corpus)), work / "local", tokenizer=str(tok), num_shards=args.shards,
                           progress=False, check_space=False)
    local_build = time.time() - t
    say("Ray build")
    built = build_on_ray(corpus, work / "local", work / "ray", tok, args.shards, args.address, args.cpus_per_task)

    say("local tracing")
    rows = [{"key": str(i), "text": text} for i, text in enumerate(make_generations(records, args.generations))]
    local = Tracer(work / "local")
    local.trace([r["text"] for r in rows[:3]])  # warm the page cache and lazy tables
    baseline = timed_pass(local, rows)

    runs = []
    for n_actors in [int(x) for x in args.actors.split(",")]:
        say(f"Ray tracing, {n_actors} actor(s)")
        t = time.time()
        tracer = ray_tracer(work / "local", actors=n_actors)
        tracer.trace([r["text"] for r in rows[:3]], workers=2)
        setup = time.time() - t
        seq = timed_pass(tracer, rows)
        conc = timed_pass(tracer, rows, threads=2 * n_actors)
        runs.append((n_actors, setup, seq, conc, driver_limit(baseline, seq, conc, n_actors)))
        tracer.close()
    call = ray_call_cost()
    ray.shutdown()

    print(f"\nPropMe on Ray, this machine: {os.cpu_count()} CPUs, Ray cluster of {cluster_cpus} CPUs "
          f"(started in {ray_start:.1f} s); 1-min load average now {os.getloadavg()[0]:.2f}")
    print(f"index: {manifest.total_tokens:,} tokens, {manifest.total_documents:,} documents, {args.shards} shards\n")
    print("| build | wall s | ratio to local | byte-identical shards |")
    print("|---|---|---|---|")
    print(f"| local (`build_index`, {os.cpu_count()} CPUs) | {local_build:.1f} | 1.00 | - |")
    print(f"| Ray, {built.tasks} tasks x {built.cpus_per_task} CPU | {built.seconds:.1f} | "
          f"{built.seconds / local_build:.2f} | {'yes' if built.identical else 'NO'} |")
    print(f"\n| tracing ({len(rows)} generations of ~180 words) | driver threads | gen/s | ratio to local | "
          "actor start-up s | identical results |")
    print("|---|---|---|---|---|---|")
    print(f"| local Tracer, 1 process | 1 | {baseline.gen_per_s:.2f} | 1.00 | - | - |")
    same = [built.identical]
    for n_actors, setup, seq, conc, _ in runs:
        for p in (seq, conc):
            same.append(p.lines == baseline.lines)
            print(f"| Ray, {n_actors} actor(s) | {p.threads} | {p.gen_per_s:.2f} | "
                  f"{p.gen_per_s / baseline.gen_per_s:.2f} | {setup:.1f} | {'yes' if same[-1] else 'NO'} |")
    limits = [run[4] for run in runs]
    print_driver_limit(limits, call, {f"this index ({args.shards} shards)": project(limits, limits[0].compute_ms)})
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(same) else 1


if __name__ == "__main__":
    sys.exit(main())
