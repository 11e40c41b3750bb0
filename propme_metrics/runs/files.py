"""lm-eval output folders as files: the results files a folder holds (as lm-eval names them), the
samples file of each task beside them, and a results file's JSON, model, --limit and chat
template. The one place that finds and reads them (`runs.lmeval` reads them into typed runs)."""
from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import scrub_surrogates


def read_json(path: Path) -> Any:
    """A JSON file (lone surrogates scrubbed); ConfigError naming the file when it is unreadable or no JSON."""
    try:
        with open(path, encoding="utf-8") as fh:
            return scrub_surrogates(json.load(fh))[0]  # a "\ud800" in a model name cannot be written out
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc})",
                          "pass lm-eval's results_*.json files or the folders holding them") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def _parse_model_args(model_args: Any) -> dict[str, str]:
    if isinstance(model_args, dict):
        return {str(k): "" if v is None else str(v) for k, v in model_args.items()}
    out: dict[str, str] = {}
    for part in str(model_args or "").split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def model_identity(results: dict[str, Any]) -> tuple[str, str, str]:
    """(model, revision, model_args as shown) of the run a results file records."""
    config = results.get("config") or {}
    raw_args = config.get("model_args")
    args = _parse_model_args(raw_args)
    model = (args.get("pretrained") or args.get("model") or args.get("path") or results.get("model_name")
             or config.get("model") or "unknown model")
    revision = args.get("revision") or ""
    shown = raw_args if isinstance(raw_args, str) else json.dumps(raw_args or {}, sort_keys=True)
    return str(model), str(revision), shown


def date_id(results_path: Path) -> str:
    """The date id of a results file, which its samples files end in: results_<date id>.json, or
    <name>_<date id>.json when lm-eval's --output_path ended in .json."""
    return results_path.stem.rsplit("_", 1)[-1] if "_" in results_path.stem else results_path.stem


#: an lm-eval results file: results_<date id>.json, or <name>_<date id>.json when --output_path ended in .json
RESULTS_FILE = re.compile(r".+_\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(\.\d+)?\.json")
#: PropMe's own file beside a results file (`propme_<date id>.json`): never read as one
SIDECAR_PREFIX = "propme_"


def results_files(path: Path) -> list[Path]:
    """The lm-eval results files `path` names: the file itself, or those under the folder (by date).
    ConfigError when there are none, naming any file that looks like one but is not named as
    lm-eval names them (its samples files could not be matched)."""
    if path.is_file():
        return [path]
    if path.is_dir():
        found = [p for p in path.rglob("*.json") if p.is_file()]
        files = [p for p in found if RESULTS_FILE.fullmatch(p.name) and not p.name.startswith(SIDECAR_PREFIX)]
        if files:
            return sorted(files, key=lambda p: (date_id(p), str(p)))
        near = sorted(p for p in found if p.name.startswith("results"))
        if near:
            shown = ", ".join(str(p.relative_to(path)) for p in near[:3]) + (" ..." if len(near) > 3 else "")
            raise ConfigError(f"no lm-eval results file under {path}: {shown} is not named as lm-eval names them "
                              "(results_<YYYY-MM-DDTHH-MM-SS.ffffff>.json, the date id its samples_<task>_<date "
                              "id>.jsonl files end in), so it is not read as one",
                              "pass the results file itself (its samples files must end in the same date id), "
                              "or keep the names lm-eval wrote")
        raise ConfigError(f"no results_*.json (nor <name>_<date>.json of an --output_path ending in .json) "
                          f"under {path}", "pass the --output_path folder of an lm-eval run made with --log_samples")
    raise ConfigError(f"{path} does not exist", "pass the --output_path folder of an lm-eval run")


def samples_path_of(results_path: Path, task: str) -> Path:
    """The samples file lm-eval writes beside a results file for `task` (--log_samples)."""
    return results_path.parent / f"samples_{task}_{date_id(results_path)}.jsonl"


def read_results(results_path: Path) -> dict[str, Any]:
    """An lm-eval results file's JSON; ConfigError, naming the file, when it is none."""
    data = read_json(results_path)
    if not isinstance(data, dict) or not isinstance(data.get("configs"), dict):
        raise ConfigError(f"{results_path} is not an lm-eval results file (no 'configs')",
                          "pass lm-eval's results_*.json files or the folders holding them")
    return data


def run_limit(data: dict[str, Any], path: Path) -> float | None:
    """lm-eval's --limit of a results file (a count, or a share when below 1); None for a full run."""
    limit = (data.get("config") or {}).get("limit")
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit <= 0:
        raise ConfigError(f"{path}: config.limit is {limit!r}, not a positive number")
    return float(limit)


def chat_template_sha(results: dict[str, Any]) -> str | None:
    """The sha256 of the chat template an lm-eval results file says its prompts went through
    (`chat_template_sha`, or the hash of `chat_template`, as lm-eval computes it); None for plain prompts."""
    sha, template = results.get("chat_template_sha"), results.get("chat_template")
    if isinstance(sha, str) and sha:
        return sha
    if isinstance(template, str) and template:
        return hashlib.sha256(template.encode("utf-8")).hexdigest()
    return None
