"""`leaderboard.html`: one self-contained page (inline CSS and JS, no network) for ranking models.

One row per model and revision with the headline columns, each value drawn with its interval as a
bar; a click on a column head sorts by it (again: the other way), two selects filter the columns by
corpus and setting, and the paired comparisons are listed below (filtered the same way). Each model
links to its tables and generations in `report.html`.

The page is made from plain inputs, so any caller can lay out its own numbers: the leaderboard rows
(dicts holding `model`, `revision` and the columns), the names of the columns to show (a value column
`X` with its interval in `X_low` and `X_high` when the rows have them) and the comparison rows
(`model_a`, `model_b`, `corpus`, `setting`, `metric`, `diff`, `low`, `high`, `significant`, `method`, and
`significant_adjusted`, `adjustment`, `adjusted_over` when the flags were adjusted for the number of comparisons).
Everything printed goes through the report's escaping Jinja environment (`report.html`): names,
corpus labels and revisions can only appear as text.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from propme_metrics.core.files import write_atomic
from propme_metrics.metrics import registry
from propme_metrics.metrics.pm import CONFIDENCE, percent
from propme_metrics.prompts.settings import SETTINGS
from propme_metrics.report.cells import fmt_value, shown
from propme_metrics.report.pages import environment, static

#: where a model's row links to in report.html: (anchor, link text)
REPORT_LINKS = (("pm", "PM"), ("metrics", "metrics"), ("explorer", "generations"))


@dataclass(frozen=True)
class ColumnInfo:
    """What a leaderboard column holds: `propme_<corpus>_pm_<metric>_<setting>` or `propme_<corpus>_<setting>_<metric>`."""

    name: str
    corpus: str
    setting: str
    metric: str
    pm: bool

    @property
    def head(self) -> str:
        label = registry.LABELS.get(self.metric, self.metric)
        return f"PM {label}" if self.pm else label


def describe_column(name: str) -> ColumnInfo | None:
    """The corpus, setting and metric of a metric column (None for any other column)."""
    if not name.startswith("propme_"):
        return None
    rest = name[len("propme_"):]
    for setting in SETTINGS:
        for metric in registry.PM_METRICS:
            tail = f"_pm_{metric}_{setting}"
            if rest.endswith(tail) and len(rest) > len(tail):
                return ColumnInfo(name, rest[: -len(tail)], setting, metric, True)
    for setting in SETTINGS:
        for metric in sorted(registry.NAMES, key=len, reverse=True):  # fmr_rare before fmr
            tail = f"_{setting}_{metric}"
            if rest.endswith(tail) and len(rest) > len(tail):
                return ColumnInfo(name, rest[: -len(tail)], setting, metric, False)
    return None


@dataclass(frozen=True)
class Bar:
    """An interval drawn in a cell: left edge and width in percent of the column's scale, the value's mark."""

    left: float
    width: float
    mark: float


@dataclass(frozen=True)
class PageCell:
    text: str
    ends: tuple[str, str] | None
    sort: str          #: the value for sorting ('' when undefined: sorted last)
    bar: Bar | None


@dataclass(frozen=True)
class PageColumn:
    name: str
    head: str
    corpus: str
    setting: str
    title: str
    kind: str = "num"   #: how the page sorts it: "num", or "text" for a column of text


@dataclass(frozen=True)
class PageRow:
    model: str
    revision: str
    cells: list[PageCell]


@dataclass(frozen=True)
class ComparisonView:
    model_a: str
    model_b: str
    corpus: str
    setting: str
    metric: str
    diff: str
    interval: str
    significant: bool | None
    method: str
    significant_adjusted: bool | None   #: the flag adjusted for the number of comparisons (None: not adjusted)


def _number(v: Any) -> float | None:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or math.isinf(v):
        return None
    return float(v)


def _scale(info: ColumnInfo | None, rows: Sequence[Mapping[str, Any]], name: str) -> float | None:
    """The upper end of a column's bar scale: 1 for PM and metrics in [0, 1], else the largest end shown."""
    if info is not None and (info.pm or info.metric not in ("als", "pii_items")):
        return 1.0
    ends = [_number(r.get(k)) for r in rows for k in (name, f"{name}_high")]
    top = max((e for e in ends if e is not None), default=None)
    return top if top else None


def _cell(row: Mapping[str, Any], name: str, metric: str, top: float | None) -> PageCell:
    raw = row.get(name)
    if isinstance(raw, str):  # a text column (an index identity, a start token): shown and sorted as text
        return PageCell(raw or registry.UNDEFINED.table, None, raw, None)
    value, low, high = (_number(row.get(k)) for k in (name, f"{name}_low", f"{name}_high"))
    cell = shown(value, low, high, metric)
    bar = None
    if value is not None and top:
        lo, hi = (low, high) if low is not None and high is not None else (value, value)
        bar = Bar(round(100 * lo / top, 2), round(100 * max(hi - lo, 0.0) / top, 2), round(100 * value / top, 2))
    return PageCell(cell.text, cell.ends, "" if value is None else repr(value), bar)


