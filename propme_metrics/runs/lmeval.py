"""lm-eval runs read into typed runs, once: each results file a RUN names (`runs.files`) as an
`LmEvalRun` (model identity, --limit, chat template) with its tasks, each an `LmEvalTask` of one
kind: one of PropMe's traced generation tasks, PropMe's likelihood subtask, or another benchmark.

Which tasks are PropMe's is decided here alone (`task_kind`): by the corpus and setting (or the
likelihood measure) their metadata records, else by the whole task name, never by a name's prefix
alone, so `propme_<corpus>_prefix` and a task whose name merely starts with it are told apart.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.names import StrEnum
from propme_metrics.prompts.settings import (
    LIKELIHOOD,
    MEASURE_KEY,
    OLD_SUBTASK_SUFFIX,
    SETTINGS,
    SUBTASK_SUFFIX,
    TASK_PREFIX,
)
from propme_metrics.runs.files import (
    chat_template_sha,
    date_id,
    model_identity,
    read_results,
    results_files,
    run_limit,
    samples_path_of,
)
from propme_metrics.runs.samples import SAMPLES_HINT, SampleRow, read_samples_file


class TaskKind(StrEnum):
    """What a task of an lm-eval run is to PropMe."""

    GENERATION = "generation"   #: a PropMe setting's task (`propme_<corpus>_<setting>`): traced generations
    LIKELIHOOD = "likelihood"   #: PropMe's likelihood subtask (`propme_<corpus>_likelihood`, or its old name)
    BENCHMARK = "benchmark"     #: any other task (checked by `propme contamination`)


def _metadata(config: Mapping[str, Any]) -> dict[str, Any]:
    metadata = config.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def is_likelihood_config(name: str, config: Mapping[str, Any]) -> bool:
    """Whether a task is the likelihood subtask: its metadata's measure, or a loglikelihood task
    named `propme_<corpus>_<SUBTASK_SUFFIX>` (or its old name, `..._<OLD_SUBTASK_SUFFIX>`)."""
    return _metadata(config).get(MEASURE_KEY) == LIKELIHOOD or (
        config.get("output_type") == "loglikelihood" and _likelihood_corpus(str(config.get("task", name))) is not None)


def _likelihood_corpus(name: str) -> str | None:
    """The corpus of a likelihood subtask's name (`propme_<corpus>_<SUBTASK_SUFFIX>`, or the old
    `..._<OLD_SUBTASK_SUFFIX>` of runs made before task version 3.0), None for another name."""
    for suffix in (f"_{OLD_SUBTASK_SUFFIX}", f"_{SUBTASK_SUFFIX}"):  # the longer first
        if name.startswith(TASK_PREFIX) and name.endswith(suffix) and len(name) > len(TASK_PREFIX) + len(suffix):
            return name[len(TASK_PREFIX):-len(suffix)]
    return None


def corpus_setting(name: str, metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """(corpus, setting) of a PropMe generation task: from its metadata, else from its whole name
    `propme_<corpus>_<setting>` (a known setting first, else the last part); None for another task."""
    corpus, setting = metadata.get("corpus"), metadata.get("setting")
    if corpus and setting:
        return str(corpus), str(setting)
    if not name.startswith(TASK_PREFIX):
        return None
    rest = name[len(TASK_PREFIX):]
    for s in sorted(SETTINGS, key=len, reverse=True):
        if rest.endswith("_" + s) and len(rest) > len(s) + 1:
            return str(corpus or rest[: -len(s) - 1]), str(setting or s)
    if "_" in rest:
        c, s = rest.rsplit("_", 1)
        return str(corpus or c), str(setting or s)
    return None


def task_kind(name: str, config: Mapping[str, Any]) -> tuple[TaskKind, str | None, str | None]:
    """(kind, corpus, setting) of a task of a results file; corpus and setting None where they do not apply."""
    metadata = _metadata(config)
    if is_likelihood_config(name, config):
        return TaskKind.LIKELIHOOD, str(metadata.get("corpus") or _likelihood_corpus(name) or ""), None
    cs = corpus_setting(name, metadata)
    if cs is not None:
        return TaskKind.GENERATION, cs[0], cs[1]
    return TaskKind.BENCHMARK, None, None


@dataclass(frozen=True)
class LmEvalTask:
    """One task of an lm-eval results file: its config as recorded, what it is to PropMe, lm-eval's
    aggregates for it and where its samples file is."""

    name: str
    kind: TaskKind
    config: dict[str, Any]
    metadata: dict[str, Any]
    corpus: str | None
    setting: str | None
    samples_path: Path
    results_path: Path
    results: dict[str, Any] = field(default_factory=dict)   #: "<metric>,<filter>" -> value
    higher_is_better: dict[str, bool] = field(default_factory=dict)   #: lm-eval's direction of each metric

    def check_samples(self) -> Path:
        """The samples file; ConfigError when lm-eval did not write it (no --log_samples)."""
        if not self.samples_path.is_file():
            raise ConfigError(f"missing samples file {self.samples_path} for task {self.name} of {self.results_path}",
                              SAMPLES_HINT)
        return self.samples_path

    def samples(self) -> list[SampleRow]:
        """The rows of its samples file (`runs.samples`)."""
        return read_samples_file(self.check_samples())


@dataclass(frozen=True)
class LmEvalRun:
    """One lm-eval results file: the model that ran (model, revision, model_args as shown), its
    date id, --limit (None: a full run), chat template and tasks."""

    results_path: Path
    date_id: str
    model: str
    revision: str
    model_args: str
    limit: float | None
    chat_template_sha: str | None
    tasks: tuple[LmEvalTask, ...]

    @property
    def label(self) -> str:
        """The model as outputs name it: `model`, or `model@revision`."""
        return f"{self.model}@{self.revision}" if self.revision else self.model

    def of_kind(self, kind: TaskKind) -> list[LmEvalTask]:
        return [t for t in self.tasks if t.kind == kind]


def read_results_file(results_path: Path) -> LmEvalRun:
    """An lm-eval results file as an `LmEvalRun`; ConfigError naming the file when it is none."""
    data = read_results(results_path)
    model, revision, model_args = model_identity(data)
    better = data.get("higher_is_better") or {}
    aggregates = data.get("results") or {}
    tasks = []
    for name, config in data["configs"].items():
        name, config = str(name), config if isinstance(config, dict) else {}
        kind, corpus, setting = task_kind(name, config)
        tasks.append(LmEvalTask(name, kind, config, _metadata(config), corpus, setting,
                                samples_path_of(results_path, name), results_path, aggregates.get(name) or {},
                                {str(k): bool(v) for k, v in (better.get(name) or {}).items()}))
    return LmEvalRun(results_path, date_id(results_path), model, revision, model_args,
                     run_limit(data, results_path), chat_template_sha(data), tuple(tasks))


def read_run(path: str | Path) -> list[LmEvalRun]:
    """Every results file of a RUN (an lm-eval --output_path folder, or one results file), by date."""
    return [read_results_file(p) for p in results_files(Path(path))]
