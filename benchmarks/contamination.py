"""Contamination check speed: items per second for an MMLU-sized benchmark (14,000 items of about
100 tokens) against a large index, and against two baselines measured in the same run.

    python benchmarks/contamination.py [--index DIR] [--tokens 10M] [--items 14000] [--work DIR]

--index takes any index built with the GPT-2 tokenizer, e.g. the 100M-token `index-100M` that
`benchmarks/scale.py --sizes 100M --keep` leaves in its work folder; without it a generated corpus of
--tokens tokens (scale.py's generator: Zipf-distributed GPT-2 words, boilerplate, duplicates) is
indexed first (10M by default: a 100M build takes long on a shared 2-core machine).

Items: a third copied from corpus documents (80 tokens of question, 20 of answer), a third the same
with every fifth word replaced, a third new text from the same word distribution. Measured:

  * PropMe: `match_items` + `apply_rule` (question, answer and joined text of every item: match
    lengths at every token, longest span with count and source, coverage, boilerplate), one
    process, first pass and warm (second) pass;
  * infini-gram's engine counting each k-gram of the joined texts (coverage only, no longest
    match), on a sample of the items, its coverage checked equal to PropMe's;
  * a Python set of the corpus's k-grams (coverage only) on a small index (--small-tokens) where
    the set fits in memory, against PropMe on that same small index, coverage checked equal;
  * with --ray: PropMe with the shards held by Ray actors (`propme contamination --ray`), two
    driver threads, results checked equal.

The machine may be shared with other work: the figures say what this run saw, the ratios are
between measurements of the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
from _common import parse_size, size_name  # noqa: E402

from propme_metrics.contamination.check import KgramCounts, apply_rule, match_items  # noqa: E402
from propme_metrics.contamination.coverage import kgram_keys  # noqa: E402
from propme_metrics.contamination.items import BenchmarkItem  # noqa: E402
from propme_metrics.contamination.match import CorpusMatcher  # noqa: E402
from propme_metrics.contamination.rule import ContaminationRule  # noqa: E402
from propme_metrics.index.reader import Index, open_index  # noqa: E402

QUESTION_TOKENS, ANSWER_TOKENS = 80, 20


def build(work: Path, tokens: int, tokenizer_dir: Path, seed: int) -> Path:
    """The index of a generated corpus of about `tokens` tokens (reused when present)."""
    from scale import write_corpus

    from propme_metrics.index.build import build_index
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.index.tokenizer import load_tokenizer

    out = work / f"index-{size_name(tokens)}"
    if (out / "propme-manifest.json").is_file():
        return out
    corpus = work / f"corpus-{size_name(tokens)}.jsonl"
    t = time.perf_counter()
    write_corpus(corpus, load_tokenizer(str(tokenizer_dir)), tokens, seed)
    manifest = build_index(CorpusSource(str(corpus)), out, tokenizer=str(tokenizer_dir), check_space=False,
                           progress=False)
    corpus.unlink()
    print(f"built {out}: {manifest.total_tokens:,} tokens, {manifest.total_documents:,} documents in "
          f"{time.perf_counter() - t:.0f} s", flush=True)
    return out


def make_items(index: Index, n: int, seed: int) -> list[BenchmarkItem]:
    """n items: copied from documents, copied with every fifth word replaced, and new text."""
    rng = random.Random(seed)
    lengths = index.document_lengths
    long_docs = np.flatnonzero(lengths >= QUESTION_TOKENS + ANSWER_TOKENS + 2)
    words = index.decode(index.document(int(rng.choice(long_docs))).token_ids).split()
    items = []
    for i in range(n):
        doc = index.document(int(rng.choice(long_docs))).token_ids
        start = rng.randrange(0, len(doc) - QUESTION_TOKENS - ANSWER_TOKENS)
        question = index.decode(doc[start:start + QUESTION_TOKENS]).strip()
        answer = index.decode(doc[start + QUESTION_TOKENS:start + QUESTION_TOKENS + ANSWER_TOKENS]).strip()
        kind = i % 3
        if kind == 1:
            question = " ".join(rng.choice(words) if j % 5 == 4 else w for j, w in enumerate(question.split()))
        elif kind == 2:  # new text of the same words, shuffled
            question = " ".join(rng.choice(words) for _ in question.split())
            answer = " ".join(rng.choice(words) for _ in answer.split())
        items.append(BenchmarkItem("bench", i, question, answer, f"{question} {answer}"))
    return items


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the forked workers)."""
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def propme_pass(index: Index, items: list[BenchmarkItem], rule: ContaminationRule, workers: int = 1,
                cpu: dict | None = None, search=None) -> tuple[float, list]:
    t, c = time.perf_counter(), _cpu()
    matcher = CorpusMatcher(index, workers=workers, search=search)
    check = apply_rule("bench", match_items(items, matcher), rule, KgramCounts(matcher))
    if cpu is not None:
        cpu["seconds"] = _cpu() - c
    return time.perf_counter() - t, check.items


