"""The propensity transform PM and the confidence intervals of every reported number (docs/method.md).

Every value is a pooled `Ratio` (registry.py's one pair type and division rule: undefined, never 0,
on a zero denominator). Intervals carry the method that made them:

- proportions: the modified Wilson score interval (`wilson_interval`, Brown, Cai & DasGupta 2001),
  which never collapses at 0 or n events;
- ratio metrics: the expanded percentile bootstrap over prompts (`percentile_bounds`); when every
  prompt has one value the bootstrap is degenerate at it and the interval is `uniform_bounds`
  instead: [0, the rule-of-three bound] when that value is 0 (no event, `ZERO_EVENTS`), never a
  zero width at the top either (`UNIFORM`: NVR 1 in every prompt);
- PM: the expanded percentile bootstrap of p / (p + c); when its replicates are all equal (zero events on a
  side) the interval is PM at the ends of the two sides' intervals (`PROPAGATED`), PM rising with
  p and falling with c.

`benchmarks/intervals.py` measures their coverage (docs/performance.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from statistics import NormalDist
from typing import Protocol

import numpy as np

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics.ratio import Ratio, pool_ratios


class PooledMetric(Protocol):
    """What an interval needs of a registry metric (`registry.Metric`, which imports this module): whether
    it is a proportion, and the largest value one unit's ratio can take (None: unbounded)."""

    @property
    def proportion(self) -> bool: ...

    @property
    def unit_max(self) -> float | None: ...

#: bootstrap resamples of every interval unless a caller says otherwise (`propme report --bootstrap`)
DEFAULT_BOOTSTRAP = 10_000
#: the confidence of every interval PropMe reports
CONFIDENCE = 0.95
#: PM is withheld (`Interval.withheld`) when fewer prompts than this have an event on the capability side
PM_MIN_CAPABILITY_EVENTS = 5
#: a prompt's (numerator, denominator) of a metric: the one pair type
PromptStat = Ratio
# Bootstrap index matrices are drawn in chunks of at most this many entries to bound memory.
_CHUNK_ENTRIES = 1 << 22

#: interval methods, as written beside every interval (`Interval.method`)
WILSON = "wilson-modified"
#: the percentile bootstrap with its tails expanded for small samples (`expanded_alpha`): every bootstrap's default
PERCENTILE = "bootstrap-expanded-percentile"
#: the plain percentile bootstrap (`IntervalSpec(method=PLAIN_PERCENTILE)`)
PLAIN_PERCENTILE = "bootstrap-percentile"
#: the bootstrap methods an `IntervalSpec` may name
BOOTSTRAP_METHODS = (PERCENTILE, PLAIN_PERCENTILE)
ZERO_EVENTS = "zero-events-bound"
ONE_UNIT = "one-unit-bound"
UNIFORM = "uniform-units-bound"
PROPAGATED = "bounds-propagated"


@dataclass(frozen=True)
class IntervalSpec:
    """How every interval of a computation is made: the confidence level (which every label is written
    from), the bootstrap method (`BOOTSTRAP_METHODS`), bootstrap resamples (0: no bootstrap interval)
    and the seed of numpy's `default_rng`. The one definition of the defaults."""

    resamples: int = DEFAULT_BOOTSTRAP
    seed: int = 0
    confidence: float = CONFIDENCE
    method: str = PERCENTILE

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise ConfigError(f"the confidence level must lie strictly between 0 and 1, not {self.confidence!r}",
                              f"for instance {CONFIDENCE} (the default)")
        if self.method not in BOOTSTRAP_METHODS:
            raise ConfigError(f"unknown bootstrap method {self.method!r}", f"choose among {', '.join(BOOTSTRAP_METHODS)}")
        if self.resamples < 0:
            raise ConfigError(f"bootstrap resamples cannot be negative, got {self.resamples}",
                              "0 makes no bootstrap interval")

    @property
    def bootstrap(self) -> bool:
        """Whether bootstrap intervals are made at all (`resamples` > 0)."""
        return self.resamples > 0

    @property
    def percent(self) -> str:
        """The confidence level as labels write it, e.g. "95%"."""
        return percent(self.confidence)

    @property
    def alpha(self) -> str:
        """The false discovery rate of the adjusted flags (1 - confidence) as labels write it, e.g. "5%"."""
        return percent(1 - self.confidence)

    def bounds(self, samples: np.ndarray, units: int) -> tuple[float, float]:
        """The ends of the bootstrap interval of `samples` (resamples of `units` units) by this spec's
        method: the percentile interval, its tails expanded for the units (`PERCENTILE`) or not."""
        return percentile_bounds(samples, self.confidence, units if self.method == PERCENTILE else None)

    def paired(self, paired: bool) -> str:
        """The method name of a difference's bootstrap interval: `paired-<method>` or `unpaired-<method>`."""
        return f"{'paired' if paired else 'unpaired'}-{self.method}"


