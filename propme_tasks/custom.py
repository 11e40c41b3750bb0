"""Task YAML for a custom corpus: `propme_<name>` with a subtask per setting (prompted and prompt-free).

The files include PropMe's shared template by absolute path (lm-eval resolves `include:` relative
to the including file otherwise), so regenerate them after moving the Python environment.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from propme_metrics.core.errors import ConfigError
from propme_metrics.prompts.settings import PROMPT_FREE_SETTINGS, SETTINGS

from .discovery import tasks_path



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
        q = json.dumps  # JSON strings are valid YAML scalars: paths with '#', ':' or quotes stay intact
        path.write_text(
            f"include: {q(str(template))}\n"
            f"task: propme_{name}_{setting}\n"
            "metadata:\n"
            "  version: 3.0\n"
            f"  corpus: {name}\n"
            f"  setting: {setting}\n"
            f"  language: {q(language)}\n"
            f"  {name}_index: {q(str(Path(index).absolute()))}\n")
        written.append(path)
    group = out / f"propme_{name}.yaml"
    group.write_text(f"group: propme_{name}\ntask:\n" + "".join(f"  - propme_{name}_{s}\n" for s in SETTINGS)
                     + "metadata:\n  version: 3.0\n")
    return [group, *written]
