"""`propme trace` end to end on small jobs, against the published tracer, in the same run.

    python benchmarks/trace_startup.py --published PATH/03_tracing/simple_trace.py
    python benchmarks/trace_startup.py --published P --frozen OLD --rounds 3 --work /tmp/bench-startup --keep
    python benchmarks/trace_startup.py --published P --generations STUDY.json   # the study's own generations too

The published tracer (N-essuno/PropMe, `03_tracing/simple_trace.py`, with its `data_loading.py`
beside it) is not part of PropMe: give the path of a copy outside this repository. It is run as
it is, through a small shim that answers its hard-coded `AutoTokenizer.from_pretrained(
"meta-llama/Llama-2-7b-hf")` with the index's own tokenizer folder (nothing else is changed), on
the same index (a generated corpus whose metadata lines have infini-gram's `{"metadata": {...}}`
layout, which the published code reads), `--match-mode mixed` (PropMe's default) and as many
workers as PropMe.

Sets traced, each in fresh processes, timed from outside (wall; CPU = user + system of the
process and its children, from `RUSAGE_CHILDREN`), `--rounds` times, alternating the tracers so
both share the machine's slow spells; the 1-minute load average is printed beside each run:

- `study-shaped`: 1,300 generations shaped like the study's generic and prefix generations
  (`memorization_experiment/data/dfm9/` of the study's repository: most empty, then short
  completions, model loops and a few copies), built from the index's corpus (`study_shaped`);
- `900`: 900 generations of 250 tokens, a third copied from documents, a third edited copies, a
  third new text (`benchmarks/trace.py`'s generator);
- each `--generations FILE`: a JSONL file (field `--text-field`) or a generations JSON file as the
  study writes them (every "completion" string, as the published `--is-generation-json` reads them).

For each set it prints the published / PropMe ratios of wall and CPU time per round (goal: wall
at least 10x in every round), and how many distinct generations get the same final spans from
both (and, for spans of at most `docs_per_span` occurrences, where neither side samples, the same
documents, match classes and NV-recall). With `--frozen DIR` (a checkout of an older commit), that
code's `propme trace` is timed as well and its results file is compared byte for byte with this
checkout's (and the summary, its `results` path aside).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import commit

HERE = Path(__file__).resolve().parent
#: both tracers run with Python's bytecode cache on (as an installed package has it), even where the
#: environment turns it off (PYTHONDONTWRITEBYTECODE): else each run of a checkout compiles its modules anew
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
       "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
#: the name the published tracer loads its tokenizer by
PUBLISHED_TOKENIZER = "meta-llama/Llama-2-7b-hf"
CLASS_NAMES = {"exact_full_raw": "full_raw", "exact_full_normalized": "full_normalized", "partial": "partial"}


# -- the index and the generation sets ------------------------------------------------------------

def build(work: Path, n_docs: int) -> tuple[Path, Path]:
    """A generated corpus's index (GPT-2 tokens) whose metadata lines read {"metadata": {id, source}}."""
    from propme.demo.synthetic import generate_corpus
    from propme_metrics.index.build import build_index
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.testing import gpt2_tokenizer

    out = work / "index"
    if not (out / "propme-manifest.json").exists():
        corpus = work / "corpus.jsonl"
        with open(corpus, "w", encoding="utf-8") as fh:
            for rec in generate_corpus(n_docs, seed=0):
                fh.write(json.dumps({"text": rec["text"], "metadata": {"id": rec["id"], "source": rec["source"]}},
                                    ensure_ascii=False) + "\n")
        t = time.time()
        manifest = build_index(CorpusSource(str(corpus), keep_fields=("metadata",)), out,
                               tokenizer=str(gpt2_tokenizer(work / "gpt2")), progress=False, check_space=False)
        print(f"built {out}: {manifest.total_documents:,} documents, {manifest.total_tokens:,} tokens in "
              f"{time.time() - t:.0f} s", flush=True)
        corpus.unlink()
    probs = work / "unigram_probs.json"
    if not probs.exists():  # the published tracer's rarity table: {id: {"prob": count / total}}
        from propme_metrics.index.reader import open_index

        index = open_index(out)
        counts, total = index.unigram_table, index.total_positions
        probs.write_text(json.dumps({str(t): {"prob": int(c) / total} for t, c in enumerate(counts.tolist()) if c}))
    return out, probs


