"""The contamination check laid out (`contamination.assess.ContaminationResult`): contamination.json,
contamination_items.jsonl, the CSV and Markdown tables, the leaderboard columns, the threshold plot,
the terminal lines and the section of report.html (flagged items with their matched spans
highlighted; a span opens report.html's source panel with the corpus documents that hold it)."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from propme_metrics.contamination.assess import ContaminationResult
from propme_metrics.contamination.sources import FlaggedItem
from propme_metrics.contamination.summary import TaskSummary
from propme_metrics.core.files import atomic_output, write_atomic
from propme_metrics.core.jsonl import json_line
from propme_metrics.core.outputs import write_staged
from propme_metrics.metrics.pm import Interval
from propme_metrics.metrics.registry import UNDEFINED
from propme_metrics.report.cells import fmt_interval, fmt_value, md_cell
from propme_metrics.report.defaults import HTML_DOCS_PER_SPAN, HTML_SNIPPET_CHARS
from propme_metrics.report.writers import write_csv

FORMAT = "propme-contamination/1"
NORMALIZATION = ("texts are normalized before matching as the tracer's normalized match does: Unicode NFKC, "
                 "CRLF and CR to LF, runs of spaces and tabs to one space, no spaces around a newline, at most "
                 "one blank line, stripped; the corpus is matched as indexed")
#: the metric's parts in the tables: its value on all, clean and contaminated items, and the difference
PARTS = (("all", "metric_all"), ("clean", "metric_clean"), ("contaminated", "metric_contaminated"),
         ("difference", "difference"))
TABLE_COLUMNS = ["task", "items", "contaminated", "share", "share_low", "share_high", "model", "metric",
                 *(f"{col}{end}" for _, col in PARTS for end in ("", "_low", "_high"))]


def contamination_document(result: ContaminationResult) -> dict[str, Any]:
    """contamination.json: the rule and its normalization, every task's figures, the leaderboard columns."""
    from propme_metrics.version import __version__

    return {"format": FORMAT, "propme_version": __version__,
            "index": {"path": result.index_path, "identity": result.index_identity}, "rule": result.rule.to_dict(),
            "normalization": NORMALIZATION, "confidence": result.intervals.confidence,
            "bootstrap": result.intervals.resamples, "seed": result.intervals.seed, "tasks": {task: s.to_dict() for task, s in result.summaries.items()},
            "leaderboard": leaderboard_columns(result.summaries)}


def leaderboard_columns(summaries: dict[str, TaskSummary]) -> list[dict[str, Any]]:
    """One row per model: `model`, then for each task it ran `<task>_contaminated_share` (the
    task's), `<task>_<metric>_clean` and `<task>_<metric>_contaminated` (the model's); one row
    with no model and the shares alone when no model ran the tasks."""
    rows: dict[str | None, dict[str, Any]] = {}
    for task, s in summaries.items():
        for model in s.models or [None]:
            row = rows.setdefault(model, {"model": model})
            row[f"{task}_contaminated_share"] = s.share.estimate
            for metric, m in s.models.get(model, {}).items():
                row[f"{task}_{metric}_clean"] = m.clean.estimate
                row[f"{task}_{metric}_contaminated"] = m.contaminated.estimate
    return list(rows.values())


def table_rows(summaries: dict[str, TaskSummary]) -> list[dict[str, Any]]:
    """One row per task, model and metric (one row without a metric for a task no model ran)."""
    rows = []
    for task, s in summaries.items():
        base = {"task": task, "items": s.items, "contaminated": s.contaminated, "share": s.share.estimate,
                "share_low": s.share.low, "share_high": s.share.high}
        if not any(s.models.values()):
            rows.append(base)
        for model, metrics in s.models.items():
            for metric, m in metrics.items():
                row = dict(base, model=model, metric=metric)
                for part, col in PARTS:
                    e: Interval = getattr(m, part)
                    row[col], row[f"{col}_low"], row[f"{col}_high"] = e.estimate, e.low, e.high
                rows.append(row)
    return rows


