"""PropMe's figures inside lm-eval's own results: a standard error for every averaged metric, PM in
each corpus group's row, the helper entries out of the table, and what lm-eval's results have no
field for written beside them.

lm-eval 0.4.x computes a stderr only for its own aggregations (`N/A` for PropMe's pooled ones), a
group's value only as a mean of its subtasks' values, and has no field for an interval's ends or
method. The start-up hook (`discovery.install`) wraps three of its functions when lm-eval imports
them; each wrapper acts on PropMe's tasks and groups only and leaves every other task as it was:

* `evaluator_utils._compute_task_aggregations`: each PropMe metric's `<metric>_stderr` is
  `STDERR_RULE`: the half-width of the interval `propme report` shows for it (modified Wilson
  over the counted generations for a share, the expanded percentile bootstrap over prompts for a
  ratio and over documents for the likelihood subtask), divided by the normal
  quantile of its confidence; `N/A` where that interval is undefined (a maximum has none). The
  helper entries `trace` and `likelihood` (per sample: the full record) leave the task's results.
* `api.group.Group.aggregate`: a group whose `aggregate_metric_list` names `pm` (each corpus's
  group) gets `pm_<metric>_<setting>` for every propensity setting and PM metric
  (`registry.DEFAULT_PM_METRICS`), PM = p / (p + c) against the prefix subtask of the same run,
  with its stderr by the same rule; undefined (a side has nothing counted) is NaN, as lm-eval
  writes an undefined value.
* `loggers.evaluation_tracker.EvaluationTracker.save_results_aggregated`: writes
  `propme_<date id>.json` beside `results_<date id>.json` (`Sidecar`): every interval with its
  method, PM withheld where the capability side is too small, tracing failures and documents
  scored; one line at the end of the run says where.
"""
from __future__ import annotations

import atexit
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from propme_metrics.metrics import registry
from propme_metrics.metrics.likelihood import bootstrap_documents
from propme_metrics.metrics.pm import DEFAULT_INTERVALS, Interval, IntervalSpec, metric_interval, pm_interval
from propme_metrics.metrics.ratio import Ratio, pool_ratios
from propme_metrics.prompts.settings import LIKELIHOOD, MEASURE_KEY, PREFIX, PROMPT_FREE_SETTINGS
from propme_metrics.runs.files import SIDECAR_PREFIX

#: how PropMe's stderr in lm-eval's results is computed (written into every sidecar)
STDERR_RULE = ("half-width of the interval `propme report` shows (modified Wilson over counted generations, or "
               "documents of the likelihood subtask, for a share; expanded percentile bootstrap over prompts for a "
               "ratio and over documents for the likelihood subtask's median; 10,000 resamples, seed 0) divided by the normal quantile of its "
               "confidence (1.96 at 95%)")
#: the helper entries of PropMe's tasks: per sample the full record, never a metric of the table
HELPERS = (registry.TRACE_DIAGNOSTIC[0], registry.LIKELIHOOD_DIAGNOSTIC[0])
#: the `aggregate_metric_list` entry that makes a group's row PropMe's PM
PM_ENTRY = "pm"


def pm_key(metric: str, setting: str) -> str:
    """The group-row metric name of PM of `metric`, propensity `setting` against prefix."""
    return f"pm_{metric}_{setting}"


def stderr(iv: Interval) -> float | str:
    """`STDERR_RULE` of an interval; "N/A" (lm-eval's spelling) where its ends are undefined."""
    if iv.estimate is None or not _finite(iv.low, iv.high):
        return "N/A"
    return (iv.high - iv.low) / (2 * NormalDist().inv_cdf(0.5 + iv.confidence / 2))


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def _value(iv: Interval) -> float:
    return math.nan if iv.estimate is None else iv.estimate


def _interval_dict(iv: Interval, units: int) -> dict[str, Any]:
    out = {k: v for k, v in iv.to_dict().items() if k != "withheld" or v}
    return {"value": out.pop("estimate"), **out, "units": units, "stderr": stderr(iv)}


@dataclass
class TaskFigures:
    """What the wrappers computed for one PropMe task of a run."""

    setting: str
    corpus: str
    units: dict[str, list[Ratio]] = field(default_factory=dict)   #: metric -> per-unit pooled pairs
    intervals: dict[str, dict[str, Any]] = field(default_factory=dict)
    helpers: dict[str, int] = field(default_factory=dict)          #: tracing failures, documents scored