def study_shaped(index_dir: Path, n: int = 1300, seed: int = 0) -> list[str]:
    """Generations shaped like the study's DFM generic and prefix sets (which are mostly empty
    completions, then short ones, some loops of one sentence until the token limit, a few copies):
    per 1,300, 940 empty, 60 generic loops, and 300 prefix-like (150 short endings of corpus
    sentences, 60 corpus copies of 40 to 200 tokens, 60 loops, 30 new text)."""
    from propme.demo.synthetic import generate_corpus, sentence
    from propme_metrics.index.reader import open_index

    index = open_index(index_dir)
    rng = random.Random(seed)
    docs = [rec["text"] for rec in generate_corpus(400, seed=0)]  # the first documents of the index's corpus

    def loop() -> str:
        s = sentence(rng, rng.choice(("da", "en")))
        ids = index.encode(" ".join([s] * 40))[:256]  # a loop until the 256-token limit, cut where it falls
        return index.decode(ids).strip()

    def short() -> str:
        words = rng.choice(rng.choice(docs).split(". ")).split()
        return " ".join(words[-rng.randint(1, min(15, len(words))):])

    def copy() -> str:
        ids = index.encode(rng.choice(docs))
        k = rng.randint(40, 200)
        start = rng.randrange(max(1, len(ids) - k))
        return index.decode(ids[start:start + k]).strip()

    def new() -> str:
        words = " ".join(sentence(rng, "da") for _ in range(20)).split()
        rng.shuffle(words)
        return index.decode(index.encode(" ".join(words))[:200]).strip()

    scale = n / 1300
    parts = [("", 940), (loop, 60), (short, 150), (copy, 60), (loop, 60), (new, 30)]
    rows = [make() if callable(make) else make for make, count in parts for _ in range(round(count * scale))]
    rng.shuffle(rows)
    return rows[:n]