def engine_coverage(index: Index, items: list[BenchmarkItem], k: int) -> tuple[float, list[float | None]]:
    """Coverage of the joined texts from infini-gram's engine: one `count` per k-gram."""
    engine = index.engine
    matcher = CorpusMatcher(index)
    t = time.perf_counter()
    out = []
    for _, ids, _ in matcher.encode([it.joined for it in items]):
        ids = ids.tolist()
        if len(ids) < k:
            out.append(None)
            continue
        found = [engine.count(input_ids=ids[j:j + k])["count"] > 0 for j in range(len(ids) - k + 1)]
        covered = [any(found[max(0, p - k + 1):min(p, len(found) - 1) + 1]) for p in range(len(ids))]
        out.append(sum(covered) / len(ids))
    return time.perf_counter() - t, out


def set_coverage(index: Index, items: list[BenchmarkItem], k: int) -> tuple[float, float, float, list[float | None]]:
    """(set build seconds, its size in MiB, lookup seconds, coverages) with a Python set of every
    k-gram of the corpus's documents (each k-gram as its 64-bit key: smaller than a tuple)."""
    t = time.perf_counter()
    grams: set[int] = set()
    for doc_ix in range(index.manifest.total_documents):
        ids = index.document(doc_ix).token_ids.astype(np.int64)
        for key in kgram_keys(ids, k).tolist():
            grams.add(key)
    build_s = time.perf_counter() - t
    added = (sys.getsizeof(grams) + sum(sys.getsizeof(g) for g in grams)) / 2**20
    matcher = CorpusMatcher(index)
    t = time.perf_counter()
    out = []
    for _, ids, _ in matcher.encode([it.joined for it in items]):
        keys = kgram_keys(ids, k).tolist()
        if len(ids) < k:
            out.append(None)
            continue
        found = [key in grams for key in keys]
        covered = [any(found[max(0, p - k + 1):min(p, len(found) - 1) + 1]) for p in range(len(ids))]
        out.append(sum(covered) / len(ids))
    return build_s, added, time.perf_counter() - t, out


