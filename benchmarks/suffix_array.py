"""Suffix-array builders side by side: libdivsufsort (`pydivsufsort`) against rust_indexing.

    python benchmarks/suffix_array.py [--tokenized FILE ...] [--repeat-mb 5] [--work DIR]

Inputs: a document of `--repeat-mb` MB made of one repeated word (tokenized with GPT-2: the case
that made rust_indexing about 100x slower per token than prose), a normal-text corpus of
generated sentences (`--normal-tokens`, GPT-2), and any `tokenized.N` files given. Each builder runs
in its own process (wall time, peak RSS); the tables are compared byte for byte and, where they
differ, checked for order on the differing ranks (which one is the true suffix order).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run_builder(ds: str, out: str, builder: str) -> None:
    from propme_metrics.index.build import default_build_memory
    from propme_metrics.index.suffix_array import build_suffix_array

    ds_path = Path(ds)
    t = time.perf_counter()
    build_suffix_array(ds_path, Path(out), 2, os.cpu_count() or 1, default_build_memory(), Path(out + ".tmp"), builder=builder)
    seconds = time.perf_counter() - t
    # VmHWM is this process's own peak (ru_maxrss would carry the parent's across exec); the
    # children are rust_indexing's binaries
    hwm = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmHWM:"))
    rss = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(json.dumps({"seconds": seconds, "peak_rss_mib": rss / 1024}))


def measure(ds: Path, out: Path, builder: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--_run", str(ds), str(out), builder], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def misordered(ds: Path, table: Path, ranks, width: int = 2) -> int:
    """Adjacent pairs (r, r+1) among `ranks` whose suffixes are out of byte order."""
    import numpy as np

    from propme_metrics.index.format import pointer_size, pointers

    raw = ds.read_bytes()
    sa = pointers(np.fromfile(table, dtype=np.uint8), pointer_size(len(raw)))
    bad = 0
    for r in ranks:
        if r + 1 < len(sa) and raw[sa[r]:] > raw[sa[r + 1]:]:
            bad += 1
    return bad


def tokenized_from_text(path: Path, texts: list[str], tokenizer) -> Path:
    import numpy as np

    from propme_metrics.index.format import token_layout

    layout = token_layout(2)
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    flat = []
    for x in ids:
        flat += [layout.separator] + x
    np.asarray(flat, dtype=layout.dtype).tofile(path)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenized", nargs="*", default=[], type=Path, help="more tokenized.N files (16-bit) to compare on")
    p.add_argument("--repeat-mb", type=float, default=5.0, help="size of the repeated-word document in MB of text")
    p.add_argument("--normal-tokens", type=int, default=5_000_000, help="GPT-2 tokens of generated prose")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--_run", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._run:
        run_builder(*args._run)
        return
    import numpy as np

    from propme.demo.synthetic import generate_corpus
    from propme_metrics.index.tokenizer import load_tokenizer
    from propme_metrics.testing import gpt2_tokenizer

    work = args.work or Path(tempfile.mkdtemp(prefix="propme-sa-"))
    work.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(str(gpt2_tokenizer(work / "gpt2")))
    inputs = {}
    inputs[f"one word repeated, {args.repeat_mb:g} MB of text"] = tokenized_from_text(
        work / "tokenized.repeat", ["word " * int(args.repeat_mb * 1e6 / 5)], tok)
    texts, n = [], 0
    for rec in generate_corpus(10**9, seed=0):
        texts.append(rec["text"])
        n += len(rec["text"]) // 4
        if n >= args.normal_tokens:
            break
    inputs[f"generated prose, {len(texts):,} documents"] = tokenized_from_text(work / "tokenized.prose", texts, tok)
    for extra in args.tokenized:
        inputs[str(extra)] = extra
    print(f"\nSuffix-array builders on {os.cpu_count()} CPUs (rust_indexing uses all, libdivsufsort one); "
          f"1-min load average {os.getloadavg()[0]:.2f}\n")
    print("| input | tokens | rust_indexing s | libdivsufsort s | speed-up | peak RSS MiB rust / divsufsort | "
          "tables identical | misordered adjacent pairs rust / divsufsort (of those that differ, up to 2,000) |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    for name, ds in inputs.items():
        tokens = ds.stat().st_size // 2
        a, b = work / "table.rust", work / "table.dss"
        r = measure(ds, a, "rust")
        d = measure(ds, b, "divsufsort")
        same = a.read_bytes() == b.read_bytes()
        bad = "-"
        if not same:
            x = np.fromfile(a, dtype=np.uint8)
            y = np.fromfile(b, dtype=np.uint8)
            ptr_size = len(x) // tokens
            diff = np.flatnonzero((x != y).reshape(-1, ptr_size).any(1))
            sample = diff[np.linspace(0, len(diff) - 1, num=min(2000, len(diff))).astype(int)]
            bad = f"{misordered(ds, a, sample)} / {misordered(ds, b, sample)} ({len(diff):,} ranks differ)"
        print(f"| {name} | {tokens:,} | {r['seconds']:.2f} | {d['seconds']:.2f} | {r['seconds'] / d['seconds']:.1f}x | "
              f"{r['peak_rss_mib']:,.0f} / {d['peak_rss_mib']:,.0f} | {'yes' if same else 'no'} | {bad} |", flush=True)
        a.unlink()
        b.unlink()


if __name__ == "__main__":
    main()
