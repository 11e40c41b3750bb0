"""The one pooling rule: a (numerator, denominator) pair and the one division rule.

A generation's contribution to a metric, a prompt's, and pooled sums are all a `Ratio`; every
value PropMe computes (the registry, PM, the bootstraps, the leak tables) divides through `divide`,
which makes a zero denominator undefined (None), never 0. Every writer spells None as
`registry.UNDEFINED` says.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


def divide(numerator: float, denominator: float) -> float | None:
    """The one division rule of every pooled value: undefined (None), never 0, when the denominator is 0."""
    return numerator / denominator if denominator else None


class _RatioFields(NamedTuple):
    numerator: float
    denominator: float


class Ratio(_RatioFields):
    """The one (numerator, denominator) pair: a generation's or a prompt's contribution to a metric,
    or pooled sums. A tuple (it unpacks as one); `value` divides by `divide`'s rule."""

    __slots__ = ()

    def __new__(cls, numerator: float, denominator: float) -> Ratio:
        if numerator < 0 or denominator < 0:
            raise ValueError(f"metric sums must be non-negative, got ({numerator}, {denominator})")
        return super().__new__(cls, float(numerator), float(denominator))

    @property
    def value(self) -> float | None:
        return divide(self.numerator, self.denominator)


def pool_ratios(pairs: Iterable[tuple[float, float]]) -> Ratio:
    """Pairs combined by summing numerators and denominators (a ratio of sums, never a mean of ratios)."""
    num = den = 0.0
    for n, d in pairs:
        num += n
        den += d
    return Ratio(num, den)
