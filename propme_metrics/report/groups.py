"""Which runs are reported together: one task per model, revision, task and --limit (the newest),
grouped by corpus into tasks that share an index, prompt set, --limit, tracing options and prompt
format (`group_tasks`), and the revisions of one model (`trajectories`)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics.results import CorpusResult
from propme_metrics.metrics.runs import LikelihoodTask, RunTask, limit_label
from propme_metrics.report.load import describe_chat_template, describe_trace_config
from propme_metrics.trace.result import TraceConfig


def prompt_set_fingerprint(obj: Any) -> str:
    """12 hex digits naming a prompt set (its prompt ids per setting and index identity)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class ComparableTasks:
    """The tasks of one corpus that can be reported together: one index, one prompt set per setting,
    one --limit, one set of tracing options, chat template or none (`group_tasks`); `label` is the
    corpus label of their columns."""

    corpus: str
    identity: str | None
    prompt_ids: dict[str, frozenset[str]]
    tasks: list[RunTask]
    label: str = ""
    limit: float | None = None
    trace_config: TraceConfig | None = None   #: None: no task recorded its tracing options (yet)
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
        """Same --limit, chat template (or none), tracing options and index (unknown options and
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
        return (f"corpus '{a.corpus}' mixes runs traced with different tracing options: "
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


def _new_group(task: RunTask, groups: list[ComparableTasks]) -> ComparableTasks:
    group = ComparableTasks(task.corpus, task.index_identity, {}, [], limit=task.limit,
                            chat_template_sha=task.chat_template_sha)
    groups.append(group)
    return group


def group_tasks(tasks: list[RunTask], separate: bool) -> list[ComparableTasks]:
    """The tasks in groups that can be reported together (`ComparableTasks`), labelled. A model's
    tasks of one corpus (one revision and --limit) stay together: into the first group that takes
    all of them, else into a group of their own, so a model that ran another prompt set for one
    setting is reported whole beside the others (and the pairing refused, saying the sets differ),
    not split into parts that each lack a setting. Only a task its own model's group does not take
    (another index or tracing options) goes elsewhere."""
    groups: list[ComparableTasks] = []
    units: dict[tuple[str, str, str, float | None], list[RunTask]] = {}
    for task in tasks:
        units.setdefault((task.corpus, task.model, task.revision, task.limit), []).append(task)
    for unit in units.values():
        home = next((g for g in groups if g.corpus == unit[0].corpus and all(g.accepts(t) for t in unit)), None)
        home = home or _new_group(unit[0], groups)
        for task in unit:
            group = home if home.accepts(task) else next(
                (g for g in groups if g.corpus == task.corpus and g.accepts(task)), None) or _new_group(task, groups)
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
                              "compare runs of one prompt set, index version, tracing options and prompt "
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


def dedupe_likelihood(tasks: list[LikelihoodTask], notes: list[str]) -> list[LikelihoodTask]:
    """One task per (model, revision, task, --limit): the latest date id wins (as for the settings)."""
    chosen: dict[tuple[str, str, str, float | None], LikelihoodTask] = {}
    for t in tasks:
        key = (t.model, t.revision, t.task, t.limit)
        old = chosen.get(key)
        if old is None or (old.samples_path.resolve() != t.samples_path.resolve() and t.date_id >= old.date_id):
            if old is not None:
                notes.append(f"{t.task} of {t.label}: using {t.results_path} (newer than {old.results_path})")
            chosen[key] = t
    return list(chosen.values())


def trajectories(results: list[CorpusResult]) -> dict[tuple[str, str], list[CorpusResult]]:
    """(corpus label, model) -> its results on several revisions, in input order."""
    out: dict[tuple[str, str], list[CorpusResult]] = {}
    for r in results:
        out.setdefault((r.label, r.model), []).append(r)
    return {k: v for k, v in out.items() if len({r.revision for r in v}) > 1}
