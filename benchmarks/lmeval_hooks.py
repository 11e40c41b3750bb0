"""The lm-eval path's tracing cost: PropMe's hooks (`propme_tasks.hooks.process_results`) against
`propme trace --workers 2`, per generation, on the same samples.

    python benchmarks/lmeval_hooks.py                     # prepares the small demo and runs stock lm_eval on it
    python benchmarks/lmeval_hooks.py --demo DIR          # reuses a finished `propme demo --out DIR`
    python benchmarks/lmeval_hooks.py --full              # the full-size demo (more, longer generations)

What it does, in one run:
  1. prepares the demo (corpus, index, tiny model, prompt sets) and runs a stock `lm_eval` on it
     with --log_samples, unless --demo names a finished one;
  2. replays every generate_until sample that lm-eval logged through the hooks exactly as lm-eval
     calls them (`process_results(doc, filtered_resps)`, the logged doc), so generation is excluded;
     the first call opens the index and is timed apart (start-up, once per process);
  3. traces the same samples files with `propme trace --workers 2` (the docs' tracing settings) and
     reads the tracing speed it prints (start-up excluded there too);
  4. checks that both give the same trace of every generation and prints the per-generation cost
     of each and their ratio (goal: the hooks at most 1.5x slower).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: the hooks' ratio to `propme trace --workers 2` that the issue accepts
GOAL = 1.5


def samples_files(runs: Path) -> list[Path]:
    """The generate_until samples files of the newest lm-eval run under `runs` (likelihood subtasks left out)."""
    files = sorted(runs.rglob("samples_*.jsonl"))
    files = [f for f in files if "_likelihood_" not in f.name]
    if not files:
        sys.exit(f"no samples files under {runs}: run lm_eval with --log_samples first")
    newest = max(f.name.rsplit("_", 1)[-1] for f in files)
    return [f for f in files if f.name.endswith(newest)]


def replay_hooks(files: list[Path]) -> dict:
    """Every logged sample through `process_results`, timed; returns the timings and the traces by key."""
    from propme_tasks import hooks

    rows = [json.loads(line) for f in files for line in open(f, encoding="utf-8")]
    t0 = time.perf_counter()
    hooks.process_results(rows[0]["doc"], rows[0]["filtered_resps"])  # opens the index (start-up)
    startup = time.perf_counter() - t0
    traces: dict[str, dict] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    for row in rows:
        items = hooks.process_results(row["doc"], row["filtered_resps"])
        for g in items["trace"]["generations"]:
            traces[g["key"]] = g
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    traces = {k: json.loads(json.dumps(g)) for k, g in traces.items()}  # as lm-eval logs them (tuples as lists)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "startup_seconds": startup,
            "generations": len(traces), "traces": traces}


def cli_flags(trace_config: str) -> list[str]:
    """`propme trace` options for a doc's tracing settings (its `trace_config` JSON)."""
    return [x for k, v in json.loads(trace_config).items() for x in (f"--{k.replace('_', '-')}", str(v))]


def run_propme_trace(files: list[Path], index: str, config: str, work: Path, workers: int) -> dict:
    """`propme trace --workers N` on each samples file; the generations/s it prints (tracing only)."""
    seconds, n, traces = 0.0, 0, {}
    for i, f in enumerate(files):
        out, summary = work / f"trace-{i}.jsonl", work / f"trace-{i}.summary.json"
        for p in (out, summary):
            p.unlink(missing_ok=True)
        cmd = [str(Path(sys.executable).with_name("propme")), "trace", "--index", index, "--input", str(f),
               "--out", str(out), "--summary", str(summary), "--workers", str(workers), "--quiet", *cli_flags(config)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
        if proc.returncode != 0:
            sys.exit(f"propme trace failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        speed = re.search(r"([\d,.]+) generations/s", proc.stdout)
        rows = [json.loads(line) for line in open(out, encoding="utf-8")]
        if speed is None:
            sys.exit(f"propme trace printed no speed:\n{proc.stdout[-2000:]}")
        n += len(rows)
        seconds += len(rows) / float(speed.group(1).replace(",", ""))
        traces.update({r["key"]: r for r in rows})
    return {"seconds": seconds, "generations": n, "traces": traces}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demo", type=Path, help="a finished `propme demo --out DIR` (its runs/ holds lm-eval's samples)")
    p.add_argument("--work", type=Path, default=Path("/tmp/propme-bench-lmeval"), help="where the demo and traces go")
    p.add_argument("--full", action="store_true", help="prepare the full-size demo instead of the small one")
    p.add_argument("--workers", type=int, default=2, help="workers of `propme trace`")
    args = p.parse_args()

    from propme_metrics.demo.run import FULL, SMALL, DemoPaths, prepare, run_lm_eval

    args.work.mkdir(parents=True, exist_ok=True)
    if args.demo:
        paths = DemoPaths(args.demo)
    else:
        size = FULL if args.full else SMALL
        paths = prepare(args.work / "demo", size)
        t0 = time.perf_counter()
        run_lm_eval(paths, size)  # a stock `lm_eval` in a subprocess (skipped when its results are there)
        print(f"lm_eval (generation and hooks): {time.perf_counter() - t0:.1f} s", flush=True)
    files = samples_files(paths.runs)
    first = json.loads(open(files[0], encoding="utf-8").readline())["doc"]
    print(f"samples: {', '.join(f.name for f in files)}", flush=True)
    hooks = replay_hooks(files)
    cli = run_propme_trace(files, first["index_path"], first["trace_config"], args.work, args.workers)
    keys = sorted(hooks["traces"])
    same = sum(hooks["traces"][k] == cli["traces"].get(k) for k in keys)  # each with its (masked) PII
    per_hook = 1000 * hooks["seconds"] / hooks["generations"]
    per_cli = 1000 * cli["seconds"] / cli["generations"]
    print()
    print(f"Index {first['index_path']}; {hooks['generations']} generations in {len(files)} samples files. "
          f"Machine: {os.cpu_count()} CPUs.")
    print()
    print("| path | generations | seconds | ms/generation |")
    print("|---|---|---|---|")
    print(f"| hooks (`process_results`, one process, as lm-eval calls them) | {hooks['generations']} | "
          f"{hooks['seconds']:.2f} | {per_hook:.1f} |")
    print(f"| `propme trace --workers {args.workers}` (its printed speed) | {cli['generations']} | "
          f"{cli['seconds']:.2f} | {per_cli:.1f} |")
    print()
    ratio = per_hook / per_cli
    print(f"Hooks / propme trace per generation: {ratio:.2f}x (goal <= {GOAL}x: {'met' if ratio <= GOAL else 'MISSED'}); "
          f"hooks' start-up (first call: opening the index) {hooks['startup_seconds']:.2f} s, CPU "
          f"{1000 * hooks['cpu_seconds'] / hooks['generations']:.1f} ms/generation; traces identical on "
          f"{same}/{len(keys)} generations.")


if __name__ == "__main__":
    main()