def _comparison(c: Mapping[str, Any]) -> ComparisonView:
    def who(side: str) -> str:
        rev = c.get(f"revision_{side}")
        return str(c.get(f"model_{side}", "")) + (f" @ {rev}" if rev else "")

    diff, low, high = (_number(c.get(k)) for k in ("diff", "low", "high"))
    metric = str(c.get("metric", ""))
    interval = registry.UNDEFINED.table if low is None or high is None else f"[{fmt_value(low)}, {fmt_value(high)}]"
    sig, adj = c.get("significant"), c.get("significant_adjusted") if c.get("adjustment") else None
    return ComparisonView(who("a"), who("b"), str(c.get("corpus", "")), str(c.get("setting", "")),
                         metric, fmt_value(diff), interval, sig if isinstance(sig, bool) else None,
                         str(c.get("method") or ""), adj if isinstance(adj, bool) else None)


def adjustment_note(comparisons: Sequence[Mapping[str, Any]]) -> str:
    """How the comparisons' adjusted flags were made, e.g. "benjamini-hochberg over 60 comparisons"
    ("" when none was adjusted)."""
    made = sorted({(str(c["adjustment"]), int(c.get("adjusted_over") or 0)) for c in comparisons if c.get("adjustment")})
    return "; ".join(f"{name} over {n} comparisons" for name, n in made)


@dataclass(frozen=True)
class LeaderboardPage:
    title: str
    columns: list[PageColumn]
    rows: list[PageRow]
    comparisons: list[ComparisonView]
    adjustment: str                         #: `adjustment_note` of the comparisons
    corpora: list[str]
    settings: list[str]
    report_href: str
    links: tuple[tuple[str, str], ...]
    version: str
    confidence: str = percent(CONFIDENCE)   #: the intervals' confidence level, e.g. "95%"
    alpha: str = percent(1 - CONFIDENCE)    #: the false discovery rate the adjusted flags keep, e.g. "5%"


def page_view(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], comparisons: Sequence[Mapping[str, Any]] = (),
              report_href: str | None = "report.html", title: str = "PropMe leaderboard",
              confidence: float = CONFIDENCE) -> LeaderboardPage:
    """What the template prints: the columns to show (model and revision are always the first two)."""
    from propme_metrics import __version__

    cols, infos = [], []
    for name in columns:
        if name in ("model", "revision") or name.endswith(("_low", "_high")):
            continue  # always shown / drawn as the value's interval
        info = describe_column(name)
        infos.append(info)
        text = any(isinstance(r.get(name), str) for r in rows)
        cols.append(PageColumn(name, info.head if info else name, info.corpus if info else "",
                               info.setting if info else "", name, "text" if text else "num"))
    tops = [_scale(info, rows, c.name) for info, c in zip(infos, cols)]
    page_rows = [PageRow(str(r.get("model", "")), str(r.get("revision") or ""),
                         [_cell(r, c.name, info.metric if info else "", top) for c, info, top in zip(cols, infos, tops)])
                 for r in rows]
    comps = [_comparison(c) for c in comparisons]
    corpora = sorted({c.corpus for c in cols if c.corpus} | {c.corpus for c in comps if c.corpus})
    settings = [s for s in SETTINGS if any(c.setting == s for c in cols) or any(c.setting == s for c in comps)]
    return LeaderboardPage(title, cols, page_rows, comps, adjustment_note(comparisons), corpora, settings,
                           report_href or "", REPORT_LINKS if report_href else (), __version__, percent(confidence),
                           percent(1 - confidence))


def render_page(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], comparisons: Sequence[Mapping[str, Any]] = (),
                report_href: str | None = "report.html", title: str = "PropMe leaderboard",
                confidence: float = CONFIDENCE) -> str:
    """The page's HTML (the same inputs give the same text)."""
    page = page_view(rows, columns, comparisons, report_href, title, confidence)
    return environment().get_template("leaderboard.html.j2").render(
        page=page, css=static("leaderboard.css"), js=static("leaderboard.js"))


def write_page(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
               comparisons: Sequence[Mapping[str, Any]] = (), report_href: str | None = "report.html",
               confidence: float = CONFIDENCE) -> Path:
    """Write leaderboard.html to `path` (`report_href` None: no links to a report page; `confidence`:
    the level of the intervals its bars draw)."""
    write_atomic(path, render_page(rows, columns, comparisons, report_href, confidence=confidence))
    return path
