"""Prompt overlap check: the search path prompts now share with tracing, against the engine, in one run.

    python benchmarks/prompt_overlap.py [--tokens 2000000] [--work DIR] [--repeat 3]

Every prompt candidate is checked for its longest span in the corpus (`prompts.prompt_set.longest_overlap`).
PropMe once did this with two pointers over the prompt and one infini-gram engine `count` per step
(about 2L counts for L tokens); it now asks `IndexSearch.longest_match_bounds`, the longest match at every
start in one vectorized search, as the tracer does. This script times both on the same prompts (the
built-in English and Danish candidates, plus passages copied from and edited out of the corpus, so
that long spans occur), checks that they give the same (length, count, span) for every prompt, and
prints the ratio. The baseline lives here only.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _trace_benchmark():
    """benchmarks/trace.py (its generated-corpus index builder); loaded by path, `trace` is a stdlib name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("propme_bench_trace", Path(__file__).with_name("trace.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engine_longest_overlap(index, ids: list[int]) -> tuple[int, int, list[int]]:
    """The former method: two pointers, one engine count per step (if ids[i:j] occurs, so does ids[i+1:j])."""
    count = lambda q: index.engine.count(input_ids=q)["count"]  # noqa: E731
    best_len, best_start, end = 0, 0, 0
    for start in range(len(ids)):
        end = max(end, start)
        while end < len(ids) and count(ids[start:end + 1]) > 0:
            end += 1
        if end - start > best_len:
            best_len, best_start = end - start, start
        if end == len(ids):
            break
    if best_len == 0:
        return 0, 0, []
    span = ids[best_start:best_start + best_len]
    return best_len, count(span), span


def candidates(index, n_corpus: int, seed: int) -> list[list[int]]:
    """Token ids of the built-in candidates and of corpus passages, copied and with words swapped."""
    from propme_metrics.prompts.prompt_set import builtin_prompts

    texts = [r["prompt"] for lang in ("en", "da") for r in builtin_prompts(lang)]
    rng = random.Random(seed)
    docs = rng.sample(range(index.manifest.total_documents), n_corpus)
    for i, doc_ix in enumerate(docs):
        words = index.decode(index.document(doc_ix, max_tokens=60).token_ids).split()
        if i % 2:
            j = rng.randrange(max(1, len(words) - 1))
            words[j:j + 2] = words[j:j + 2][::-1]
        texts.append(" ".join(words))
    return [ids for ids in (index.encode(t) for t in texts) if ids]


def best_of(repeat: int, fn, prompts):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = [fn(ids) for ids in prompts]
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2_000_000, help="size of the generated-corpus index")
    p.add_argument("--work", type=Path, default=Path("/tmp/propme-bench-prompts"))
    p.add_argument("--corpus-prompts", type=int, default=200, help="candidates cut from corpus documents")
    p.add_argument("--repeat", type=int, default=3, help="time each method this often and keep the fastest")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    from propme_metrics.index.reader import open_index
    from propme_metrics.prompts.prompt_set import longest_overlap
    from propme_metrics.testing import gpt2_tokenizer

    args.work.mkdir(parents=True, exist_ok=True)
    tok = args.work / "gpt2"
    if not (tok / "tokenizer.json").exists():
        gpt2_tokenizer(tok)
    index = open_index(_trace_benchmark().build(args.work, args.tokens, tok, f"index-{args.tokens // 1_000_000}M"))
    prompts = candidates(index, args.corpus_prompts, args.seed)
    index.engine  # noqa: B018 - both paths opened before timing
    longest_overlap(index, prompts[0])
    engine_longest_overlap(index, prompts[0])
    base_s, base = best_of(args.repeat, lambda ids: engine_longest_overlap(index, ids), prompts)
    new_s, new = best_of(args.repeat, lambda ids: longest_overlap(index, ids), prompts)
    same = sum(a == b for a, b in zip(base, new))
    tokens = sum(map(len, prompts))
    print(f"index: {index.manifest.total_tokens:,} tokens; {len(prompts)} prompts, {tokens:,} tokens, "
          f"longest spans {min(b[0] for b in base)}..{max(b[0] for b in base)} tokens; best of {args.repeat}")
    print("| method | s | ms/prompt | ratio to engine |")
    print("|---|---:|---:|---:|")
    print(f"| engine, two pointers (former) | {base_s:.3f} | {1000 * base_s / len(prompts):.2f} | 1.00 |")
    print(f"| IndexSearch.longest_match_bounds (now) | {new_s:.3f} | {1000 * new_s / len(prompts):.2f} | {base_s / new_s:.1f}x faster |")
    print(f"identical (length, count, span): {same} of {len(prompts)}")
    if same != len(prompts):
        sys.exit("the two methods disagree")


if __name__ == "__main__":
    main()
