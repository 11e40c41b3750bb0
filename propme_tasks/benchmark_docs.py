"""Benchmark items through lm-eval's own task code: the documents of any task lm-eval knows
(`TaskManager`, local YAML tasks through `include_path`), the tasks of a run rebuilt from the configs
its results file recorded, and the texts a task exposes of a document, from its `doc_to_text` /
`doc_to_target` / `doc_to_choice` (never the few-shot context).

This is the only part of the contamination check that imports lm-eval (`propme_metrics` must not).
"""
from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.runs import LoggedDoc, LoggedTask
from propme_metrics.core.errors import ConfigError

INCLUDE_HINT = ("name tasks that `lm_eval ls tasks` lists; for local YAML tasks pass their folder with "
                "--include-path (and have the datasets the tasks read available)")


#: how lm-eval records a Python function of a task's config (its source, or its repr): not rebuilt from text
_CODE = re.compile(r"\s*(?:async\s+)?def\s+\w+\s*\(|\s*lambda\b[^:]*:|<function |<bound method |functools\.partial\(")


def load_tasks(names: Sequence[str], include_path: str | None = None) -> dict[str, Any]:
    """lm-eval's task objects by name (groups and tags expand to their tasks); their datasets are
    loaded as lm-eval loads them. ConfigError for a name lm-eval does not know or cannot load, and
    for an `include_path` that is no folder of task YAML, saying what is wrong with it."""
    check_include_path(include_path)
    manager = _task_manager(names, include_path)
    unknown = [n for n in names if not manager.match_tasks([n])]
    if unknown:
        raise ConfigError(f"lm-eval knows no task {', '.join(map(repr, unknown))}"
                          + ("" if include_path is None else _include_path_problem(Path(include_path))), INCLUDE_HINT)
    return _load(manager, list(names))


def _load(manager: Any, specs: list[Any]) -> dict[str, Any]:
    """`manager.load(specs)`'s tasks; ConfigError naming the tasks when lm-eval cannot load them."""
    try:
        return dict(manager.load(specs)["tasks"])
    except Exception as exc:  # lm-eval raises many kinds while loading a task or its dataset
        names = [s if isinstance(s, str) else str(s.get("task")) for s in specs]
        raise ConfigError(f"lm-eval could not load the task(s) {', '.join(names)}: {type(exc).__name__}: "
                          f"{str(exc)[:300]}", INCLUDE_HINT) from None


def check_include_path(include_path: str | None) -> None:
    """ConfigError when `include_path` (lm-eval's --include_path) is given and is not a folder."""
    if include_path is None:
        return
    path = Path(include_path)
    if not path.exists():
        raise ConfigError(f"--include-path {path} does not exist", "pass the folder that holds the task's YAML files")
    if not path.is_dir():
        raise ConfigError(f"--include-path {path} is a file, not a folder: lm-eval reads the *.yaml files of a folder",
                          f"pass the folder holding it: --include-path {path.parent}")


class _TagsIgnored(yaml.SafeLoader):
    """YAML as lm-eval's task files write it: `!function` and other tags parse (to None)."""


_TagsIgnored.add_multi_constructor("!", lambda loader, suffix, node: None)


def _include_path_problem(folder: Path) -> str:
    """Why a folder of local tasks defines no task: YAML that does not parse, or no YAML at all."""
    files = sorted(folder.rglob("*.yaml"))
    if not files:
        return f": --include-path {folder} holds no *.yaml task file"
    broken = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as fh:
                yaml.load(fh, Loader=_TagsIgnored)  # noqa: S506 (a SafeLoader)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            broken.append(f"{path}: {' '.join(str(exc).split())[:200]}")
    if broken:
        return (f": YAML under --include-path {folder} does not parse, so lm-eval skips it: {broken[0]}"
                + (f" (and {len(broken) - 1} more file(s))" if len(broken) > 1 else ""))
    return f": none of the {len(files)} YAML file(s) under --include-path {folder} defines it"


def recorded_code(config: dict[str, Any]) -> list[str]:
    """The fields of a recorded task config that hold Python code (a `class`, or a function lm-eval
    wrote out as its source), which a task cannot be rebuilt from."""
    found = ["class"] if "class" in config else []
    for key, value in config.items():
        values = value if isinstance(value, list) else [value]
        for v in values:
            texts = v.values() if isinstance(v, dict) else [v]
            if any(isinstance(t, str) and _CODE.match(t) for t in texts):
                found.append(str(key))
                break
    return found


