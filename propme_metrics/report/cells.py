"""How a value and its interval are written in the report's tables: one formatter for every output.

A value has 3 significant digits (ALS: 2 decimals); an undefined one (None or NaN) is written as
`registry.UNDEFINED` says for tables. An interval is shown only when both ends are defined. The
Markdown, terminal and HTML tables lay the same `Shown` out their own way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from propme_metrics.metrics.registry import UNDEFINED


def fmt_value(v: float | None, metric: str = "") -> str:
    """A metric value for tables: 3 significant digits (ALS: 2 decimals), `UNDEFINED.table` when undefined."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return UNDEFINED.table
    if v == 0:
        return "0"
    return f"{v:.2f}" if metric == "als" else f"{v:.3g}"


@dataclass(frozen=True)
class Shown:
    """A value and its interval's ends as table text (`ends` None: no interval to show)."""

    text: str
    ends: tuple[str, str] | None = None

    def inline(self) -> str:
        """One line: `value [low, high]` (Markdown tables)."""
        return self.text if self.ends is None else f"{self.text} [{self.ends[0]}, {self.ends[1]}]"


def shown(value: float | None, low: float | None = None, high: float | None = None, metric: str = "") -> Shown:
    """The one formatter of a value with its interval (none when either end is undefined)."""
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return Shown(fmt_value(value, metric))
    return Shown(fmt_value(value, metric), (fmt_value(low, metric), fmt_value(high, metric)))


def fmt_interval(value: float | None, low: float | None, high: float | None, metric: str = "") -> str:
    """`value [low, high]` on one line (the value alone without an interval)."""
    return shown(value, low, high, metric).inline()
