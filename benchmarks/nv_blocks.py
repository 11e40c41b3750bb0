"""NV-recall's matching blocks: the routes side by side on the windows tracing really scores.

    python benchmarks/nv_blocks.py --index DIR --gens GENS [--generations 300] [--frozen CHECKOUT]

Traces the first --generations texts of GENS (trace.py's generations file, field `text`) on the
index, keeps every (generation words, window words) pair whose blocks NV-recall computes (the
pairs that pass its LCS bound), then times on those pairs, in this process: cydifflib (what
`nvrecall._matching_blocks` uses), the standard library's difflib (the definition, the oracle),
and with --frozen the numpy recursion of an older checkout (e.g. 6b36d5f, on word ids as it was
called). Every route's blocks are checked equal to difflib's; CPU seconds, best of --repeat.
"""
from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import cydifflib
import numpy as np
from rapidfuzz.distance import LCSseq

from propme_metrics.trace import nvrecall
from propme_metrics.trace import tracer as tracer_module
from propme_metrics.trace.nvrecall import NVParams, normalize_words


def scored_pairs(index: Path, gens: Path, n: int) -> list[tuple[list[str], list[str]]]:
    """The (generation words, window words) pairs of n generations that reach the block step."""
    seen: list[tuple[str, list[str]]] = []
    original = tracer_module.nv_scores

    def recording(generation, windows):
        seen.append((generation, list(windows)))
        return original(generation, windows)

    tracer_module.nv_scores = recording
    try:
        tracer = tracer_module.Tracer(index)
        with open(gens, encoding="utf-8") as fh:
            for line in list(fh)[:n]:
                tracer.trace_one(json.loads(line)["text"])
    finally:
        tracer_module.nv_scores = original
    pairs = []
    for generation, windows in seen:
        gen = normalize_words(generation)
        if not gen:
            continue
        l2 = NVParams.adaptive(len(gen)).l2
        pairs += [(gen, w) for w in map(normalize_words, windows) if LCSseq.similarity(gen, w, score_cutoff=l2)]
    return pairs


def _frozen_blocks(checkout: Path):
    """The older checkout's `_matching_blocks` (numpy, on word ids), called as that checkout did."""
    spec = importlib.util.spec_from_file_location("frozen_nvrecall", checkout / "propme_metrics/trace/nvrecall.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)

    def blocks(a: list[str], b: list[str]):
        vocab = {w: i for i, w in enumerate(dict.fromkeys(a))}
        return module._matching_blocks(np.asarray([vocab[w] for w in a], dtype=np.int64),
                                       np.asarray([vocab.get(w, -1) for w in b], dtype=np.int64))
    return blocks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--gens", type=Path, required=True)
    ap.add_argument("--generations", type=int, default=300)
    ap.add_argument("--frozen", type=Path, default=None, help="an older checkout whose numpy blocks to time too")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    pairs = scored_pairs(args.index, args.gens, args.generations)
    print(f"{len(pairs):,} pairs from {args.generations} generations; windows of "
          f"{np.mean([len(b) for _, b in pairs]):.0f} words on average", flush=True)
    routes = {"difflib (standard library)": lambda a, b: [tuple(m) for m in
                                                          difflib.SequenceMatcher(None, a, b).get_matching_blocks()[:-1]],
              f"cydifflib {cydifflib.__version__ if hasattr(cydifflib, '__version__') else ''}".strip():
                  nvrecall._matching_blocks}
    if args.frozen:
        routes[f"numpy recursion of {args.frozen.name}"] = _frozen_blocks(args.frozen)
    times, expected = {}, None
    for name, blocks in routes.items():
        best = float("inf")
        for _ in range(args.repeat):
            start = time.process_time()
            got = [blocks(a, b) for a, b in pairs]
            best = min(best, time.process_time() - start)
        expected = got if expected is None else expected
        times[name] = (best, got == expected)
    base = times["difflib (standard library)"][0]
    print(f"| route | ms per pair | vs difflib | blocks equal difflib's |  (load {os.getloadavg()[0]:.1f})")
    for name, (seconds, same) in times.items():
        print(f"| {name} | {seconds * 1e3 / len(pairs):.3f} | {base / seconds:.2f}x | {same} |")


if __name__ == "__main__":
    main()
