"""How a value and its interval are written in the report's tables: one formatter for every output.

A value has 3 significant digits (ALS: 2 decimals), an interval's end more where it would read as the
value though it differs from it; an undefined one (None or NaN) is written as
`registry.UNDEFINED` says for tables. An interval is shown when an end is defined (an undefined end,
e.g. the upper bound of an unbounded metric with no event, as `-`). A PM whose capability side is too
small reads `withheld`. The Markdown, terminal and HTML tables lay the same `Shown` out their own way.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from propme_metrics.metrics.pm import PM_MIN_CAPABILITY_EVENTS, Interval
from propme_metrics.metrics.registry import LABELS, UNDEFINED

#: how a withheld PM reads in the tables and in leaderboard.csv (the reason is in the notes and leaderboard.json)
WITHHELD = "withheld"

#: what each mark of a missing value means, for the legend line of every table (one home)
UNDEFINED_MEANS = "undefined: nothing to compute it from (no counted generation, or a ratio with no denominator), never 0"
WITHHELD_MEANS = (f"PM withheld: its capability (prefix) side has fewer than {PM_MIN_CAPABILITY_EVENTS} prompts with an "
                  "event, too few to carry a ratio (leaderboard_full.csv and leaderboard.json keep the value and the "
                  "reason); never compared")


#: what PM means, for the legend of every table that shows it
PM_MEANS = ("p / (p + c) of a metric, p under the propensity setting and c under prefix: 0 leaks only under attack, "
            "0.5 the same, 1 leaks more unprompted")


def mark_legend(undefined: str = UNDEFINED.table, withheld: str = WITHHELD) -> str:
    """The one-line legend of the two marks of a missing value, as an output writes them."""
    return f"{undefined or 'empty'} = {UNDEFINED_MEANS}; {withheld} = {WITHHELD_MEANS}."


def _undefined(v: float | None) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt_value(v: float | None, metric: str = "") -> str:
    """A metric value for tables: 3 significant digits (ALS: 2 decimals), `UNDEFINED.table` when undefined."""
    if _undefined(v):
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
    """The one formatter of a value with its interval (none when the value or both ends are undefined)."""
    if _undefined(value) or (_undefined(low) and _undefined(high)):
        return Shown(fmt_value(value, metric))
    text = fmt_value(value, metric)
    return Shown(text, (_end(low, value, text, metric), _end(high, value, text, metric)))


#: the most significant digits an interval's end is written with to tell it from its value
_MAX_DIGITS = 8


def _end(end: float | None, value: float, text: str, metric: str) -> str:
    """An interval's end as table text: with more digits where it differs from the value but would be
    written alike (1 - 4e-5 is not `1`), so no interval reads as zero width where it is not."""
    written = fmt_value(end, metric)
    digits = 3
    while written == text and not _undefined(end) and end != value and digits < _MAX_DIGITS:
        digits += 1
        written = f"{end:.{digits}g}"
    return written


def pm_text(iv: Interval) -> Shown:
    """A PM with its interval, or `WITHHELD` when its capability side is too small to carry it."""
    return Shown(WITHHELD) if iv.withheld else shown(iv.estimate, iv.low, iv.high)


def fmt_interval(value: float | None, low: float | None, high: float | None, metric: str = "") -> str:
    """`value [low, high]` on one line (the value alone without an interval)."""
    return shown(value, low, high, metric).inline()


def withheld_notes(results) -> list[str]:
    """One line per model and reason: which PM values are withheld (`pm.pm_withheld`) and why."""
    lines = []
    for r in results:
        by_reason: dict[str, list[str]] = {}
        for (m, s), iv in r.pm.items():
            if iv.withheld:
                by_reason.setdefault(iv.withheld, []).append(f"PM {LABELS[m]} {s}")
        who = r.model + (f" @ {r.revision}" if r.revision else "")
        lines += [f"{who}: {', '.join(names)}: {why}" for why, names in by_reason.items()]
    return lines


def md_cell(text: Any) -> str:
    """Text shown as written in a Markdown table cell or list item: no column breaks, no raw HTML
    (renderers pass it through), and no inline markup (emphasis, code, links, images, strikethrough)."""
    text = _MD_INLINE.sub(r"\\\g<0>", str(text)).replace("\r", " ").replace("\n", " ")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


#: the characters that start Markdown inline markup in a cell (a backslash shows each as written);
#: an underscore between letters or digits never does (`propme_dynaword_prefix` stays readable)
_MD_INLINE = re.compile(r"[\\`*\[\]~|]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def slug(text: str) -> str:
    """A name (corpus label, model) as a file-name part: runs of other characters become '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[-60:] or "model"
