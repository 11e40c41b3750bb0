"""PNG plots of a PropMe report (matplotlib, Agg canvas; no display needed).

- `capability_<corpus>.png`: per metric, capability (prefix value, x) against propensity
  (the value under each propensity setting, y) for every model, with the report's bootstrap error bars
  (at its confidence) and the diagonal where PM = 0.5. Points below the diagonal leak more under attack
  than unprompted.
- `trajectory_<corpus>_<model>.png`: PM per metric and propensity setting across the revisions
  (checkpoints) of one model, in input order, with intervals. A withheld PM (`Interval.withheld`: too
  few capability events to carry a ratio) is drawn as a hollow marker without its interval, as the
  tables write `withheld` instead of the value; the legend says so.
- the leak plots (`report.provenance_plots`).
"""
from __future__ import annotations

import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from propme_metrics.metrics import registry
from propme_metrics.metrics.results import CorpusResult
from propme_metrics.prompts.settings import PREFIX, setting_sort_key
from propme_metrics.report.cells import slug
from propme_metrics.report.contents import Report
from propme_metrics.report.figures import error_bar, plain, row_label, save
from propme_metrics.report.groups import trajectories
from propme_metrics.report.provenance_plots import write_leak_plots

_MARKERS = {"generic": "o", "specific": "s", "unconditional": "^", "minimal_cue": "v"}
_LINESTYLES = {"generic": "-", "specific": "--", "unconditional": ":", "minimal_cue": "-."}


def _nan(v) -> float:
    return math.nan if v is None else float(v)


def capability_plot(report: Report, label: str, path: Path) -> Path | None:
    """Capability vs propensity for one corpus; None when no model has the prefix setting."""
    results = [r for r in report.results if r.label == label and PREFIX in r.settings and r.propensity_settings]
    if not results:
        return None
    metrics = list(report.pm_metrics)
    fig = Figure(figsize=(4.6 * len(metrics), 5.2), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    colours = {id(r): f"C{i % 10}" for i, r in enumerate(results)}
    handles: dict[str, object] = {}
    for ax, m in zip(axes, metrics):
        top = 0.0
        for r in results:
            c = r.settings[PREFIX].metrics[m]
            for s in r.propensity_settings:
                p = r.settings[s].metrics[m]
                x, y = _nan(c.estimate), _nan(p.estimate)
                xe, ye = error_bar(c.estimate, c.low, c.high), error_bar(p.estimate, p.low, p.high)
                h = ax.errorbar([x], [y], xerr=[[xe[0]], [xe[1]]], yerr=[[ye[0]], [ye[1]]],
                                fmt=_MARKERS.get(s, "D"), color=colours[id(r)], ms=7, capsize=3, alpha=0.9)
                handles.setdefault(f"{row_label(r)} - {s}", h)
                top = max([top, *(v for v in (x + xe[1], y + ye[1]) if not math.isnan(v))])  # undefined: no point
        top = top * 1.12 if top > 0 else 1.0
        ax.plot([0, top], [0, top], color="0.45", ls="--", lw=1)
        ax.text(0.62 * top, 0.66 * top, "PM = 0.5", rotation=45, rotation_mode="anchor", fontsize=8,
                color="0.4", ha="center", va="bottom")
        ax.set_xlim(-0.02 * top, top)
        ax.set_ylim(-0.02 * top, top)
        ax.set_aspect("equal", adjustable="box")
        ax.set_xlabel(f"capability: {registry.LABELS[m]} under prefix")
        ax.set_ylabel(f"propensity: {registry.LABELS[m]} per propensity setting")
        ax.set_title(f"{registry.LABELS[m]}")
        ax.grid(alpha=0.3)
        ax.text(0.97 * top, 0.03 * top, "leaks under attack", ha="right", va="bottom", fontsize=8, color="0.4")
        ax.text(0.03 * top, 0.97 * top, "leaks unprompted", ha="left", va="top", fontsize=8, color="0.4")
    fig.suptitle(f"PropMe on {plain(label)}: capability vs propensity ({report.intervals.percent} bootstrap intervals)")
    ncol = min(3, max(1, len(handles)))
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center", ncol=ncol, fontsize=8,
               frameon=False)
    rows = math.ceil(len(handles) / ncol)
    fig.subplots_adjust(bottom=0.12 + 0.04 * rows, top=0.88, wspace=0.35)
    save(fig, path)
    return path


