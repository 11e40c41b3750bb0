"""Benchmark of SimpleTrace (`propme_metrics.trace.tracer.Tracer`) against the published per-start loop.

    python benchmarks/trace.py                       # builds a ~20M-token synthetic index (GPT-2 tokenizer)
    python benchmarks/trace.py --index DIR           # reuse an index (its corpus must be generate_corpus(seed 0))
    python benchmarks/trace.py --frozen DIR          # also time the Tracer of an older checkout (e.g. a git
                                                     # worktree of commit 750e590) side by side; repeatable:
                                                     # --frozen OLD --frozen NEWER times and compares each

What it does, in one run:
  1. builds (or reuses) a synthetic index of --tokens tokens and one 10x smaller whose corpus is the
     first tenth of the same documents (generate_corpus is deterministic per seed);
  2. makes --generations texts of about --gen-tokens index tokens: a third copied from documents of
     that first tenth (from a word start, with the space before it, as a model's completion begins), a third lightly edited copies (a word swapped with its neighbour or deleted
     about every 10 words), a third new text (generate_corpus with another seed, words shuffled);
  3. in fresh subprocesses (so ru_maxrss is that measurement's own): traces all of them with the
     Tracer (workers 2 and 1) on the large index, with workers 1 on the small one, and runs the
     baseline on the first --baseline-n generations (sequential; its rate is extrapolated);
  4. checks that baseline and Tracer agree on those generations, and prints a Markdown table;
  5. with --frozen DIR (repeatable): traces all generations with the Tracer of each PropMe checkout
     DIR too (its code first on PYTHONPATH, workers 2 and 1), in --rounds rounds that each time this
     Tracer again and then every checkout, so both sides share the machine's slow spells; counts
     the generations whose results equal this Tracer's and prints the per-generation speed-up of the
     best runs against each; the --goal (default 2x) is checked against the first one;
     --frozen-only times nothing else (no small index, baseline, step 1, decoding or start-up).

The baseline is the straightforward loop of the published code: for every start position one
`engine.find` on the whole remaining suffix; when that suffix does not occur, the suffix-array
neighbours of its insertion point are fetched with `engine.get_doc_by_rank_2` and their common
prefix with the query measured in Python. Spans and unions are then counted with `engine.find` and
windows fetched with `engine.get_doc_by_rank(max_disp_len=5L)`; the other steps (rules, rarity,
anchors, classes, NV-recall) are shared. A fourth measurement times start-up: a fresh process that
imports PropMe, opens the small index and traces one generation.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
from _common import maxrss_mib, status_kb  # noqa: E402

# -- the baseline -------------------------------------------------------------------------------

def baseline_tracer_class():
    from propme_metrics.index.search import DocWindow, IndexSearch, Occurrences
    from propme_metrics.trace.tracer import Tracer

    class EngineSearch(IndexSearch):
        """Step 1 and the lookups through infini-gram's engine, one call per start / span / document."""

        def longest_matches(self, ids, starts=None):
            import numpy as np

            engine = self.index.engine
            ids = [int(t) for t in ids]
            tok_cnt = [engine.engine.get_tok_cnt(s=s) for s in range(len(self.index.engine_shards))]
            out = []
            for i in (range(len(ids)) if starts is None else starts):
                query = ids[i:]
                found = engine.find(input_ids=query)
                best = len(query) if found["cnt"] > 0 else 0
                if not best:
                    for s, (lo, _hi) in enumerate(found["segment_by_shard"]):
                        for rank in (lo - 1, lo):
                            if 0 <= rank < tok_cnt[s]:
                                doc = engine.get_doc_by_rank_2(s=s, rank=rank, needle_len=len(query), max_ctx_len=0)
                                toks = doc["token_ids"][doc["needle_offset"]:]
                                k = 0
                                while k < len(toks) and k < len(query) and toks[k] == query[k]:
                                    k += 1
                                best = max(best, k)
                out.append(i + best)
            return np.asarray(out, dtype=np.int64)

        def locate(self, ids, spans):
            engine = self.index.engine
            ids = [int(t) for t in ids]
            out = []
            for s, e in spans:
                f = engine.find(input_ids=ids[s:e])
                out.append(Occurrences(f["cnt"], [tuple(x) for x in f["segment_by_shard"]]))
            return out

        def windows(self, occurrences, max_disp_len):
            import numpy as np

            engine = self.index.engine
            docs = [engine.get_doc_by_rank(s=s, rank=r, max_disp_len=max_disp_len) for s, r in occurrences]
            return [DocWindow(shard=self.index.engine_shards[s], doc_ix=d["doc_ix"], doc_len=d["doc_len"],
                              token_ids=np.asarray(d["token_ids"]), needle_offset=d["needle_offset"],
                              metadata=d["metadata"]) for (s, _), d in zip(occurrences, docs)]

    class BaselineTracer(Tracer):
        """The tracer with the engine as its search path."""

        def _open_search(self):
            return EngineSearch(self.index)

    return BaselineTracer


