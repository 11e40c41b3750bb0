"""The numbers of a report: base metrics with intervals per setting, PM per propensity setting, grouping of runs."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics import registry
from propme_metrics.metrics.compare import Arm, Comparisons, compare_arms, pairing_problem
from propme_metrics.metrics.leaks import RARE_MAX_COUNT
from propme_metrics.metrics.pm import CONFIDENCE, Interval, metric_interval, pm_interval
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS
from propme_metrics.report.load import (
    RunTask,
    describe_chat_template,
    describe_trace_config,
    limit_label,
)

if TYPE_CHECKING:  # pragma: no cover
    from propme_metrics.report.leaks import CorpusLeaks



class IncompleteReportError(ConfigError):
    """The report was written (it is in `report`) but something in it is undefined: exit status 2."""

    def __init__(self, message: str, hint: str | None = None, report: Report | None = None):
        super().__init__(message, hint)
        self.report = report


class MissingPrefixError(IncompleteReportError):
    """PM needs the prefix setting; the report (base metrics) was written anyway and is in `report`."""


@dataclass
class MetricResult:
    """A base metric of one setting: its value and interval (`pm.metric_interval`: modified Wilson for
    proportions, bootstrap for ratio metrics, none for a maximum); None: undefined."""

    value: float | None
    low: float | None = None
    high: float | None = None
    method: str = ""                  #: how the interval was made ("": none)
    confidence: float = CONFIDENCE
    resamples: int = 0                #: bootstrap resamples behind it (0: not a bootstrap)


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
    leaderboard_csv: Path | None = None        #: the headline columns (`columns.headline_columns`)
    leaderboard_full_csv: Path | None = None   #: every column (`columns`)
    leaderboard_json: Path | None = None
    leaderboard_md: Path | None = None
    html: Path | None = None
    plots: list[Path] = field(default_factory=list)
    likelihood: list[Any] = field(default_factory=list)  #: report.likelihood.LikelihoodResult per model and corpus
    rare_max_count: int = RARE_MAX_COUNT   #: `fmr_rare`'s threshold, one for every task of the report
    comparisons: Comparisons | None = None   #: paired comparisons of the models (None: fewer than two)
    comparisons_json: Path | None = None
    comparisons_csv: Path | None = None
    leaderboard_html: Path | None = None   #: the models' page (`report.leaderboard_page`)
    eee: list[Path] = field(default_factory=list)   #: Every Eval Ever records, one per model and revision
    contamination_html: str = ""   #: report.html's contamination section (report/contamination_views.py), or none
    contamination: Any = None   #: contamination.assess.ContaminationResult of the runs' other benchmarks, or None

    @property
    def paths(self) -> list[Path]:
        """Every file written."""
        return [p for p in (self.leaderboard_csv, self.leaderboard_full_csv, self.leaderboard_json,
                            self.leaderboard_md, self.comparisons_json, self.comparisons_csv, self.html,
                            self.leaderboard_html)
                if p is not None] + list(self.plots) + list(self.eee)


def finite(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _metric_result(task: RunTask, metric: str, bootstrap: int, seed: int) -> MetricResult:
    spec = registry.metric(metric)
    if not spec.has_interval:  # a maximum: pooled over generations, no interval
        counted = [v for p in task.prompts for v in p.values if v is not None]
        return MetricResult(spec.value_of(v[metric] for v in counted))
    iv = metric_interval(spec, task.stats(metric), bootstrap, seed)
    return MetricResult(iv.estimate, finite(iv.low), finite(iv.high), iv.method, iv.confidence, iv.resamples)


def setting_result(task: RunTask, bootstrap: int, seed: int) -> SettingResult:
    metrics = {m.name: _metric_result(task, m.name, bootstrap, seed) for m in registry.for_setting(task.setting)}
    return SettingResult(task.setting, task, task.counts(), metrics)


def side(result: MetricResult) -> Interval:
    """A base metric's result as the Interval PM's rules read."""
    return Interval(result.value, result.low, result.high, result.method, result.confidence, result.resamples)


def setting_pm(p: SettingResult, c: SettingResult, metric: str, bootstrap: int, seed: int) -> Interval:
    """PM of `metric`, propensity setting `p` vs the prefix setting `c` (`pm.pm_interval`)."""
    return pm_interval(p.task.stats(metric), c.task.stats(metric), bootstrap, seed,
                       (side(p.metrics[metric]), side(c.metrics[metric])))


def prompt_set_fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class ComparableTasks:
    """The tasks of one corpus that can be reported together: one index, one prompt set per setting,
    one --limit, one set of tracing settings, chat template or none (`group_tasks`); `label` is the
    corpus label of their columns."""

    corpus: str
    identity: str | None
    prompt_ids: dict[str, frozenset[str]]
    tasks: list[RunTask]
    label: str = ""
    limit: float | None = None
    trace_config: dict[str, Any] | None = None   #: None: no task recorded its tracing settings (yet)
    chat_template_sha: str | None = None

    def add(self, task: RunTask) -> None:
        """Take `task` (which `accepts` says fits)."""
        if self.identity is None:
            self.identity = task.index_identity
        if self.trace_config is None:
            self.trace_config = task.trace_config
        self.prompt_ids.setdefault(task.setting, task.prompt_ids)
        self.tasks.append(task)

    @property
    def family(self) -> str:
        """The corpus, marked when the runs used --limit (never mixed with full runs)."""
        return "_".join(x for x in (self.corpus, limit_label(self.limit)) if x)

    def accepts(self, task: RunTask) -> bool:
        """Same --limit, chat template (or none), tracing settings and index (unknown settings and
        identities, e.g. of an empty samples file, fit any) and same prompt ids."""
        if task.limit != self.limit or task.chat_template_sha != self.chat_template_sha:
            return False
        if None not in (task.trace_config, self.trace_config) and task.trace_config != self.trace_config:
            return False
        if None not in (task.index_identity, self.identity) and task.index_identity != self.identity:
            return False
        ids = self.prompt_ids.get(task.setting)
        return ids is None or ids == task.prompt_ids


def _describe_conflict(a: ComparableTasks, b: ComparableTasks) -> str:
    ta, tb = a.tasks[0], b.tasks[0]
    if a.chat_template_sha != b.chat_template_sha:
        return (f"corpus '{a.corpus}' mixes prompts with and without a chat template: "
                f"{describe_chat_template(a.chat_template_sha)} ({ta.label}, {ta.task}) and "
                f"{describe_chat_template(b.chat_template_sha)} ({tb.label}, {tb.task})")
    if None not in (a.trace_config, b.trace_config) and a.trace_config != b.trace_config:
        return (f"corpus '{a.corpus}' mixes runs traced with different tracing settings: "
                f"{describe_trace_config(a.trace_config)} ({ta.label}, {ta.task}) and "
                f"{describe_trace_config(b.trace_config)} ({tb.label}, {tb.task}); PM would mix them")
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
            group = ComparableTasks(task.corpus, task.index_identity, {}, [], limit=task.limit,
                                    chat_template_sha=task.chat_template_sha)
            groups.append(group)
        group.add(task)
    by_corpus: dict[str, list[ComparableTasks]] = {}
    for g in groups:
        by_corpus.setdefault(g.family, []).append(g)
    for corpus, gs in by_corpus.items():
        if len(gs) == 1:
            gs[0].label = corpus
            continue
        if not separate:
            raise ConfigError(_describe_conflict(gs[0], gs[1]),
                              "compare runs of one prompt set, index version, tracing settings and prompt "
                              "format only, or pass --separate (separate=True) to report them apart")
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


def arm(result: CorpusResult) -> Arm:
    """A model's result on a corpus as `metrics.compare` reads it: per setting, each unit's pair per
    metric with an interval (prompts; generations, `<prompt id>#<k>`, in the prompt-free settings)."""
    units: dict[str, list[tuple[str, dict]]] = {}
    for s, sr in result.settings.items():
        names = [m.name for m in registry.for_setting(s) if m.has_interval]
        if s in PROMPT_FREE_SETTINGS:
            units[s] = []
            for p in sr.task.prompts:
                per_metric = {m: p.generation_stats(m) for m in names}
                units[s] += [(f"{p.id}#{k}", {m: per_metric[m][k] for m in names})
                             for k in range(len(per_metric[names[0]]))]
        else:
            units[s] = [(p.id, {m: p.stat(m) for m in names}) for p in sr.task.prompts]
    return Arm(result.model, result.revision, result.corpus, result.index_identity, units)


def compare_results(results: list[CorpusResult], pm_metrics: tuple[str, ...], bootstrap: int, seed: int,
                    pairing: str = "all") -> Comparisons | None:
    """Paired comparisons of the models of each corpus label (`metrics.compare`); runs of one corpus
    reported apart (`--separate`) are refused for pairing, with why. None: nothing to compare."""
    out = Comparisons(pairing=pairing)
    labels = list(dict.fromkeys(r.label for r in results))
    for label in labels:
        arms = [arm(r) for r in results if r.label == label]
        done = compare_arms(arms, pm_metrics, bootstrap, seed, pairing)
        for row in done.rows:
            row.corpus = label
        out.rows += done.rows
        out.refused += done.refused
    for x, y in combinations(labels, 2):
        rx, ry = (next(r for r in results if r.label == lab) for lab in (x, y))
        if rx.corpus == ry.corpus:
            why = pairing_problem(arm(rx), arm(ry)) or "they are reported apart"
            out.refused.append(f"runs of {x} and {y} are not compared on shared prompts: {why}")
    return out if out.rows or out.refused else None
