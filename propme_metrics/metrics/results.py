"""The numbers of one model on one corpus: base metrics with intervals per setting, PM per
propensity setting, and the leak analysis (`metrics.provenance_analysis`), from typed runs
(`metrics.runs`) and one `IntervalSpec`."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from propme_metrics.metrics import registry
from propme_metrics.metrics.pm import Interval, IntervalSpec, metric_interval, pm_interval
from propme_metrics.metrics.provenance_analysis import CorpusLeaks, corpus_leaks, open_traced_index
from propme_metrics.metrics.robustness import Robustness, corpus_robustness
from propme_metrics.metrics.runs import RunTask
from propme_metrics.prompts.settings import PREFIX, setting_sort_key
from propme_metrics.prompts.start import StartToken


@dataclass
class SettingResult:
    """The base metrics of one model x corpus x setting."""

    setting: str
    task: RunTask
    counts: dict[str, int]
    metrics: dict[str, Interval]   #: metric -> its value and interval (`metric_result`)


@dataclass
class CorpusResult:
    """Everything reported for one model (and revision) on one corpus."""

    label: str                     #: column label: the corpus, or <corpus>_set<k> with separate=True
    corpus: str
    model: str
    revision: str
    index_identity: str | None
    prompt_set: str
    settings: dict[str, SettingResult]
    pm: dict[tuple[str, str], Interval]   #: (metric, propensity setting) -> PM with interval
    start_token: StartToken | None = None   #: what every prompt started with (the prefix task's record)
    leaks: CorpusLeaks | None = None   #: which data leaks: by source and by duplication (`metrics.provenance_analysis`)
    robustness: Robustness | None = None   #: floor, repeated sampling, long spans' duplication (`metrics.robustness`)

    @property
    def propensity_settings(self) -> list[str]:
        return [s for s in self.settings if s != PREFIX]


def finite(x: float | None) -> float | None:
    """A value as written: None for undefined (None or NaN), else a float."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def metric_result(task: RunTask, metric: str, intervals: IntervalSpec) -> Interval:
    """One base metric of a task with its interval (`pm.metric_interval`: modified Wilson for
    proportions, bootstrap for ratio metrics; a maximum: pooled over generations, no interval);
    undefined ends as None."""
    spec = registry.metric(metric)
    if not spec.has_interval:
        counted = [v for p in task.prompts for v in p.values if v is not None]
        return Interval(spec.value_of(v[metric] for v in counted))
    iv = metric_interval(spec, task.stats(metric), intervals)
    return replace(iv, low=finite(iv.low), high=finite(iv.high))


def setting_result(task: RunTask, intervals: IntervalSpec) -> SettingResult:
    """Every registry metric the task's setting has, with its interval."""
    metrics = {m.name: metric_result(task, m.name, intervals) for m in registry.for_setting(task.setting)}
    return SettingResult(task.setting, task, task.counts(), metrics)


def setting_pm(p: SettingResult, c: SettingResult, metric: str, intervals: IntervalSpec) -> Interval:
    """PM of `metric`, propensity setting `p` vs the prefix setting `c` (`pm.pm_interval`)."""
    return pm_interval(p.task.stats(metric), c.task.stats(metric), intervals,
                       (p.metrics[metric], c.metrics[metric]))


def corpus_result(label: str, identity: str | None, prompt_set: str, tasks: Mapping[str, RunTask],
                  pm_metrics: Sequence[str], intervals: IntervalSpec) -> CorpusResult:
    """One model's results on one corpus label (traced against index `identity`, prompt set
    fingerprint `prompt_set`) from its tasks by setting: each setting's metrics, the leak analysis,
    the robustness figures, and PM of every propensity setting when the prefix setting was run."""
    ordered = sorted(tasks, key=setting_sort_key)
    first = tasks[ordered[0]]
    settings = {s: setting_result(tasks[s], intervals) for s in ordered}
    res = CorpusResult(label, first.corpus, first.model, first.revision, identity, prompt_set, settings, {},
                       tasks.get(PREFIX, first).start_token)
    by_setting = {s: tasks[s] for s in ordered}
    opened = open_traced_index(by_setting)
    res.leaks = corpus_leaks(by_setting, intervals, opened)
    res.robustness = corpus_robustness(by_setting, opened[0], intervals, opened[1])
    if PREFIX in tasks:
        for s in res.propensity_settings:
            for m in pm_metrics:
                res.pm[(m, s)] = setting_pm(settings[s], settings[PREFIX], m, intervals)
    return res
