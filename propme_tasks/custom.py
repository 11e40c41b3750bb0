"""Task YAML for a custom corpus: `propme_<name>` with a subtask per setting (prompted and prompt-free)
and the prefix documents scored by likelihood (`propme_<name>_likelihood`).

The files include PropMe's shared template by absolute path (lm-eval resolves `include:` relative
to the including file otherwise), so regenerate them after moving the Python environment.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import write_atomic
from propme_metrics.prompts.settings import (
    LIKELIHOOD,
    MEASURE_KEY,
    PREFIX,
    PROMPT_FREE_SETTINGS,
    SETTINGS,
    SUBTASK_SUFFIX,
    task_name,
)

from .discovery import tasks_path
from .lmeval_results import PM_ENTRY

#: the version of PropMe's task YAML (`metadata.version`), also written into custom tasks
TASK_VERSION = 7.0
#: the version of the likelihood subtask's YAML (`propme_<corpus>_likelihood`)
LIKELIHOOD_TASK_VERSION = 3.0


def shipped_corpora() -> tuple[str, ...]:
    """The corpora PropMe ships tasks for: the task folders that hold a `_propme_<corpus>.yaml` group."""
    root = Path(tasks_path())
    return tuple(sorted(p.name for p in root.iterdir() if (p / f"_propme_{p.name}.yaml").is_file()))


def write_corpus_tasks(name: str, index: str | Path, language: str, out_dir: str | Path) -> list[Path]:
    """Write `propme_<name>.yaml` (group) and one YAML per setting into `out_dir`; return their paths.
    The index must open and the language have a built-in prompt set: a task that cannot run is
    refused here, not when lm-eval first loads it."""
    from propme_metrics.index.reader import open_index
    from propme_metrics.prompts.prompt_set import available_languages

    shipped = shipped_corpora()
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name in shipped:
        raise ConfigError(f"corpus name {name!r} must be lower-case letters, digits and '_' "
                          f"and not one of PropMe's own ({', '.join(shipped)})")
    if language not in available_languages():
        raise ConfigError(f"--language {language!r} has no built-in prompt set; available: "
                          f"{', '.join(available_languages())}", "pass one of those")
    open_index(index)  # IndexFormatError (exit 3) naming what is missing or broken
    out = Path(out_dir)
    group_path = out / f"{task_name(name)}.yaml"
    files: dict[Path, dict] = {group_path: {
        "group": task_name(name), "task": [task_name(name, s) for s in SETTINGS],
        "aggregate_metric_list": [{"metric": PM_ENTRY}], "metadata": {"version": TASK_VERSION}}}
    for setting in SETTINGS:
        # prompt-free settings sample (greedy decoding would repeat one generation)
        template = Path(tasks_path(), "_sampling_template_yaml" if setting in PROMPT_FREE_SETTINGS
                        else "_default_template_yaml")
        files[out / f"{task_name(name, setting)}.yaml"] = {
            "include": str(template), "task": task_name(name, setting),
            "metadata": {"version": TASK_VERSION, "corpus": name, "setting": str(setting),
                         "language": language, f"{name}_index": str(Path(index).absolute())}}
    likelihood = task_name(name, SUBTASK_SUFFIX)  # the prefix documents scored by likelihood
    files[out / f"{likelihood}.yaml"] = {
        "include": str(Path(tasks_path(), "_likelihood_template_yaml")), "task": likelihood,
        "metadata": {"version": LIKELIHOOD_TASK_VERSION, "corpus": name, "setting": str(PREFIX),
                     MEASURE_KEY: LIKELIHOOD, "language": language, f"{name}_index": str(Path(index).absolute())}}
    files[group_path]["task"].append(likelihood)
    theirs = [p for p, data in files.items() if p.exists() and not _written_by_propme(p, data)]
    if theirs:
        raise ConfigError(f"{', '.join(map(str, theirs))} already exist{'s' if len(theirs) == 1 else ''} and "
                          "{} not written by `propme tasks-new`".format("is" if len(theirs) == 1 else "are"),
                          "choose another --out or another corpus name; PropMe never overwrites files it did "
                          "not write")
    out.mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        _write_yaml(path, data)
    return list(files)


def _written_by_propme(path: Path, data: dict) -> bool:
    """Whether the YAML at `path` is an earlier `tasks-new` file of the same group or task, or an empty
    file (an earlier PropMe's write cut short; both replaced on a re-run); anything else there is the user's."""
    try:
        if path.is_file() and path.stat().st_size == 0:  # what a write cut short (a full disk) left: PropMe's
            return True
        old = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    if not isinstance(old, dict) or set(old) != set(data):
        return False
    same_template = "include" not in data or Path(str(old["include"])).name == Path(data["include"]).name
    return same_template and old.get("task") == data["task"] and old.get("group") == data.get("group")


def _write_yaml(path: Path, data: dict) -> None:
    """YAML written by a YAML library (paths with '#', ':' or quotes stay intact), atomically: a full
    disk leaves the earlier file or none, never a part of one."""
    try:
        write_atomic(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}",
                          "free some space (or fix the folder's permissions) and run `propme tasks-new` again") from None