# -- measurement (runs in its own process) ---------------------------------------------------------

def serialize_line(result) -> bytes:
    """A result's line as `propme trace` writes it, as bytes for the file (an older checkout: as that one did)."""
    if hasattr(result, "json_bytes"):
        return result.json_bytes()
    if hasattr(result, "json_line"):
        return result.json_line().encode("utf-8")
    return (json.dumps(result.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")


def measure(kind: str, index: str, gens_path: str, workers: int, every: int, out: str | None,
            repeat: int) -> None:
    from propme_metrics.trace.tracer import Tracer

    rows = [json.loads(line) for line in open(gens_path, encoding="utf-8")][::every]
    started = time.perf_counter()
    base = kind.startswith("baseline")
    tracer = (baseline_tracer_class() if base else Tracer)(index)
    if base or kind == "attribute-step1":
        tracer.index.engine  # noqa: B018 - open the engine before timing
    tracer.trace([rows[0]["text"]], ["warm-up"])  # first page faults / lazy tables outside the timing
    opened = time.perf_counter() - started
    texts, keys = [r["text"] for r in rows], [r["key"] for r in rows]
    if kind.endswith("step1"):  # step 1 (maximal spans) alone, on pre-tokenized generations
        all_ids = [tracer.index.encode(t) for t in texts]
        seconds = math.inf
        if kind == "attribute-step1":  # the engine's own call, which the issue names for step 1
            engine, delims = tracer.index.engine, sorted(tracer.index.manifest.delimiter_ids)
            step1 = lambda ids: engine.attribute(input_ids=ids, delim_ids=delims, min_len=1,  # noqa: E731
                                                 max_cnt=2**62, enforce_bow=True)
        else:
            step1 = lambda ids: tracer.clean_spans(ids, tracer.step1_spans(ids))  # noqa: E731
        for _ in range(repeat):
            t0 = time.perf_counter()
            for ids in all_ids:
                step1(ids)
            seconds = min(seconds, time.perf_counter() - t0)
        print(json.dumps({"kind": kind, "index": index, "workers": 1, "generations": len(rows), "seconds": seconds,
                          "open_seconds": opened, "rate": len(rows) / seconds,
                          "tokens": sum(map(len, all_ids)), "failed": 0,
                          "maxrss_mb": maxrss_mib(),
                          "rss_anon_mb": status_kb("RssAnon") / 1024, "rss_file_mb": status_kb("RssFile") / 1024}))
        return
    seconds = serialize = math.inf
    traced_anon = None
    for _ in range(repeat):  # best of `repeat`: other load on the machine only ever slows a run down
        # as `propme trace` runs: each result serialized and written as it comes; `seconds` is the
        # tracing alone (the loop less the serialization), `serialize` that of every result once
        results, spent = [], 0.0
        with open(out or os.devnull, "wb") as fh:
            t0 = time.perf_counter()
            for res in tracer.iter_trace(texts, keys, workers=workers):
                t1 = time.perf_counter()
                line = serialize_line(res)
                spent += time.perf_counter() - t1
                fh.write(line)
                results.append(res)
            total = time.perf_counter() - t0
        if total - spent < seconds:
            seconds, serialize = total - spent, spent
        if traced_anon is None:  # the first run's: a later one also holds what its predecessor freed
            traced_anon = status_kb("RssAnon") / 1024  # the tracer's own memory and its results (no lines held)
    lines = [serialize_line(r) for r in results]  # every line at once: what `propme trace` never holds
    print(json.dumps({
        "kind": kind, "index": index, "workers": workers, "generations": len(rows), "seconds": seconds,
        "open_seconds": opened, "rate": len(rows) / seconds, "tokens": sum(r.n_tokens for r in results),
        "serialize_seconds": serialize, "lines_mib": sum(map(len, lines)) / 2**20,
        "failed": sum(r.error is not None for r in results),
        "maxrss_mb": max(maxrss_mib(resource.RUSAGE_SELF), maxrss_mib(resource.RUSAGE_CHILDREN)), "rss_anon_mb": status_kb("RssAnon") / 1024,
        "rss_anon_traced_mb": traced_anon, "rss_file_mb": status_kb("RssFile") / 1024}))


def measure_decoding(index: Path, gens_path: Path, n: int, repeat: int) -> dict:
    """Window decoding alone, old against new in this process: every window the Tracer fetches for
    the first `n` generations, cut at its occurrence (as tracing decodes it), decoded by the
    tokenizer's `decode_batch` (PropMe at 750e590) and through the byte table (`index/decode.py`)."""
    from propme_metrics.trace.tracer import Tracer

    tracer = Tracer(index)
    rows = [json.loads(line) for line in open(gens_path, encoding="utf-8")][:n]
    wins: list = []
    fetch = tracer.search.windows
    tracer.search.windows = lambda picks, m: wins.extend(w := fetch(picks, m)) or w
    tracer.trace([r["text"] for r in rows])
    parts = [p for w in wins for p in (w.token_ids[:w.needle_offset], w.token_ids[w.needle_offset:])]
    backend, decoder = tracer.index.backend, tracer._decoder
    best = {"tokenizer": math.inf, "table": math.inf}
    for _ in range(repeat):
        t0 = time.perf_counter()
        old = backend.decode_batch([p.tolist() for p in parts], skip_special_tokens=False)
        best["tokenizer"] = min(best["tokenizer"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        new = decoder.decode_batch(parts)
        best["table"] = min(best["table"], time.perf_counter() - t0)
    return {**best, "windows": len(wins), "tokens": sum(len(p) for p in parts), "identical": old == new,
            "family": type(decoder.rules).__name__.strip("_") if decoder.rules else "tokenizer's own"}


def run_measure(args: argparse.Namespace, kind: str, index: Path, workers: int, every: int = 1,
                out: Path | None = None, timeout: float | None = None, code: Path | None = None) -> dict | None:
    """One measurement in a fresh process (importing PropMe from `code` when given); None if it ran
    past `timeout` seconds (it is then stopped)."""
    cmd = [sys.executable, __file__, "--_measure", kind, "--index", str(index), "--_gens", str(args.gens_file),
           "--workers", str(workers), "--_every", str(every), "--repeat", str(args.repeat)]
    # the code measured first on the path: an older checkout, or this one (not an installed copy)
    path = code if code is not None else Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path.absolute()), os.environ.get("PYTHONPATH", "")])}
    if out:
        cmd += ["--_out", str(out)]
    print(f"  measuring {kind}{f' of {code}' if code else ''} on {index.name} (workers {workers}"
          f"{f', every {every}th generation' if every > 1 else ''}) ...", flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"  ... stopped after {timeout:.0f} s", flush=True)
        return None
    if proc.returncode != 0:
        sys.exit(f"measurement failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


STARTUP = ("import sys, time; t0 = time.perf_counter(); from propme_metrics.trace.tracer import Tracer; "
           "t = Tracer(sys.argv[1]); t.trace_one(sys.argv[2], 'k'); print(time.perf_counter() - t0)")


def measure_startup(index: Path, text: str, repeat: int) -> dict:
    """Wall time of a fresh `python` that imports PropMe, opens `index` and traces one generation,
    next to a bare `python -c pass` (best of `repeat`)."""
    best, bare, inner = math.inf, math.inf, math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", STARTUP, str(index), text], capture_output=True, text=True)
        best = min(best, time.perf_counter() - t0)
        if proc.returncode != 0:
            sys.exit(f"start-up measurement failed:\n{proc.stderr[-3000:]}")
        inner = min(inner, float(proc.stdout.strip().splitlines()[-1]))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare = min(bare, time.perf_counter() - t0)
    return {"seconds": best, "inner_seconds": inner, "python_seconds": bare}


# -- corpus, indexes, generations -----------------------------------------------------------------

def build(work: Path, tokens: int, tokenizer: Path, name: str) -> Path:
    from propme.demo.synthetic import generate_corpus
    from propme_metrics.index.build import build_index
    from propme_metrics.index.sources import CorpusSource

    out = work / name
    if (out / "propme-manifest.json").exists():
        return out
    corpus = work / f"{name}.jsonl"
    # generated documents average about 305 GPT-2 tokens
    n_docs = max(100, tokens // 300)
    with open(corpus, "w", encoding="utf-8") as fh:
        for rec in generate_corpus(n_docs, seed=0):
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    t = time.time()
    manifest = build_index(CorpusSource(str(corpus)), out, tokenizer=str(tokenizer), progress=False,
                           check_space=False)
    print(f"  built {out}: {manifest.total_documents:,} documents, {manifest.total_tokens:,} tokens "
          f"in {time.time() - t:.0f} s", flush=True)
    corpus.unlink()
    return out


def make_generations(path: Path, index_dir: Path, n: int, gen_tokens: int, source_docs: int, seed: int) -> None:
    from propme.demo.synthetic import generate_corpus
    from propme_metrics.index.reader import open_index

    index = open_index(index_dir)
    rng = random.Random(seed)
    bow = set(index.word_starts.tolist())
    lengths = index.document_lengths[:source_docs]
    long_docs = [i for i, n_tok in enumerate(lengths) if n_tok >= gen_tokens + 20]
    rng.shuffle(long_docs)

    def copied(doc_ix: int) -> str:
        toks = index.document(doc_ix).token_ids.tolist()
        starts = [i for i in range(len(toks) - gen_tokens) if toks[i] in bow] or [0]
        s = rng.choice(starts)
        return index.decode(toks[s:s + gen_tokens])  # from a word start: its space first, as a model writes it

    def edited(text: str) -> str:
        words = text.split(" ")
        out, i = [], 0
        while i < len(words):
            if i % 10 == 9 and i + 1 < len(words):
                if rng.random() < 0.5:
                    out += [words[i + 1], words[i]]
                    i += 2
                    continue
                i += 1  # delete this word
                continue
            out.append(words[i])
            i += 1
        return " ".join(out)

    third = n // 3
    rows = []
    for j in range(third):
        rows.append({"key": f"copy-{j}", "kind": "copied", "text": copied(long_docs[j])})
    for j in range(third):
        rows.append({"key": f"edit-{j}", "kind": "edited", "text": edited(copied(long_docs[third + j]))})
    new = []
    for rec in generate_corpus(20 * (n - 2 * third) + 100, seed=seed + 1000):
        words = rec["text"].split()
        rng.shuffle(words)
        ids = index.encode(" ".join(words))
        if len(ids) >= gen_tokens:
            new.append(index.decode(ids[:gen_tokens]).strip())
        if len(new) == n - 2 * third:
            break
    for j, text in enumerate(new):
        rows.append({"key": f"new-{j}", "kind": "new", "text": text})
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


# -- older checkouts ------------------------------------------------------------------------------

def frozen_results(work: Path, i: int, workers: int) -> Path:
    """Where the results of the i-th --frozen checkout traced with `workers` workers go."""
    return work / f"frozen{i}-results-{workers}.jsonl"


def print_frozen(args: argparse.Namespace, frozen: dict, mine: dict, mine_runs: int, base: dict | None) -> None:
    """The table against each --frozen checkout: best times of the rounds, speed-up, RssAnon and
    identical results (parsed JSON compared, so a serializer's spacing does not count), then the
    --goal (and the speed-up against the per-start baseline when it was measured). RssAnon is taken twice: after tracing (the tracer's memory) and after every result is
    serialized into one list of lines, which `propme trace` never holds (it writes each line as it goes)."""
    ours = [json.loads(x) for x in open(args.work / "tracer-results.jsonl", encoding="utf-8")]
    print()
    print(f"Against the Tracer of older checkouts (same generations, same index, fresh processes; {args.rounds} "
          f"rounds, each timing this Tracer and then every checkout; best of {mine_runs} runs for this Tracer "
          f"and {args.rounds} for each checkout, each run the best of {args.repeat}):")
    print()
    print("| checkout | workers | frozen s | PropMe s | frozen ms/generation | PropMe ms/generation | speed-up | "
          "RssAnon MiB after tracing, frozen / PropMe | after serializing, frozen / PropMe | results identical |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, (code, runs) in enumerate(frozen.items()):
        for w in (args.workers, 1):
            fr, me = runs[w], mine[w]
            theirs = [json.loads(x) for x in open(frozen_results(args.work, i, w), encoding="utf-8")]
            same = sum(a == b for a, b in zip(ours, theirs))
            print(f"| {code} | {w} | {fr['seconds']:.2f} | {me['seconds']:.2f} | "
                  f"{1000 / fr['rate']:.1f} | {1000 / me['rate']:.1f} | {me['rate'] / fr['rate']:.2f}x | "
                  f"{fr['rss_anon_traced_mb']:.0f} / {me['rss_anon_traced_mb']:.0f} | "
                  f"{fr['rss_anon_mb']:.0f} / {me['rss_anon_mb']:.0f} | {same}/{len(ours)} |")
    code, runs = next(iter(frozen.items()))
    ratios = {w: mine[w]["rate"] / runs[w]["rate"] for w in runs}
    print()
    verdict = lambda r: "met" if r >= args.goal else "MISSED"  # noqa: E731
    memory = {w: "no higher" if mine[w]["rss_anon_traced_mb"] <= runs[w]["rss_anon_traced_mb"] else "HIGHER"
              for w in runs}
    print(f"Goal: at least {args.goal:g}x faster per generation than {code}: "
          f"{verdict(ratios[args.workers])} with {args.workers} workers ({ratios[args.workers]:.2f}x; RssAnon after "
          f"tracing {memory[args.workers]}), {verdict(ratios[1])} with 1 ({ratios[1]:.2f}x; RssAnon {memory[1]})"
          + ("." if base is None else
             f"; speed-up against the per-start baseline: {mine[1]['rate'] / base['rate']:.1f}x with 1 worker, "
             f"{mine[args.workers]['rate'] / base['rate']:.1f}x with {args.workers}."))


def time_frozen(args: argparse.Namespace, big: Path, tr2: dict, tr1: dict) -> tuple[dict, dict, int]:
    """The checkouts compared side by side: each round times this Tracer and then every --frozen
    checkout, per worker count, so that a slow spell of the machine hits both sides. Returns the
    best run of each checkout and of this Tracer per worker count, and this Tracer's run count."""
    mine: dict[int, list[dict]] = {args.workers: [tr2], 1: [tr1]}
    frozen: dict[Path, dict[int, list[dict]]] = {code: {args.workers: [], 1: []} for code in args.frozen}
    for _ in range(args.rounds if args.frozen else 0):
        for w in (args.workers, 1):
            mine[w].append(run_measure(args, "tracer", big, w))
            for i, code in enumerate(args.frozen):
                frozen[code][w].append(run_measure(args, "tracer", big, w, code=code, out=frozen_results(args.work, i, w)))
    fastest = lambda runs: max(runs, key=lambda r: r["rate"])  # noqa: E731
    return ({code: {w: fastest(runs) for w, runs in by_w.items()} for code, by_w in frozen.items()},
            {w: fastest(runs) for w, runs in mine.items()}, len(mine[1]))


# -- main ---------------------------------------------------------------------------------------

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, help="reuse this index (built from generate_corpus(seed=0) documents)")
    p.add_argument("--small-index", type=Path, help="reuse this 10x smaller index")
    p.add_argument("--work", type=Path, default=Path("/tmp/propme-bench-trace"), help="where indexes and texts go")
    p.add_argument("--tokens", type=int, default=20_000_000, help="size of the index to build")
    p.add_argument("--generations", type=int, default=300)
    p.add_argument("--gen-tokens", type=int, default=256)
    p.add_argument("--baseline-n", type=int, default=30, help="generations the (slow) baseline traces")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=2, help="time each measurement this often and keep the fastest")
    p.add_argument("--rounds", type=int, default=2,
                   help="with --frozen: rounds that each time this Tracer and then every checkout again, per worker "
                        "count (a slow spell of a shared machine then hits both sides); the best of all is compared")
    p.add_argument("--frozen", type=Path, action="append", default=[],
                   help="a checkout of an older PropMe (e.g. `git worktree add DIR 750e590`) whose Tracer is timed "
                        "and compared on the same generations; repeatable (--goal is checked against the first)")
    p.add_argument("--goal", type=float, default=2.0,
                   help="with --frozen: the speed-up per generation over the first checkout that counts as met")
    p.add_argument("--frozen-only", action="store_true",
                   help="with --frozen: time only this Tracer (on --index) and the checkouts: no small index, "
                        "per-start baseline, step 1 alone, decoding or start-up")
    p.add_argument("--_measure", choices=("tracer", "baseline", "tracer-step1", "baseline-step1",
                                                   "attribute-step1"), help=argparse.SUPPRESS)
    p.add_argument("--_gens", help=argparse.SUPPRESS)
    p.add_argument("--_every", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--_out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._measure:
        measure(args._measure, str(args.index), args._gens, args.workers, args._every, args._out, args.repeat)
        return
    if args.frozen_only and not args.frozen:
        p.error("--frozen-only needs --frozen")

    from propme_metrics.index.reader import open_index
    from propme_metrics.testing import gpt2_tokenizer

    args.work.mkdir(parents=True, exist_ok=True)
    tok = args.work / "gpt2"
    if not (tok / "tokenizer.json").exists():
        gpt2_tokenizer(tok)
    print("indexes:", flush=True)
    big = args.index or build(args.work, args.tokens, tok, f"index-{args.tokens // 1_000_000}M")
    small = args.small_index or build(args.work, args.tokens // 10, tok, f"index-{args.tokens // 10_000_000}M-small")
    big_m, small_m = open_index(big).manifest, open_index(small).manifest
    args.gens_file = args.work / f"generations-{args.generations}x{args.gen_tokens}-seed{args.seed}-v2.jsonl"
    if not args.gens_file.exists():
        make_generations(args.gens_file, big, args.generations, args.gen_tokens, small_m.total_documents, args.seed)

    print("measurements:", flush=True)
    every = max(1, args.generations // args.baseline_n)
    tr2 = run_measure(args, "tracer", big, args.workers, out=args.work / "tracer-results.jsonl")
    tr1 = run_measure(args, "tracer", big, 1)
    if args.frozen_only:
        frozen_best, mine_best, mine_runs = time_frozen(args, big, tr2, tr1)
        print_frozen(args, frozen_best, mine_best, mine_runs, None)
        return
    tr_small = run_measure(args, "tracer", small, 1)
    base = run_measure(args, "baseline", big, 1, every=every, out=args.work / "baseline-results.jsonl")
    s1 = run_measure(args, "tracer-step1", big, 1)
    b1 = run_measure(args, "baseline-step1", big, 1, every=every)
    # the engine's `attribute` lists every occurrence of every span: on frequent spans it runs for
    # minutes and takes gigabytes (seen here: 11 GB after 7 minutes on 30 generations), so it gets
    # a few generations and a time limit
    a1 = run_measure(args, "attribute-step1", big, 1, every=max(1, args.generations // 3), timeout=120)
    frozen_best, mine_best, mine_runs = time_frozen(args, big, tr2, tr1)

    dec = measure_decoding(big, args.gens_file, min(args.generations, 300), max(3, args.repeat))
    first = json.loads(open(args.gens_file, encoding="utf-8").readline())["text"]
    start = measure_startup(small, first, max(3, args.repeat))
    ours = [json.loads(x) for x in open(args.work / "tracer-results.jsonl", encoding="utf-8")][::every]
    theirs = [json.loads(x) for x in open(args.work / "baseline-results.jsonl", encoding="utf-8")]
    agree = sum(a == b for a, b in zip(ours, theirs))

    tokens_per_gen = tr1["tokens"] / tr1["generations"]
    big_t, small_t = f"{big_m.total_tokens / 1e6:.1f}M", f"{small_m.total_tokens / 1e6:.1f}M"
    print()
    print(f"Index: {big_m.total_tokens:,} tokens, {big_m.total_documents:,} documents, 1 shard ({big}); "
          f"small index: {small_m.total_tokens:,} tokens. Generations: {tr1['generations']} "
          f"(a third each copied / edited / new), {tokens_per_gen:.0f} index tokens on average. "
          f"Machine: {os.cpu_count()} CPUs.")
    print()
    print("| what | run | index | workers | generations | seconds | generations/s | ms/generation | "
          "speed-up vs baseline | ru_maxrss MiB | RssAnon MiB | RssFile MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    table = (("end to end", "PropMe Tracer", tr2, big_t, base), ("end to end", "PropMe Tracer", tr1, big_t, base),
             ("end to end", "PropMe Tracer", tr_small, small_t, base),
             ("end to end", "baseline", base, big_t, base),
             ("step 1 only", "PropMe Tracer", s1, big_t, b1), ("step 1 only", "baseline", b1, big_t, b1),
             ("step 1 only", "engine `attribute`", a1, big_t, b1))
    for what, name, r, idx, ref in table:
        if r is None:
            print(f"| {what} | {name} | {idx} | 1 | 3 | > 120 (stopped) | < 0.025 | > 40,000 | | | | |")
            continue
        extra = f" (on {r['generations']}, extrapolated)" if r["generations"] < tr1["generations"] else ""
        print(f"| {what} | {name} | {idx} | {r['workers']} | {r['generations']} | {r['seconds']:.2f} | "
              f"{r['rate']:.2f}{extra} | {1000 / r['rate']:.1f} | {r['rate'] / ref['rate']:.1f}x | "
              f"{r['maxrss_mb']:.0f} | {r['rss_anon_mb']:.0f} | {r['rss_file_mb']:.0f} |")
    print()
    print(f"The baseline traced every {every}th generation ({base['generations']}, all three kinds); its rate is "
          f"extrapolated. Baseline and Tracer results identical on {agree}/{len(theirs)} of them. "
          f"Each time is the best of {args.repeat} runs. "
          f"'step 1 only' times maximal spans on pre-tokenized generations (engine `attribute`: the engine's own "
          f"call with word starts, delimiters and every occurrence listed); 'end to end' includes tokenizing, "
          f"counting, document windows, decoding, match classes and NV-recall (shared code). ru_maxrss of the "
          f"2-worker run is that of its largest process.")
    print(f"Start-up (fresh process: import, open the {small_t} index, trace one generation): "
          f"{start['seconds']:.2f} s wall, {start['inner_seconds']:.2f} s inside Python "
          f"(a bare `python -c pass` takes {start['python_seconds']:.2f} s); goal < 1 s: "
          f"{'met' if start['seconds'] < 1 else 'MISSED'}.")
    if frozen_best:
        print_frozen(args, frozen_best, mine_best, mine_runs, base)
    print()
    print(f"Window decoding ({dec['windows']:,} windows of the first {min(args.generations, 300)} generations, cut at "
          f"their occurrence, {dec['tokens']:,} tokens; {dec['family']} rules): tokenizer decode_batch "
          f"{dec['tokenizer'] * 1000:.0f} ms, byte table {dec['table'] * 1000:.0f} ms: "
          f"{dec['table'] / dec['tokenizer']:.1%} of the old cost (goal <= 20%: "
          f"{'met' if dec['table'] <= dec['tokenizer'] / 5 else 'MISSED'}); texts identical: {dec['identical']}.")
    share = tr1["serialize_seconds"] / (tr1["seconds"] + tr1["serialize_seconds"])
    print(f"Serialization (one JSON line of each result as it comes, as `propme trace` writes it): {tr1['serialize_seconds']:.2f} s = "
          f"{share:.1%} of trace + serialization with 1 worker (goal <= 2%: {'met' if share <= 0.02 else 'MISSED'})"
          + "".join(f"; {code}: {fr[1]['serialize_seconds']:.2f} s = "
                    f"{fr[1]['serialize_seconds'] / (fr[1]['seconds'] + fr[1]['serialize_seconds']):.1%}"
                    for code, fr in frozen_best.items()) + ".")
    speed = tr2["rate"] / base["rate"]
    print(f"Goals: end-to-end speed-up >= 10x: {'met' if speed >= 10 else 'MISSED'} ({speed:.1f}x with {args.workers} "
          f"workers, {tr1['rate'] / base['rate']:.1f}x with 1; step 1 alone {s1['rate'] / b1['rate']:.1f}x); "
          f"under 50 ms per generation: {'met' if 1000 / tr2['rate'] < 50 else 'MISSED'} "
          f"({1000 / tr2['rate']:.1f} ms with {args.workers} workers, {1000 / tr1['rate']:.1f} ms with 1); "
          f"memory: ru_maxrss {tr1['maxrss_mb']:.0f} MiB on the {big_t} index vs {tr_small['maxrss_mb']:.0f} MiB "
          f"on the {small_t} one (RssAnon {tr1['rss_anon_mb']:.0f} vs {tr_small['rss_anon_mb']:.0f} MiB, "
          f"RssFile {tr1['rss_file_mb']:.0f} vs {tr_small['rss_file_mb']:.0f} MiB).")


if __name__ == "__main__":
    main()
