"""The official Every Eval Ever validator (`every-eval-ever==0.3.0`, which declares Python 3.12), in a
virtual environment of its own, made once per machine; tests using it are skipped, with the reason,
where Python 3.12 or the package cannot be had. Nothing of it is vendored."""
from __future__ import annotations

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

#: run in the validator's interpreter: every file by the package's own `validate_file` (its pydantic
#: models), and each aggregate by its score-metadata and model-deployment rules (`validation_core`);
#: the repository-layout rules need the data repository's paths, which PropMe's records do not have yet
_SCRIPT = """
import json, sys
from pathlib import Path
from every_eval_ever.validator import validation_core as core
out = {}
for name in sys.argv[1:]:
    path = Path(name)
    report = core.validate_file(path)
    errors = [core.format_error(e) for e in report.errors]
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        errors += core.check_score_metadata(data) + core.check_model_deployment(data)
    out[name] = errors
print(json.dumps(out))
"""


def _python312() -> str | None:
    found = shutil.which("python3.12")
    if found:
        return found
    pyenv = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = sorted(glob.glob(os.path.join(pyenv, "versions", "3.12*", "bin", "python3.12")))
    return candidates[-1] if candidates else None


def validator_python() -> str:
    """The validator environment's interpreter, made if need be; skips the test where it cannot be."""
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


def official_errors(paths: list[Path]) -> dict[str, list[str]]:
    """What the official validator says of each file (empty lists: valid)."""
    proc = subprocess.run([validator_python(), "-c", _SCRIPT, *map(str, paths)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)