def nine_hundred(index_dir: Path, work: Path) -> list[str]:
    """benchmarks/trace.py's generations: 900 of 250 tokens (copied, edited, new)."""
    spec = importlib.util.spec_from_file_location("trace_benchmark", HERE / "trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = work / "gens-900.jsonl"
    module.make_generations(path, index_dir, 900, 250, 4000, seed=0)
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


def read_generation_file(path: Path, field: str) -> list[str]:
    """A JSONL file's `field` values, or every "completion" of a generations JSON file (the study's layout)."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        return [json.loads(line)[field] for line in text.splitlines() if line.strip()]
    found: list[str] = []

    def collect(node) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("completion"), str):
                found.append(node["completion"])
            for child in node.values():
                collect(child)
        elif isinstance(node, list):
            for child in node:
                collect(child)

    collect(data)
    return found


# -- running both tracers ---------------------------------------------------------------------------

@dataclass
class Run:
    wall: float
    cpu: float
    load: float
    out: Path


def timed(cmd: list[str], out: Path, env: dict[str, str], log: Path) -> Run:
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"{cmd[:4]} ... failed ({proc.returncode}); see {log}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, load, out)


def run_propme(index: Path, gens: Path, where: Path, workers: int, code: Path | None = None) -> Run:
    env = dict(ENV)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    where.mkdir(parents=True, exist_ok=True)
    out = where / "results.jsonl"
    cmd = [sys.executable, "-m", "propme.cli.app", "trace", "--index", str(index), "--input", str(gens),
           "--out", str(out), "--summary", str(where / "summary.json"), "--workers", str(workers), "--quiet"]
    return timed(cmd, out, env, where / "log.txt")


def run_published(published: Path, index: Path, probs: Path, gens: Path, where: Path, workers: int) -> Run:
    where.mkdir(parents=True, exist_ok=True)
    out = where / "results.jsonl"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--shim", str(index / "propme-tokenizer"), str(published),
           "--dataset", str(gens), "--is-jsonl", "--text-field", "completion", "--index-dir", str(index),
           "--unigram-probs-path", str(probs), "--num-workers", str(workers), "--match-mode", "mixed",
           "--results-output", str(out), "--summary-output", str(where / "summary.json")]
    return timed(cmd, out, ENV, where / "log.txt")


def shim(tokenizer_dir: str, script: str, argv: list[str]) -> None:
    """Run the published script as `__main__`, its hub tokenizer answered by `tokenizer_dir` (the
    workers it forks inherit this)."""
    import runpy

    import transformers

    load = transformers.AutoTokenizer.from_pretrained

    def local(name, *args, **kwargs):
        return load(tokenizer_dir if name == PUBLISHED_TOKENIZER else name, *args, **kwargs)

    transformers.AutoTokenizer.from_pretrained = local
    sys.path.insert(0, str(Path(script).parent))
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


# -- comparing their outputs ------------------------------------------------------------------------

def agreement(propme_out: Path, published_out: Path, docs_per_span: int = 10) -> tuple[int, int]:
    """(distinct generations whose traces agree, distinct generations compared)."""
    mine = {}
    for line in propme_out.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        mine[r["text"]] = r
    agree = total = 0
    for line in published_out.read_text(encoding="utf-8").splitlines():
        p = json.loads(line)
        m = mine.get(p["generation"])
        if m is None:
            continue
        total += 1
        ours = sorted(((s["start"], s["end"]), s) for s in m["final_spans"])
        theirs = sorted(((s["start"], s["end"]), s) for s in p["spans"])
        same = [a for a, _ in ours] == [b for b, _ in theirs]
        for (_, s), (_, q) in zip(ours, theirs) if same else ():
            if s["count"] <= docs_per_span:
                a = sorted((str(d["source_id"]), d["match"], round(d["nv_recall"], 9)) for d in s["documents"])
                b = sorted((str(d["id"]), CLASS_NAMES[d["match_tier"]], round(d["nv_recall"], 9)) for d in q["docs"])
                same = same and a == b
            else:
                same = same and len(s["documents"]) == len(q["docs"])
        agree += same
    return agree, total


def same_outputs(a: Path, b: Path) -> bool:
    """Byte-identical results files and summaries equal but for the results path they name."""
    def summary(run: Path) -> dict:
        d = json.loads((run.parent / "summary.json").read_text())
        d.pop("results", None)
        return d
    return a.read_bytes() == b.read_bytes() and summary(a) == summary(b)


# -- main -------------------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 3 and sys.argv[1] == "--shim":
        return shim(sys.argv[2], sys.argv[3], sys.argv[4:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--published", type=Path, required=True, help="the published simple_trace.py (outside this repo)")
    ap.add_argument("--frozen", type=Path, default=None, help="a checkout of an older PropMe commit, timed and compared")
    ap.add_argument("--generations", type=Path, action="append", default=[], help="another set (repeatable)")
    ap.add_argument("--text-field", default="completion", help="the field of a --generations JSONL file")
    ap.add_argument("--docs", type=int, default=12000, help="documents of the generated corpus (about 305 tokens each)")
    ap.add_argument("--sets", default="study-shaped,900", help="the built-in sets to trace (comma-separated)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--goal", type=float, default=10.0, help="published / PropMe wall time, in every round")
    ap.add_argument("--work", type=Path, default=None, help="folder for the index and the runs (default: temporary)")
    ap.add_argument("--keep", action="store_true", help="keep --work")
    args = ap.parse_args()
    if not (args.published.is_file() and (args.published.parent / "data_loading.py").is_file()):
        sys.exit(f"{args.published}: not the published simple_trace.py with its data_loading.py beside it")
    work = args.work or Path(tempfile.mkdtemp(prefix="propme-bench-startup-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        index, probs = build(work, args.docs)
        makers = {"study-shaped": lambda: study_shaped(index), "900": lambda: nine_hundred(index, work)}
        sets = {name: makers[name]() for name in args.sets.split(",") if name}
        for path in args.generations:
            sets[path.name] = read_generation_file(path, args.text_field)
        print(f"commit {commit()}, {os.cpu_count()} CPUs, {args.workers} workers each, {args.rounds} rounds; "
              f"index {index} ({json.loads((index / 'propme-manifest.json').read_text())['total_tokens']:,} tokens)")
        met = True
        for name, texts in sets.items():
            gens = work / f"set-{name}.jsonl"
            gens.write_text("".join(json.dumps({"completion": t}, ensure_ascii=False) + "\n" for t in texts),
                            encoding="utf-8")
            n_empty = sum(not t.strip() for t in texts)
            print(f"\n### {name}: {len(texts)} generations ({n_empty} empty, {len(set(texts))} distinct)\n")
            print("| round | load | published wall / CPU | PropMe wall / CPU | ratio wall | ratio CPU |"
                  + (" frozen wall / CPU | frozen / PropMe wall | identical |" if args.frozen else ""))
            print("|---|---|---|---|---|---|" + ("---|---|---|" if args.frozen else ""))
            for r in range(args.rounds):
                base = work / "runs" / name / str(r)
                pub = run_published(args.published, index, probs, gens, base / "published", args.workers)
                mine = run_propme(index, gens, base / "propme", args.workers)
                row = (f"| {r + 1} | {pub.load:.1f} / {mine.load:.1f} | {pub.wall:.2f} / {pub.cpu:.2f} s | "
                       f"{mine.wall:.2f} / {mine.cpu:.2f} s | **{pub.wall / mine.wall:.1f}x** | "
                       f"{pub.cpu / mine.cpu:.1f}x |")
                met = met and pub.wall / mine.wall >= args.goal
                if args.frozen:
                    old = run_propme(index, gens, base / "frozen", args.workers, code=args.frozen)
                    row += (f" {old.wall:.2f} / {old.cpu:.2f} s | {old.wall / mine.wall:.2f}x | "
                            f"{'yes' if same_outputs(old.out, mine.out) else 'NO'} |")
                print(row, flush=True)
            agree, total = agreement(mine.out, pub.out)
            print(f"\ntraces agreeing with the published tracer's (last round): {agree}/{total} distinct generations")
        print(f"\ngoal (published / PropMe wall >= {args.goal:g}x in every round of every set): "
              f"{'met' if met else 'NOT met'}; load average now {os.getloadavg()[0]:.1f}")
    finally:
        if not (args.keep or args.work):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
