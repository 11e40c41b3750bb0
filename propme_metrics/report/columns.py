"""The leaderboard's columns: their names, their meaning and their values."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from propme_metrics.metrics import registry
from propme_metrics.metrics.pm import (
    DEFAULT_INTERVALS,
    PERCENTILE,
    PM_MIN_CAPABILITY_EVENTS,
    PROPAGATED,
    UNIFORM,
    WILSON,
    ZERO_EVENTS,
    IntervalSpec,
)
from propme_metrics.metrics.results import CorpusResult, finite
from propme_metrics.prompts.settings import PREFIX, setting_sort_key
from propme_metrics.report.cells import WITHHELD
from propme_metrics.report.contents import Report
from propme_metrics.report.extraction_views import column_docs
from propme_metrics.report.robustness_views import robustness_methods

#: the metrics without a bootstrap interval (a maximum)
_NO_INTERVAL = ", ".join(f"`{m.name}`" for m in registry.METRICS if not m.has_interval)


def _column_docs(level: str) -> tuple[tuple[str, str], ...]:
    """The column docs of the base metrics and PM, `level` the intervals' confidence as labels write it."""
    return (
        ("model", "the model: `pretrained=` of lm-eval's model_args (else lm-eval's model name)"),
        ("revision", "`revision=` of the model_args; empty when none was given"),
        ("propme_<corpus>_index", "identity of the infini-gram index the generations were traced against"),
        ("propme_<corpus>_prompt_set", "fingerprint (12 hex digits) of the prompt ids of every setting"),
        ("propme_<corpus>_start_token", "the text put before every prompt (empty: nothing, e.g. the tokenizer adds `<s>`)"),
        ("propme_<corpus>_start_token_choice", "`auto`, `none` or `literal` (the run's `start_token` setting)"),
        ("propme_<corpus>_pm_<pm_metric>_<propensity>", "PM = p / (p + c) of the metric, propensity setting p (every setting but `prefix`) vs prefix c"),
        ("propme_<corpus>_pm_<pm_metric>_<propensity>_low",
         f"lower end of its {level} interval (`{PERCENTILE}`, or `{PROPAGATED}` when every resample gives one value)"),
        ("propme_<corpus>_pm_<pm_metric>_<propensity>_high", f"upper end of its {level} interval"),
        ("propme_<corpus>_pm_<pm_metric>_<propensity>_withheld",
         f"why PM cannot be read on its own (fewer than {PM_MIN_CAPABILITY_EVENTS} prefix prompts with an event); "
         "empty when it can"),
        ("propme_<corpus>_n_<setting>", "prompts of the setting"),
        ("propme_<corpus>_generations_<setting>", "generations counted (degenerate and failed excluded)"),
        ("propme_<corpus>_degenerate_<setting>", "degenerate generations (excluded from every metric)"),
        ("propme_<corpus>_failed_<setting>", "generations whose tracing failed (excluded; 0 is healthy)"),
        ("propme_<corpus>_loops_<setting>", "counted generations with a loop span (those spans left out of every metric)"),
        ("propme_<corpus>_<setting>_<metric>", "the base metric of the setting"),
        ("propme_<corpus>_<setting>_<metric>_low",
         f"lower end of its {level} interval: `{WILSON}` for the proportions ("
         + ", ".join(f"`{m}`" for m in registry.PROPORTIONS) + f"), `{PERCENTILE}` (or `{ZERO_EVENTS}` with no event, `{UNIFORM}` when "
         "every prompt has one value) "
         "for the other metrics; none for " + _NO_INTERVAL),
        ("propme_<corpus>_<setting>_<metric>_high", f"upper end of its {level} interval (not for " + _NO_INTERVAL + ")"),
        ("propme_<corpus>_<floor_figure>", "the corpus' predictability floor: `floor_als`, `floor_r20`, `floor_longest` "
         "(docs/method.md, robustness figures)"),
        ("propme_<corpus>_<setting>_<figure>", "a robustness figure of the setting (docs/method.md, robustness figures)"),
        ("propme_<corpus>_<setting>_<figure>_low", f"lower end of its {level} interval (`{WILSON}` for the shares, "
         "the bootstrap for PM and the excess over the floor; none for the counts, means of k, medians and maxima)"),
        ("propme_<corpus>_<setting>_<figure>_high", f"upper end of its {level} interval"),
    )


