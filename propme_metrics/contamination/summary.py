"""Per-task figures: the contaminated share (Wilson interval), every logged per-sample metric on
all, clean and contaminated items with intervals, the difference contaminated - clean with a
bootstrap interval (GPT-3's clean-subset study), and the curve across thresholds. Every figure is a
`metrics.pm.Interval` made by one `IntervalSpec` (`units`: the items behind it; None for a difference)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from propme_metrics.contamination.check import TaskCheck, coverage_values
from propme_metrics.contamination.rule import CURVE_COVERAGE, CURVE_K, ContaminationRule
from propme_metrics.metrics.difference import BOUNDS
from propme_metrics.metrics.pm import (
    DEFAULT_INTERVALS,
    WILSON,
    Interval,
    IntervalSpec,
    is_share,
    resample_indices,
    share_interval,
    spread,
    wilson_interval,
)


def figure(iv: Interval) -> dict[str, Any]:
    """A figure's JSON form in contamination.json: value, ends, method (None without an interval) and
    `n`, the items behind it (not for a difference, which has two groups)."""
    out: dict[str, Any] = {"value": iv.estimate, "low": iv.low, "high": iv.high, "method": iv.method or None}
    if iv.units is not None:
        out["n"] = iv.units
    return out


@dataclass(frozen=True)
class MetricSplit:
    """One per-sample metric on all, clean and contaminated items, and contaminated - clean."""

    all: Interval
    clean: Interval
    contaminated: Interval
    difference: Interval

    def to_dict(self) -> dict[str, Any]:
        return {part: figure(getattr(self, part)) for part in ("all", "clean", "contaminated", "difference")}


@dataclass(frozen=True)
class CurvePoint:
    """The contaminated share and each model's clean score of each metric under the rule at (k, min_coverage)."""

    k: int
    min_coverage: float
    contaminated: int
    share: float | None
    clean: dict[str, dict[str, float | None]]   #: model label -> metric -> mean on the clean items

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "min_coverage": self.min_coverage, "contaminated": self.contaminated,
                "share": self.share, "clean": self.clean}


@dataclass(frozen=True)
class TaskSummary:
    """A task's figures under one rule (its entry of contamination.json): the share is the task's,
    the metrics each model's that ran it."""

    items: int
    contaminated: int
    share: Interval
    boilerplate_kgrams: int
    rule: ContaminationRule
    models: dict[str, dict[str, MetricSplit]]   #: model label -> metric -> its split
    curve: list[CurvePoint]

    def to_dict(self) -> dict[str, Any]:
        return {"items": self.items, "contaminated": self.contaminated, "share": figure(self.share),
                "boilerplate_kgrams": self.boilerplate_kgrams, "rule": self.rule.to_dict(),
                "models": {label: {name: m.to_dict() for name, m in metrics.items()}
                           for label, metrics in self.models.items()},
                "curve": [p.to_dict() for p in self.curve]}


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _resampled_means(values: np.ndarray, iters: int, rng: np.random.Generator) -> np.ndarray:
    """Means of `iters` bootstrap resamples of `values`."""
    return np.concatenate([values[idx].mean(axis=1) for idx in resample_indices(len(values), iters, rng)])


def mean_with_interval(values: np.ndarray, intervals: IntervalSpec) -> Interval:
    """The mean with a Wilson interval for 0/1 values (accuracy), a bootstrap interval
    (`IntervalSpec.bounds`) otherwise; undefined when there are no values, and without ends when
    every value is the same (a range the metric's values keep is not known, and zero width would lie)."""
    n = len(values)
    if n == 0:
        return Interval(None, confidence=intervals.confidence, units=0)
    mean = float(values.mean())
    if is_share(values):
        return share_interval(values, intervals.confidence)
    if intervals.bootstrap:
        samples = _resampled_means(values, intervals.resamples, np.random.default_rng(intervals.seed))
        if spread(samples):
            low, high = intervals.bounds(samples, n)
            return Interval(mean, _finite(low), _finite(high), intervals.method, intervals.confidence,
                            intervals.resamples, units=n)
    return Interval(mean, confidence=intervals.confidence, units=n)


