"""(n, p)-discoverable extraction: how likely a model is to produce a document's true continuation.

For a prefix document, `log P(z)` is the model's natural-log probability of the true continuation
`z` (the next 50 index tokens' text) after the start token and the first 50 index tokens' text,
as lm-eval's `loglikelihood` request returns it (the sum over z's tokens). The document is
(n, p)-discoverable when z would appear at least once in n independent samples with probability
at least p: `1 - (1 - P(z))^n >= p` (docs/method.md, probabilistic extraction). This assumes
samples drawn from the model's full distribution (temperature 1, no top-p or top-k).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.limits import MAX_SIZE
from propme_metrics.metrics.pm import Interval, IntervalSpec, is_share, resample_indices, share_interval, spread

#: the sample counts n of the `discoverable@n` metrics, and the probability p they are computed at
DISCOVERABLE_N = (1, 10, 100, 1_000, 10_000)
DISCOVERABLE_P = 0.5
#: the task-metadata keys that change them
N_KEY, P_KEY = "discoverable_n", "discoverable_p"
LN10 = math.log(10.0)
LN2 = math.log(2.0)


@dataclass(frozen=True)
class DocumentLikelihood:
    """One prefix document scored by the model: what lm-eval returned and how z was tokenized."""

    id: str
    logp: float                        #: natural log of P(z), the sum over z's model tokens
    greedy: bool                       #: z is the model's greedy continuation (lm-eval's is_greedy)
    target_tokens: int | None = None   #: tokens of z in the model's tokenizer (None: tokenizer unknown)
    boundary_clean: bool | None = None  #: the model tokenizer splits context + z exactly between the two

    @property
    def log10p(self) -> float:
        return self.logp / LN10

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DocumentLikelihood:
        logp = float(data["logp"])
        if not math.isfinite(logp) or logp > 1e-6:
            raise ValueError(f"log P(z) must be a finite number <= 0, not {data['logp']!r}")
        tokens = data.get("target_tokens")
        clean = data.get("boundary_clean")
        return cls(str(data["id"]), min(logp, 0.0), bool(data["greedy"]),
                   None if tokens is None else int(tokens), None if clean is None else bool(clean))


def extraction_probability(logp: float, n: int) -> float:
    """1 - (1 - P)^n for P = exp(logp): the chance that z appears in at least one of n samples.

    Computed as -expm1(n * log(1 - P)) with log(1 - P) taken as log1p(-P) for small P (so that
    P = 1e-30 keeps its precision) and as log(-expm1(logp)) for P near 1 (so that logp = -1e-17,
    whose exp rounds to 1.0, is not log(0)).
    """
    if logp >= 0.0:
        return 1.0
    log_miss = math.log1p(-math.exp(logp)) if logp < -LN2 else math.log(-math.expm1(logp))
    return -math.expm1(n * log_miss)


def discoverable(logp: float, n: int, p: float = DISCOVERABLE_P) -> bool:
    """Whether a continuation of log-probability `logp` is (n, p)-discoverable."""
    return extraction_probability(logp, n) >= p


def min_probability(n: int, p: float = DISCOVERABLE_P) -> float:
    """The smallest P(z) that is (n, p)-discoverable: 1 - (1 - p)^(1/n)."""
    return -math.expm1(math.log1p(-p) / n)


def check_p(raw: Any, where: str = P_KEY) -> float:
    """A discoverability probability p in (0, 1), or ConfigError naming `where`."""
    try:
        if isinstance(raw, bool):
            raise ValueError
        p = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be a probability between 0 and 1 (exclusive), not {raw!r}",
                          "for instance 0.5 (the default)") from None
    if not 0.0 < p < 1.0:
        raise ConfigError(f"{where} must be a probability between 0 and 1 (exclusive), not {raw!r}",
                          "for instance 0.5 (the default)")
    return p


def check_n(raw: Any, where: str = N_KEY) -> tuple[int, ...]:
    """Sample counts n (a list, or text such as '1,10,100'), each a positive integer; sorted, unique."""
    items: Iterable[Any] = raw.replace(",", " ").split() if isinstance(raw, str) else raw
    try:
        values = []
        for item in items:
            if isinstance(item, bool) or (isinstance(item, float) and not item.is_integer()):
                raise ValueError
            values.append(int(str(item).strip()) if isinstance(item, str) else int(item))
    except (TypeError, ValueError):
        values = []
    if not values or min(values) < 1 or max(values) > MAX_SIZE:
        raise ConfigError(f"{where} must be a list of positive whole numbers of samples (at most {MAX_SIZE:,}), "
                          f"not {raw!r}", f"for instance {list(DISCOVERABLE_N)} (the default)")
    return tuple(sorted(set(values)))


def bootstrap_documents(columns: Mapping[str, Sequence[float]], statistics: Mapping[str, Callable[..., Any]],
                        intervals: IntervalSpec) -> dict[str, Interval]:
    """Each column's statistic (`statistics[name]`: np.mean or np.median, called with axis=) over the
    documents with its interval: a share (the mean of 0/1 values: greedy extraction, the
    discoverable shares) gets Wilson's, any other statistic a bootstrap interval
    (`IntervalSpec.bounds`; the documents resampled with replacement, numpy default_rng(seed), the
    same resamples for every column), or no ends when every resample gives one value (every
    document the same: zero width would claim certainty that ten documents do not give). No
    resamples: no bootstrap interval."""
    data = {k: np.asarray(v, dtype=float) for k, v in columns.items()}
    sizes = {len(v) for v in data.values()}
    if len(sizes) != 1 or not next(iter(sizes)):
        raise ValueError("bootstrap_documents needs columns of one non-zero length")
    n = sizes.pop()
    out = {k: share_interval(v, intervals.confidence) for k, v in data.items()
           if statistics[k] is np.mean and is_share(v)}
    rest = {k: v for k, v in data.items() if k not in out}
    point = {k: float(statistics[k](v)) for k, v in rest.items()}
    if not intervals.bootstrap or not rest:
        out.update({k: Interval(v, confidence=intervals.confidence, units=n) for k, v in point.items()})
        return {k: out[k] for k in data}
    samples = {k: np.empty(intervals.resamples) for k in rest}
    start = 0
    for idx in resample_indices(n, intervals.resamples, np.random.default_rng(intervals.seed)):
        for k, v in rest.items():
            samples[k][start:start + len(idx)] = statistics[k](v[idx], axis=1)
        start += len(idx)
    for k, s in samples.items():
        out[k] = (Interval(point[k], *intervals.bounds(s, n), intervals.method, intervals.confidence,
                           intervals.resamples, units=n) if spread(s)
                  else Interval(point[k], confidence=intervals.confidence, units=n))
    return {k: out[k] for k in data}
