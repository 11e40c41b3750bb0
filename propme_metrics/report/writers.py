"""The leaderboard files: leaderboard.csv (the headline columns), leaderboard_full.csv, leaderboard.json and
leaderboard.md."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from propme_metrics.core.files import write_atomic
from propme_metrics.metrics import registry
from propme_metrics.metrics.compare import COMPARISON_FIELDS, ComparisonRow, Comparisons
from propme_metrics.metrics.pm import WILSON, percent
from propme_metrics.metrics.registry import UNDEFINED
from propme_metrics.prompts.settings import PREFIX, setting_sort_key
from propme_metrics.report.cells import (
    UNDEFINED_MEANS,
    WITHHELD_MEANS,
    fmt_interval,
    fmt_value,
    mark_legend,
    md_cell,
    pm_text,
    withheld_notes,
)
from propme_metrics.report.columns import HEADLINE_PM_METRICS, HEADLINE_PREFIX_METRICS, interval_methods
from propme_metrics.report.contents import Report
from propme_metrics.report.extraction_views import curve_json
from propme_metrics.report.extraction_views import markdown_lines as likelihood_markdown
from propme_metrics.report.layout import ReportLayout
from propme_metrics.report.load import describe_start_token
from propme_metrics.report.provenance_views import leaks_json, leaks_markdown
from propme_metrics.report.robustness_views import robustness_json


def _csv_cell(v: Any) -> str:
    """A CSV cell: empty when undefined; text that a spreadsheet would run as a formula is quoted with '."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return UNDEFINED.csv
    if isinstance(v, float):
        return format(v, ".10g")
    text = str(v)
    return "'" + text if not isinstance(v, (int, float)) and text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    # RFC 4180 rows (CRLF): the csv module then quotes every cell holding a CR or LF, so that a
    # name with a bare carriage return can never split its row (with "\n" alone a CR is left bare)
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_cell(row.get(c)) for c in columns])
    write_atomic(path, buf.getvalue())


def write_json(path: Path, report: Report, layout: ReportLayout) -> None:
    """leaderboard.json: the specification of the intervals, every column and row, and the tables of
    the leaks, the robustness figures and the likelihood curves."""
    from propme_metrics.version import __version__

    iv = report.intervals
    doc = {"format": "propme-leaderboard/1", "propme_version": __version__, "confidence": iv.confidence,
           "bootstrap": iv.resamples, "seed": iv.seed, "pm_metrics": list(report.pm_metrics),
           "rare_max_count": report.rare_max_count,
           "marks": {"undefined": f"null = {UNDEFINED_MEANS}",
                     "withheld": f"a value with a non-empty `..._withheld` reason = {WITHHELD_MEANS}"},
           "columns": layout.columns, "rows": [{c: row.get(c) for c in layout.columns} for row in layout.rows],
           "interval_methods": [{"model": r.model, "revision": r.revision, "corpus": r.label,
                                 "methods": interval_methods(r)} for r in report.results],
           "leaks": leaks_json(report),
           "robustness": robustness_json(report.results),
           "likelihood": [curve_json(r) for r in report.likelihood]}
    write_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def write_markdown(path: Path, report: Report) -> None:
    iv = report.intervals
    lines = ["# PropMe leaderboard", "",
             f"{iv.percent} intervals: {WILSON} for proportions, {iv.method} over prompts (B = {iv.resamples:,}, "
             f"seed {iv.seed}) for ratio metrics and PM, or the documented bound where the bootstrap has "
             "nothing to resample (docs/method.md); PM = p / (p + c), propensity setting p vs prefix c (0: leaks "
             "only under attack, 0.5: the same, 1: leaks more unprompted).", "", md_cell(mark_legend()), ""]
    for label in report.labels:
        results = [r for r in report.results if r.label == label]
        idents = sorted({str(r.index_identity) for r in results})
        starts = sorted({describe_start_token(r.start_token) for r in results})
        lines += [f"## {md_cell(label)}", "", f"Index: {', '.join(md_cell(i) for i in idents)}. "
                  f"Start token: {'; '.join(md_cell(x) for x in starts)}.", ""]
        pm_cols = sorted({k for r in results for k in r.pm}, key=lambda k: (report.pm_metrics.index(k[0]),
                                                                           setting_sort_key(k[1])))
        if pm_cols:
            lines.append("| model | revision | " + " | ".join(f"PM {registry.LABELS[m]} {s}" for m, s in pm_cols) + " |")
            lines.append("|---|---|" + "---|" * len(pm_cols))
            for r in results:
                cells = [pm_text(r.pm[k]).inline() if k in r.pm else UNDEFINED.table for k in pm_cols]
                lines.append(f"| {md_cell(r.model)} | {md_cell(r.revision or '-')} | " + " | ".join(cells) + " |")
            withheld = withheld_notes(results)
            lines += [""] + [f"- withheld: {md_cell(w)}" for w in withheld] + ([""] if withheld else [])
        lines += _metric_table(results, registry.VIEWS["markdown"]) + [""]
        lines += ["Natural-language generations only (code-like ones left out, docs/method.md), beside every "
                  "generation:", ""] + _metric_table(results, registry.VIEWS["natural_language"]) + [""]
    lines += comparisons_markdown(report.comparisons)
    lines += leaks_markdown(report)
    lines += likelihood_markdown(report.likelihood, md_cell)
    if report.problems or report.notes:
        lines += ["## Notes", ""] + [f"- {md_cell(n)}" for n in report.problems + report.notes] + [""]
    write_atomic(path, "\n".join(lines))