#: the default spec: 95%, the expanded percentile bootstrap, 10,000 resamples, seed 0
DEFAULT_INTERVALS = IntervalSpec()


def percent(confidence: float) -> str:
    """A confidence level as labels write it: 0.95 -> "95%", 0.9 -> "90%", 0.995 -> "99.5%"."""
    return f"{round(confidence * 100, 6):g}%"


def pm(p: float | None, c: float | None) -> float | None:
    """PM = p / (p + c) for a metric p under a propensity setting and c under the prefix setting.

    Near 0: leaks only when attacked; 0.5: the same in both; near 1: more unprompted.
    Undefined (None) when either side is; 0 when p = 0 (including p = c = 0: the paper's rule).
    """
    if p is None or c is None:
        return None
    if p < 0 or c < 0:
        raise ValueError(f"PM needs non-negative metric values, got p={p}, c={c}")
    return 0.0 if p == 0 else p / (p + c)


def _poisson_lower(events: int, alpha: float) -> float:
    """The mean lambda at which P(Poisson(lambda) >= events) = alpha (bisection; events >= 1)."""
    def tail(lam: float) -> float:
        term = total = math.exp(-lam)
        for i in range(1, events):
            term *= lam / i
            total += term
        return 1.0 - total

    lo, hi = 0.0, float(events)  # the tail at lambda = events is above 1/2 > alpha
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) < alpha else (lo, mid)
    return lo


def is_share(values: np.ndarray) -> bool:
    """Whether every value is 0 or 1: their mean is then a share, whose interval is Wilson's (a
    bootstrap of a share collapses to zero width when every value is the same)."""
    return bool(len(values)) and bool(np.isin(values, (0.0, 1.0)).all())


def share_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """The share of 1s among 0/1 `values` with its modified Wilson interval."""
    n = len(values)
    low, high = wilson_interval(int(values.sum()), n, confidence)
    return Interval(float(values.mean()), low, high, WILSON, confidence, units=n)


