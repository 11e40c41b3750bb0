"""What PropMe's lm-eval discovery hook (propme_lmeval.pth) adds to every Python start-up.

Measures, in one run: (1) the import time of the hook's modules from `python -X importtime`
(what the .pth line costs), (2) interpreter start-up wall time with the hook on and switched off
(PROPME_LMEVAL_DISCOVERY=0), (3) the watcher's per-import overhead on 200 stdlib imports.
Goal: < 5 ms added to start-up.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

RUNS = int(os.environ.get("RUNS", "40"))


def wall(env_extra: dict[str, str], code: str = "pass") -> float:
    env = dict(os.environ, **env_extra)
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def hook_import_us() -> int:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True)
    total = 0
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() in ("propme_tasks", "propme_tasks.discovery"):
            total = max(total, int(parts[1]))  # cumulative time of the outermost hook module
    return total


IMPORTS = ("import " + ", ".join(["json", "csv", "email.parser", "http.client", "xml.dom.minidom", "sqlite3",
                                   "decimal", "fractions", "statistics", "difflib", "zipfile", "tarfile"]))


def main() -> None:
    if hook_import_us() == 0:
        sys.exit("propme_lmeval.pth is not active in this interpreter: install PropMe as a wheel (make install)")
    on, off = wall({}), wall({"PROPME_LMEVAL_DISCOVERY": "0"})
    imp_on, imp_off = wall({}, IMPORTS), wall({"PROPME_LMEVAL_DISCOVERY": "0"}, IMPORTS)
    us = statistics.median(hook_import_us() for _ in range(15))
    print(f"| measure ({RUNS} runs, median) | value |")
    print("|---|---|")
    print(f"| import of the hook modules (-X importtime, cumulative) | {us / 1000:.2f} ms |")
    print(f"| `python -c pass`, hook on | {on * 1000:.1f} ms |")
    print(f"| `python -c pass`, hook switched off | {off * 1000:.1f} ms |")
    print(f"| difference on - off (watcher install) | {(on - off) * 1000:+.2f} ms |")
    print(f"| 12 stdlib packages imported, hook on / off | {imp_on * 1000:.1f} / {imp_off * 1000:.1f} ms "
          f"(ratio {imp_on / imp_off:.3f}) |")


if __name__ == "__main__":
    main()