def difference(contaminated: np.ndarray, clean: np.ndarray, intervals: IntervalSpec) -> Interval:
    """contaminated - clean, with a bootstrap interval (each group resampled on its own, with its own
    size; the expansion counts the smaller group); undefined when either group is empty. When every
    resample gives one difference (each group one value), the difference of the two groups' own
    intervals (`BOUNDS`), never [d, d]."""
    if not len(contaminated) or not len(clean):
        return Interval(None, confidence=intervals.confidence)
    value = float(contaminated.mean() - clean.mean())
    if not intervals.bootstrap:
        return Interval(value, confidence=intervals.confidence)
    rng = np.random.default_rng(intervals.seed)
    samples = (_resampled_means(contaminated, intervals.resamples, rng)
               - _resampled_means(clean, intervals.resamples, rng))
    if not spread(samples):
        a, b = mean_with_interval(contaminated, intervals), mean_with_interval(clean, intervals)
        low = None if a.low is None or b.high is None else a.low - b.high
        high = None if a.high is None or b.low is None else a.high - b.low
        return Interval(value, low, high, BOUNDS if low is not None else "", intervals.confidence)
    low, high = intervals.bounds(samples, min(len(contaminated), len(clean)))
    return Interval(value, low, high, intervals.method, intervals.confidence, intervals.resamples)


def model_labels(check: TaskCheck) -> list[str]:
    """The models whose per-sample metrics were logged for the task's items, in first-seen order."""
    return list(dict.fromkeys(label for r in check.items for label in r.item.metrics))


def metric_names(check: TaskCheck, model: str) -> list[str]:
    """The per-sample metrics `model` logged for the task's items, in first-seen order."""
    return list(dict.fromkeys(name for r in check.items for name in r.item.metrics.get(model, {})))


def _values(check: TaskCheck, model: str, metric: str, mask: np.ndarray) -> np.ndarray:
    """`model`'s values of `metric` on the items `mask` selects (those it ran)."""
    return np.array([float(r.item.metrics[model][metric]) for r, m in zip(check.items, mask)
                     if m and metric in r.item.metrics.get(model, {})], dtype=float)


def _split(check: TaskCheck, model: str, metric: str, flagged: np.ndarray, intervals: IntervalSpec) -> MetricSplit:
    every = np.ones(len(flagged), dtype=bool)
    dirty, clean = _values(check, model, metric, flagged), _values(check, model, metric, ~flagged)
    return MetricSplit(all=mean_with_interval(_values(check, model, metric, every), intervals),
                       clean=mean_with_interval(clean, intervals),
                       contaminated=mean_with_interval(dirty, intervals),
                       difference=difference(dirty, clean, intervals))


def task_summary(check: TaskCheck, intervals: IntervalSpec = DEFAULT_INTERVALS) -> TaskSummary:
    """The task's figures: share, each model's metrics split into clean and contaminated items, the curve."""
    n, k = len(check.items), check.contaminated
    low, high = wilson_interval(k, n, intervals.confidence)
    flagged = np.array([r.contaminated for r in check.items], dtype=bool)
    models = {model: {name: _split(check, model, name, flagged, intervals) for name in metric_names(check, model)}
              for model in model_labels(check)}
    share = Interval(k / n if n else None, _finite(low), _finite(high), WILSON if n else "", intervals.confidence,
                     units=n)
    return TaskSummary(n, k, share, check.boilerplate_kgrams, check.rule, models, curve(check))


def curve(check: TaskCheck, ks: Sequence[int] = CURVE_K, coverages: Sequence[float] = CURVE_COVERAGE) -> list[CurvePoint]:
    """Contaminated share and each model's clean score (every metric) for each (k, coverage
    threshold), the rule's other settings kept: how the choice of rule moves the figures."""
    names = {model: metric_names(check, model) for model in model_labels(check)}
    rows = []
    for k in ks:
        values = coverage_values(check.items, replace(check.rule, k=k), check.counts)
        for cov in coverages:
            flagged = values >= cov
            n = len(flagged)
            clean = {model: {name: _mean_or_none(_values(check, model, name, ~flagged)) for name in metrics}
                     for model, metrics in names.items()}
            rows.append(CurvePoint(k, cov, int(flagged.sum()), float(flagged.mean()) if n else None, clean))
    return rows


def _mean_or_none(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None
