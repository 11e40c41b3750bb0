"""The numbers of a report: base metrics with intervals per setting, PM per propensity setting, grouping of runs."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics import registry
from propme_metrics.metrics.leaks import RARE_MAX_COUNT
from propme_metrics.metrics.pm import Interval, bootstrap_metric, bootstrap_pm, pm, ratio, wilson_interval
from propme_metrics.prompts.settings import PREFIX
from propme_metrics.report.load import RunTask, limit_label

if TYPE_CHECKING:  # pragma: no cover
    from propme_metrics.report.leaks import CorpusLeaks

CONFIDENCE = 0.95


class IncompleteReportError(ConfigError):
    """The report was written (it is in `report`) but something in it is undefined: exit status 2."""

    def __init__(self, message: str, hint: str | None = None, report: Report | None = None):
        super().__init__(message, hint)
        self.report = report


class MissingPrefixError(IncompleteReportError):
    """PM needs the prefix setting; the report (base metrics) was written anyway and is in `report`."""


@dataclass
class MetricResult:
    """A base metric of one setting: value, bootstrap interval, Wilson interval (proportions)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    wilson_low: float | None = None
    wilson_high: float | None = None


@dataclass
class SettingResult:
    """The base metrics of one model x corpus x setting."""

    setting: str
    task: RunTask
    counts: dict[str, int]
    metrics: dict[str, MetricResult]


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
    start_token: dict[str, str] | None = None   #: what every prompt started with (the prefix task's record)
    leaks: CorpusLeaks | None = None   #: which data leaks: by source and by duplication (report/leaks.py)

    @property
    def propensity_settings(self) -> list[str]:
        return [s for s in self.settings if s != PREFIX]


@dataclass
class Report:
    """What `build_report` computed and wrote."""

    out: Path
    columns: list[str]
    rows: list[dict[str, Any]]
    results: list[CorpusResult]
    labels: list[str]
    pm_metrics: tuple[str, ...]
    bootstrap: int
    seed: int
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   #: e.g. a missing prefix setting (PM impossible)
    leaderboard_csv: Path | None = None
    leaderboard_json: Path | None = None
    leaderboard_md: Path | None = None
    html: Path | None = None
    plots: list[Path] = field(default_factory=list)
    likelihood: list[Any] = field(default_factory=list)  #: report.likelihood.LikelihoodResult per model and corpus
    rare_max_count: int = RARE_MAX_COUNT   #: `fmr_rare`'s threshold, one for every task of the report
    contamination_html: str = ""   #: report.html's contamination section (report/contamination_views.py), or none

    @property
    def paths(self) -> list[Path]:
        """Every file written."""
        return [p for p in (self.leaderboard_csv, self.leaderboard_json, self.leaderboard_md, self.html)
                if p is not None] + list(self.plots)