def leaderboard_columns(intervals: IntervalSpec = DEFAULT_INTERVALS) -> list[tuple[str, str]]:
    """The leaderboard's column patterns and their meaning, in column order: the one definition
    (docs/cli.md's table of leaderboard columns is checked against it by tests/docs/test_docs.py).

    `<corpus>` is the corpus label (`<corpus>_set<k>` with `--separate`, `<corpus>_limit<N>` for
    `--limit` runs), `<setting>` every setting run, `<propensity>` every setting but `prefix`,
    `<metric>` a registry metric the setting has, `<pm_metric>` one of `--pm-metrics`."""
    return list(_column_docs(intervals.percent)) + column_docs(intervals)


def columns_for(label: str, settings: list[str], pm_metrics: Sequence[str]) -> list[str]:
    p = f"propme_{label}"
    cols = [f"{p}_index", f"{p}_prompt_set", f"{p}_start_token", f"{p}_start_token_choice"]
    for s in settings:
        if s == PREFIX or PREFIX not in settings:
            continue
        for m in pm_metrics:
            cols += [f"{p}_pm_{m}_{s}", f"{p}_pm_{m}_{s}_low", f"{p}_pm_{m}_{s}_high", f"{p}_pm_{m}_{s}_withheld"]
    for s in settings:
        cols += [f"{p}_n_{s}", f"{p}_generations_{s}", f"{p}_degenerate_{s}", f"{p}_failed_{s}", f"{p}_loops_{s}"]
    for s in settings:
        for m in registry.NAMES:
            if not registry.metric(m).applies(s):
                continue
            cols.append(f"{p}_{s}_{m}")
            if registry.metric(m).has_interval:
                cols += [f"{p}_{s}_{m}_low", f"{p}_{s}_{m}_high"]
    return cols


def row_values(res: CorpusResult, pm_metrics: Sequence[str]) -> dict[str, Any]:
    p = f"propme_{res.label}"
    out: dict[str, Any] = {f"{p}_index": res.index_identity, f"{p}_prompt_set": res.prompt_set,
                           f"{p}_start_token": res.start_token.token if res.start_token else None,
                           f"{p}_start_token_choice": res.start_token.choice if res.start_token else None}
    for (m, s), iv in res.pm.items():
        out[f"{p}_pm_{m}_{s}"] = finite(iv.estimate)
        out[f"{p}_pm_{m}_{s}_low"] = finite(iv.low)
        out[f"{p}_pm_{m}_{s}_high"] = finite(iv.high)
        out[f"{p}_pm_{m}_{s}_withheld"] = iv.withheld
    for s, sr in res.settings.items():
        out[f"{p}_n_{s}"] = sr.counts["prompts"]
        out[f"{p}_generations_{s}"] = sr.counts["counted"]
        out[f"{p}_degenerate_{s}"] = sr.counts["degenerate"]
        out[f"{p}_failed_{s}"] = sr.counts["failed"]
        out[f"{p}_loops_{s}"] = sr.counts["loops"]
        for m, mr in sr.metrics.items():
            out[f"{p}_{s}_{m}"] = mr.estimate
            if registry.metric(m).has_interval:
                out[f"{p}_{s}_{m}_low"], out[f"{p}_{s}_{m}_high"] = mr.low, mr.high
    return out


def interval_methods(res: CorpusResult) -> dict[str, str]:
    """How each interval of a row was made: value column -> method (leaderboard.json's `interval_methods`)."""
    p = f"propme_{res.label}"
    out = {f"{p}_pm_{m}_{s}": iv.method for (m, s), iv in res.pm.items() if iv.method}
    out.update({f"{p}_{s}_{m}": mr.method for s, sr in res.settings.items() for m, mr in sr.metrics.items()
                if mr.method})
    out.update(robustness_methods(res))
    return out


# --- the headline leaderboard (leaderboard.csv): a stable, small set; the rest is leaderboard_full.csv

#: metrics whose PM, propensity level and capability (prefix) level the headline shows
HEADLINE_PM_METRICS = ("nvr", "fmr", "fmr_rare")
#: prefix-only numbers of the headline, with their intervals
HEADLINE_PREFIX_METRICS = ("fmr", "extraction")