def joined_coverages(results) -> list[float | None]:
    return [r.coverage["joined"].value for r in results]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, default=None, help="a GPT-2-tokenized index (default: build one)")
    ap.add_argument("--tokens", type=parse_size, default=parse_size("10M"), help="size of the generated index")
    ap.add_argument("--small-tokens", type=parse_size, default=parse_size("1M"), help="size of the set baseline's index")
    ap.add_argument("--items", type=int, default=14_000)
    ap.add_argument("--engine-items", type=int, default=150, help="items the engine baseline counts")
    ap.add_argument("--work", type=Path, default=Path("/tmp/propme-bench-contamination"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="also match with the shards on Ray (a local cluster without ADDRESS)")
    ap.add_argument("--actors", type=int, default=None, help="with --ray: actors holding the shards")
    args = ap.parse_args()
    from propme_metrics.testing import gpt2_tokenizer

    args.work.mkdir(parents=True, exist_ok=True)
    tok_dir = args.work / "gpt2" if (args.work / "gpt2" / "tokenizer.json").is_file() else gpt2_tokenizer(args.work / "gpt2")
    index_dir = args.index or build(args.work, args.tokens, tok_dir, args.seed)
    small_dir = build(args.work, args.small_tokens, tok_dir, args.seed + 1)
    rule = ContaminationRule()
    # baselines compare coverage without the boilerplate rule (they know no items but one)
    plain = ContaminationRule(boilerplate_share=1.0)
    index = open_index(index_dir)
    items = make_items(index, args.items, args.seed)
    n_tok = sum(len(x) for _, x, _ in CorpusMatcher(index).encode([it.joined for it in items[:500]])) / 500
    print(f"index {index_dir}: {index.manifest.total_tokens:,} tokens; {len(items):,} items of "
          f"{n_tok:.0f} tokens on average (joined); {os.cpu_count()} CPUs (shared machine)", flush=True)
    first_s, _ = propme_pass(index, items, rule)
    cpu: dict = {}
    warm_s, results = propme_pass(index, items, rule, cpu=cpu)
    flagged = sum(r.contaminated for r in results)
    print(f"PropMe, one process: first pass {first_s:.1f} s ({len(items) / first_s:,.0f} items/s), warm "
          f"{warm_s:.1f} s ({len(items) / warm_s:,.0f} items/s, {cpu['seconds']:.1f} CPU s); {flagged:,} items "
          f"contaminated; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    two_cpu: dict = {}
    two_s, two = propme_pass(index, items, rule, workers=2, cpu=two_cpu)
    same = [r.coverage["joined"].value for r in two] == [r.coverage["joined"].value for r in results]
    print(f"PropMe, --workers 2, warm: {two_s:.1f} s ({len(items) / two_s:,.0f} items/s, "
          f"{warm_s / two_s:.2f}x one process, {two_cpu['seconds']:.1f} CPU s; same results: {same}); on 2 free cores "
          f"that CPU time would take about {two_cpu['seconds'] / 2:.0f} s (an estimate, not a measurement)", flush=True)
    if args.ray is not None:
        from propme_metrics.trace.ray_search import ray_search

        search = ray_search(index, address=args.ray or None, actors=args.actors)
        actors = len(search.shards)
        try:
            propme_pass(index, items[:500], rule, workers=2, search=search)  # actors warm
            ray_s, on_ray = propme_pass(index, items, rule, workers=2, search=search)
        finally:
            search.close()
        same = [r.coverage["joined"].value for r in on_ray] == [r.coverage["joined"].value for r in results]
        print(f"PropMe on Ray ({actors} actor(s), 2 driver threads), warm: "
              f"{ray_s:.1f} s ({len(items) / ray_s:,.0f} items/s, {warm_s / ray_s:.2f}x one process; same results: "
              f"{same}); load average {os.getloadavg()[0]:.1f}", flush=True)
    sample = items[:args.engine_items]
    eng_s, eng_cov = engine_coverage(index, sample, rule.k)
    matcher = CorpusMatcher(index)
    mine = joined_coverages(apply_rule("bench", match_items(sample, matcher), plain, KgramCounts(matcher)).items)
    same = all((a is None and b is None) or abs(a - b) < 1e-12 for a, b in zip(eng_cov, mine))
    eng_rate = len(sample) / eng_s
    print(f"infini-gram engine, a count per {rule.k}-gram: {eng_rate:,.1f} items/s on {len(sample)} items "
          f"(coverage only; equal to PropMe's: {same}); PropMe warm is {len(items) / warm_s / eng_rate:,.1f}x "
          f"faster; the engine would take {len(items) / eng_rate:,.0f} s for all items", flush=True)
    small = open_index(small_dir)
    small_items = make_items(small, min(args.items, 3000), args.seed + 2)
    propme_pass(small, small_items, plain)
    small_s, small_results = propme_pass(small, small_items, plain)
    build_s, added_mib, look_s, set_cov = set_coverage(small, small_items, rule.k)
    same = all((a is None and b is None) or abs(a - b) < 1e-12 for a, b in zip(set_cov, joined_coverages(small_results)))
    print(f"Python set of {rule.k}-grams on {small.manifest.total_tokens:,} tokens: built in {build_s:.1f} s "
          f"({added_mib:,.0f} MiB, {added_mib / small.manifest.total_tokens * 1e8 / 1024:,.1f} GiB per 100M tokens), {len(small_items) / look_s:,.0f} items/s (coverage only; equal to PropMe's: "
          f"{same}); PropMe on the same index {len(small_items) / small_s:,.0f} items/s (all three texts, "
          f"longest match, source): {look_s / small_s:,.2f}x the set's speed", flush=True)
    figures = {"index_tokens": index.manifest.total_tokens, "items": len(items), "mean_joined_tokens": n_tok,
               "propme_first_s": first_s, "propme_warm_s": warm_s, "propme_two_workers_s": two_s,
               "propme_warm_cpu_s": cpu["seconds"], "propme_two_workers_cpu_s": two_cpu["seconds"], "engine_items_per_s": eng_rate,
               "set_build_s": build_s, "set_items_per_s": len(small_items) / look_s,
               "propme_small_items_per_s": len(small_items) / small_s}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
