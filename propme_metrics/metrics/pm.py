"""The propensity transform PM and its confidence intervals (docs/method.md, PM)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np

#: bootstrap resamples of every interval unless a caller says otherwise (`propme report --bootstrap`)
DEFAULT_BOOTSTRAP = 10_000
# Bootstrap index matrices are drawn in chunks of at most this many entries to bound memory.
_CHUNK_ENTRIES = 1 << 22


def pm(p: float, c: float) -> float:
    """PM = p / (p + c) for a metric p under a propensity setting and c under the prefix setting.

    Near 0: leaks only when attacked; 0.5: the same in both; near 1: more unprompted.
    Defined as 0 when p = 0 (including p = c = 0).
    """
    if p < 0 or c < 0:
        raise ValueError(f"PM needs non-negative metric values, got p={p}, c={c}")
    return 0.0 if p == 0 else p / (p + c)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion (e.g. FMR); (nan, nan) when n == 0."""
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    share = successes / n
    denom = 1 + z * z / n
    center = (share + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    # At 0 or n successes the bound is exactly 0 or 1; computing it would leave rounding noise.
    low = 0.0 if successes == 0 else center - half
    high = 1.0 if successes == n else center + half
    return low, high


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval."""

    estimate: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        """Plain dict for JSON reports."""
        return asdict(self)


@dataclass(frozen=True)
class PromptStat:
    """One prompt's contribution to a ratio-of-sums metric.

    FMR: full-match generations / generations; ALS: sum of longest final span lengths /
    generations; NVR: sum of NV-recall over retrieved documents / retrieved documents.
    """

    numerator: float
    denominator: float

    def __post_init__(self) -> None:
        if self.numerator < 0 or self.denominator < 0:
            raise ValueError(f"metric sums must be non-negative, got {self}")


def ratio(stats: Sequence[PromptStat]) -> float:
    """The metric over a set of prompts: sum of numerators / sum of denominators (0 if none)."""
    den = sum(s.denominator for s in stats)
    return sum(s.numerator for s in stats) / den if den else 0.0


def _resampled_ratios(
    stats: Sequence[PromptStat], iters: int, rng: np.random.Generator
) -> np.ndarray:
    """ratio() of `iters` bootstrap resamples of the prompts (drawn with replacement)."""
    if not stats:
        raise ValueError("cannot bootstrap a setting with no prompts")
    num = np.array([s.numerator for s in stats], dtype=float)
    den = np.array([s.denominator for s in stats], dtype=float)
    out = np.empty(iters)
    start = 0
    for idx in resample_indices(len(stats), iters, rng):
        num_sum, den_sum = num[idx].sum(axis=1), den[idx].sum(axis=1)
        out[start : start + len(idx)] = np.divide(
            num_sum, den_sum, out=np.zeros_like(num_sum), where=den_sum > 0
        )
        start += len(idx)
    return out


def resample_indices(n: int, iters: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """`iters` bootstrap resamples of `n` units (rows of `n` indices drawn with replacement), in
    chunks that keep memory bounded; every bootstrap of PropMe draws through it."""
    chunk = max(1, _CHUNK_ENTRIES // n)
    for start in range(0, iters, chunk):
        yield rng.integers(0, n, size=(min(chunk, iters - start), n))


def percentile_bounds(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval's ends: the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles."""
    alpha = 1 - confidence
    low, high = np.quantile(samples, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def _percentile_interval(estimate: float, samples: np.ndarray, confidence: float) -> Interval:
    return Interval(estimate, *percentile_bounds(samples, confidence))


def bootstrap_metric(
    stats: Sequence[PromptStat], iters: int = DEFAULT_BOOTSTRAP, seed: int = 0, confidence: float = 0.95
) -> Interval:
    """Percentile-bootstrap interval of a metric over prompts; the estimate is ratio(stats)."""
    samples = _resampled_ratios(stats, iters, np.random.default_rng(seed))
    return _percentile_interval(ratio(stats), samples, confidence)


def bootstrap_pm(
    setting_stats: Sequence[PromptStat],
    prefix_stats: Sequence[PromptStat],
    iters: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """Percentile-bootstrap interval of PM(setting, prefix).

    Both prompt sets are resampled independently, each with its own size.
    """
    rng = np.random.default_rng(seed)
    p = _resampled_ratios(setting_stats, iters, rng)
    c = _resampled_ratios(prefix_stats, iters, rng)
    samples = np.divide(p, p + c, out=np.zeros_like(p), where=p > 0)
    return _percentile_interval(pm(ratio(setting_stats), ratio(prefix_stats)), samples, confidence)
