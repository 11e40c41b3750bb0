"""PropMe's lm-eval side: task discovery, the metric hooks named by the task YAML, and API helpers."""
from __future__ import annotations

from .discovery import tasks_path


def task_manager(include_defaults: bool = False, metadata: dict | None = None, **kwargs):
    """A TaskManager that knows PropMe's tasks, for `lm_eval.simple_evaluate(..., task_manager=...)`.

    With `include_defaults=False` lm-eval skips indexing its ~15k built-in tasks (about 6 s).
    Pass index paths and other options as `metadata`, e.g. {"dynaword_index": "/data/idx",
    "tokenizer": "<the model's id or folder>"} (the tasks read the model's document-start token
    from it): `simple_evaluate(metadata=...)` and its `model_args` do not reach the tasks when a
    task manager is given.
    """
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=tasks_path(), include_defaults=include_defaults, metadata=metadata, **kwargs)


__all__ = ["tasks_path", "task_manager"]