def _interval(row: dict[str, Any], col: str) -> str:
    """A metric part of a table row as `value [low, high]`; "-" in a task's row without a metric."""
    if "metric" not in row:
        return UNDEFINED.table
    return fmt_interval(row[col], row[f"{col}_low"], row[f"{col}_high"])


def _shown(e: Interval) -> str:
    return fmt_interval(e.estimate, e.low, e.high)


def markdown(result: ContaminationResult) -> str:
    """contamination.md: the rule, then one line per task and metric."""
    rule = result.rule
    lines = ["# Contamination of the benchmark items", "",
             f"Index `{result.index_identity}`. An item is contaminated when at least "
             f"{rule.min_coverage:.0%} of the tokens of its {rule.field} text lie in corpus spans of at "
             f"least {rule.k} tokens; {boilerplate_rule(rule)}. Intervals: {result.intervals.percent} (Wilson for shares and 0/1 "
             f"metrics, bootstrap otherwise and for the difference).", "",
             "| task | items | contaminated | share | model | metric | all | clean | contaminated | "
             "contaminated - clean |", "|---|---:|---:|---|---|---|---|---|---|---|"]
    for r in table_rows(result.summaries):
        cells = [r["task"], r["items"], r["contaminated"], fmt_interval(r["share"], r["share_low"], r["share_high"]),
                 r.get("model", UNDEFINED.table), r.get("metric", UNDEFINED.table)]
        cells += [_interval(r, col) for _, col in PARTS]
        lines.append("| " + " | ".join(md_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def contamination_lines(result: ContaminationResult) -> list[str]:
    """One line per task for the terminal: its contaminated share, then each model's metrics clean
    vs contaminated."""
    out = []
    for task, s in result.summaries.items():
        line = f"{task}: {s.contaminated} of {s.items} items contaminated ({_shown(s.share)})"
        for model, metrics in s.models.items():
            line += f"; {model}:" + ",".join(
                f" {metric} clean {fmt_value(m.clean.estimate)}, contaminated {fmt_value(m.contaminated.estimate)}, "
                f"difference {_shown(m.difference)}" for metric, m in metrics.items())
        out.append(line)
    return out


def curve_plot(result: ContaminationResult, path: Path) -> Path:
    """contamination_curve.png: per task, the contaminated share and each model's clean score of
    its first metric against the coverage threshold, one line per k (and model; the rule's point marked)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from propme_metrics.report.figures import plain

    tasks = list(result.summaries.items())
    fig = Figure(figsize=(10, 3.2 * max(1, len(tasks))))
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(1, len(tasks)), 2, squeeze=False)
    rule = result.rule
    for (task, s), (ax_share, ax_clean) in zip(tasks, axes):
        shown = [(model, next(iter(metrics))) for model, metrics in s.models.items() if metrics]
        metric = shown[0][1] if shown else None
        for k in sorted({p.k for p in s.curve}):
            points = [p for p in s.curve if p.k == k]
            xs = [p.min_coverage for p in points]
            style = "-" if k == rule.k else "--"
            ax_share.plot(xs, [p.share for p in points], style, marker="o", label=f"k = {k}")
            for model, name in shown:
                ys = [float("nan") if p.clean[model].get(name) is None else p.clean[model][name] for p in points]
                label = f"k = {k}" if len(shown) == 1 else f"{plain(model)}, {name}, k = {k}"
                ax_clean.plot(xs, ys, style, marker="o", label=label)
        ax_share.axvline(rule.min_coverage, color="grey", lw=0.8)
        ax_share.set(title=f"{task}: contaminated share", xlabel="coverage threshold", ylabel="share", ylim=(-0.02, 1.02))
        ax_share.legend(fontsize=7)
        if metric is None:
            ax_clean.set_axis_off()
            ax_clean.text(0.5, 0.5, "no per-sample metric (no model run)", ha="center", va="center")
        else:
            ax_clean.axvline(rule.min_coverage, color="grey", lw=0.8)
            title = f"{task}: {metric} of {plain(shown[0][0])} on clean items" if len(shown) == 1 else \
                f"{task}: each model's score on clean items"
            ax_clean.set(title=title, xlabel="coverage threshold", ylabel=metric if len(shown) == 1 else "score")
            ax_clean.legend(fontsize=7)
    fig.tight_layout()
    with atomic_output(path, "wb") as fh:
        fig.savefig(fh, format="png")
    return path


#: the folder inside --out the files are written into before they are moved into place
STAGING_NAME = ".propme-contamination-staging"
OUTPUT_NAMES = ("contamination.json", "contamination_items.jsonl", "contamination.csv", "contamination.md",
                "contamination_leaderboard.csv", "contamination_curve.png")


def _write_file(name: str, path: Path, result: ContaminationResult, doc: dict[str, Any]) -> None:
    """Write the output file `name` of the check to `path`."""
    if name == "contamination.json":
        write_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    elif name == "contamination_items.jsonl":
        with atomic_output(path) as fh:
            for check in result.checks:
                for r in check.items:
                    fh.write(json_line(r.to_dict(check.rule)))
    elif name == "contamination.csv":
        write_csv(path, TABLE_COLUMNS, table_rows(result.summaries))
    elif name == "contamination.md":
        write_atomic(path, markdown(result))
    elif name == "contamination_leaderboard.csv":
        board = doc["leaderboard"]
        write_csv(path, list(dict.fromkeys(c for row in board for c in row)), board)
    else:
        curve_plot(result, path)


def write_outputs(out: Path, result: ContaminationResult) -> list[Path]:
    """Every output file of `propme contamination` into `out`, all at once (`core.outputs.write_staged`,
    as the report's files are), so a check that cannot write one (a full disk) leaves the earlier
    outputs as they were, never some of each; returns their paths. ConfigError names the file that
    could not be written."""
    from propme_metrics.core.errors import ConfigError

    doc = contamination_document(result)

    def write(stage: Path) -> list[Path]:
        for name in OUTPUT_NAMES:
            try:
                _write_file(name, stage / name, result, doc)
            except OSError as exc:
                raise ConfigError(f"cannot write {out / name}: {exc}; the files already in {out} were left as "
                                  "they were", "free space or choose another --out, then run it again") from None
        return [stage / name for name in OUTPUT_NAMES]

    return write_staged(out, STAGING_NAME, write, "output folder")


#: the id of the JSON block holding the flagged items' spans (report.js reads `propme-data-<block>`)
DATA_BLOCK = "contamination"


def html_section(result: ContaminationResult, docs_per_span: int = HTML_DOCS_PER_SPAN,
                 snippet_chars: int = HTML_SNIPPET_CHARS, show_pii: bool = False) -> str:
    """The contamination section of report.html: the table, then each task's flagged items with the
    spans found in the corpus highlighted. Each span is a `.seg` mark of report.html's generations
    section: clicking it opens the same source panel (report.js) on the documents that hold it,
    carried in a JSON block of the same form as the generations' (`html.doc_json`, `script_json`);
    personal data in their snippets is masked unless `show_pii`."""
    from propme_metrics.report.html import doc_json, script_json

    parts = ["<section id='contamination'><h2>Contamination of the benchmark items</h2>",
             f"<p>{html.escape(contamination_note(result))}</p>", "<table><tr><th>task</th><th>items</th>"
             "<th>contaminated</th><th>model</th><th>metric</th><th>clean</th><th>contaminated</th><th>difference</th>"
             "</tr>"]
    for r in table_rows(result.summaries):
        cells = [r["task"], r["items"], f"{r['contaminated']} ({fmt_interval(r['share'], r['share_low'], r['share_high'])})",
                 r.get("model", UNDEFINED.table), r.get("metric", UNDEFINED.table)]
        cells += [_interval(r, col) for _, col in PARTS[1:]]
        parts.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    if any(result.flagged.values()):
        parts.append("<p class='legend'>Highlighted: the spans of each item that corpus spans of at least "
                     f"{result.rule.k} tokens cover. Click a span for the corpus documents holding its longest "
                     "part.</p>")
    block: dict[str, Any] = {}
    for check in result.checks:
        flagged = result.flagged.get(check.task, [])
        if not flagged:
            continue
        parts.append(f"<h3>{html.escape(check.task)}: flagged items</h3><ol>")
        for item in flagged:
            parts.append(_flagged_item(item, check.task, check.rule.field, block, docs_per_span, snippet_chars,
                                       show_pii, doc_json))
        more = check.contaminated - len(flagged)
        if more > 0:
            parts.append(f"<li>... {more} more in contamination_items.jsonl</li>")
        parts.append("</ol>")
    if block:  # script_json leaves no '<', '>' or '&' in the text: it cannot end the <script> element
        parts.append(f"<script type='application/json' id='propme-data-{DATA_BLOCK}'>{script_json(block)}</script>")
    parts.append("</section>")
    return "\n".join(parts)


def _flagged_item(item: FlaggedItem, task: str, field: str, block: dict[str, Any], docs_per_span: int,
                  snippet_chars: int, show_pii: bool, doc_json) -> str:
    """One flagged item: its figures, then its text with each covered span a clickable mark whose
    documents go into `block`."""
    r = item.result
    m, cov = r.matches[field], r.coverage[field]
    gid = str(len(block))
    title = f"{task} · doc {r.item.doc_id}"
    block[gid] = {"title": title, "spans": [
        {"label": f"span found in the corpus ({s.count} occurrence(s))", "text": s.text, "start": s.match[0],
         "end": s.match[1], "n_docs": len(s.documents), "docs": [doc_json(d.traced(), snippet_chars, None if show_pii else ())
                                     for d in s.documents[:max(1, docs_per_span)]]}
        for s in item.spans]}
    out, pos = [], 0
    for k, s in enumerate(item.spans):
        a, b = s.chars
        tip = (f"covered span, its longest corpus match {s.match[1] - s.match[0]} tokens, {s.count} occurrence(s); "
               "click for sources")
        out.append(html.escape(m.text[pos:a]))
        out.append(f"<mark class='seg c-full' tabindex='0' role='button' data-b='{DATA_BLOCK}' data-g='{gid}' "
                   f"data-s='{k}' title='{html.escape(tip, quote=True)}'>{html.escape(m.text[a:b])}</mark>")
        pos = b
    out.append(html.escape(m.text[pos:]))
    source = html.escape(str(m.source_id)) + (f" ({html.escape(m.source)})" if m.source else "")
    return (f"<li><p>doc {r.item.doc_id}, coverage {fmt_value(cov.value)}, longest match {m.longest} tokens "
            f"({m.count} in the corpus), source {source}</p><p class='item'>{''.join(out)}</p></li>")


def contamination_note(result: ContaminationResult) -> str:
    rule = result.rule
    return (f"Against index {result.index_identity}: an item is contaminated when at least {rule.min_coverage:.0%} "
            f"of its {rule.field} text's tokens lie in corpus spans of at least {rule.k} tokens; "
            f"{boilerplate_rule(rule)}; {NORMALIZATION}.")


def boilerplate_rule(rule) -> str:
    """The boilerplate part of the rule in words."""
    return (f"k-grams shared by more than {rule.boilerplate_share:.0%} of a task's items are boilerplate, left out, "
            f"when the corpus holds them {rule.boilerplate_min_count} or more times, or lacks them and they stand at "
            "a fixed position in every item (a template); shared text the corpus holds fewer times counts")