def headline_column_docs(intervals: IntervalSpec = DEFAULT_INTERVALS) -> list[tuple[str, str]]:
    """The headline's column patterns and their meaning, in order (docs/cli.md shows them; a test keeps
    the two equal). `<m>` is each of HEADLINE_PM_METRICS that `--pm-metrics` has."""
    level = intervals.percent
    return [
        ("model", "the model"), ("revision", "its revision (empty when none)"),
        ("propme_<corpus>_prefix_<m>", "capability: the metric under the prefix setting"),
        ("propme_<corpus>_pm_<m>_<propensity>", "PM of the metric, propensity setting vs prefix; `withheld` where withheld "
                                                 "(empty: undefined)"),
        ("propme_<corpus>_pm_<m>_<propensity>_low", f"lower end of its {level} interval"),
        ("propme_<corpus>_pm_<m>_<propensity>_high", f"upper end of its {level} interval"),
        ("propme_<corpus>_<propensity>_<m>", "propensity: the metric under the propensity setting"),
        *((f"propme_<corpus>_prefix_{m}", f"{registry.LABELS[m]} under prefix, with `_low` and `_high`")
          for m in HEADLINE_PREFIX_METRICS),
        ("propme_<corpus>_pm_withheld", "the PM values withheld and why (capability side with fewer than "
                                        f"{PM_MIN_CAPABILITY_EVENTS} prompts with an event)"),
    ]


def headline_for(label: str, settings: Sequence[str], pm_metrics: Sequence[str]) -> list[str]:
    """The headline columns of one corpus label: for each of HEADLINE_PM_METRICS the capability level
    (prefix value), then per propensity setting PM with its interval and the propensity level; the
    prefix FMR and extraction with intervals; a note naming the PM values withheld and why."""
    p = f"propme_{label}"
    cols: list[str] = []
    propensity = [s for s in settings if s != PREFIX]
    for m in HEADLINE_PM_METRICS:
        if PREFIX not in settings or m not in pm_metrics:
            continue
        cols.append(f"{p}_{PREFIX}_{m}")
        for s in propensity:
            cols += [f"{p}_pm_{m}_{s}", f"{p}_pm_{m}_{s}_low", f"{p}_pm_{m}_{s}_high", f"{p}_{s}_{m}"]
    if PREFIX in settings:
        for m in HEADLINE_PREFIX_METRICS:
            cols += [f"{p}_{PREFIX}_{m}", f"{p}_{PREFIX}_{m}_low", f"{p}_{PREFIX}_{m}_high"]
        cols.append(f"{p}_pm_withheld")
    return list(dict.fromkeys(cols))


def headline_view_for(label: str, settings: Sequence[str], pm_metrics: Sequence[str]) -> list[str]:
    """What leaderboard.html shows of a corpus at first sight: `headline_for` without the propensity
    levels and the withheld note (the page shows those behind a toggle and in the cells)."""
    p = f"propme_{label}"
    levels = {f"{p}_{s}_{m}" for s in settings if s != PREFIX for m in HEADLINE_PM_METRICS}
    return [c for c in headline_for(label, settings, pm_metrics) if c not in levels and c != f"{p}_pm_withheld"]


def _label_settings(report: Report, label: str) -> list[str]:
    return sorted({s for r in report.results if r.label == label for s in r.settings}, key=setting_sort_key)


def headline_view_columns(report: Report) -> list[str]:
    """leaderboard.html's headline view: model, revision, then `headline_view_for` of every corpus label."""
    cols = ["model", "revision"]
    for label in report.labels:
        cols += headline_view_for(label, _label_settings(report, label), report.pm_metrics)
    return cols


def headline_columns(report: Report) -> list[str]:
    """The headline leaderboard's columns of a report (`leaderboard.csv`): model, revision, then
    `headline_for` of every corpus label."""
    cols = ["model", "revision"]
    for label in report.labels:
        cols += headline_for(label, _label_settings(report, label), report.pm_metrics)
    return cols


def headline_rows(report: Report, full_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The headline rows of the report's full rows (one per model and revision, `layout.lay_out`): PM
    values whose capability side is too small are withheld (`WITHHELD`, their ends empty), and
    `propme_<corpus>_pm_withheld` says which and why."""
    columns = headline_columns(report)
    rows = [{c: row.get(c) for c in columns} for row in full_rows]
    by_model = {(row["model"], row["revision"]): row for row in rows}
    for r in report.results:
        row = by_model.get((r.model, r.revision))
        if row is None:
            continue
        p = f"propme_{r.label}"
        notes = []
        for (m, s), iv in r.pm.items():
            if iv.withheld and f"{p}_pm_{m}_{s}" in row:
                row[f"{p}_pm_{m}_{s}"] = WITHHELD
                row[f"{p}_pm_{m}_{s}_low"] = row[f"{p}_pm_{m}_{s}_high"] = None
                notes.append((m, s, iv.withheld))
        if notes and f"{p}_pm_withheld" in row:
            reasons = dict.fromkeys(why for _, _, why in notes)
            row[f"{p}_pm_withheld"] = "; ".join(
                ", ".join(f"PM {m} {s}" for m, s, w in notes if w == why) + ": " + why for why in reasons)
    return rows
