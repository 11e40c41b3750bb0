"""`leaderboard.html`: one self-contained page (inline CSS and JS, no network) for ranking models.

Per corpus one headline view: per metric a small table under its one-line legend (the registry's
description), one row per model and revision, its headline columns (capability, PM per propensity
setting), each value drawn with its interval as a bar; the marks of a missing value (undefined `-`,
`withheld`) are explained at the top. Every other metric column of the rows is behind a toggle
(`<details>`), one row per model and setting. A click on a column head sorts by it (again: the
other way), two selects filter by corpus and setting. The paired comparisons below are folded to the
significant ones (the rest behind a toggle); a withheld PM is not compared, and the page says so. Each
model links to its tables and generations in `report.html`.

The page is made from plain inputs, so any caller can lay out its own numbers: the leaderboard rows
(dicts holding `model`, `revision` and the columns; a PM column `X` with a non-empty `X_withheld` is
shown as withheld), the names of the headline columns (a value column `X` with its interval in `X_low`
and `X_high` when the rows have them) and the comparison rows (`model_a`, `model_b`, `corpus`,
`setting`, `metric`, `diff`, `low`, `high`, `significant`, `method`, `withheld`, and
`significant_adjusted`, `adjustment`, `adjusted_over` when the flags were adjusted for the number of comparisons).
Everything printed goes through the report's escaping Jinja environment (`report.html`): names,
corpus labels and revisions can only appear as text.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from propme_metrics.core.files import write_atomic
from propme_metrics.metrics import registry
from propme_metrics.metrics.pm import CONFIDENCE, percent
from propme_metrics.prompts.settings import SETTINGS, setting_sort_key
from propme_metrics.report.cells import PM_MEANS, WITHHELD, fmt_value, mark_legend, shown
from propme_metrics.report.pages import environment, static
from propme_metrics.report.writers import metric_label, not_compared

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


@lru_cache(maxsize=4096)
def describe_column(name: str) -> ColumnInfo | None:
    """The corpus, setting and metric of a metric column (None for any other column); once per name
    (a page asks for each of the leaderboard's hundreds of columns, and each try builds every tail)."""
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
    sort: str          #: the value for sorting ('' when undefined or withheld: sorted last)
    bar: Bar | None
    title: str = ""    #: a withheld PM: why


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
    setting: str = ""   #: a row of a table behind the toggle: its setting


@dataclass(frozen=True)
class PageTable:
    """A sortable table: its value columns (model and revision come first) and its rows."""

    columns: list[PageColumn]
    rows: list[PageRow]
    by_setting: bool = False   #: one row per model and setting (a setting column after the revision)


@dataclass(frozen=True)
class MetricBlock:
    """The headline columns of one metric (its capability level, its PM per propensity setting): a small
    table under the metric's one-line legend, so no view scrolls sideways."""

    label: str
    legend: str          #: the registry's description of the metric
    table: PageTable


@dataclass(frozen=True)
class CorpusView:
    """One corpus: the headline, a block per metric; the PM withheld and why; the other columns behind a toggle."""

    corpus: str
    headline: list[MetricBlock]
    withheld: list[str]                   #: "model: PM ... : why" per model and reason
    more: list[tuple[str, PageTable]]     #: (title, table) behind the toggle
    more_legend: list[tuple[str, str]]


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


def _scale(info: ColumnInfo | None, values: Sequence[float | None]) -> float | None:
    """The upper end of a column's bar scale: 1 for PM and metrics in [0, 1], else the largest end shown."""
    if info is not None and (info.pm or registry.metric(info.metric).unit_max is not None):
        return 1.0
    top = max((v for v in values if v is not None), default=None)
    return top if top else None


def _ends(rows: Sequence[Mapping[str, Any]], name: str) -> list[float | None]:
    return [_number(r.get(k)) for r in rows for k in (name, f"{name}_high")]


def _cell(row: Mapping[str, Any], name: str, metric: str, top: float | None) -> PageCell:
    raw = row.get(name)
    why = row.get(f"{name}_withheld")
    if why:  # a PM the leaderboard withholds: its own mark, never a number, never undefined's
        return PageCell(WITHHELD, None, "", None, str(why))
    if isinstance(raw, str):  # a text column (an index identity, a start token): shown and sorted as text
        return PageCell(raw or registry.UNDEFINED.table, None, raw, None)
    value, low, high = (_number(row.get(k)) for k in (name, f"{name}_low", f"{name}_high"))
    cell = shown(value, low, high, metric)
    bar = None
    if value is not None and top:
        lo, hi = (low, high) if low is not None and high is not None else (value, value)
        bar = Bar(round(100 * lo / top, 2), round(100 * max(hi - lo, 0.0) / top, 2), round(100 * value / top, 2))
    return PageCell(cell.text, cell.ends, "" if value is None else repr(value), bar)


def _column(name: str, rows: Sequence[Mapping[str, Any]], info: ColumnInfo | None, with_setting: bool) -> PageColumn:
    text = any(isinstance(r.get(name), str) and not r.get(f"{name}_withheld") for r in rows)
    head = info.head if info else name
    return PageColumn(name, head, info.corpus if info else "", info.setting if info and with_setting else "", name,
                      "text" if text else "num")


def _table(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> PageTable:
    """One row per model and revision, the columns `names`."""
    infos = [describe_column(n) for n in names]
    cols = [_column(n, rows, i, True) for n, i in zip(names, infos)]
    tops = [_scale(i, _ends(rows, n)) for n, i in zip(names, infos)]
    return PageTable(cols, [PageRow(str(r.get("model", "")), str(r.get("revision") or ""),
                                    [_cell(r, n, i.metric if i else "", t) for n, i, t in zip(names, infos, tops)])
                            for r in rows])


def _by_setting(rows: Sequence[Mapping[str, Any]], infos: Sequence[ColumnInfo]) -> PageTable:
    """Columns per metric, one row per model and setting (the columns behind the toggle)."""
    metrics = sorted({i.metric for i in infos}, key=registry.NAMES.index)
    settings = sorted({i.setting for i in infos}, key=setting_sort_key)
    name = {(i.setting, i.metric): i.name for i in infos}
    tops = {m: _scale(next(i for i in infos if i.metric == m), [v for s in settings if (s, m) in name
                                                                 for v in _ends(rows, name[s, m])]) for m in metrics}
    first = {m: next(i for i in infos if i.metric == m) for m in metrics}
    cols = [PageColumn(m, first[m].head, first[m].corpus, "", m) for m in metrics]
    out = []
    for s in settings:
        for r in rows:
            cells = [_cell(r, name[s, m], m, tops[m]) if (s, m) in name else PageCell(registry.UNDEFINED.table, None, "", None)
                     for m in metrics]
            out.append(PageRow(str(r.get("model", "")), str(r.get("revision") or ""), cells, s))
    return PageTable(cols, out, by_setting=True)


def _legend(infos: Sequence[ColumnInfo | None]) -> list[tuple[str, str]]:
    """One line per metric of the columns (the registry's description), PM's first when any is PM."""
    lines = [("PM", PM_MEANS)] if any(i and i.pm for i in infos) else []
    seen = sorted({i.metric for i in infos if i is not None}, key=registry.NAMES.index)
    return lines + [(registry.LABELS[m], registry.metric(m).description) for m in seen]


def _blocks(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[MetricBlock]:
    """The headline columns grouped by metric (in column order), each block with its legend line; the
    columns of no metric (text) in a block of their own."""
    groups: dict[str, list[str]] = {}
    for n in names:
        info = describe_column(n)
        groups.setdefault(info.metric if info else "", []).append(n)
    return [MetricBlock(registry.LABELS[m] if m else "other", registry.metric(m).description if m else "",
                        _table(rows, cols)) for m, cols in groups.items()]


def _withheld(rows: Sequence[Mapping[str, Any]], infos: Sequence[ColumnInfo | None]) -> list[str]:
    """Per model and reason: which PM of the headline the page withholds and why."""
    out = []
    for r in rows:
        by_reason: dict[str, list[str]] = {}
        for i in infos:
            if i is not None and i.pm and r.get(f"{i.name}_withheld"):
                by_reason.setdefault(str(r[f"{i.name}_withheld"]), []).append(f"{i.head} {i.setting}")
        who = str(r.get("model", "")) + (f" @ {r['revision']}" if r.get("revision") else "")
        out += [f"{who}: {', '.join(names)}: {why}" for why, names in by_reason.items()]
    return out


#: the base metrics behind the toggle: those report.html's tables show
_MORE_METRICS = registry.VIEWS["html"]


def corpus_view(rows: Sequence[Mapping[str, Any]], names: Sequence[str], corpus: str) -> CorpusView:
    """A corpus' headline table (its columns of `names`) and, behind the toggle, its other PM and base
    metric columns found in the rows (one row per model and setting)."""
    infos = [describe_column(n) for n in names]
    shown_names = set(names)
    keys = dict.fromkeys(k for r in rows for k in r)
    rest = [i for i in map(describe_column, keys) if i is not None and i.corpus == corpus
            and i.name not in shown_names and (i.pm or i.metric in _MORE_METRICS)]
    more = [(title, _by_setting(rows, part)) for title, part in
            (("PM", [i for i in rest if i.pm]), ("base metrics", [i for i in rest if not i.pm])) if part]
    return CorpusView(corpus, _blocks(rows, names), _withheld(rows, infos), more, _legend(rest))


def _comparison(c: Mapping[str, Any]) -> ComparisonView:
    def who(side: str) -> str:
        rev = c.get(f"revision_{side}")
        return str(c.get(f"model_{side}", "")) + (f" @ {rev}" if rev else "")

    diff, low, high = (_number(c.get(k)) for k in ("diff", "low", "high"))
    metric = metric_label(str(c.get("metric", "")))
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
    corpora: list[CorpusView]
    significant: list[ComparisonView]       #: shown at first sight
    other_comparisons: list[ComparisonView]  #: behind a toggle
    not_compared: list[str]                 #: the withheld PM values not compared, and why
    adjustment: str                         #: `adjustment_note` of the comparisons
    settings: list[str]
    report_href: str
    links: tuple[tuple[str, str], ...]
    version: str
    confidence: str = percent(CONFIDENCE)   #: the intervals' confidence level, e.g. "95%"
    alpha: str = percent(1 - CONFIDENCE)    #: the false discovery rate the adjusted flags keep, e.g. "5%"
    marks: str = mark_legend()              #: what `-` and `withheld` mean
    pm_legend: str = PM_MEANS

    @property
    def comparisons(self) -> list[ComparisonView]:
        return self.significant + self.other_comparisons


def page_view(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], comparisons: Sequence[Mapping[str, Any]] = (),
              report_href: str | None = "report.html", title: str = "PropMe leaderboard",
              confidence: float = CONFIDENCE) -> LeaderboardPage:
    """What the template prints: per corpus its headline columns of `columns` (model and revision are
    always the first two; a column of no known corpus goes with the first), the rest of the rows behind a toggle."""
    from propme_metrics.version import __version__

    names = [n for n in columns if n not in ("model", "revision") and not n.endswith(("_low", "_high", "_withheld"))]
    corpus_of = {n: (describe_column(n).corpus if describe_column(n) else "") for n in names}
    corpora = list(dict.fromkeys(c for c in corpus_of.values() if c)) or [""]
    for n, c in corpus_of.items():  # another column of a corpus (`propme_<corpus>_index`): the longest label it starts with
        corpus_of[n] = c or max((x for x in corpora if n.startswith(f"propme_{x}_")), key=len, default=corpora[0])
    views = [corpus_view(rows, [n for n in names if corpus_of[n] == c], c) for c in corpora]
    compared = [c for c in comparisons if not c.get("withheld")]
    comps = [_comparison(c) for c in compared]
    tables = [t for v in views for t in (*(b.table for b in v.headline), *(t for _, t in v.more))]
    used = {c.setting for t in tables for c in t.columns} | {r.setting for t in tables for r in t.rows}
    settings = [s for s in SETTINGS if s in used | {c.setting for c in comps}]
    return LeaderboardPage(title, views, [c for c in comps if c.significant], [c for c in comps if not c.significant],
                           not_compared(comparisons), adjustment_note(comparisons), settings,
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
