"""The leaderboard's tables laid out from what a report computed (`lay_out`): every column
(`leaderboard_full.csv`, `leaderboard.json`), the headline columns with withheld PM marked
(`leaderboard.csv`) and leaderboard.html's first view, one row per model and revision."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from propme_metrics.prompts.settings import setting_sort_key
from propme_metrics.report.columns import (
    columns_for,
    headline_columns,
    headline_rows,
    headline_view_columns,
    row_values,
)
from propme_metrics.report.contents import Report
from propme_metrics.report.extraction_views import columns as likelihood_columns
from propme_metrics.report.extraction_views import row_values as likelihood_row_values
from propme_metrics.report.robustness_views import robustness_columns, robustness_values


@dataclass(frozen=True)
class ReportLayout:
    """The leaderboard's columns and rows (one per model and revision, in the report's model order)."""

    columns: list[str]                      #: every column
    rows: list[dict[str, Any]]              #: every column's value per model and revision
    headline_columns: list[str]             #: `leaderboard.csv`'s (`columns.headline_columns`)
    headline_rows: list[dict[str, Any]]     #: the headline values, withheld PM marked
    view_columns: list[str]                 #: leaderboard.html's headline view


def lay_out(report: Report) -> ReportLayout:
    """The columns of every corpus label (base metrics and PM per setting, robustness, likelihood) and
    one row per model and revision."""
    results, pm_metrics = report.results, report.pm_metrics
    rows_by_model: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        rows_by_model.setdefault((r.model, r.revision), {"model": r.model, "revision": r.revision})
    columns = ["model", "revision"]
    for label in report.labels:
        settings = sorted({s for r in results if r.label == label for s in r.settings}, key=setting_sort_key)
        columns += columns_for(label, settings, pm_metrics)
        columns += robustness_columns([r for r in results if r.label == label])
    for r in results:
        rows_by_model[(r.model, r.revision)].update(row_values(r, pm_metrics))
        rows_by_model[(r.model, r.revision)].update(robustness_values(r))
    columns += likelihood_columns(report.likelihood)
    for lr in report.likelihood:
        rows_by_model.setdefault((lr.model, lr.revision), {"model": lr.model, "revision": lr.revision}).update(
            likelihood_row_values(lr))
    rows = [{c: rows_by_model[k].get(c) for c in columns} for k in report.models if k in rows_by_model]
    return ReportLayout(columns, rows, headline_columns(report), headline_rows(report, rows),
                        headline_view_columns(report))
