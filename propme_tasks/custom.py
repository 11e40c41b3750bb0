"""Task YAML for a custom corpus: `propme_<name>` with a subtask per setting (prompted and prompt-free)
and the prefix documents scored by likelihood (`propme_<name>_prefix_likelihood`).

The files include PropMe's shared template by absolute path (lm-eval resolves `include:` relative
to the including file otherwise), so regenerate them after moving the Python environment.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics.likelihood import LIKELIHOOD, MEASURE_KEY, SUBTASK_SUFFIX
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS, SETTINGS

from .discovery import tasks_path

#: the version of PropMe's task YAML (`metadata.version`), also written into custom tasks
TASK_VERSION = 4.0
#: the version of the likelihood subtask's YAML (`propme_<corpus>_prefix_likelihood`)
LIKELIHOOD_TASK_VERSION = 1.0


def write_corpus_tasks(name: str, index: str | Path, language: str, out_dir: str | Path) -> list[Path]:
    """Write `propme_<name>.yaml` (group) and one YAML per setting into `out_dir`; return their paths."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name in ("dynaword", "common_pile", "demo"):
        raise ConfigError(f"corpus name {name!r} must be lower-case letters, digits and '_' "
                          "and not one of PropMe's own (dynaword, common_pile, demo)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for setting in SETTINGS:
        # prompt-free settings sample (greedy decoding would repeat one generation)
        template = Path(tasks_path(), "_sampling_template_yaml" if setting in PROMPT_FREE_SETTINGS
                        else "_default_template_yaml")
        path = out / f"propme_{name}_{setting}.yaml"
        _write_yaml(path, {"include": str(template), "task": f"propme_{name}_{setting}",
                           "metadata": {"version": TASK_VERSION, "corpus": name, "setting": setting,
                                        "language": language, f"{name}_index": str(Path(index).absolute())}})
        written.append(path)
    likelihood = f"propme_{name}_{SUBTASK_SUFFIX}"  # the prefix documents scored by likelihood
    path = out / f"{likelihood}.yaml"
    _write_yaml(path, {"include": str(Path(tasks_path(), "_likelihood_template_yaml")), "task": likelihood,
                       "metadata": {"version": LIKELIHOOD_TASK_VERSION, "corpus": name, "setting": PREFIX,
                                    MEASURE_KEY: LIKELIHOOD, "language": language,
                                    f"{name}_index": str(Path(index).absolute())}})
    written.append(path)
    group = out / f"propme_{name}.yaml"
    _write_yaml(group, {"group": f"propme_{name}", "task": [f"propme_{name}_{s}" for s in SETTINGS] + [likelihood],
                        "metadata": {"version": TASK_VERSION}})
    return [group, *written]


def _write_yaml(path: Path, data: dict) -> None:
    """YAML written by a YAML library: paths with '#', ':' or quotes stay intact."""
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
