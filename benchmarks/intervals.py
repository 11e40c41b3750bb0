"""Coverage of PropMe's 95% intervals, and the false-flag rate of its paired comparisons (issue 33).

    python benchmarks/intervals.py                  # about half an hour on two busy cores
    python benchmarks/intervals.py --reps 2000 --resamples 2000

Prompts are drawn from known rates, each interval is computed as `propme report` computes it, and
the share of intervals holding the true value is counted, for n = 10, 100, 1000 prompts and rates
0, 0.01, 0.1, 0.5:

- proportions (FMR and the like): the modified Wilson interval PropMe shows, against plain Wilson
  and the percentile bootstrap it replaced. These are EXACT: the binomial distribution of the
  number of events is enumerated (the percentile bootstrap of a share is a binomial quantile).
- a ratio metric (NVR-like: per prompt 1 + Poisson(2) document entries, each a hit with the rate,
  a hit's NV-recall uniform on [0.2, 1]): `pm.bootstrap_metric`, simulated.
- PM of a proportion (p at the rate, c at 0.1, n prompts each): `pm.pm_interval` with its sides'
  intervals, simulated.
- paired comparisons on null pairs (two models with the same per-prompt rates; prompt difficulty
  shared, Beta-distributed around the rate): the share flagged significant by
  `compare.metric_difference` (paired) and `compare.pm_difference`, simulated.

Rate 0 is one-sided: every interval that contains 0 when nothing is observed covers it, so its
coverage is 100% by construction. Where the number of events is small the binomial is so coarse
that no interval can sit inside 93-97% (n = 10, rate 0.01: 0 events occur 90.4% of the time, so
coverage is either 90.4% or at least 99.6%); the table marks those cells.
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
from propme_metrics.metrics.difference import metric_difference, pm_difference
from propme_metrics.metrics.pm import IntervalSpec, bootstrap_metric, metric_interval, pm_interval, wilson_interval
from propme_metrics.metrics.ratio import Ratio

NS = (10, 100, 1000)
RATES = (0.0, 0.01, 0.1, 0.5)
CAPABILITY_RATE = 0.1
CONFIDENCE = 0.95
FMR, NVR = registry.metric("fmr"), registry.metric("nvr")


# --- proportions: exact coverage by enumerating the binomial ------------------------------------------

def _pmf(n: int, p: float) -> list[float]:
    if p in (0.0, 1.0):
        return [float(k == round(n * p)) for k in range(n + 1)]
    logs = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
            + (n - k) * math.log1p(-p) for k in range(n + 1)]
    return [math.exp(v) for v in logs]


def _plain_wilson(k: int, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    s, d = k / n, 1 + z * z / n
    c, h = (s + z * z / (2 * n)) / d, z / d * math.sqrt(s * (1 - s) / n + z * z / (4 * n * n))
    return (0.0 if k == 0 else c - h), (1.0 if k == n else c + h)


def _percentile_bootstrap(k: int, n: int) -> tuple[float, float]:
    """The percentile bootstrap of a share: quantiles of Binomial(n, k/n)/n (what resampling gives)."""
    pmf = np.cumsum(_pmf(n, k / n))
    lo = int(np.searchsorted(pmf, 0.025 - 1e-12))
    hi = int(np.searchsorted(pmf, 0.975 - 1e-12))
    return lo / n, hi / n


def proportion_coverage(n: int, p: float, interval) -> float:
    return sum(w for k, w in enumerate(_pmf(n, p)) if interval(k, n)[0] <= p <= interval(k, n)[1])


# --- simulations ---------------------------------------------------------------------------------------

def _nvr_prompts(rng: np.random.Generator, n: int, rate: float) -> list[Ratio]:
    docs = 1 + rng.poisson(2.0, n)
    out = []
    for d in docs:
        hits = rng.random(d) < rate
        out.append(Ratio(float(rng.uniform(0.2, 1.0, hits.sum()).sum()), float(d)))
    return out


def _shares(rng: np.random.Generator, rates: np.ndarray) -> list[Ratio]:
    return [Ratio(float(x), 1.0) for x in rng.random(len(rates)) < rates]


def ratio_coverage(n: int, rate: float, reps: int, resamples: int, seed: int) -> float:
    rng, truth, hit = np.random.default_rng(seed), rate * 0.6, 0
    for r in range(reps):
        iv = bootstrap_metric(_nvr_prompts(rng, n, rate), IntervalSpec(resamples, r, CONFIDENCE))
        hit += iv.low <= truth <= iv.high
    return hit / reps


def pm_coverage(n: int, rate: float, reps: int, resamples: int, seed: int) -> tuple[float, float]:
    """Coverage of PM's interval, and the share of replicates where it was withheld."""
    rng, truth = np.random.default_rng(seed), rate / (rate + CAPABILITY_RATE)
    hit = withheld = 0
    for r in range(reps):
        p, c = _shares(rng, np.full(n, rate)), _shares(rng, np.full(n, CAPABILITY_RATE))
        spec = IntervalSpec(resamples, r, CONFIDENCE)
        sides = (metric_interval(FMR, p, spec), metric_interval(FMR, c, spec))
        iv = pm_interval(p, c, spec, sides)
        hit += iv.low <= truth <= iv.high
        withheld += iv.withheld is not None
    return hit / reps, withheld / reps