@dataclass
class RunFigures:
    """The figures of PropMe's tasks and groups in this process's lm-eval run."""

    tasks: dict[str, TaskFigures] = field(default_factory=dict)
    groups: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    intervals: IntervalSpec = DEFAULT_INTERVALS

    def task(self, task: Any, raw_metrics: dict[tuple[str, str], list], agg: dict[str, Any],
             bootstrap_iters: int | None) -> dict[str, Any]:
        """`agg` of a PropMe task with PropMe's stderr and without the helper entries."""
        meta = task.config.metadata if isinstance(task.config.metadata, dict) else {}
        figures = TaskFigures(str(meta.get("setting") or ""), str(meta.get("corpus") or ""))
        self.tasks[task.config.task] = figures
        bootstrap = isinstance(bootstrap_iters, int) and bootstrap_iters > 0
        for metric, filter_key in raw_metrics:
            if metric in HELPERS:
                figures.helpers["tracing_failures" if metric == HELPERS[0] else "documents_scored"] = \
                    int(agg.pop(f"{metric},{filter_key}", 0) or 0)
                agg.pop(f"{metric}_stderr,{filter_key}", None)
        if meta.get(MEASURE_KEY) == LIKELIHOOD:
            found = self._likelihood(figures, raw_metrics)
        else:
            found = self._generations(figures, raw_metrics)
        for (metric, filter_key), iv, units in found:
            figures.intervals[metric] = _interval_dict(iv, units)
            if bootstrap:
                agg[f"{metric}_stderr,{filter_key}"] = stderr(iv)
        return agg

    def _generations(self, figures: TaskFigures, raw: dict[tuple[str, str], list]) -> list:
        trace_items = next((v for (m, _), v in raw.items() if m == HELPERS[0]), None)
        found = []
        for (metric, filter_key), items in raw.items():
            spec = registry.BY_NAME.get(metric)
            if spec is None or spec.unit is not registry.Generation:
                continue
            units = _units(items, trace_items, figures.setting)
            figures.units[metric] = units
            iv = (metric_interval(spec, units, self.intervals) if spec.has_interval
                  else Interval(spec.pooling.corpus_value(items)))
            found.append(((metric, filter_key), iv, len(units)))
        return found

    def _likelihood(self, figures: TaskFigures, raw: dict[tuple[str, str], list]) -> list:
        found = []
        for (metric, filter_key), items in raw.items():
            spec = registry.BY_NAME.get(metric)
            if spec is None or spec.unit is not registry.Document or not items:
                continue
            iv = bootstrap_documents({metric: items}, {metric: spec.pooling.statistic}, self.intervals)[metric]
            found.append(((metric, filter_key), iv, len(items)))
        return found

    def group(self, group: Any, task_metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """A PropMe corpus group's row: PM of every propensity setting and PM metric against prefix."""
        from propme_tasks.task import PropMeTask

        leaves = [t for t in group.get_all_tasks() if isinstance(t, PropMeTask)]
        names = [t.config.task for t in leaves]
        row: dict[str, Any] = {"alias": group.alias or group.name, "name": group.name,
                               "sample_len": sum(task_metrics.get(n, {}).get("sample_len", 0) for n in names)}
        figures = {n: self.tasks[n] for n in names if n in self.tasks}
        prefix = [f for f in figures.values() if f.setting == PREFIX and f.units]
        if len(prefix) != 1 or len({f.corpus for f in figures.values()}) != 1:
            return row  # PM pairs one prefix subtask with the settings of one corpus
        capability = prefix[0]
        pms: dict[str, dict[str, Any]] = {}
        for name, f in figures.items():
            if f.setting == PREFIX or not f.units:
                continue
            for metric in registry.DEFAULT_PM_METRICS:
                if metric not in f.units or metric not in capability.units:
                    continue
                p, c = f.units[metric], capability.units[metric]
                spec = registry.metric(metric)
                sides = (metric_interval(spec, p, self.intervals), metric_interval(spec, c, self.intervals))
                iv = pm_interval(p, c, self.intervals, sides)
                key = pm_key(metric, f.setting)
                row[f"{key},none"] = _value(iv)
                row[f"{key}_stderr,none"] = stderr(iv)
                pms[key] = {**_interval_dict(iv, len(p)), "propensity_task": name,
                            "capability_task": next(n for n, x in figures.items() if x is capability)}
        row["sample_count"] = {k: row["sample_len"] for k in row if k.endswith(",none") and "_stderr" not in k}
        self.groups[group.name] = pms
        return row

    def sidecar(self, results: dict[str, Any]) -> dict[str, Any] | None:
        """The figures of the tasks and groups in `results` (lm-eval's `results` section), or None."""
        tasks = {n: {"setting": f.setting, "corpus": f.corpus, **f.helpers, "metrics": f.intervals}
                 for n, f in self.tasks.items() if n in results}
        if not tasks:
            return None
        groups = {n: g for n, g in self.groups.items() if n in results and g}
        return {"stderr": STDERR_RULE, "confidence": self.intervals.confidence,
                "pm": "p / (p + c) against the prefix subtask of the same run; withheld: the capability side "
                      "has too few prompts with an event for PM to be read on its own (the leaderboard shows it "
                      "as withheld, not as a value)",
                "tasks": tasks, "groups": groups}


def _units(items: Sequence[dict[str, Any]], trace_items: Sequence[dict[str, Any]] | None,
           setting: str) -> list[Ratio]:
    """The resampling units of a ratio metric, as the report takes them: a prompt (its rows pooled:
    several generations per prompt are rows of one prompt id), or each generation when prompt-free."""
    pairs = [Ratio(0.0, 0.0) if i is None else i.pair for i in items]  # None: the prompt adds nothing
    if setting in PROMPT_FREE_SETTINGS or trace_items is None or len(trace_items) != len(pairs):
        return pairs
    by_prompt: dict[str, list[Ratio]] = {}
    for pair, t in zip(pairs, trace_items):
        by_prompt.setdefault(str(t.get("prompt_id")), []).append(pair)
    return [pool_ratios(v) for v in by_prompt.values()]


#: this process's run
RUN = RunFigures()


def sidecar_path(tracker: Any) -> Path | None:
    """Where `propme_<date id>.json` goes: the folder of the tracker's results file."""
    if not getattr(tracker, "output_path", None) or not getattr(tracker, "date_id", None):
        return None
    path = Path(tracker.output_path)
    if path.suffix == ".json":
        return path.with_name(f"{SIDECAR_PREFIX}{path.stem}_{tracker.date_id}.json")
    folder = path / str(tracker.general_config_tracker.model_name_sanitized)
    return folder / f"{SIDECAR_PREFIX}{tracker.date_id}.json"


def write_sidecar(tracker: Any, results: dict[str, Any]) -> None:
    """Write the sidecar of a saved run and say where at the end of the run (one line on stderr)."""
    data = RUN.sidecar(results.get("results") or {})
    if data is None:
        return
    path = sidecar_path(tracker)
    failures = {n: t["tracing_failures"] for n, t in data["tasks"].items() if t.get("tracing_failures")}
    lines = [f"PropMe: {n} generation(s) of {task} could not be traced; redo them with `propme trace` on its "
             "samples file" for task, n in failures.items()]
    if path is None:
        lines.append("PropMe: the intervals, their methods and withheld PM are kept only with --output_path "
                     "(PM and stderr are in the table)")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        lines.append(f"PropMe: intervals, their methods, withheld PM and tracing failures of this run: {path}")
    atexit.register(lambda: print("\n".join(lines), file=sys.stderr, flush=True))


# --- the wrappers (installed by `propme_tasks.discovery`)

def wrap(owner: Any, name: str, make: Any) -> None:
    """Replace `owner.name` by `make(original)`, once (a wrapped function is marked `_propme`);
    nothing when lm-eval has no such attribute."""
    original = getattr(owner, name, None) if owner is not None else None
    if original is None or getattr(original, "_propme", False):
        return
    wrapper = make(original)
    wrapper._propme = True
    setattr(owner, name, wrapper)


def patch_evaluator_utils(module: Any) -> None:
    """Wrap `_compute_task_aggregations`: PropMe's stderr and no helper entries for PropMe's tasks."""
    def make(original):
        def _compute_task_aggregations(task, raw_metrics, bootstrap_iters=100000):
            agg, sample_len = original(task, raw_metrics, bootstrap_iters)
            from propme_tasks.task import PropMeTask

            if isinstance(task, PropMeTask):
                agg = RUN.task(task, raw_metrics, agg, bootstrap_iters)
            return agg, sample_len
        return _compute_task_aggregations

    wrap(module, "_compute_task_aggregations", make)


def patch_group(module: Any) -> None:
    """Wrap `Group.aggregate`: a group whose aggregate_metric_list names `pm` gets PropMe's PM row."""
    def make(original):
        def aggregate(self, task_metrics):
            entries = [getattr(a, "metric", None) for a in (self.aggregate_metric_list or [])]
            return RUN.group(self, task_metrics) if PM_ENTRY in entries else original(self, task_metrics)
        return aggregate

    wrap(getattr(module, "Group", None), "aggregate", make)


def patch_tracker(module: Any) -> None:
    """Wrap `EvaluationTracker.save_results_aggregated`: the sidecar beside the results file."""
    def make(original):
        def save_results_aggregated(self, results, samples=None):
            original(self, results, samples)
            write_sidecar(self, results)
        return save_results_aggregated

    wrap(getattr(module, "EvaluationTracker", None), "save_results_aggregated", make)
