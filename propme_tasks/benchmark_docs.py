"""Benchmark items through lm-eval's own task code: the documents of any task lm-eval knows
(`TaskManager`, local YAML tasks through `include_path`), and the texts a task exposes of a
document, from its `doc_to_text` / `doc_to_target` / `doc_to_choice` (never the few-shot context).

This is the only part of the contamination check that imports lm-eval (`propme_metrics` must not).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.runs import LoggedDoc
from propme_metrics.core.errors import ConfigError

INCLUDE_HINT = ("name tasks that `lm_eval ls tasks` lists; for local YAML tasks pass their folder with "
                "--include-path (and have the datasets the tasks read available)")


def load_tasks(names: Sequence[str], include_path: str | None = None) -> dict[str, Any]:
    """lm-eval's task objects by name (groups and tags expand to their tasks); their datasets are
    loaded as lm-eval loads them. ConfigError for a name lm-eval does not know or cannot load."""
    manager = _task_manager(names, include_path)
    unknown = [n for n in names if not manager.match_tasks([n])]
    if unknown:
        raise ConfigError(f"lm-eval knows no task {', '.join(map(repr, unknown))}", INCLUDE_HINT)
    try:
        tasks = manager.load(list(names))["tasks"]
    except Exception as exc:  # lm-eval raises many kinds while loading a task or its dataset
        raise ConfigError(f"lm-eval could not load the task(s) {', '.join(names)}: {type(exc).__name__}: "
                          f"{str(exc)[:300]}", INCLUDE_HINT) from None
    return dict(tasks)


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
    """BenchmarkItems of logged documents (`--log_samples`), with their metric values."""
    return [BenchmarkItem(name, d.doc_id, *_texts(name, task, d.doc, d.doc_id), metrics=dict(d.metrics)) for d in docs]


def task_items(name: str, task: Any, limit: int | None = None) -> list[BenchmarkItem]:
    """BenchmarkItems of a task's evaluation documents (no model run: no metric values), doc_id as
    lm-eval numbers them."""
    items = []
    for doc_id, doc in enumerate(task.eval_docs):
        if limit is not None and doc_id >= limit:
            break
        items.append(BenchmarkItem(name, doc_id, *_texts(name, task, doc, doc_id)))
    return items
