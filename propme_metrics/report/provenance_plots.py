"""PNG plots of the leak analysis (`metrics/provenance_analysis.py`), one pair per corpus label.

- `sources_<corpus>.png`: per model, the most leaking sources (rows) and their full-match
  enrichment per setting (bars with the report's bootstrap intervals, log scale), the line at 1 where a source
  leaks in proportion to its share of the corpus tokens.
- `duplication_<corpus>.png`: left, each setting's full matches spread over the corpus-count
  buckets of their text; right, the prefix extraction rate by how often the true continuation
  occurs in the corpus, with Wilson intervals, per model.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from propme_metrics.metrics.provenance import BUCKET_LABELS, UNKNOWN_BUCKET
from propme_metrics.prompts.settings import PREFIX, setting_sort_key
from propme_metrics.report.cells import slug
from propme_metrics.report.contents import Report
from propme_metrics.report.figures import error_bar, plain, row_label, save

#: sources shown per model in the sources plot
PLOTTED_SOURCES = 8


def sources_plot(report: Report, label: str, path: Path) -> Path | None:
    """Full-match enrichment of the top sources per setting; None when nothing has an enrichment."""
    results = [r for r in report.results if r.label == label and r.leaks is not None]
    panels = []
    for r in results:
        best: dict[str, float] = {}
        for sl in r.leaks.settings.values():
            for s in sl.sources:
                if s.enrichment_full is not None and s.enrichment_full.estimate > 0:
                    best[s.source] = max(best.get(s.source, 0.0), s.enrichment_full.estimate)
        if best:
            top = sorted(best, key=lambda k: (-best[k], k))[:PLOTTED_SOURCES]
            panels.append((r, top))
    if not panels:
        return None
    height = max(3.2, 0.5 * max(len(top) for _, top in panels) * 1.6 + 1.6)
    fig = Figure(figsize=(6.4 * len(panels), height), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (r, top) in zip(axes, panels):
        settings = sorted((s for s, sl in r.leaks.settings.items() if sl.full_matches), key=setting_sort_key)
        width = 0.8 / max(1, len(settings))
        for k, s in enumerate(settings):
            by_name = {x.source: x for x in r.leaks.settings[s].sources}
            ys, xs, lo, hi = [], [], [], []
            for i, name in enumerate(top):
                iv = by_name[name].enrichment_full if name in by_name else None
                if iv is None or not iv.estimate > 0:
                    continue
                ys.append(i + (k - (len(settings) - 1) / 2) * width)
                xs.append(iv.estimate)
                below, above = error_bar(iv.estimate, iv.low, iv.high, positive=True)
                lo.append(below)
                hi.append(above)
            ax.barh(ys, xs, height=width, xerr=[lo, hi], capsize=2, color=f"C{k % 10}", label=s, log=True)
        ax.axvline(1.0, color="0.45", ls="--", lw=1)
        ax.set_yticks(range(len(top)))
        ax.set_yticklabels([plain(t if len(t) <= 28 else t[:25] + "...") for t in top], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("full-match enrichment: share of full matches / share of corpus tokens (log)")
        ax.set_title(row_label(r), fontsize=9)
        ax.grid(alpha=0.3, axis="x")
        ax.legend(fontsize=8, frameon=False)
    fig.suptitle(f"PropMe on {plain(label)}: which sources leak ({report.intervals.percent} bootstrap intervals; "
                 "1 = in proportion)")
    fig.subplots_adjust(left=0.2 if len(panels) == 1 else 0.12, top=0.85, bottom=0.16, wspace=0.5)
    save(fig, path)
    return path


def duplication_plot(report: Report, label: str, path: Path) -> Path | None:
    """Full matches by corpus count per setting, and prefix extraction by continuation count."""
    results = [r for r in report.results if r.label == label and r.leaks is not None]
    if not any(sl.full_matches or sl.extraction for r in results for sl in r.leaks.settings.values()):
        return None
    fig = Figure(figsize=(12, 4.6), dpi=100)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    present = {x.bucket for r in results for sl in r.leaks.settings.values() for x in (*sl.buckets, *sl.extraction)}
    buckets = [b for b in BUCKET_LABELS if b != UNKNOWN_BUCKET or b in present]
    series = [(r, s, sl) for r in results for s, sl in r.leaks.settings.items() if sl.full_matches]
    width = 0.8 / max(1, len(series))
    for k, (r, s, sl) in enumerate(series):
        share = {b.bucket: b.full_share or 0.0 for b in sl.buckets}
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(buckets))]
        name = s if len(results) == 1 else f"{row_label(r)} - {s}"
        left.bar(xs, [share.get(b, 0.0) for b in buckets], width=width, color=f"C{k % 10}", label=name)
    left.set_xticks(range(len(buckets)))
    left.set_xticklabels(buckets)
    left.set_xlabel("occurrences of the full match's text in the corpus")
    left.set_ylabel("share of the setting's full matches")
    left.set_ylim(0, 1.05)
    left.set_title("full matches by duplication", fontsize=10)
    left.grid(alpha=0.3, axis="y")
    if series:
        left.legend(fontsize=8, frameon=False)
    drawn = False
    for k, r in enumerate(results):
        sl = r.leaks.settings.get(PREFIX)
        points = [(i, e) for i, b in enumerate(buckets) for e in (sl.extraction if sl else []) if e.bucket == b
                  and e.generations]
        if not points:
            continue
        drawn = True
        xs = [i for i, _ in points]
        ys = [e.rate for _, e in points]
        bars = [error_bar(e.rate, e.low, e.high) for _, e in points]
        err = [[b for b, _ in bars], [a for _, a in bars]]
        right.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=f"C{k % 10}", label=row_label(r))
        for (i, e) in points:
            right.annotate(f"n={e.generations}", (i, e.rate), textcoords="offset points", xytext=(6, -10), fontsize=7)
    right.set_xticks(range(len(buckets)))
    right.set_xticklabels(buckets)
    right.set_xlim(-0.5, len(buckets) - 0.5)
    right.set_ylim(-0.02, 1.05)
    right.set_xlabel("occurrences of the prompt's true continuation in the corpus")
    right.set_ylabel("extraction rate (prefix)")
    right.set_title(f"prefix extraction by duplication (Wilson {report.intervals.percent})", fontsize=10)
    right.grid(alpha=0.3)
    if drawn:
        right.legend(fontsize=8, frameon=False)
    else:
        right.text(0.5, 0.5, "no prefix setting, or its index cannot be read", ha="center", va="center",
                   transform=right.transAxes, fontsize=9, color="0.4")
    fig.suptitle(f"PropMe on {plain(label)}: unique text or boilerplate?")
    fig.subplots_adjust(top=0.85, bottom=0.14, wspace=0.3)
    save(fig, path)
    return path


def write_leak_plots(report: Report, out: Path) -> list[Path]:
    """Both plots for every corpus label that has something to show."""
    written = []
    for label in report.labels:
        for make, stem in ((sources_plot, "sources"), (duplication_plot, "duplication")):
            p = make(report, label, out / f"{stem}_{slug(label)}.png")
            if p:
                written.append(p)
    return written

