"""Running the stock `lm_eval` command of this environment in a subprocess, offline, on the demo model."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

LM_EVAL = str(Path(sys.executable).parent / "lm_eval")


def run_lm_eval(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                    PROPME_CACHE_DIR=str(tmp_path / "cache"), **env)
    for key in ("PROPME_DYNAWORD_INDEX", "PROPME_COMMON_PILE_INDEX", "PROPME_DEMO_INDEX"):
        if key not in env:
            full_env.pop(key, None)
    return subprocess.run([LM_EVAL, *args], env=full_env, capture_output=True, text=True, cwd=tmp_path, timeout=900)


def model_args(demo_paths) -> list[str]:
    return ["--model", "hf", "--model_args", f"pretrained={demo_paths.model},dtype=float32", "--device", "cpu",
            "--batch_size", "8"]


def demo_metadata(demo_paths) -> str:
    return json.dumps({"demo_index": str(demo_paths.index), "prompt_free_generations": 8,
                       **{f"demo_{s}_prompts": str(demo_paths.prompts(s)) for s in ("generic", "specific", "prefix")}})


def samples_file(out: Path, task: str) -> Path:
    """The `samples_<task>_<date id>.jsonl` of exactly `task` under an lm-eval output folder.

    A glob `samples_<task>_*` would also match a longer task name that starts with this one
    (`propme_demo_prefix_likelihood`, the likelihood subtask's old name, for `propme_demo_prefix`)."""
    pattern = re.compile(rf"samples_{re.escape(task)}_\d{{4}}-\d\d-\d\dT[\d.-]+\.jsonl")
    found = sorted(p for p in out.rglob(f"samples_{task}_*.jsonl") if pattern.fullmatch(p.name))
    if not found:
        raise FileNotFoundError(f"no samples file of {task} under {out}")
    return found[-1]


def sidecar(out: Path) -> dict:
    """PropMe's `propme_<date id>.json` beside the newest `results_<date id>.json` under `out`."""
    results = max(out.rglob("results_*.json"), key=lambda p: p.name)
    return json.loads((results.parent / f"propme_{results.stem[len('results_'):]}.json").read_text())
