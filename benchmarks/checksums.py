"""What integrity costs: content checksums at build, the cheap check on open, `verify --full`.

    python benchmarks/checksums.py [--tokens 20000000] [--workdir DIR] [--keep]

Builds one index of a generated corpus (GPT-2 tokenizer, as benchmarks/index_build.py) and measures,
in the same run, against that build's own wall-clock time:

* checksums at build: `checksum_files` over every index file (what the build adds before its manifest);
* corpus identity: `file_digest` of the corpus (what a fresh build reads once more to name the source);
* open: `open_index` (sizes plus sampled checksums), with and without the sampled checksums;
* verify: `verify_index` without and with `full=True`.
Prints a Markdown table of seconds and ratios to the build time.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from index_build import write_corpus  # noqa: E402

import propme_metrics.index.reader as index_module  # noqa: E402
from propme_metrics.core.checksums import checksum_files, file_digest  # noqa: E402
from propme_metrics.index.build import build_index  # noqa: E402
from propme_metrics.index.format import index_file_names  # noqa: E402
from propme_metrics.index.reader import open_index, verify_index  # noqa: E402
from propme_metrics.index.shard_writer import DEFAULT_BATCH_SIZE  # noqa: E402
from propme_metrics.index.sources import CorpusSource  # noqa: E402
from propme_metrics.index.tokenizer import load_tokenizer  # noqa: E402
from propme_metrics.testing import gpt2_tokenizer  # noqa: E402


def timed(fn, repeat: int = 3) -> float:
    """Best of `repeat` wall-clock runs (the page cache is warm after the first, as after a build)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000_000)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="propme-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        tok_dir = gpt2_tokenizer(workdir / "gpt2-tokenizer")
        corpus = workdir / "corpus.jsonl"
        if not corpus.is_file():
            write_corpus(corpus, load_tokenizer(str(tok_dir)), args.tokens, 0, DEFAULT_BATCH_SIZE)
        out = workdir / "index"
        shutil.rmtree(out, ignore_errors=True)
        t = time.perf_counter()
        manifest = build_index(CorpusSource(str(corpus)), out, tokenizer=str(tok_dir), check_space=False,
                               progress=False)
        build_s = time.perf_counter() - t
        names = index_file_names(manifest.shard_ids)
        index_bytes = sum(r["bytes"] for r in manifest.files.values())
        rows = [("whole build (includes the two lines below)", build_s),
                ("checksums of every index file", timed(lambda: checksum_files(out, names))),
                ("corpus content hash (source identity)", timed(lambda: file_digest(corpus))),
                ("open_index: sizes + sampled checksums", timed(lambda: open_index(out), 5))]
        real = index_module.checksum_mismatches
        index_module.checksum_mismatches = lambda *a, **k: []
        rows.append(("open_index: sizes only", timed(lambda: open_index(out), 5)))
        index_module.checksum_mismatches = real
        rows += [("verify_index", timed(lambda: verify_index(out), 1)),
                 ("verify_index(full=True)", timed(lambda: verify_index(out, full=True), 1))]
        print(f"\n{manifest.total_tokens:,} tokens; index {index_bytes / 2**20:,.1f} MiB in {len(manifest.files)} "
              f"files; corpus {corpus.stat().st_size / 2**20:,.1f} MiB; load average {os.getloadavg()[0]:.2f}\n")
        print("| step | seconds | / whole build |")
        print("|---|---:|---:|")
        for name, seconds in rows:
            print(f"| {name} | {seconds:.3f} | {seconds / build_s:.4f} |")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
