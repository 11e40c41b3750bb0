"""The contamination check laid out: contamination.json, contamination_items.jsonl, the CSV and
Markdown tables, the leaderboard columns, the threshold plot, the terminal lines and the HTML
section of report.html (flagged items with their matched spans highlighted)."""
from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

from propme_metrics.contamination.check import TaskCheck
from propme_metrics.contamination.rule import ContaminationRule
from propme_metrics.contamination.summary import CONFIDENCE
from propme_metrics.core.files import atomic_output, write_atomic
from propme_metrics.core.jsonl import json_line
from propme_metrics.index.reader import Index
from propme_metrics.metrics.registry import UNDEFINED
from propme_metrics.report.cells import fmt_interval, fmt_value
from propme_metrics.report.writers import _md_cell, write_csv

FORMAT = "propme-contamination/1"
NORMALIZATION = ("texts are normalized before matching as the tracer's normalized match does: Unicode NFKC, "
                 "CRLF and CR to LF, runs of spaces and tabs to one space, no spaces around a newline, at most "
                 "one blank line, stripped; the corpus is matched as indexed")
#: the metric's parts in the tables: its value on all, clean and contaminated items, and the difference
PARTS = (("all", "metric_all"), ("clean", "metric_clean"), ("contaminated", "metric_contaminated"),
         ("difference", "difference"))
TABLE_COLUMNS = ["task", "items", "contaminated", "share", "share_low", "share_high", "metric",
                 *(f"{col}{end}" for _, col in PARTS for end in ("", "_low", "_high"))]


def contamination_document(checks: list[TaskCheck], summaries: dict[str, dict[str, Any]], index_path: str,
                           index_identity: str, bootstrap: int, seed: int) -> dict[str, Any]:
    """contamination.json: the rule and its normalization, every task's figures, the leaderboard columns."""
    from propme_metrics import __version__

    rule = checks[0].rule.to_dict() if checks else {}
    return {"format": FORMAT, "propme_version": __version__, "index": {"path": index_path, "identity": index_identity},
            "rule": rule, "normalization": NORMALIZATION, "confidence": CONFIDENCE, "bootstrap": bootstrap,
            "seed": seed, "tasks": summaries, "leaderboard": leaderboard_columns(summaries)}