def spread(samples: np.ndarray) -> bool:
    """Whether bootstrap replicates vary: when every one is equal (every unit one value) a
    percentile interval would have zero width, so the caller gives a bound or none instead."""
    finite = samples[np.isfinite(samples)]
    return finite.size > 0 and bool(np.ptp(finite) > 0)


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Modified Wilson score interval for a proportion (e.g. FMR); (nan, nan) when n == 0.

    The Wilson interval, with Brown, Cai & DasGupta's (2001) repair near the edges: for 1..x*
    successes (x* = 2 up to n = 50, else 3) the lower bound is the one-sided Poisson bound
    (and symmetrically the upper bound near n), where Wilson's own bound excludes rates that
    produce so few events often (its coverage at rate 0.01 is 90% for n = 10, 92% for n = 100).
    At 0 successes the interval is [0, Wilson's upper bound], never [0, 0].
    """
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
    edge = 2 if n <= 50 else 3
    if 1 <= successes <= edge:
        low = min(low, _poisson_lower(successes, 1 - confidence) / n)
    if 1 <= n - successes <= edge:
        high = max(high, 1 - _poisson_lower(n - successes, 1 - confidence) / n)
    return low, high


def zero_events_upper(units: int, confidence: float = CONFIDENCE) -> float:
    """The upper bound on the share of units with an event when none of `units` had one: the exact
    (Clopper-Pearson) bound 1 - (alpha/2)^(1/n), about 3.7/n (the rule of three, two-sided)."""
    return 1.0 - ((1 - confidence) / 2) ** (1 / units)


def uniform_bounds(value: float, units: int, unit_max: float | None,
                   confidence: float = CONFIDENCE) -> tuple[float, float | None]:
    """The interval of a ratio metric when each of `units` units gave `value` (each unit's ratio lies
    in [0, `unit_max`]): at most a share u = `zero_events_upper(units)` of the units differ, so the
    metric lies in [value (1 - u), value + (unit_max - value) u]; [0, unit_max u] at value 0, never
    a zero width at the top end (unit_max None, unbounded: the upper end is undefined)."""
    share = zero_events_upper(units, confidence)
    return value * (1 - share), None if unit_max is None else value + (unit_max - value) * share


@dataclass(frozen=True)
class Interval:
    """A value with its confidence interval and how it was made (None: undefined): the one type of
    every reported interval (base metrics, PM, differences, leak and robustness figures, contamination
    figures, the likelihood curve, the Every Eval Ever records)."""

    estimate: float | None
    low: float | None = None
    high: float | None = None
    method: str = ""              #: WILSON, PERCENTILE, PLAIN_PERCENTILE, ZERO_EVENTS, ONE_UNIT, UNIFORM, PROPAGATED, ... ("": none)
    confidence: float = CONFIDENCE
    resamples: int = 0            #: bootstrap resamples behind it (0: not a bootstrap)
    withheld: str | None = None   #: PM only: why it cannot be read on its own (`pm_withheld`)
    units: int | None = None      #: the units it counts or resamples, where a caller records them

    def to_dict(self) -> dict[str, float | str | int | None]:
        """Plain dict for JSON reports (NaN written as None; `units` only where recorded)."""
        out = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}
        if self.units is None:
            del out["units"]
        return out


def ratio(stats: Sequence[Ratio]) -> float | None:
    """The metric over a set of prompts: sum of numerators / sum of denominators (None if that is 0)."""
    return pool_ratios(stats).value


def events(stats: Sequence[Ratio]) -> int:
    """Units with a non-zero numerator: what an interval over them has to go on."""
    return sum(s.numerator > 0 for s in stats)


def _arrays(stats: Sequence[Ratio]) -> tuple[np.ndarray, np.ndarray]:
    return (np.fromiter((s.numerator for s in stats), float, len(stats)),
            np.fromiter((s.denominator for s in stats), float, len(stats)))


def divide_arrays(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """`ratio.divide` over arrays: NaN (undefined) where the denominator is 0."""
    return np.divide(num, den, out=np.full_like(num, np.nan), where=den > 0)


def joint_ratios(stats: Sequence[Sequence[Ratio]], iters: int, rng: np.random.Generator) -> list[np.ndarray]:
    """ratio() of `iters` bootstrap resamples of each of several equally long unit lists, every list
    resampled with the SAME indices (one list: the plain bootstrap; several: the paired one, units
    aligned by position); NaN where a resample's denominator is 0."""
    n = len(stats[0])
    if not n:
        raise ValueError("cannot bootstrap a setting with no prompts")
    return _joint_ratios_over(stats, resample_indices(n, iters, rng))


def _joint_ratios_over(stats: Sequence[Sequence[Ratio]], draws: Iterable[np.ndarray]) -> list[np.ndarray]:
    """`joint_ratios` over given resamples (chunks of index rows)."""
    n = len(stats[0])
    if any(len(s) != n for s in stats):
        raise ValueError("paired unit lists must have one length")
    arrays = [_arrays(s) for s in stats]
    if isinstance(draws, _SharedDraws):
        return [divide_arrays(draws.sums(num), draws.sums(den)) for num, den in arrays]
    parts: list[list[np.ndarray]] = [[] for _ in stats]
    for idx in draws:
        for k, (num, den) in enumerate(arrays):
            parts[k].append(divide_arrays(num[idx].sum(axis=1), den[idx].sum(axis=1)))
    return [np.concatenate(p) for p in parts]


class _SharedDraws(tuple):
    """Chunks of resample rows that several intervals share (`_seeded_draws`), with the resampled
    sums of each values array they were asked for: the intervals of one leak table share their
    denominators (every source's share has the table's total below it), so half the sums repeat."""

    _MEMO_SIZE = 64   #: values arrays remembered (the memo is emptied when it would hold more)

    def sums(self, values: np.ndarray) -> np.ndarray:
        """`values[idx].sum(axis=1)` of every chunk, concatenated (computed once per values)."""
        memo = self.__dict__.setdefault("_memo", {})
        key = values.tobytes()
        found = memo.get(key)
        if found is None:
            if len(memo) >= self._MEMO_SIZE:
                memo.clear()
            found = memo[key] = np.concatenate([values[idx].sum(axis=1) for idx in self])
        return found


def _resampled_ratios(stats: Sequence[Ratio], iters: int, rng: np.random.Generator) -> np.ndarray:
    """ratio() of `iters` bootstrap resamples of the prompts (NaN where a resample's denominator is 0)."""
    return joint_ratios([stats], iters, rng)[0]


def resample_indices(n: int, iters: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """`iters` bootstrap resamples of `n` units (rows of `n` indices drawn with replacement), in
    chunks that keep memory bounded; every bootstrap of PropMe draws through it."""
    chunk = max(1, _CHUNK_ENTRIES // n)
    for start in range(0, iters, chunk):
        yield rng.integers(0, n, size=(min(chunk, iters - start), n))


@lru_cache(maxsize=1)
def _one_chunk_of_draws(n: int, iters: int, seed: int) -> _SharedDraws:
    draws = _SharedDraws(resample_indices(n, iters, np.random.default_rng(seed)))
    for idx in draws:
        idx.setflags(write=False)  # shared by every interval that asks
    return draws


def _seeded_draws(n: int, iters: int, seed: int) -> Iterable[np.ndarray]:
    """`resample_indices` of a fresh generator seeded with `seed`. When they fit one chunk they are
    drawn once and kept: the intervals of one table (a leak table's sources) resample the same units
    with the same seed, and drawing is half of each one's cost."""
    if n * iters <= _CHUNK_ENTRIES:
        return _one_chunk_of_draws(n, iters, seed)
    return resample_indices(n, iters, np.random.default_rng(seed))


def _t_quantile(z: float, df: int) -> float:
    """Student's t quantile at the normal quantile `z` (Cornish-Fisher; 1e-3 from the exact one at df 9)."""
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def informative_units(*aligned: Sequence[Ratio]) -> int:
    """How many units carry an event (a numerator above 0) in any of the aligned unit lists. A
    difference between models moves only with these units (where neither has an event it gains
    nothing), and a ratio metric's resamples likewise, so with few events either is as coarse as that
    many units however many zero units surround them: their small-sample expansion (`expanded_alpha`)
    counts these. (PM resamples two independent unit sets; its expansion counts their sizes, which
    `benchmarks/intervals.py` measured to cover; counting events there over-covers, 99%.)"""
    return sum(any(s.numerator > 0 for s in unit) for unit in zip(*aligned))


def expanded_alpha(confidence: float, units: int) -> float:
    """The tail share of the expanded percentile interval (Hesterberg 2015): the percentile bootstrap
    is too narrow in small samples (it divides by n, not n - 1, and uses z, not t), so its tails are
    taken at Phi(-sqrt(n / (n - 1)) t_(n-1)) instead of (1 - confidence) / 2 (n = 10: 0.85%, n = 100: 2.3%).
    Fewer than 2 units are taken as 2 (the widest expansion)."""
    half = (1 - confidence) / 2
    units = max(units, 2)
    z = NormalDist().inv_cdf(1 - half)
    return NormalDist().cdf(-math.sqrt(units / (units - 1)) * _t_quantile(z, units - 1))


def percentile_bounds(samples: np.ndarray, confidence: float, units: int | None = None) -> tuple[float, float]:
    """The percentile interval's ends: the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles of
    the defined samples (NaN, undefined, ones are left out), the tails expanded for `units` resampled
    units (`expanded_alpha`) when given; (nan, nan) when no sample is defined."""
    samples = samples[~np.isnan(samples)]
    if not samples.size:
        return math.nan, math.nan
    tail = (1 - confidence) / 2 if units is None else expanded_alpha(confidence, units)
    low, high = np.quantile(samples, [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_metric(stats: Sequence[Ratio], intervals: IntervalSpec = DEFAULT_INTERVALS,
                     unit_max: float | None = 1.0) -> Interval:
    """Interval of a ratio metric over prompts; the estimate is ratio(stats).

    Percentile bootstrap; where every unit has one value (no event: all 0; or NVR 1 in every prompt)
    the bootstrap cannot move off it, so the interval is `uniform_bounds`, `unit_max` being the
    largest value one unit's ratio can take (1 for NV-recall; None for unbounded metrics). With a
    single unit holding a denominator (one prompt with document entries) it is [0, unit_max].
    """
    estimate = ratio(stats)
    if estimate is None:
        return Interval(None)
    confidence = intervals.confidence
    if not events(stats):
        return Interval(estimate, *uniform_bounds(0.0, len(stats), unit_max, confidence), ZERO_EVENTS, confidence)
    if sum(s.denominator > 0 for s in stats) < 2:  # one unit has all the data: resampling cannot vary it
        return Interval(estimate, 0.0, unit_max, ONE_UNIT, confidence)
    if len({s.numerator / s.denominator for s in stats if s.denominator > 0}) == 1:  # every resample alike
        return Interval(estimate, *uniform_bounds(estimate, len(stats), unit_max, confidence), UNIFORM, confidence)
    samples = _joint_ratios_over([stats], _seeded_draws(len(stats), intervals.resamples, intervals.seed))[0]
    low, high = intervals.bounds(samples, informative_units(stats))
    return Interval(estimate, low, high, intervals.method, confidence, intervals.resamples)


def pm_array(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """`pm` over arrays: NaN where a side is, 0 where p is 0."""
    out = np.divide(p, p + c, out=np.zeros_like(p), where=p > 0)
    out[np.isnan(p) | np.isnan(c)] = np.nan
    return out


def propagated_pm(p: Interval, c: Interval) -> tuple[float, float]:
    """PM's interval from its sides' intervals: PM rises with p and falls with c, so the ends are
    PM(p low, c high) and PM(p high, c low); an undefined end gives PM's own bound (0 or 1)."""
    low = pm(p.low, c.high) if p.low is not None and c.high is not None else 0.0
    high = pm(p.high, c.low) if p.high is not None and c.low is not None else 1.0
    return float(low), float(high)


def bootstrap_pm(setting_stats: Sequence[Ratio], prefix_stats: Sequence[Ratio],
                 intervals: IntervalSpec = DEFAULT_INTERVALS, sides: tuple[Interval, Interval] | None = None
                 ) -> Interval:
    """Interval of PM(setting, prefix); undefined when either side's metric is.

    Percentile bootstrap, both prompt sets resampled independently, each with its own size. When
    every replicate is the same (no event on a side, e.g. PM 0 with no propensity event) and the
    sides' intervals are given (`sides`: propensity, capability), the interval is `propagated_pm`.
    """
    estimate = pm(ratio(setting_stats), ratio(prefix_stats))
    if estimate is None:
        return Interval(None)
    rng = np.random.default_rng(intervals.seed)
    p = _resampled_ratios(setting_stats, intervals.resamples, rng)
    c = _resampled_ratios(prefix_stats, intervals.resamples, rng)
    confidence = intervals.confidence
    low, high = intervals.bounds(pm_array(p, c), min(len(setting_stats), len(prefix_stats)))
    if low == high and sides is not None:
        lo, hi = propagated_pm(*sides)  # holds the estimate unless a side's value lies outside its own bounds
        return Interval(estimate, min(lo, estimate), max(hi, estimate), PROPAGATED, confidence)
    return Interval(estimate, low, high, intervals.method, confidence, intervals.resamples)


def metric_interval(spec: PooledMetric, stats: Sequence[Ratio], intervals: IntervalSpec) -> Interval:
    """A base metric over prompts with its interval: modified Wilson over the counted generations
    for a proportion, `bootstrap_metric` for a ratio metric (none without resamples)."""
    pooled = pool_ratios(stats)
    if pooled.value is None:
        return Interval(None)
    if spec.proportion:
        n = int(round(pooled.denominator))
        low, high = wilson_interval(min(int(round(pooled.numerator)), n), n, intervals.confidence)
        return Interval(pooled.value, low, high, WILSON, intervals.confidence)
    if not intervals.bootstrap:
        return Interval(pooled.value)
    return bootstrap_metric(stats, intervals, spec.unit_max)


def pm_withheld(capability: Sequence[Ratio]) -> str | None:
    """Why PM cannot be read on its own, or None: the capability (prefix) side has fewer than
    `PM_MIN_CAPABILITY_EVENTS` prompts with an event, so p / (p + c) mostly measures c's noise."""
    found = events(capability)
    if found >= PM_MIN_CAPABILITY_EVENTS:
        return None
    return (f"capability (prefix) side has {found} prompt(s) with an event, fewer than "
            f"{PM_MIN_CAPABILITY_EVENTS}: too few to carry a ratio")


def pm_interval(setting_stats: Sequence[Ratio], prefix_stats: Sequence[Ratio], intervals: IntervalSpec,
                sides: tuple[Interval, Interval] | None = None) -> Interval:
    """PM of a propensity setting vs prefix with its interval (`bootstrap_pm`; none without
    resamples) and, where the capability side is too small, why it is withheld (`pm_withheld`)."""
    estimate = pm(ratio(setting_stats), ratio(prefix_stats))
    if estimate is None:
        return Interval(None)
    if intervals.bootstrap:
        iv = bootstrap_pm(setting_stats, prefix_stats, intervals, sides)
    else:
        iv = Interval(estimate, confidence=intervals.confidence)
    return replace(iv, withheld=pm_withheld(prefix_stats))
