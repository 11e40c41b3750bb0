"""The official Every Eval Ever validator (`every-eval-ever==0.3.0`, which declares Python 3.12), in a
virtual environment of its own, made once per machine; tests using it are skipped, with the reason,
where Python 3.12 or the package cannot be had. Nothing of it is vendored."""
from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

VERSION = "0.3.0"
#: where the validator's environment is kept between test runs (PROPME_EEE_VALIDATOR_VENV overrides)
VENV = Path(os.environ.get("PROPME_EEE_VALIDATOR_VENV")
            or Path.home() / ".cache" / "propme" / f"every-eval-ever-{VERSION}")

def _python312() -> str | None:
    """A Python 3.12 that runs: pyenv's installed 3.12 versions, then `python3.12` on PATH (a pyenv
    shim there runs only where 3.12 is selected, so each candidate is tried)."""
    pyenv = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = sorted(glob.glob(os.path.join(pyenv, "versions", "3.12*", "bin", "python3.12")), reverse=True)
    candidates += [p for p in (shutil.which("python3.12"),) if p]
    for candidate in candidates:
        if subprocess.run([candidate, "-c", "import venv"], capture_output=True).returncode == 0:
            return candidate
    return None


def validator_python() -> str:
    """The validator environment's interpreter, made if need be; skips the test where it cannot be."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / f"{VENV.name}.lock", "w") as lock:  # test workers make it one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _made()


def _made() -> str:
    python = VENV / "bin" / "python"
    probe = [str(python), "-c", f"import every_eval_ever.validator.validation_core; "
             f"from importlib.metadata import version; assert version('every-eval-ever') == '{VERSION}'"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(python)
    base = _python312()
    if base is None:
        pytest.skip("the official Every Eval Ever validator needs Python 3.12, which is not installed "
                    "(pyenv install 3.12, or the distribution's python3.12)")
    made = subprocess.run([base, "-m", "venv", "--clear", str(VENV)], capture_output=True, text=True)
    if made.returncode == 0:
        made = subprocess.run([str(python), "-m", "pip", "install", "-q", f"every-eval-ever=={VERSION}"],
                              capture_output=True, text=True, timeout=900)
    if made.returncode != 0 or subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip(f"every-eval-ever=={VERSION} could not be installed into {VENV}: "
                    f"{(made.stderr or made.stdout).strip()[-300:]}")
    return str(python)


def official_validate(paths: list[Path]) -> tuple[int, dict[str, list[str]]]:
    """`every_eval_ever validate --format json PATHS`, as a user runs it (the repository-layout and
    companion rules included): its exit status (0 clean, 1 errors, 2 warnings only) and, per file,
    its errors and warnings."""
    command = [str(Path(validator_python()).parent / "every_eval_ever"), "validate", "--format", "json",
               *map(str, paths)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1, 2), proc.stderr[-2000:]
    found = {r["file"]: [f"{e.get('loc', '')}: {e.get('msg', '')}" for e in r["errors"] + r["warnings"]]
             for r in json.loads(proc.stdout)}
    return proc.returncode, found
