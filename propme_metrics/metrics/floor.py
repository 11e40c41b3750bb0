"""The predictability floor: what text absent from the corpus matches, and each setting's excess over it.

The generic and specific prompts were checked not to occur in the corpus, yet any fluent text
matches short spans of it. Each distinct prompt of those settings is traced once, as a generation
is (the run's tracing options, against the same index); the floor is the registry's ALS and R20
over these prompt traces and their longest final span. A setting's excess is its ALS (R20) minus
the floor's, with an unpaired percentile bootstrap (`difference.metric_difference`: the setting's units
and the floor's prompts resampled independently): a span is evidence of memorization only beyond
the floor. The study's report, section 5.1.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from propme_metrics.metrics import registry
from propme_metrics.metrics.difference import metric_difference
from propme_metrics.metrics.figures import FLOOR, Figure
from propme_metrics.metrics.pm import Interval, IntervalSpec, metric_interval
from propme_metrics.metrics.ratio import Ratio
from propme_metrics.metrics.runs import RunTask
from propme_metrics.metrics.values import contributions, counts_for_metrics
from propme_metrics.prompts.settings import PREFIX, PROMPTED_SETTINGS
from propme_metrics.trace.result import TraceConfig, TraceResult

#: the settings whose prompts the floor traces: the prompted propensity ones
FLOOR_SETTINGS = tuple(s for s in PROMPTED_SETTINGS if s != PREFIX)
#: the registry metrics the floor and the excess are given for
FLOOR_METRICS = ("als", "r20")


def floor_prompts(tasks: Mapping[str, RunTask]) -> list[str]:
    """The distinct prompt texts of the generic and specific settings, in order."""
    return list(dict.fromkeys(p.prompt for s in FLOOR_SETTINGS if s in tasks for p in tasks[s].prompts
                              if p.prompt))


def trace_config(tasks: Mapping[str, RunTask]) -> TraceConfig:
    """The tracing options the tasks' generations were traced with (the defaults when not recorded)."""
    return next((t.trace_config for t in tasks.values() if t.trace_config is not None), TraceConfig())


def trace_prompts(texts: Sequence[str], index, config: TraceConfig) -> list[TraceResult]:
    """Each prompt traced as a generation would be (a failure recorded in its `error`); the traces of
    one prompt set, index and configuration are made once per process (a report of several models
    on one corpus shares its floor)."""
    from propme_metrics.trace.tracer import Tracer

    key = (str(index.path), index.manifest.identity, config, tuple(texts))
    if key not in _TRACED:
        tracer = Tracer(index, config)
        if len(_TRACED) >= _TRACED_SETS:
            _TRACED.pop(next(iter(_TRACED)))
        _TRACED[key] = [tracer.safe_trace_one(text, key=f"prompt#{i}") for i, text in enumerate(texts)]
    return list(_TRACED[key])


#: the prompt traces kept (by index folder, identity, configuration and prompts), the oldest dropped first
_TRACED: dict[tuple, list[TraceResult]] = {}
_TRACED_SETS = 8


def floor_stats(traces: Sequence[TraceResult]) -> dict[str, list[Ratio]]:
    """Per metric of `FLOOR_METRICS`, one (numerator, denominator) per counted prompt trace."""
    counted = [contributions(t, [registry.metric(m) for m in FLOOR_METRICS]) for t in traces if counts_for_metrics(t)]
    return {m: [Ratio(*c[m]) for c in counted] for m in FLOOR_METRICS}


def floor_figures(traces: Sequence[TraceResult] | None, intervals: IntervalSpec) -> list[Figure]:
    """floor_als, floor_r20 and floor_longest of the prompt traces (undefined without them: no index)."""
    if traces is None:
        return [Figure(f"floor_{m}", FLOOR, Interval(None), 0, "prompts") for m in (*FLOOR_METRICS, "longest")]
    stats = floor_stats(traces)
    n = len(stats["als"])
    out = [Figure(f"floor_{m}", FLOOR, metric_interval(registry.metric(m), stats[m], intervals), n, "prompts")
           for m in FLOOR_METRICS]
    longest = max((t.longest_span for t in traces if counts_for_metrics(t)), default=None)
    return out + [Figure("floor_longest", FLOOR, Interval(None if longest is None else float(longest)), n, "prompts")]


def excess_figures(tasks: Mapping[str, RunTask], traces: Sequence[TraceResult] | None,
                   intervals: IntervalSpec) -> list[Figure]:
    """Every setting's ALS and R20 minus the floor's (undefined without a floor)."""

    stats = None if traces is None else floor_stats(traces)
    out = []
    for setting, task in tasks.items():
        for m in FLOOR_METRICS:
            units = task.stats(m)
            if stats is None:
                iv = Interval(None)
            elif intervals.bootstrap:
                iv = metric_difference(registry.metric(m), units, stats[m], False, intervals)
            else:
                a, b = registry.metric(m).value_of(units), registry.metric(m).value_of(stats[m])
                iv = Interval(None if a is None or b is None else a - b)
            out.append(Figure(f"excess_{m}", setting, iv, len(units), "units"))
    return out
