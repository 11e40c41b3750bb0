"""The difference A - B of a metric or of PM between two models (or a setting and the corpus' floor),
with a bootstrap interval: **paired** where the units are aligned (one set of resampled indices for
both, so what the units share cancels), unpaired otherwise, the percentile tails expanded for small
samples as for every bootstrap interval (`IntervalSpec.bounds`). When every resample gives one
difference (no event on either side), the interval is the difference of the two sides' own intervals
(`BOUNDS`), never [0, 0]. Each difference carries the two-sided bootstrap p-value of "no difference"."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from propme_metrics.metrics import registry
from propme_metrics.metrics.pm import (
    Interval,
    IntervalSpec,
    informative_units,
    joint_ratios,
    metric_interval,
    pm,
    pm_array,
    pm_interval,
    ratio,
)
from propme_metrics.metrics.ratio import Ratio

#: the interval methods of a difference at the default spec (`IntervalSpec.paired`), and without resample variation
PAIRED = IntervalSpec().paired(True)
UNPAIRED = IntervalSpec().paired(False)
BOUNDS = "bounds-difference"


@dataclass(frozen=True)
class Difference(Interval):
    """A difference A - B with its interval and the bootstrap p-value of no difference."""

    p_value: float | None = None


def bootstrap_p_value(samples: np.ndarray) -> float | None:
    """Two-sided p-value of "the difference is 0" from its bootstrap distribution: twice the smaller
    share of resamples at or beyond 0 on either side, each count and the total plus one (so it is
    never 0), at most 1. None without a defined resample."""
    s = samples[np.isfinite(samples)]
    if not len(s):
        return None
    tail = min(np.count_nonzero(s <= 0), np.count_nonzero(s >= 0))
    return min(1.0, 2 * (tail + 1) / (len(s) + 1))


def _finish(estimate: float, samples: np.ndarray, units: int, intervals: IntervalSpec, paired: bool,
            bounds: Any) -> Difference:
    """The percentile interval of the difference, or `bounds()` (the sides' intervals' difference)
    when every resample gives one value; with the p-value of the resamples."""
    low, high = intervals.bounds(samples, units)
    p = bootstrap_p_value(samples)
    if low == high or low != low:
        a, b = bounds()
        lo = None if a.low is None or b.high is None else a.low - b.high
        hi = None if a.high is None or b.low is None else a.high - b.low
        return Difference(estimate, lo, hi, BOUNDS, intervals.confidence, p_value=p)
    return Difference(estimate, low, high, intervals.paired(paired), intervals.confidence, intervals.resamples,
                      p_value=p)


def metric_difference(spec: registry.Metric, a: Sequence[Ratio], b: Sequence[Ratio], paired: bool,
                      intervals: IntervalSpec) -> Difference:
    """A - B of one metric over units (aligned by position when `paired`)."""
    va, vb = ratio(a), ratio(b)
    if va is None or vb is None:
        return Difference(None)
    estimate = va - vb
    iters, rng = intervals.resamples, np.random.default_rng(intervals.seed)
    if paired:
        ra, rb = joint_ratios([a, b], iters, rng)
    else:
        (ra,), (rb,) = joint_ratios([a], iters, rng), joint_ratios([b], iters, rng)
    units = informative_units(a, b) if paired else min(informative_units(a), informative_units(b))
    return _finish(estimate, ra - rb, units, intervals, paired,
                   lambda: (metric_interval(spec, a, intervals), metric_interval(spec, b, intervals)))


def pm_difference(spec: registry.Metric, a: tuple[Sequence[Ratio], Sequence[Ratio]],
                  b: tuple[Sequence[Ratio], Sequence[Ratio]], paired: bool, intervals: IntervalSpec) -> Difference:
    """PM(A) - PM(B); `a` and `b` are (propensity units, prefix units). The propensity units are
    resampled together across the models when `paired`, the prefix units always are."""
    pa, pb = pm(ratio(a[0]), ratio(a[1])), pm(ratio(b[0]), ratio(b[1]))
    if pa is None or pb is None:
        return Difference(None)
    estimate = pa - pb
    iters, rng = intervals.resamples, np.random.default_rng(intervals.seed)
    if paired:
        p_a, p_b = joint_ratios([a[0], b[0]], iters, rng)
    else:
        (p_a,), (p_b,) = joint_ratios([a[0]], iters, rng), joint_ratios([b[0]], iters, rng)
    c_a, c_b = joint_ratios([a[1], b[1]], iters, rng)

    def sides(units: tuple[Sequence[Ratio], Sequence[Ratio]]) -> Interval:
        p, c = (metric_interval(spec, u, intervals) for u in units)
        return pm_interval(units[0], units[1], intervals, (p, c))
    prefix_units = informative_units(a[1], b[1])
    if paired:
        units = min(informative_units(a[0], b[0]), prefix_units)
    else:
        units = min(informative_units(a[0]), informative_units(b[0]), prefix_units)
    return _finish(estimate, pm_array(p_a, c_a) - pm_array(p_b, c_b), units, intervals,
                   paired, lambda: (sides(a), sides(b)))