def run_tasks(logged: Sequence[LoggedTask], include_path: str | None = None) -> dict[str, Any]:
    """lm-eval's task objects of the runs' tasks: from `include_path` when given (lm-eval's own
    lookup, as `load_tasks`), else rebuilt from the config each run's results file recorded, so a
    run folder alone suffices. A task whose config holds Python code (a function of a local module)
    is looked up by name among lm-eval's tasks instead; ConfigError when lm-eval knows it not."""
    if include_path is not None:
        return load_tasks([t.task for t in logged], include_path)
    from lm_eval.tasks import TaskManager

    rebuilt = [not recorded_code(t.config) and t.config.get("task") == t.task for t in logged]
    plain = [copy.deepcopy(t.config) for t, ok in zip(logged, rebuilt) if ok]
    coded = [t for t, ok in zip(logged, rebuilt) if not ok]
    tasks = _load(TaskManager(include_defaults=False), plain) if plain else {}
    if coded:
        manager = TaskManager()
        unknown = [t for t in coded if not manager.match_tasks([t.task])]
        if unknown:
            t = unknown[0]
            raise ConfigError(f"task {t.task}: the config its run recorded holds Python code "
                              f"({', '.join(recorded_code(t.config)) or 'no task name'}), which PropMe does not "
                              "run from a results file, and lm-eval knows no task of that name",
                              "pass --include-path with the folder of the task's YAML (and its Python module)")
        tasks.update(_load(manager, [t.task for t in coded]))
    return tasks


def _task_manager(names: Sequence[str], include_path: str | None) -> Any:
    """lm-eval's TaskManager for `names`. When each name is a task of the --include-path folder (no
    pattern, group or tag), a manager of that folder alone loads the same tasks, since lm-eval lets an
    included folder override its built-in tasks; it saves indexing the ~15k built-in task files."""
    from lm_eval.tasks import TaskManager

    if include_path is not None and not any(c in name for name in names for c in "*?["):
        local = TaskManager(include_path=include_path, include_defaults=False)
        if set(names) <= set(local.all_subtasks):
            return local
    return TaskManager(include_path=include_path)


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (list, tuple)) and value else value


def _choice_text(choices: list[Any], target: Any) -> str:
    """The gold choice's text for a target given as an index, a list of indices or a string."""
    target = _first(target)
    if isinstance(target, int) and 0 <= target < len(choices):
        return str(choices[target])
    if isinstance(target, str) and target.strip().isdigit() and int(target) < len(choices):
        return str(choices[int(target)])
    return str(target)


def item_texts(task: Any, doc: dict[str, Any]) -> tuple[str, str, str]:
    """(question, answer, joined) of a document as the task exposes them: the question is
    `doc_to_text`, the answer `doc_to_target` (the gold choice's text for multiple choice), joined
    with the task's target delimiter. A task with several contexts (`multiple_input`) gives the
    gold context as the question; a rolling-loglikelihood task has only the text to score."""
    delimiter = task.config.target_delimiter or ""
    kind = task.OUTPUT_TYPE
    if kind == "loglikelihood_rolling":
        text = str(task.doc_to_target(doc))
        return "", text, text
    if kind == "multiple_choice":
        choices = task.doc_to_choice(doc)
        if getattr(task, "multiple_input", 0):
            question, answer = _choice_text(choices, task.doc_to_text(doc)), str(_first(task.doc_to_target(doc)))
        else:
            question, answer = str(task.doc_to_text(doc)), _choice_text(choices, task.doc_to_target(doc))
    else:
        question, answer = str(task.doc_to_text(doc)), str(_first(task.doc_to_target(doc)))
    joined = question + delimiter + answer if question and answer else question or answer
    return question, answer, joined


def _texts(name: str, task: Any, doc: dict[str, Any], doc_id: int) -> tuple[str, str, str]:
    """`item_texts`, with a failure of the task's own code named (task, document) as a ConfigError."""
    try:
        return item_texts(task, doc)
    except Exception as exc:  # the task's doc_to_* code may raise anything on a document it cannot read
        raise ConfigError(f"task {name}: its doc_to_text/doc_to_target/doc_to_choice failed on document {doc_id} "
                          f"({type(exc).__name__}: {str(exc)[:200]})",
                          "check that the task lm-eval builds now is the one the run used (same YAML, "
                          "--include-path)") from None


def items_from_docs(name: str, task: Any, docs: Iterable[LoggedDoc]) -> list[BenchmarkItem]:
    """BenchmarkItems of logged documents (`--log_samples`), with each model's metric values."""
    return [BenchmarkItem(name, d.doc_id, *_texts(name, task, d.doc, d.doc_id),
                          metrics={model: dict(values) for model, values in d.metrics.items()}) for d in docs]


def logged_items(logged: Sequence[LoggedTask], include_path: str | None = None,
                 limit: int | None = None) -> list[tuple[str, list[BenchmarkItem]]]:
    """(task, items) of the runs' tasks (`run_tasks`), the first `limit` logged documents of each
    (by doc_id) when given."""
    tasks = run_tasks(logged, include_path)
    return [(t.task, items_from_docs(t.task, tasks[t.task], t.docs[:limit])) for t in logged]


def task_items(name: str, task: Any, limit: int | None = None) -> list[BenchmarkItem]:
    """BenchmarkItems of a task's evaluation documents (no model run: no metric values), doc_id as
    lm-eval numbers them."""
    items = []
    for doc_id, doc in enumerate(task.eval_docs):
        if limit is not None and doc_id >= limit:
            break
        items.append(BenchmarkItem(name, doc_id, *_texts(name, task, doc, doc_id)))
    return items
