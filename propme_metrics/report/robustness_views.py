"""How the robustness figures (`metrics.robustness`) are written: leaderboard.json's `robustness`,
the leaderboard_full.csv columns, the report.html tables and the Every Eval Ever results."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from propme_metrics.metrics.figures import BY_NAME, COPY_BUCKETS, FLOOR, Figure
from propme_metrics.metrics.results import CorpusResult, finite
from propme_metrics.report.cells import fmt_interval

#: report.html's tables: title and the figures of each, one row per model and setting
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Predictability floor (the propensity prompts themselves) and each setting's excess over it",
     ("floor_als", "floor_r20", "floor_longest", "excess_als", "excess_r20")),
    ("Repeated sampling: at least one of a prompt's k generations",
     ("any_fm20", "mean_fm20", "any_span50", "mean_span50", "any_extraction", "mean_extraction")),
    ("Duplication of the long spans: corpus count of their first 50 tokens, and R50 on rare text",
     (*(f"r50_copies_{b[0]}" for b in COPY_BUCKETS), "r50_copies_median", "r50_rare", "r50_unique", "pm_r50_rare",
      "pm_r50_unique")),
    ("Concentration of the long spans, and prefix extraction by the corpus count of its 100 tokens",
     ("r50_documents", "r50_top10_share", *(f"extraction_copies_{b[0]}" for b in COPY_BUCKETS))),
)


def column(label: str, f: Figure) -> str:
    """A figure's leaderboard column: `propme_<corpus>_<figure>` for the floor, else with the setting."""
    return f"propme_{label}_{f.name}" if f.setting == FLOOR else f"propme_{label}_{f.setting}_{f.name}"


def _columns_of(label: str, f: Figure) -> list[str]:
    c = column(label, f)
    return [c, f"{c}_low", f"{c}_high"] if f.spec.interval else [c]


def robustness_columns(results: Sequence[CorpusResult]) -> list[str]:
    """The columns of the figures of a corpus label's results (their union, in figure order)."""
    cols: dict[str, None] = {}
    for r in results:
        for f in (r.robustness.figures if r.robustness else []):
            cols.update(dict.fromkeys(_columns_of(r.label, f)))
    return list(cols)


def robustness_values(res: CorpusResult) -> dict[str, Any]:
    """A row's figure cells (None: undefined)."""
    out: dict[str, Any] = {}
    for f in (res.robustness.figures if res.robustness else []):
        c = column(res.label, f)
        out[c] = finite(f.value.estimate)
        if f.spec.interval:
            out[f"{c}_low"], out[f"{c}_high"] = finite(f.value.low), finite(f.value.high)
    return out


def robustness_methods(res: CorpusResult) -> dict[str, str]:
    """How each figure's interval was made: value column -> method (leaderboard.json's `interval_methods`)."""
    return {column(res.label, f): f.value.method for f in (res.robustness.figures if res.robustness else [])
            if f.value.method}


def robustness_json(results: Sequence[CorpusResult]) -> list[dict[str, Any]]:
    """leaderboard.json's `robustness`: per model, revision and corpus, every figure with its interval."""
    return [{"model": r.model, "revision": r.revision, "corpus": r.label, **r.robustness.to_dict()}
            for r in results if r.robustness is not None]


@dataclass(frozen=True)
class FigureTable:
    """One robustness table of report.html: a corpus label's rows (model, revision, setting) of figures."""

    title: str
    note: str
    heads: list[str]
    rows: list[list[str]]


def _cell(f: Figure | None) -> str:
    if f is None:
        return ""
    iv = f.value
    return fmt_interval(iv.estimate, iv.low, iv.high) + (f" (n={f.units})" if f.spec.interval else "")


def figure_tables(results: Sequence[CorpusResult]) -> list[FigureTable]:
    """report.html's robustness tables, per corpus label and table, rows with at least one figure."""
    out = []
    for label in dict.fromkeys(r.label for r in results):
        mine = [r for r in results if r.label == label and r.robustness is not None]
        notes = "; ".join(dict.fromkeys(r.robustness.note for r in mine if r.robustness.note))
        for title, names in TABLES:
            rows = []
            for r in mine:
                settings = dict.fromkeys(f.setting for f in r.robustness.figures if f.name in names)
                for s in settings:
                    cells = [_cell(r.robustness.get(n, s)) for n in names]
                    rows.append([r.model, r.revision or "-", s, *cells])
            if rows:
                out.append(FigureTable(f"{label}: {title}", notes, ["model", "revision", "setting",
                                                                    *(BY_NAME[n].label for n in names)], rows))
    return out
