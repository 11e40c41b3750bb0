"""Per-task figures: the contaminated share (Wilson interval), every logged per-sample metric on
all, clean and contaminated items with intervals, the difference contaminated - clean with a
bootstrap interval (GPT-3's clean-subset study), and the curve across thresholds."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from propme_metrics.contamination.check import TaskCheck, coverage_values
from propme_metrics.contamination.rule import CURVE_COVERAGE, CURVE_K
from propme_metrics.metrics.pm import (
    CONFIDENCE,
    DEFAULT_BOOTSTRAP,
    percentile_bounds,
    resample_indices,
    wilson_interval,
)


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _is_binary(values: np.ndarray) -> bool:
    return bool(np.isin(values, (0.0, 1.0)).all())


def _resampled_means(values: np.ndarray, iters: int, rng: np.random.Generator) -> np.ndarray:
    """Means of `iters` bootstrap resamples of `values`."""
    return np.concatenate([values[idx].mean(axis=1) for idx in resample_indices(len(values), iters, rng)])


def mean_with_interval(values: np.ndarray, iters: int, seed: int) -> dict[str, Any]:
    """{"value", "low", "high", "n"}: the mean with a Wilson interval for 0/1 values (accuracy),
    a percentile bootstrap otherwise; every figure None (undefined) when there are no values."""
    n = len(values)
    if n == 0:
        return {"value": None, "low": None, "high": None, "n": 0}
    mean = float(values.mean())
    if _is_binary(values):
        low, high = wilson_interval(int(values.sum()), n, CONFIDENCE)
    elif iters > 0:
        low, high = percentile_bounds(_resampled_means(values, iters, np.random.default_rng(seed)), CONFIDENCE)
    else:
        low = high = None
    return {"value": mean, "low": _finite(low), "high": _finite(high), "n": n}


def difference(contaminated: np.ndarray, clean: np.ndarray, iters: int, seed: int) -> dict[str, Any]:
    """contaminated - clean, with a percentile-bootstrap interval (each group resampled on its
    own, with its own size); undefined when either group is empty."""
    if not len(contaminated) or not len(clean):
        return {"value": None, "low": None, "high": None}
    value = float(contaminated.mean() - clean.mean())
    if iters <= 0:
        return {"value": value, "low": None, "high": None}
    rng = np.random.default_rng(seed)
    samples = _resampled_means(contaminated, iters, rng) - _resampled_means(clean, iters, rng)
    low, high = percentile_bounds(samples, CONFIDENCE)
    return {"value": value, "low": low, "high": high}


def metric_names(check: TaskCheck) -> list[str]:
    """The per-sample metrics logged for the task's items, in first-seen order."""
    return list(dict.fromkeys(name for r in check.items for name in r.item.metrics))


def _values(check: TaskCheck, metric: str, mask: np.ndarray) -> np.ndarray:
    return np.array([float(r.item.metrics[metric]) for r, m in zip(check.items, mask)
                     if m and metric in r.item.metrics], dtype=float)


def task_summary(check: TaskCheck, iters: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict[str, Any]:
    """The task's entry of `contamination.json`."""
    n, k = len(check.items), check.contaminated
    low, high = wilson_interval(k, n, CONFIDENCE)
    flagged = np.array([r.contaminated for r in check.items], dtype=bool)
    metrics = {}
    for name in metric_names(check):
        every = np.ones(n, dtype=bool)
        metrics[name] = {
            "all": mean_with_interval(_values(check, name, every), iters, seed),
            "clean": mean_with_interval(_values(check, name, ~flagged), iters, seed),
            "contaminated": mean_with_interval(_values(check, name, flagged), iters, seed),
            "difference": difference(_values(check, name, flagged), _values(check, name, ~flagged), iters, seed),
        }
    return {"items": n, "contaminated": k,
            "share": {"value": k / n if n else None, "low": _finite(low), "high": _finite(high)},
            "boilerplate_kgrams": check.boilerplate_kgrams, "rule": check.rule.to_dict(),
            "metrics": metrics, "curve": curve(check)}


def curve(check: TaskCheck, ks: Sequence[int] = CURVE_K, coverages: Sequence[float] = CURVE_COVERAGE) -> list[dict[str, Any]]:
    """Contaminated share and clean score (every metric) for each (k, coverage threshold), the
    rule's other settings kept: how the choice of rule moves the figures."""
    names = metric_names(check)
    rows = []
    for k in ks:
        values = coverage_values(check.items, replace(check.rule, k=k))
        for cov in coverages:
            flagged = values >= cov
            n = len(flagged)
            clean = {name: _mean_or_none(_values(check, name, ~flagged)) for name in names}
            rows.append({"k": k, "min_coverage": cov, "contaminated": int(flagged.sum()),
                         "share": float(flagged.mean()) if n else None, "clean": clean})
    return rows


def _mean_or_none(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None
