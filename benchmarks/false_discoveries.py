"""False discovery rate of the comparisons' flags, with and without the Benjamini-Hochberg adjustment.

    python benchmarks/false_discoveries.py                     # a few minutes on two busy cores
    python benchmarks/false_discoveries.py --reps 500 --comparisons 60 --resamples 10000

A report over several checkpoints compares dozens of (pair, setting, metric) rows. Each replicate
here builds such a table: `--comparisons` paired differences of an FMR-like share between two models
on `--prompts` shared prompts, `compare.metric_difference` for each (its interval and bootstrap
p-value), then `compare.adjust` over the table, as `propme report` does. Prompt difficulty (Beta,
mean `--rate`) is drawn once per setting and shared by both models and by the rows of that setting,
so rows on the same prompts are positively dependent, as real ones are. In the null scenario every
pair has the same per-prompt rates; in the mixed one `--real` rows have a true difference (model B
at half the rate). Printed per scenario: the false discovery rate (the mean over replicates of false
flags / flags, 0 when nothing is flagged) of the per-row flag and of the adjusted flag, the share of
replicates with any false flag, and the share of true differences found. The goal: the adjusted
flag's false discovery rate at most the nominal 5%.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
from _common import commit

from propme_metrics.metrics import registry
from propme_metrics.metrics.compare import ComparisonRow, Comparisons, adjust
from propme_metrics.metrics.difference import metric_difference
from propme_metrics.metrics.pm import IntervalSpec
from propme_metrics.metrics.ratio import Ratio

FMR = registry.metric("fmr")
SETTINGS = 3   #: rows are spread over this many settings, each with its own prompt difficulty


def _shares(rng: np.random.Generator, rates: np.ndarray) -> list[Ratio]:
    return [Ratio(float(x), 1.0) for x in rng.random(len(rates)) < rates]


def _difficulty(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    return rng.beta(0.5, 0.5 * (1 - rate) / rate, n)


def replicate(rng: np.random.Generator, m: int, real: int, n: int, rate: float, resamples: int,
              seed: int) -> tuple[list[bool], list[bool], list[bool]]:
    """One comparisons table: (which rows are real differences, per-row flags, adjusted flags)."""
    difficulty = [_difficulty(rng, n, rate) for _ in range(SETTINGS)]
    truth, rows = [], []
    for i in range(m):
        q = difficulty[i % SETTINGS]
        is_real = i < real
        a, b = _shares(rng, q), _shares(rng, q * (0.5 if is_real else 1.0))
        iv = metric_difference(FMR, a, b, True, IntervalSpec(resamples, seed * m + i))
        rows.append(ComparisonRow("a", "", "b", "", "c", f"s{i % SETTINGS}", f"m{i}", None, None, iv, True, n))
        truth.append(is_real)
    table = Comparisons(rows=rows)
    adjust(table)
    return truth, [r.significant for r in rows], [r.significant_adjusted for r in rows]


def _rates(truth: list[list[bool]], flags: list[list[bool]]) -> tuple[float, float, float, float]:
    """(false discovery rate, its Monte Carlo standard error, share of tables with a false flag, power)."""
    fdp, any_false, found, real = [], 0, 0, 0
    for t, f in zip(truth, flags):
        false = sum(fl and not tr for tr, fl in zip(t, f))
        fdp.append(false / max(sum(f), 1))
        any_false += false > 0
        found += sum(fl and tr for tr, fl in zip(t, f))
        real += sum(t)
    fdr = float(np.mean(fdp))
    return fdr, float(np.std(fdp) / math.sqrt(len(fdp))), any_false / len(fdp), found / real if real else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200, help="simulated comparison tables per scenario")
    ap.add_argument("--comparisons", type=int, default=60, help="rows per table (the study's report: 60)")
    ap.add_argument("--real", type=int, default=12, help="rows with a true difference in the mixed scenario")
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--rate", type=float, default=0.1, help="mean per-prompt rate of model A")
    ap.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples per row (the default's)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"commit {commit()}; reps {args.reps}, {args.comparisons} comparisons, {args.prompts} prompts, rate "
          f"{args.rate}, resamples {args.resamples}, seed {args.seed}; load {os.getloadavg()[0]:.1f}; "
          f"python {sys.version.split()[0]}")
    start = time.perf_counter()
    print(f"\n{'scenario':>18} | {'flag':>9} | {'false discovery rate':>20} | {'tables with a false flag':>24} | power")
    worst = 0.0
    for name, real in (("all null", 0), (f"{args.real} real of {args.comparisons}", args.real)):
        rng = np.random.default_rng([args.seed, real])
        runs = [replicate(rng, args.comparisons, real, args.prompts, args.rate, args.resamples, r)
                for r in range(args.reps)]
        truth = [t for t, _, _ in runs]
        for label, flags in (("own", [f for _, f, _ in runs]), ("adjusted", [f for _, _, f in runs])):
            fdr, se, any_false, power = _rates(truth, flags)
            mark = " *" if label == "adjusted" and fdr > 0.05 else ""
            if label == "adjusted":
                worst = max(worst, fdr)
            power_text = "-" if math.isnan(power) else f"{100 * power:.1f}%"
            print(f"{name:>18} | {label:>9} | {100 * fdr:12.1f}% ±{100 * se:.1f}{mark:2} | "
                  f"{100 * any_false:23.1f}% | {power_text}")
    print(f"\nadjusted false discovery rate at most 5% (nominal): {'yes' if worst <= 0.05 else 'NO'} "
          f"(largest {100 * worst:.1f}%); {time.perf_counter() - start:.0f} s wall; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
