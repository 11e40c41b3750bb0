"""Benchmark samples read back from lm-eval output folders (`--log_samples`): every task that is
not one of PropMe's, its logged documents and the per-sample metric values of each."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import json_objects
from propme_metrics.trace.inputs import read_samples

SAMPLES_HINT = "run lm-eval with --log_samples (and keep the samples files beside the results)"


@dataclass
class LoggedDoc:
    """One logged document of a task: its id, the document, and its per-sample metric values."""

    doc_id: int
    doc: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class LoggedTask:
    """A benchmark task of a run: its name, samples file and logged documents."""

    task: str
    samples_path: Path
    docs: list[LoggedDoc]


def is_propme_task(task: str, config: dict[str, Any]) -> bool:
    """PropMe's own tasks (`propme_*`, or metadata naming a corpus and setting) are not benchmarks."""
    metadata = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
    task = str(task)
    return task.startswith("propme_") or bool(metadata.get("corpus") and metadata.get("setting"))


def _results_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("results_*.json") if p.is_file())
        if not files:
            raise ConfigError(f"no results_*.json under {path}", "pass the --output_path folder of an lm-eval run")
        return files
    raise ConfigError(f"{path} does not exist", "pass the --output_path folder of an lm-eval run")


def _metric_value(value: Any) -> float | None:
    """A per-sample metric value that averages (bool or finite number); None for anything else
    (corpus-level items such as BLEU's (reference, prediction) pairs)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def read_samples_file(path: Path, task: str) -> LoggedTask:
    """A task's samples file: one document per doc_id, with every filter's metrics (named
    `<metric>` for the filter `none`, `<metric>_<filter>` for others)."""
    try:
        with open(path, encoding="utf-8") as fh:
            rows = read_samples(list(json_objects(fh, str(path), "the samples file is damaged: re-run lm-eval")))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the samples file {path}: {exc}", SAMPLES_HINT) from None
    docs: dict[int, LoggedDoc] = {}
    for s in rows:
        doc_id = s.row.get("doc_id")
        if not isinstance(doc_id, int) or not isinstance(s.row.get("doc"), dict):
            raise ConfigError(f"{path}, line {s.lineno}: not an lm-eval sample (no doc_id or doc)", SAMPLES_HINT)
        entry = docs.setdefault(doc_id, LoggedDoc(doc_id, s.doc))
        names = s.row.get("metrics")
        for name in names if isinstance(names, list) else []:
            value = _metric_value(s.row.get(name)) if isinstance(name, str) else None
            if value is not None:
                entry.metrics[name if s.filter == "none" else f"{name}_{s.filter}"] = value
    return LoggedTask(task, path, list(docs.values()))


def read_runs(paths: list[str | Path], tasks: tuple[str, ...] = ()) -> list[LoggedTask]:
    """The benchmark tasks of lm-eval output folders or results files (`tasks`: only these), the
    latest run of each task when several runs hold it."""
    found: dict[str, LoggedTask] = {}
    for path in paths:
        for results_path in _results_files(Path(path)):
            try:
                data = json.loads(results_path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ConfigError(f"cannot read {results_path}: {exc}",
                                  "pass lm-eval's results_*.json files or the folders holding them") from None
            if not isinstance(data, dict) or not isinstance(data.get("configs"), dict):
                raise ConfigError(f"{results_path} is not an lm-eval results file (no 'configs')")
            date_id = results_path.stem.rsplit("_", 1)[-1]
            for task, config in data["configs"].items():
                if is_propme_task(task, config if isinstance(config, dict) else {}) or (tasks and task not in tasks):
                    continue
                samples = results_path.parent / f"samples_{task}_{date_id}.jsonl"
                if not samples.is_file():
                    raise ConfigError(f"missing samples file {samples} for task {task} of {results_path}", SAMPLES_HINT)
                found[task] = read_samples_file(samples, task)  # files come in date order: the latest wins
    missing = [t for t in tasks if t not in found]
    if missing:
        raise ConfigError(f"no samples of task(s) {', '.join(missing)} in {', '.join(map(str, paths))}",
                          "name tasks the runs hold (their results_*.json 'configs'), or leave out --tasks")
    if not found:
        raise ConfigError(f"the runs {', '.join(map(str, paths))} hold no benchmark task besides PropMe's",
                          "run lm-eval with your benchmark tasks next to PropMe's (e.g. --tasks propme_demo,arc_easy)")
    return list(found.values())


def logged_index_path(paths: list[str | Path]) -> str | None:
    """The index folder PropMe's own tasks of these runs traced against (their logged documents'
    `index_path`), or None when no PropMe task logged one."""
    for path in paths:
        for results_path in _results_files(Path(path)):
            date_id = results_path.stem.rsplit("_", 1)[-1]
            try:
                configs = json.loads(results_path.read_text(encoding="utf-8")).get("configs") or {}
                for task, config in configs.items():
                    samples = results_path.parent / f"samples_{task}_{date_id}.jsonl"
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
