"""Benchmark samples read back from lm-eval output folders (`--log_samples`): every task that is
not one of PropMe's, the models that ran it, its logged documents and each model's per-sample
metric values. The runs are read as the report reads them (`runs.lmeval`)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.runs.files import date_id, results_files
from propme_metrics.runs.lmeval import LmEvalRun, LmEvalTask, TaskKind, read_results_file, read_run
from propme_metrics.runs.samples import SAMPLES_HINT, read_samples_file


@dataclass(frozen=True)
class BenchmarkRun:
    """One model's run of a benchmark task: who ran it, and where its samples are."""

    model: str
    revision: str
    model_args: str
    samples_path: Path
    higher_is_better: dict[str, bool] = field(default_factory=dict)   #: lm-eval's direction of each metric

    @property
    def label(self) -> str:
        """The model as the contamination outputs name it: `model`, or `model@revision`."""
        return f"{self.model}@{self.revision}" if self.revision else self.model


@dataclass
class LoggedDoc:
    """One logged document of a task: its id, the document, and each model's per-sample metric values."""

    doc_id: int
    doc: dict[str, Any]
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)   #: model label -> metric -> value


@dataclass
class LoggedTask:
    """A benchmark task of the runs: its name, the config lm-eval recorded for it (of the latest
    run), the models that ran it and the documents any of them logged."""

    task: str
    config: dict[str, Any]
    runs: dict[str, BenchmarkRun]   #: model label -> its run (the latest when a model ran the task twice)
    docs: list[LoggedDoc]


class NoBenchmarkError(ConfigError):
    """The runs hold no benchmark task besides PropMe's (the report then has no contamination section)."""


def read_logged_docs(path: Path) -> dict[int, tuple[dict[str, Any], dict[str, float]]]:
    """A task's samples file: doc_id -> (document, metrics) with every filter's metrics (named
    `<metric>` for the filter `none`, `<metric>_<filter>` for others)."""
    docs: dict[int, tuple[dict[str, Any], dict[str, float]]] = {}
    for s in read_samples_file(path):
        doc_id = s.row.get("doc_id")
        if not isinstance(doc_id, int) or not isinstance(s.row.get("doc"), dict):
            raise ConfigError(f"{path}, line {s.lineno}: not an lm-eval sample (no doc_id or doc)", SAMPLES_HINT)
        _, metrics = docs.setdefault(doc_id, (s.doc, {}))
        for name, value in s.metric_values().items():
            metrics[name if s.filter == "none" else f"{name}_{s.filter}"] = value
    return docs


def _benchmark_tasks(paths: Sequence[str | Path]) -> Iterator[tuple[LmEvalRun, LmEvalTask]]:
    """(run, task) of every benchmark task of the runs, by date."""
    files = sorted({p for path in paths for p in results_files(Path(path))}, key=lambda p: (date_id(p), str(p)))
    for results_path in files:
        run = read_results_file(results_path)
        for task in run.of_kind(TaskKind.BENCHMARK):
            yield run, task


def _merge(task: LoggedTask, run: BenchmarkRun, docs: dict[int, tuple[dict[str, Any], dict[str, float]]]) -> None:
    """Add one model's logged documents to its task's; ConfigError when a document id holds another
    document than another model's run logged (the runs used different versions of the task)."""
    known = {d.doc_id: d for d in task.docs}
    for doc_id, (doc, metrics) in docs.items():
        entry = known.get(doc_id)
        if entry is None:
            entry = known[doc_id] = LoggedDoc(doc_id, doc)
            task.docs.append(entry)
        elif entry.doc != doc:
            others = [r.samples_path for label, r in task.runs.items() if label != run.label]
            raise ConfigError(f"task {task.task}: document {doc_id} of {run.samples_path} is not the one of "
                              f"{', '.join(map(str, others))}: the runs used different versions of the task",
                              "check the runs of each version of the task apart (pass their folders separately)")
        entry.metrics[run.label] = metrics


def read_runs(paths: list[str | Path], tasks: tuple[str, ...] = ()) -> list[LoggedTask]:
    """The benchmark tasks of lm-eval output folders or results files (`tasks`: only these), each
    with every model that ran it (a model's latest run of it when it ran the task several times)."""
    latest: dict[tuple[str, str], tuple[BenchmarkRun, dict[str, Any]]] = {}
    for lm_run, task in _benchmark_tasks(paths):
        if tasks and task.name not in tasks:
            continue
        run = BenchmarkRun(lm_run.model, lm_run.revision, lm_run.model_args, task.check_samples(),
                           task.higher_is_better)
        latest[(task.name, run.label)] = (run, task.config)  # files come in date order: a model's latest run wins
    found: dict[str, LoggedTask] = {}
    for (task, label), (run, config) in latest.items():
        entry = found.setdefault(task, LoggedTask(task, config, {}, []))
        entry.config = config
        entry.runs[label] = run
        _merge(entry, run, read_logged_docs(run.samples_path))
    missing = [t for t in tasks if t not in found]
    if missing:
        raise ConfigError(f"no samples of task(s) {', '.join(missing)} in {', '.join(map(str, paths))}",
                          "name tasks the runs hold (their results_*.json 'configs'), or leave out --tasks")
    if not found:
        raise NoBenchmarkError(f"the runs {', '.join(map(str, paths))} hold no benchmark task besides PropMe's",
                          "run lm-eval with your benchmark tasks next to PropMe's (e.g. --tasks propme_demo,arc_easy)")
    for entry in found.values():
        entry.docs.sort(key=lambda d: d.doc_id)
    return list(found.values())


def logged_index_path(paths: Sequence[str | Path]) -> str | None:
    """The index folder PropMe's own tasks of these runs traced against (their logged documents'
    `index_path`), or None when no PropMe task logged one."""
    for path in paths:
        try:
            found = read_run(path)
        except ConfigError:
            continue  # the report itself says what is wrong with it
        for run in found:
            for task in run.tasks:
                if task.kind == TaskKind.BENCHMARK or not task.samples_path.is_file():
                    continue
                try:
                    rows = task.samples()
                except ConfigError:
                    continue  # unreadable: the report itself says what is wrong with it
                for s in rows:
                    try:
                        if s.document.index_path:
                            return str(s.document.index_path)
                    except ConfigError:
                        continue
    return None
