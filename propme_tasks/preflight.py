"""PropMe's tasks checked before the model loads: `lm_eval` builds tasks only after loading the
model (minutes for a real one), so a missing index or prompt file, or an index whose tokenizer does
not match, would be reported only then; `lm_eval validate` checks only that the names exist.

The start-up hook (`discovery.install`) wraps lm-eval's `EvaluatorConfig.process_tasks` (the
`lm_eval` command resolves its task names there, before `simple_evaluate` loads the model) and
`Validate._execute` (`lm_eval validate`): each builds PropMe's tasks among the names given, which
runs every check of `hooks.load_prompts` (index, its tokenizer, start token, prompt files, sizes).
A failure stops the command with PropMe's one-paragraph message. The datasets built before the
model loads are handed to lm-eval's own build of the same tasks (`hooks.handed_over`), so nothing
is built twice.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from propme_metrics.core.errors import PropMeError

from . import hooks
from .lmeval_results import PM_ENTRY, wrap


def _is_propme(entry: Any) -> bool:
    """A task whose YAML names PropMe's hooks, or a group whose row is PropMe's PM."""
    cfg = getattr(entry, "cfg", None)
    if not isinstance(cfg, dict):
        return False
    if "group" in cfg:
        entries = cfg.get("aggregate_metric_list") or []
        entries = entries if isinstance(entries, list) else [entries]
        return any(isinstance(e, dict) and e.get("metric") == PM_ENTRY for e in entries)
    return "propme_tasks." in str(cfg.get("class", "")) + str(cfg.get("custom_dataset", ""))


def propme_names(manager: Any, names: Sequence[str]) -> list[str]:
    """The names among `names` (patterns expanded by lm-eval) that are PropMe's tasks or groups."""
    index = getattr(manager, "task_index", None) or {}
    return [n for n in manager.match_tasks(list(names)) if _is_propme(index.get(n))]


def build(manager: Any, names: Sequence[str]) -> None:
    """Build PropMe's tasks among `names` now (every check of their loaders runs), keeping their
    datasets for lm-eval's own build of the same tasks."""
    ours = propme_names(manager, names)
    if ours:
        with hooks.building_ahead():
            manager.load(ours)


def _task_names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [t for t in value.split(",") if t]
    return [t for item in value or [] if isinstance(item, str) for t in item.split(",") if t]


def patch_evaluate_config(module: Any) -> None:
    """Wrap `EvaluatorConfig.process_tasks`: PropMe's tasks are built before the model loads."""
    def make(original):
        def process_tasks(self, *args: Any, **kwargs: Any):
            manager = original(self, *args, **kwargs)
            build(manager, _task_names(self.tasks))
            return manager
        return process_tasks

    wrap(getattr(module, "EvaluatorConfig", None), "process_tasks", make)


def patch_validate(module: Any) -> None:
    """Wrap `lm_eval validate`: PropMe's tasks are built as a run would build them, and what is
    missing is said (exit 1), before lm-eval's own check of the names."""
    def make(original):
        def _execute(self, args: Any) -> None:
            from lm_eval.tasks import TaskManager

            manager = TaskManager(include_path=getattr(args, "include_path", None))
            failed = []
            with hooks.command("lm_eval validate"):
                for name in propme_names(manager, _task_names(getattr(args, "tasks", ""))):
                    try:
                        with hooks.building_ahead(keep=False):
                            manager.load([name])
                    except PropMeError as exc:
                        failed.append(f"{name}: {exc}")
            if failed:
                print("PropMe: these tasks cannot run as configured:\n" + "\n".join(f"- {f}" for f in failed),
                      file=sys.stderr)
                sys.exit(1)
            return original(self, args)
        return _execute

    wrap(getattr(module, "Validate", None), "_execute", make)
