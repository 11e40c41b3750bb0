"""The terminal summary of a report: rich tables of PM and base metrics."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from propme_metrics.core.progress import terminal
from propme_metrics.metrics import registry
from propme_metrics.metrics.pm import percent
from propme_metrics.report.cells import Shown, mark_legend, pm_text, shown, withheld_notes
from propme_metrics.report.contents import Report
from propme_metrics.report.provenance_views import print_leaks
from propme_metrics.report.writers import comparison_cells, comparison_heads, not_compared, shown_comparisons

if TYPE_CHECKING:  # pragma: no cover
    from propme_metrics.report.folder import ReportFiles


def _lines(cell: Shown) -> str:
    """The value, its interval dimmed on a second line."""
    return cell.text if cell.ends is None else f"{cell.text}\n[dim][{cell.ends[0]}, {cell.ends[1]}][/]"


def _cell(value: float | None, low: float | None, high: float | None, metric: str = "") -> str:
    return _lines(shown(value, low, high, metric))


def _model(r) -> Text:
    """The model cell: its name (and revision) printed as written, never read as markup."""
    return Text.assemble(r.model, *([("\n@ " + r.revision, "bold")] if r.revision else []))


def print_summary(report: Report, files: ReportFiles | None = None, console=None) -> None:
    """Rich tables per corpus: PM with intervals per model and setting, then the base metrics, the
    comparisons, leaks, problems and notes, and the files written (`files`, when given)."""
    # a log or pipe gets the full table, not 80 columns
    console = console or terminal(width=None if sys.stdout.isatty() else 160)
    for label in report.labels:
        results = [r for r in report.results if r.label == label]
        idents = ", ".join(sorted({str(r.index_identity) for r in results}))
        if any(r.pm for r in results):
            table = Table(title=Text(f"PM on {label} (index {idents}); {report.intervals.percent} intervals "
                                     f"(docs/method.md), B={report.intervals.resamples:,}"), show_lines=True)
            table.add_column("model", overflow="fold", min_width=20, max_width=34)
            table.add_column("setting\nvs prefix")
            for m in report.pm_metrics:
                table.add_column(f"PM {registry.LABELS[m]}", justify="right")
            for r in results:
                name = _model(r)
                if not r.pm:
                    table.add_row(name, "-", *["[yellow]no prefix[/]"] * len(report.pm_metrics))
                for i, s in enumerate(r.propensity_settings if r.pm else []):
                    ivs = [r.pm[(m, s)] for m in report.pm_metrics]
                    cells = [_lines(pm_text(iv)) for iv in ivs]
                    table.add_row(name if i == 0 else "", Text(s), *cells)
            console.print(table)
            console.print(Text(mark_legend(), style="dim"), highlight=False)
            for note in withheld_notes(results):
                console.print(Text(f"withheld: {note}", style="dim"), highlight=False)
        base = Table(title=Text(f"Base metrics on {label}"), show_lines=True)
        base.add_column("model", overflow="fold", min_width=20, max_width=34)
        base.add_column("setting")
        base.add_column("prompts", justify="right")
        for m in registry.VIEWS["console"]:
            base.add_column(registry.LABELS[m], justify="right")
        for r in results:
            name = _model(r)
            for i, (s, sr) in enumerate(r.settings.items()):
                cells = [_cell(sr.metrics[m].estimate, sr.metrics[m].low, sr.metrics[m].high, m)
                         for m in registry.VIEWS["console"]]
                base.add_row(name if i == 0 else "", Text(s), str(sr.counts["prompts"]), *cells)
        console.print(base)
    print_comparisons(report.comparisons, console)
    print_leaks(report, console)
    for p in report.problems:
        console.print(Text.assemble(("problem:", "bold yellow"), " ", p), highlight=False)
    for n in report.notes:
        console.print(Text(f"note: {n}", style="dim"), highlight=False)
    if files is not None and files.paths:
        console.print(Text(f"wrote {', '.join(p.name for p in files.paths)} to {files.out}"), highlight=False)


def print_comparisons(comparisons, console) -> None:
    """The headline comparisons (`writers.shown_comparisons`) as a rich table, then the pairs refused."""
    if comparisons is None:
        return
    shown = shown_comparisons(comparisons)
    if shown:
        table = Table(title=Text(f"Paired comparisons (A - B, {percent(comparisons.confidence)} paired bootstrap; "
                                 "every metric in comparisons.csv)"))
        for h in comparison_heads(comparisons):
            table.add_column(h, overflow="fold", justify="left" if h.startswith("model") else "right")
        for r in shown:
            cells = comparison_cells(r)
            table.add_row(*map(Text, cells), style="bold" if r.significant else None)
        console.print(table)
    for why in not_compared(comparisons.rows):
        console.print(Text(f"not compared: {why}", style="yellow"), highlight=False)
    for why in comparisons.refused:
        console.print(Text(f"not paired: {why}", style="yellow"), highlight=False)