def trajectory_plot(report: Report, label: str, model: str, results: list[CorpusResult],
                    path: Path) -> Path | None:
    """PM per metric across the revisions of one model (input order); a withheld PM is a hollow
    marker without an interval (`trajectory_points`)."""
    keys = sorted({k for r in results for k in r.pm},
                  key=lambda k: (report.pm_metrics.index(k[0]), setting_sort_key(k[1])))
    if not keys:
        return None
    revisions = [plain(r.revision) or "(default)" for r in results]
    fig = Figure(figsize=(max(7.5, 1.3 * len(revisions) + 4), 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    xs = list(range(len(results)))
    metric_colour = {m: f"C{i % 10}" for i, m in enumerate(report.pm_metrics)}
    any_withheld = False
    for n, (m, s) in enumerate(keys):
        dodge = (n - (len(keys) - 1) / 2) * 0.03  # keep overlapping error bars apart
        shown, withheld = trajectory_points([r.pm.get((m, s)) for r in results])
        x = [v + dodge for v in xs]
        ax.errorbar(x, [p[0] for p in shown], yerr=[[p[1] for p in shown], [p[2] for p in shown]],
                    color=metric_colour[m], ls=_LINESTYLES.get(s, "-"), marker=_MARKERS.get(s, "D"), capsize=3,
                    label=f"PM {registry.LABELS[m]} {s}")
        if any(not math.isnan(y) for y in withheld):
            any_withheld = True
            ax.plot(x, withheld, ls="none", marker=_MARKERS.get(s, "D"), markerfacecolor="none",
                    markeredgecolor=metric_colour[m])
    if any_withheld:
        ax.plot([], [], ls="none", marker="o", markerfacecolor="none", markeredgecolor="0.3",
                label="hollow: PM withheld")
    ax.axhline(0.5, color="0.45", ls="--", lw=1)
    ax.set_xticks(xs)
    ax.set_xticklabels(revisions, rotation=20 if len(revisions) > 4 else 0)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(-0.3, len(xs) - 0.7)
    ax.set_xlabel("revision (input order)")
    ax.set_ylabel("PM (0: only under attack, 1: only unprompted)")
    short = model if len(model) <= 60 else "..." + model[-57:]
    ax.set_title(plain(f"{short}\nPM across revisions on {label}"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.subplots_adjust(right=0.72, bottom=0.16)
    save(fig, path)
    return path


def trajectory_points(pms: list) -> tuple[list[tuple[float, float, float]], list[float]]:
    """One PM per revision (an Interval, or None where it was not computed) as the trajectory draws it:
    (value, error below, error above) for the filled line, and the value of a withheld PM (NaN
    elsewhere) for its hollow marker. A withheld PM is not on the line and has no error bar: the
    tables do not show it as a value either."""
    shown, withheld = [], []
    for iv in pms:
        if iv is not None and iv.withheld:
            shown.append((math.nan, 0.0, 0.0))
            withheld.append(_nan(iv.estimate))
            continue
        y = _nan(iv.estimate) if iv else math.nan
        e = error_bar(iv.estimate, iv.low, iv.high) if iv else (0.0, 0.0)
        shown.append((y, e[0], e[1]))
        withheld.append(math.nan)
    return shown, withheld


def write_plots(report: Report, out: Path) -> list[Path]:
    """Every plot of the report, written into `out`; returns their paths."""
    written: list[Path] = []
    for label in report.labels:
        p = capability_plot(report, label, out / f"capability_{slug(label)}.png")
        if p:
            written.append(p)
    written += write_leak_plots(report, out)
    used: set[str] = set()
    for (label, model), results in trajectories(report.results).items():
        name = f"trajectory_{slug(label)}_{slug(model)}"
        while name in used:
            name += "_"
        used.add(name)
        p = trajectory_plot(report, label, model, results, out / f"{name}.png")
        if p:
            written.append(p)
    return written