def finite(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _metric_result(task: RunTask, metric: str, bootstrap: int, seed: int) -> MetricResult:
    counted = [v for p in task.prompts for v in p.values if v is not None]
    if not counted:  # undefined, not 0 (0 would read as the best possible score)
        return MetricResult(None)
    spec = registry.metric(metric)
    value = spec.value_of(v[metric] for v in counted)
    if value is None or not spec.has_interval:  # undefined (NVR without documents, extraction), or a maximum
        return MetricResult(value)
    stats = task.stats(metric)
    out = MetricResult(ratio(stats))
    if bootstrap > 0 and stats:
        iv = bootstrap_metric(stats, iters=bootstrap, seed=seed, confidence=CONFIDENCE)
        out.low, out.high = finite(iv.low), finite(iv.high)
    if spec.proportion:
        n = int(round(sum(s.denominator for s in stats)))
        k = int(round(sum(s.numerator for s in stats)))
        if n > 0:
            lo, hi = wilson_interval(min(k, n), n, CONFIDENCE)
            out.wilson_low, out.wilson_high = finite(lo), finite(hi)
    return out


def setting_result(task: RunTask, bootstrap: int, seed: int) -> SettingResult:
    metrics = {m.name: _metric_result(task, m.name, bootstrap, seed) for m in registry.for_setting(task.setting)}
    return SettingResult(task.setting, task, task.counts(), metrics)


def pm_interval(p_task: RunTask, c_task: RunTask, metric: str, bootstrap: int, seed: int) -> Interval:
    if not p_task.counts()["counted"] or not c_task.counts()["counted"]:
        return Interval(math.nan, math.nan, math.nan)  # undefined: a side has no counted generation
    ps, cs = p_task.stats(metric), c_task.stats(metric)
    if bootstrap > 0 and ps and cs:
        iv = bootstrap_pm(ps, cs, iters=bootstrap, seed=seed, confidence=CONFIDENCE)
        return Interval(iv.estimate, iv.low, iv.high)
    return Interval(pm(ratio(ps), ratio(cs)), math.nan, math.nan)


def prompt_set_fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class ComparableTasks:
    """The tasks of one corpus that can be reported together: one index, one prompt set per setting,
    one --limit (`group_tasks`); `label` is the corpus label of their columns."""

    corpus: str
    identity: str | None
    prompt_ids: dict[str, frozenset[str]]
    tasks: list[RunTask]
    label: str = ""
    limit: float | None = None

    @property
    def family(self) -> str:
        """The corpus, marked when the runs used --limit (never mixed with full runs)."""
        return "_".join(x for x in (self.corpus, limit_label(self.limit)) if x)

    def accepts(self, task: RunTask) -> bool:
        """Same --limit, same index (unknown identities, e.g. of an empty samples file, fit any) and
        same prompt ids."""
        if task.limit != self.limit:
            return False
        if None not in (task.index_identity, self.identity) and task.index_identity != self.identity:
            return False
        ids = self.prompt_ids.get(task.setting)
        return ids is None or ids == task.prompt_ids


def _describe_conflict(a: ComparableTasks, b: ComparableTasks) -> str:
    ta, tb = a.tasks[0], b.tasks[0]
    if a.identity != b.identity:
        return (f"corpus '{a.corpus}' was traced against different indexes: {a.identity} "
                f"({ta.label}, {ta.task}) and {b.identity} ({tb.label}, {tb.task})")
    for setting, ids in b.prompt_ids.items():
        other = a.prompt_ids.get(setting)
        if other is not None and other != ids:
            ta = next(t for t in a.tasks if t.setting == setting)
            tb = next(t for t in b.tasks if t.setting == setting)
            return (f"corpus '{a.corpus}' mixes prompt sets: {ta.task} of {ta.label} has {len(other)} prompts, "
                    f"{tb.task} of {tb.label} has {len(ids)} prompts, {len(other & ids)} in common")
    return f"corpus '{a.corpus}' mixes runs that cannot be compared"


def group_tasks(tasks: list[RunTask], separate: bool) -> list[ComparableTasks]:
    groups: list[ComparableTasks] = []
    for task in tasks:
        group = next((g for g in groups if g.corpus == task.corpus and g.accepts(task)), None)
        if group is None:
            group = ComparableTasks(task.corpus, task.index_identity, {}, [], limit=task.limit)
            groups.append(group)
        if group.identity is None:
            group.identity = task.index_identity
        group.prompt_ids.setdefault(task.setting, task.prompt_ids)
        group.tasks.append(task)
    by_corpus: dict[str, list[ComparableTasks]] = {}
    for g in groups:
        by_corpus.setdefault(g.family, []).append(g)
    for corpus, gs in by_corpus.items():
        if len(gs) == 1:
            gs[0].label = corpus
            continue
        if not separate:
            raise ConfigError(_describe_conflict(gs[0], gs[1]),
                              "compare runs of one prompt set and one index version only, or pass --separate "
                              "(separate=True) to report them apart")
        taken = {g.family for g in groups}
        for k, g in enumerate(gs, 1):
            label = f"{corpus}_set{k}"
            while label in taken:
                label += "x"
            g.label = label
            taken.add(label)
    return groups


def dedupe_tasks(tasks: list[RunTask], notes: list[str]) -> list[RunTask]:
    """One task per (model, revision, task, --limit): the latest date id wins; order of first appearance
    kept. A --limit run never replaces a full run (nor the reverse): they are reported apart."""
    chosen: dict[tuple[str, str, str, float | None], RunTask] = {}
    for t in tasks:
        key = (t.model, t.revision, t.task, t.limit)
        old = chosen.get(key)
        if old is None:
            chosen[key] = t
        elif old.samples_path.resolve() == t.samples_path.resolve():
            continue
        elif t.date_id >= old.date_id:
            notes.append(f"{t.task} of {t.label}: using {t.results_path} (newer than {old.results_path})")
            chosen[key] = t
        else:
            notes.append(f"{t.task} of {t.label}: using {old.results_path} (newer than {t.results_path})")
    return list(chosen.values())


def trajectories(report: Report) -> dict[tuple[str, str], list[CorpusResult]]:
    """(corpus label, model) -> its results on several revisions, in input order."""
    out: dict[tuple[str, str], list[CorpusResult]] = {}
    for r in report.results:
        out.setdefault((r.label, r.model), []).append(r)
    return {k: v for k, v in out.items() if len({r.revision for r in v}) > 1}
