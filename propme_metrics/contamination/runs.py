"""Benchmark samples read back from lm-eval output folders (`--log_samples`): every task that is
not one of PropMe's, the models that ran it, its logged documents and each model's per-sample
metric values. The results files are found and read as the report reads them (`core.lmeval_files`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import json_objects
from propme_metrics.core.lmeval_files import date_id, model_identity, read_results, results_files, samples_path_of
from propme_metrics.trace.inputs import read_samples

SAMPLES_HINT = "run lm-eval with --log_samples (and keep the samples files beside the results)"


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


def is_propme_task(task: str, config: dict[str, Any]) -> bool:
    """PropMe's own tasks (`propme_*`, or metadata naming a corpus and setting) are not benchmarks."""
    metadata = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
    task = str(task)
    return task.startswith("propme_") or bool(metadata.get("corpus") and metadata.get("setting"))


def _metric_value(value: Any) -> float | None:
    """A per-sample metric value that averages (bool or finite number); None for anything else
    (corpus-level items such as BLEU's (reference, prediction) pairs)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def read_samples_file(path: Path) -> dict[int, tuple[dict[str, Any], dict[str, float]]]:
    """A task's samples file: doc_id -> (document, metrics) with every filter's metrics (named
    `<metric>` for the filter `none`, `<metric>_<filter>` for others)."""
    try:
        with open(path, encoding="utf-8") as fh:
            rows = read_samples(list(json_objects(fh, str(path), "the samples file is damaged: re-run lm-eval")))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the samples file {path}: {exc}", SAMPLES_HINT) from None
    docs: dict[int, tuple[dict[str, Any], dict[str, float]]] = {}
    for s in rows:
        doc_id = s.row.get("doc_id")
        if not isinstance(doc_id, int) or not isinstance(s.row.get("doc"), dict):
            raise ConfigError(f"{path}, line {s.lineno}: not an lm-eval sample (no doc_id or doc)", SAMPLES_HINT)
        _, metrics = docs.setdefault(doc_id, (s.doc, {}))
        names = s.row.get("metrics")
        for name in names if isinstance(names, list) else []:
            value = _metric_value(s.row.get(name)) if isinstance(name, str) else None
            if value is not None:
                metrics[name if s.filter == "none" else f"{name}_{s.filter}"] = value
    return docs


def _benchmark_configs(paths: list[str | Path]):
    """(results path, results JSON, task, config) of every benchmark task of the runs, by date."""
    files = sorted({p for path in paths for p in results_files(Path(path))},
                   key=lambda p: (date_id(p), str(p)))
    for results_path in files:
        data = read_results(results_path)
        for task, config in data["configs"].items():
            config = config if isinstance(config, dict) else {}
            if not is_propme_task(task, config):
                yield results_path, data, str(task), config


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
    for results_path, data, task, config in _benchmark_configs(paths):
        if tasks and task not in tasks:
            continue
        samples = samples_path_of(results_path, task)
        if not samples.is_file():
            raise ConfigError(f"missing samples file {samples} for task {task} of {results_path}", SAMPLES_HINT)
        model, revision, model_args = model_identity(data)
        better = (data.get("higher_is_better") or {}).get(task) or {}
        run = BenchmarkRun(model, revision, model_args, samples, {str(k): bool(v) for k, v in better.items()})
        latest[(task, run.label)] = (run, config)  # files come in date order: a model's latest run wins
    found: dict[str, LoggedTask] = {}
    for (task, label), (run, config) in latest.items():
        entry = found.setdefault(task, LoggedTask(task, config, {}, []))
        entry.config = config
        entry.runs[label] = run
        _merge(entry, run, read_samples_file(run.samples_path))
    missing = [t for t in tasks if t not in found]
    if missing:
        raise ConfigError(f"no samples of task(s) {', '.join(missing)} in {', '.join(map(str, paths))}",
                          "name tasks the runs hold (their results_*.json 'configs'), or leave out --tasks")
    if not found:
        raise ConfigError(f"the runs {', '.join(map(str, paths))} hold no benchmark task besides PropMe's",
                          "run lm-eval with your benchmark tasks next to PropMe's (e.g. --tasks propme_demo,arc_easy)")
    for entry in found.values():
        entry.docs.sort(key=lambda d: d.doc_id)
    return list(found.values())


def logged_index_path(paths: list[str | Path]) -> str | None:
    """The index folder PropMe's own tasks of these runs traced against (their logged documents'
    `index_path`), or None when no PropMe task logged one."""
    for path in paths:
        try:
            found = results_files(Path(path))
        except ConfigError:
            continue  # the report itself says what is wrong with it
        for results_path in found:
            try:
                configs = read_results(results_path)["configs"]
                for task, config in configs.items():
                    samples = samples_path_of(results_path, task)
                    if not is_propme_task(task, config if isinstance(config, dict) else {}) or not samples.is_file():
                        continue
                    with open(samples, encoding="utf-8") as fh:
                        for _, row in json_objects(fh, str(samples)):
                            doc = row.get("doc")
                            if isinstance(doc, dict) and doc.get("index_path"):
                                return str(doc["index_path"])
            except (OSError, ValueError, AttributeError, ConfigError):
                continue  # unreadable: the report itself says what is wrong with it
    return None