def _difficulty(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """Per-prompt rates around `rate`, shared by both models of a pair (Beta with a = 0.5)."""
    if rate == 0:
        return np.zeros(n)
    return rng.beta(0.5, 0.5 * (1 - rate) / rate, n)


def null_flags(n: int, rate: float, reps: int, resamples: int, seed: int) -> tuple[float, float]:
    """Share of null pairs flagged significant: the metric itself (FMR-like), and its PM."""
    rng, metric = np.random.default_rng(seed), 0
    pm_flags = 0
    for r in range(reps):
        q, qc = _difficulty(rng, n, rate), _difficulty(rng, n, CAPABILITY_RATE)
        a, b = _shares(rng, q), _shares(rng, q)
        ca, cb = _shares(rng, qc), _shares(rng, qc)
        iv = metric_difference(FMR, a, b, True, IntervalSpec(resamples, r, CONFIDENCE))
        metric += iv.low is not None and iv.high is not None and (iv.low > 0 or iv.high < 0)
        iv = pm_difference(FMR, (a, ca), (b, cb), True, IntervalSpec(resamples, r, CONFIDENCE))
        pm_flags += iv.low is not None and iv.high is not None and (iv.low > 0 or iv.high < 0)
    return metric / reps, pm_flags / reps


def _cell(v: float, claims: bool = True, reps: int | None = None) -> str:
    """A coverage as a percentage, marked * outside 93-97%; with `reps` (simulated) also its Monte
    Carlo standard error, so that a cell a standard error or two off the goal reads as noise, not a miss."""
    mark = "" if not claims or 0.93 <= v <= 0.97 else " *"
    se = "" if reps is None else f" ±{100 * math.sqrt(max(v * (1 - v), 1e-12) / reps):.1f}"
    return f"{100 * v:5.1f}%{se}{mark}"


def _flag(v: float, reps: int) -> str:
    """A null pair's flag rate with its Monte Carlo standard error, marked * above the 5% goal."""
    se = math.sqrt(max(v * (1 - v), 1e-12) / reps)
    return f"{100 * v:4.1f}% ±{100 * se:.1f}{' *' if v > 0.05 else ''}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=1000,
                    help="simulated data sets per cell (1,000: a Monte Carlo standard error of 0.7 points at 95%%)")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per interval")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"commit {commit()}; reps {args.reps}, resamples {args.resamples}, seed {args.seed}; "
          f"load {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}")
    start, cpu = time.perf_counter(), time.process_time()
    print("\nProportions (exact): coverage of the 95% interval; * outside 93-97% (rate 0 is one-sided: not marked)")
    print(f"{'n':>5} {'rate':>5} | {'modified Wilson (shown)':>23} | {'plain Wilson':>12} | {'percentile bootstrap':>20}")
    for n in NS:
        for p in RATES:
            cells = [proportion_coverage(n, p, f) for f in (wilson_interval, _plain_wilson, _percentile_bootstrap)]
            c = [_cell(v, p > 0) for v in cells]
            print(f"{n:>5} {p:>5} | {c[0]:>23} | {c[1]:>12} | {c[2]:>20}")

    print("\nRatio metric (NVR-like) and PM of a proportion (c at 0.1), simulated: coverage; PM withheld share")
    print(f"{'n':>5} {'rate':>5} | {'NVR bootstrap':>13} | {'PM':>13} | {'PM withheld':>11} | reps")
    for n in NS:
        for p in RATES:
            k = args.reps
            nvr = ratio_coverage(n, p, k, args.resamples, args.seed + n)
            pm_cov, withheld = pm_coverage(n, p, k, args.resamples, args.seed + 7 * n)
            print(f"{n:>5} {p:>5} | {_cell(nvr, p > 0, k):>13} | {_cell(pm_cov, p > 0 and withheld < 0.5, k):>13} | "
                  f"{100 * withheld:10.1f}% | {k}")

    print("\nPaired comparison on null pairs (same per-prompt rates): share flagged significant (goal <= 5%)")
    print(f"{'n':>5} {'rate':>5} | {'FMR diff':>13} | {'PM FMR diff':>13} | reps")
    for n in NS:
        for p in RATES:
            k = args.reps
            metric, pm_flag = null_flags(n, p, k, args.resamples, args.seed + 13 * n)
            print(f"{n:>5} {p:>5} | {_flag(metric, k):>13} | {_flag(pm_flag, k):>13} | {k}")
    print(f"\n{time.perf_counter() - start:.0f} s wall, {time.process_time() - cpu:.0f} s CPU; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