def leaderboard_columns(summaries: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """`<task>_contaminated_share`, `<task>_<metric>_clean`, `<task>_<metric>_contaminated`."""
    cols: dict[str, float | None] = {}
    for task, s in summaries.items():
        cols[f"{task}_contaminated_share"] = s["share"]["value"]
        for metric, m in s["metrics"].items():
            cols[f"{task}_{metric}_clean"] = m["clean"]["value"]
            cols[f"{task}_{metric}_contaminated"] = m["contaminated"]["value"]
    return cols


def table_rows(summaries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per task and metric (one row without a metric for a task with none)."""
    rows = []
    for task, s in summaries.items():
        base = {"task": task, "items": s["items"], "contaminated": s["contaminated"], "share": s["share"]["value"],
                "share_low": s["share"]["low"], "share_high": s["share"]["high"]}
        if not s["metrics"]:
            rows.append(base)
        for metric, m in s["metrics"].items():
            row = dict(base, metric=metric)
            for part, col in PARTS:
                row[col], row[f"{col}_low"], row[f"{col}_high"] = m[part]["value"], m[part]["low"], m[part]["high"]
            rows.append(row)
    return rows


def _interval(row: dict[str, Any], col: str) -> str:
    """A metric part of a table row as `value [low, high]`; "-" in a task's row without a metric."""
    if "metric" not in row:
        return UNDEFINED.table
    return fmt_interval(row[col], row[f"{col}_low"], row[f"{col}_high"])


def markdown(doc: dict[str, Any]) -> str:
    """contamination.md: the rule, then one line per task and metric."""
    rule = doc["rule"]
    lines = ["# Contamination of the benchmark items", "",
             f"Index `{doc['index']['identity']}`. An item is contaminated when at least "
             f"{rule['min_coverage']:.0%} of the tokens of its {rule['field']} text lie in corpus spans of at "
             f"least {rule['k']} tokens; k-grams shared by more than {rule['boilerplate_share']:.0%} of a task's "
             f"items are boilerplate and left out. Intervals: {CONFIDENCE:.0%} (Wilson for shares and 0/1 "
             f"metrics, bootstrap otherwise and for the difference).", "",
             "| task | items | contaminated | share | metric | all | clean | contaminated | contaminated - clean |",
             "|---|---:|---:|---|---|---|---|---|---|"]
    for r in table_rows(doc["tasks"]):
        cells = [r["task"], r["items"], r["contaminated"], fmt_interval(r["share"], r["share_low"], r["share_high"]),
                 r.get("metric", UNDEFINED.table)]
        cells += [_interval(r, col) for _, col in PARTS]
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def contamination_lines(doc: dict[str, Any]) -> list[str]:
    """One line per task for the terminal: its contaminated share and each metric clean vs contaminated."""
    out = []
    for task, s in doc["tasks"].items():
        share = s["share"]
        line = (f"{task}: {s['contaminated']} of {s['items']} items contaminated "
                f"({fmt_interval(share['value'], share['low'], share['high'])})")
        for metric, m in s["metrics"].items():
            d = m["difference"]
            line += (f"; {metric} clean {fmt_value(m['clean']['value'])}, contaminated "
                     f"{fmt_value(m['contaminated']['value'])}, difference {fmt_interval(d['value'], d['low'], d['high'])}")
        out.append(line)
    return out


def curve_plot(doc: dict[str, Any], path: Path) -> Path:
    """contamination_curve.png: per task, the contaminated share and the clean score of its first
    metric against the coverage threshold, one line per k (the rule's point marked)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tasks = list(doc["tasks"].items())
    fig = Figure(figsize=(10, 3.2 * max(1, len(tasks))))
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(1, len(tasks)), 2, squeeze=False)
    rule = doc["rule"]
    for (task, s), (ax_share, ax_clean) in zip(tasks, axes):
        metric = next(iter(s["metrics"]), None)
        for k in sorted({p["k"] for p in s["curve"]}):
            points = [p for p in s["curve"] if p["k"] == k]
            xs = [p["min_coverage"] for p in points]
            style = "-" if k == rule["k"] else "--"
            ax_share.plot(xs, [p["share"] for p in points], style, marker="o", label=f"k = {k}")
            if metric is not None:
                ys = [float("nan") if p["clean"].get(metric) is None else p["clean"][metric] for p in points]
                ax_clean.plot(xs, ys, style, marker="o", label=f"k = {k}")
        ax_share.axvline(rule["min_coverage"], color="grey", lw=0.8)
        ax_share.set(title=f"{task}: contaminated share", xlabel="coverage threshold", ylabel="share", ylim=(-0.02, 1.02))
        ax_share.legend(fontsize=7)
        if metric is None:
            ax_clean.set_axis_off()
            ax_clean.text(0.5, 0.5, "no per-sample metric (no model run)", ha="center", va="center")
        else:
            ax_clean.axvline(rule["min_coverage"], color="grey", lw=0.8)
            ax_clean.set(title=f"{task}: {metric} on clean items", xlabel="coverage threshold", ylabel=metric)
            ax_clean.legend(fontsize=7)
    fig.tight_layout()
    with atomic_output(path, "wb") as fh:
        fig.savefig(fh, format="png")
    return path


def check_and_write(index: Index, per_task: list, rule: ContaminationRule, workers: int, bootstrap: int, seed: int,
                    quiet: bool, out: Path, search=None) -> tuple:
    """Match every task's items, apply the rule, summarize and write the outputs into `out`:
    (contamination.json's document, the task checks, the files written, seconds spent matching).
    `search`: another search path than the index's own (its shards on Ray: `CorpusMatcher`)."""
    from propme_metrics.contamination.check import apply_rule, match_items
    from propme_metrics.contamination.match import CorpusMatcher
    from propme_metrics.contamination.summary import task_summary
    from propme_metrics.core.progress import progress_bar, rate

    matcher = CorpusMatcher(index, workers=workers, search=search)
    total = sum(len(items) for _, items in per_task)
    started = time.time()
    checks = []
    with progress_bar(not quiet) as bar:
        job = bar.add_task("matching items", total=total, rate="")

        def advance(n: int) -> None:
            bar.update(job, advance=n, rate=rate(bar.tasks[job].completed + n, time.time() - started, "items"))

        for name, items in per_task:
            checks.append(apply_rule(name, match_items(items, matcher, advance), rule))
    seconds = time.time() - started
    summaries = {c.task: task_summary(c, bootstrap, seed) for c in checks}
    doc = contamination_document(checks, summaries, str(index.path), index.manifest.identity, bootstrap, seed)
    return doc, checks, write_outputs(out, doc, checks), seconds


def write_outputs(out: Path, doc: dict[str, Any], checks: list[TaskCheck]) -> list[Path]:
    """Every output file of `propme contamination` into `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in ("contamination.json", "contamination_items.jsonl", "contamination.csv",
                                           "contamination.md", "contamination_leaderboard.csv",
                                           "contamination_curve.png")}
    write_atomic(paths["contamination.json"], json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    with atomic_output(paths["contamination_items.jsonl"]) as fh:
        for check in checks:
            for r in check.items:
                fh.write(json_line(r.to_dict(check.rule)))
    write_csv(paths["contamination.csv"], TABLE_COLUMNS, table_rows(doc["tasks"]))
    write_atomic(paths["contamination.md"], markdown(doc))
    board = doc["leaderboard"]
    write_csv(paths["contamination_leaderboard.csv"], list(board), [board])
    curve_plot(doc, paths["contamination_curve.png"])
    return list(paths.values())


def html_section(doc: dict[str, Any], checks: list[TaskCheck], max_items: int = 20) -> str:
    """The contamination section of report.html: the table, then each task's flagged items with
    the spans found in the corpus highlighted and the source document named."""
    parts = ["<section id='contamination'><h2>Contamination of the benchmark items</h2>",
             f"<p>{html.escape(contamination_note(doc))}</p>", "<table><tr><th>task</th><th>items</th>"
             "<th>contaminated</th><th>metric</th><th>clean</th><th>contaminated</th><th>difference</th></tr>"]
    for r in table_rows(doc["tasks"]):
        cells = [r["task"], r["items"], f"{r['contaminated']} ({fmt_interval(r['share'], r['share_low'], r['share_high'])})",
                 r.get("metric", UNDEFINED.table)]
        cells += [_interval(r, col) for _, col in PARTS[1:]]
        parts.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    for check in checks:
        flagged = [r for r in check.items if r.contaminated]
        if not flagged:
            continue
        parts.append(f"<h3>{html.escape(check.task)}: flagged items</h3><ol>")
        for r in flagged[:max_items]:
            m, cov = r.matches[check.rule.field], r.coverage[check.rule.field]
            parts.append(f"<li><p>doc {r.item.doc_id}, coverage {fmt_value(cov.value)}, longest match {m.longest} "
                         f"tokens ({m.count} in the corpus), source {html.escape(str(m.source_id))}"
                         + (f" ({html.escape(m.source)})" if m.source else "") + "</p>"
                         f"<p class='item'>{_highlighted(m.text, [(m.offsets[a][0], m.offsets[b - 1][1]) for a, b in cov.spans()])}</p>"
                         f"<p class='source'>source: {html.escape(m.context)}</p></li>")
        if len(flagged) > max_items:
            parts.append(f"<li>... {len(flagged) - max_items} more in contamination_items.jsonl</li>")
        parts.append("</ol>")
    parts.append("</section>")
    return "\n".join(parts)


def contamination_note(doc: dict[str, Any]) -> str:
    rule = doc["rule"]
    return (f"Against index {doc['index']['identity']}: an item is contaminated when at least {rule['min_coverage']:.0%} "
            f"of its {rule['field']} text's tokens lie in corpus spans of at least {rule['k']} tokens (boilerplate "
            f"shared by more than {rule['boilerplate_share']:.0%} of a task's items left out); {NORMALIZATION}.")


def _highlighted(text: str, ranges: list[tuple[int, int]]) -> str:
    """`text` escaped, with the character ranges wrapped in <mark>."""
    out, pos = [], 0
    for a, b in ranges:
        out.append(html.escape(text[pos:a]))
        out.append(f"<mark>{html.escape(text[a:b])}</mark>")
        pos = b
    out.append(html.escape(text[pos:]))
    return "".join(out)
