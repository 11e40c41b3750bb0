"""How often PropMe's personal-data detectors fire on real text that holds (almost) no personal data.

Corpus: the Python standard library of the running interpreter (its .py sources: English comments
and docstrings, and a great many numbers, dates, version strings and hex constants) plus the
licence and metadata texts of the installed packages (`*.dist-info/LICENSE*`, `METADATA`). Real
text, not generated. Every detection is printed masked with its file for review: an e-mail address
there is usually a real contact address (true personal data), a phone/CPR/IBAN/card hit in source
code is a false positive unless the review says otherwise.

    python benchmarks/pii_false_positives.py [--root DIR ...] [--show]
"""
from __future__ import annotations

import argparse
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

from propme_metrics.trace.pii import PII_TYPES, detect


def corpus_files(roots: list[Path]) -> list[Path]:
    files = []
    for root in roots:
        for p in sorted(root.rglob("*")):
            if not p.is_file() or "__pycache__" in p.parts:
                continue
            if p.suffix == ".py" and "site-packages" not in p.parts:
                files.append(p)
            elif p.parent.name.endswith(".dist-info") and (p.name == "METADATA" or p.name.startswith("LICENSE")):
                files.append(p)
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", type=Path, help="folders to scan (default: stdlib + site-packages)")
    ap.add_argument("--show", action="store_true", help="print detected values unmasked (for review)")
    args = ap.parse_args()
    roots = args.root or [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    files = corpus_files(roots)
    chars, hits, by_type = 0, [], Counter()
    started = time.time()
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        chars += len(text)
        for it in detect(text):
            by_type[it.type] += 1
            hits.append((path, it))
    seconds = time.time() - started
    print(f"scanned {len(files):,} files, {chars / 1e6:.1f}M characters in {seconds:.0f}s "
          f"({chars / 1e6 / seconds:.2f}M chars/s)")
    print(f"{'type':<6} {'detections':>10} {'per 1M chars':>13}")
    for t in PII_TYPES:
        print(f"{t:<6} {by_type[t]:>10} {by_type[t] / (chars / 1e6):>13.3f}")
    for path, it in hits:
        if it.type != "email":
            value = it.value if args.show else it.masked
            print(f"  {it.type}: {value!r} in {path}")
    emails = Counter(path.parent.name.endswith(".dist-info") for path, it in hits if it.type == "email")
    print(f"e-mail detections: {emails[False]} in sources, {emails[True]} in package metadata/licences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
