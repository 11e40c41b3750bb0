"""How the likelihood subtask's results (`metrics.extraction_curve`) are shown: the leaderboard's
`prefix_likelihood` columns, leaderboard.json's `likelihood`, a Markdown section and
`likelihood_<corpus>.png` (the (n, p) curve per model beside its prefix FMR)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from propme_metrics.metrics import registry
from propme_metrics.metrics.extraction_curve import LikelihoodResult
from propme_metrics.metrics.pm import DEFAULT_INTERVALS, Interval, IntervalSpec
from propme_metrics.metrics.registry import UNDEFINED
from propme_metrics.prompts.settings import LIKELIHOOD_SETTING
from propme_metrics.report.cells import fmt_interval, slug
from propme_metrics.report.figures import model_label, plain, save

#: the leaderboard's setting name of the likelihood subtask's columns
SETTING = LIKELIHOOD_SETTING


def columns(results: Sequence[LikelihoodResult]) -> list[str]:
    """The leaderboard's likelihood columns, per corpus label in order of first appearance."""
    cols: list[str] = []
    for label in dict.fromkeys(r.label for r in results):
        p = f"propme_{label}"
        cols.append(f"{p}_n_{SETTING}")
        for m in registry.LIKELIHOOD_LEADERBOARD:
            cols += [f"{p}_{SETTING}_{m}", f"{p}_{SETTING}_{m}_low", f"{p}_{SETTING}_{m}_high"]
    return cols


def row_values(res: LikelihoodResult) -> dict[str, Any]:
    p = f"propme_{res.label}"
    out: dict[str, Any] = {f"{p}_n_{SETTING}": res.n_documents}
    for m in registry.LIKELIHOOD_LEADERBOARD:
        e = res.metrics[m]
        out[f"{p}_{SETTING}_{m}"], out[f"{p}_{SETTING}_{m}_low"], out[f"{p}_{SETTING}_{m}_high"] = \
            e.estimate, e.low, e.high
    return out


def column_docs(intervals: IntervalSpec = DEFAULT_INTERVALS) -> list[tuple[str, str]]:
    """The likelihood columns' patterns and meaning (for the leaderboard's documentation)."""
    docs = [(f"propme_<corpus>_n_{SETTING}", "prefix documents scored by likelihood")]
    for m in registry.LIKELIHOOD_LEADERBOARD:
        spec = registry.metric(m)
        docs += [(f"propme_<corpus>_{SETTING}_{m}", spec.description),
                 (f"propme_<corpus>_{SETTING}_{m}_low",
                  f"lower end of its {intervals.percent} Wilson interval over documents (a share)"),
                 (f"propme_<corpus>_{SETTING}_{m}_high",
                  f"upper end of its {intervals.percent} Wilson interval over documents (a share)")]
    return docs


def curve_json(res: LikelihoodResult) -> dict[str, Any]:
    """The curve and metrics of one result, for leaderboard.json."""
    return {"corpus": res.label, "model": res.model, "revision": res.revision, "documents": res.n_documents,
            "p": res.p, "curve": [{"n": n, "share": e.estimate, "low": e.low, "high": e.high} for n, e in res.curve.items()],
            "metrics": {k: _value_and_ends(e) for k, e in res.metrics.items()},
            "prefix_fmr": None if res.prefix_fmr is None else _value_and_ends(res.prefix_fmr)}


def _value_and_ends(e: Interval) -> dict[str, Any]:
    return {"value": e.estimate, "low": e.low, "high": e.high}


def _fmt(e: Interval | None) -> str:
    return UNDEFINED.table if e is None else fmt_interval(e.estimate, e.low, e.high)


def markdown_lines(results: Sequence[LikelihoodResult], cell=str) -> list[str]:
    """A Markdown section: per corpus, the (n, p) curve of every model next to its prefix FMR."""
    lines: list[str] = []
    for label in dict.fromkeys(r.label for r in results):
        rs = [r for r in results if r.label == label]
        grid = sorted({n for r in rs for n in r.curve})
        lines += [f"## {cell(label)}: probabilistic extraction ({SETTING})", "",
                  "Share of prefix documents (n, p)-discoverable, 1 - (1 - P(z))^n >= p, sampling at temperature 1 "
                  "without top-p; greedy extraction and the prefix FMR on the same documents beside it.", "",
                  "| model | revision | documents | p | " + " | ".join(f"n={n:,}" for n in grid)
                  + " | greedy extraction | median log10 P(z) | prefix FMR |",
                  "|---|---|---|---|" + "---|" * (len(grid) + 3)]
        for r in rs:
            cells = [_fmt(r.curve.get(n)) for n in grid]
            lines.append(f"| {cell(r.model)} | {cell(r.revision or '-')} | {r.n_documents} | {r.p:g} | "
                         + " | ".join(cells) + f" | {_fmt(r.metrics['greedy_extraction'])} | "
                         f"{_fmt(r.metrics['log10_p_median'])} | {_fmt(r.prefix_fmr)} |")
        lines.append("")
    return lines


def curve_plot(results: Sequence[LikelihoodResult], label: str, path: Path) -> Path | None:
    """The (n, p) curve per model (share against n, log axis), each with its prefix FMR as a dotted line."""
    rs = [r for r in results if r.label == label]
    if not rs:
        return None
    fig = Figure(figsize=(7.2, 4.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for i, r in enumerate(rs):
        colour = f"C{i % 10}"
        ns = list(r.curve)
        vals = [r.curve[n].estimate for n in ns]
        name = model_label(r.model, r.revision)
        ax.plot(ns, vals, marker="o", color=colour, label=f"{name} (p = {r.p:g})")
        if all(r.curve[n].low is not None for n in ns):
            ax.fill_between(ns, [r.curve[n].low for n in ns], [r.curve[n].high for n in ns], color=colour, alpha=0.15)
        if r.prefix_fmr is not None and not math.isnan(r.prefix_fmr.estimate):
            ax.axhline(r.prefix_fmr.estimate, color=colour, linestyle=":", label=f"{name}: prefix FMR (greedy)")
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("samples n (log scale)")
    ax.set_ylabel("share of documents (n, p)-discoverable")
    ax.set_title(f"{plain(label)}: probabilistic extraction of prefix documents", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.subplots_adjust(right=0.62, bottom=0.13)
    save(fig, path)
    return path


def write_plots(results: Sequence[LikelihoodResult], out: Path) -> list[Path]:
    """`likelihood_<corpus>.png` for every corpus label with a likelihood result."""
    written = []
    for label in dict.fromkeys(r.label for r in results):
        p = curve_plot(results, label, out / f"likelihood_{slug(label)}.png")
        if p:
            written.append(p)
    return written