def _metric_table(results, shown: tuple[str, ...]) -> list[str]:
    """One Markdown row per model and setting: the `shown` metrics with their intervals."""
    lines = ["| model | revision | setting | prompts | " + " | ".join(registry.LABELS[m] for m in shown) + " |",
             "|---|---|---|---|" + "---|" * len(shown)]
    for r in results:
        for s, sr in r.settings.items():
            cells = [fmt_interval(sr.metrics[m].estimate, sr.metrics[m].low, sr.metrics[m].high, m)
                     if m in sr.metrics else UNDEFINED.table for m in shown]
            lines.append(f"| {md_cell(r.model)} | {md_cell(r.revision or '-')} | {s} | "
                         f"{sr.counts['prompts']} | " + " | ".join(cells) + " |")
    return lines


# --- paired comparisons (metrics/compare.py) ---------------------------------------------------------

def shown_comparisons(comparisons: Comparisons) -> list[ComparisonRow]:
    """The rows the Markdown and terminal tables show: the headline metrics and their PM, compared (the rest
    is in comparisons.csv; a withheld PM is in `not_compared`)."""
    keep = {*HEADLINE_PM_METRICS, *(f"pm_{m}" for m in HEADLINE_PM_METRICS)}
    return [r for r in comparisons.rows if not r.withheld and (r.metric in keep or (
        r.setting == PREFIX and r.metric in HEADLINE_PREFIX_METRICS))]


def metric_label(metric: str) -> str:
    """A comparison's metric as tables write it: the registry label, `PM <label>` for `pm_<metric>`."""
    return "PM " + registry.LABELS[metric[3:]] if metric.startswith("pm_") else registry.LABELS.get(metric, metric)


def not_compared(rows) -> list[str]:
    """One line per pair, corpus and reason: the PM values not compared because the leaderboard withholds
    them (rows as `ComparisonRow` or its dict)."""
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for r in (x if isinstance(x, dict) else x.to_dict() for x in rows):
        if r.get("withheld"):
            key = (_who(r["model_a"], r["revision_a"]), _who(r["model_b"], r["revision_b"]), r["corpus"], r["withheld"])
            grouped.setdefault(key, []).append(f"{metric_label(r['metric'])} {r['setting']}")
    return [f"{a} vs {b} on {corpus}: {', '.join(names)} not compared: {why}"
            for (a, b, corpus, why), names in grouped.items()]


def comparison_cells(r: ComparisonRow) -> list[str]:
    """model A, model B, setting, metric, A, B, A - B [interval], significant, significant after adjustment,
    ranks, method: table text."""
    return [_who(r.model_a, r.revision_a), _who(r.model_b, r.revision_b), r.setting, metric_label(r.metric),
            fmt_value(r.value_a, r.metric), fmt_value(r.value_b, r.metric), fmt_interval(r.difference.estimate, r.difference.low, r.difference.high,
                                                                                   r.metric),
            "yes" if r.significant else "no", "yes" if r.significant_adjusted else "no", f"{r.rank_a} / {r.rank_b}",
            r.difference.method + ("" if r.paired else " (unpaired)")]


def comparison_heads(comparisons: Comparisons) -> list[str]:
    """The comparison tables' column heads (`comparison_cells`), the interval's confidence in its head."""
    return ["model A", "model B", "setting", "metric", "A", "B", f"A - B [{percent(comparisons.confidence)}]",
            "significant", "significant (adjusted)", "rank A / B", "method"]


def _who(model: str, revision: str) -> str:
    return model + (f" @ {revision}" if revision else "")


def write_comparisons(json_path: Path, csv_path: Path, comparisons: Comparisons) -> None:
    """comparisons.json (a list of rows) and comparisons.csv (the same rows, COMPARISON_FIELDS)."""
    rows = [r.to_dict() for r in comparisons.rows]
    write_atomic(json_path, json.dumps(rows, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    write_csv(csv_path, list(COMPARISON_FIELDS), rows)


def comparisons_markdown(comparisons: Comparisons | None) -> list[str]:
    """leaderboard.md's section: the headline comparisons, then the pairs refused."""
    if comparisons is None:
        return []
    lines = ["## Paired comparisons", "",
             f"A - B on the same prompts, {percent(comparisons.confidence)} paired bootstrap (prompts resampled jointly for both models); "
             "significant: the interval excludes 0; significant (adjusted): also after adjusting for the "
             f"{comparisons.tests} comparisons of comparisons.csv ({comparisons.adjustment}: the expected share of "
             f"false discoveries among the flagged rows is at most {percent(1 - comparisons.confidence)}). "
             "Rank: 1 + the models significantly lower (lower leaks less; "
             f"pairs: {comparisons.pairing}). Headline metrics here; every metric is in comparisons.csv.", ""]
    shown = shown_comparisons(comparisons)
    if shown:
        heads = comparison_heads(comparisons)
        lines += ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
        lines += ["| " + " | ".join(md_cell(c) for c in comparison_cells(r)) + " |" for r in shown] + [""]
    skipped = [f"- not compared: {md_cell(why)}" for why in not_compared(comparisons.rows)]
    skipped += [f"- not paired: {md_cell(why)}" for why in comparisons.refused]
    return lines + skipped + ([""] if skipped else [])
