"""The lm-eval range is declared once (setup.cfg's `lmeval` extra); the Makefile's oldest-release
run and docs/configuration.md name the same bounds."""
from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> tuple[str, str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    (spec,) = [line for line in cfg["options.extras_require"]["lmeval"].splitlines() if line.strip()
               and not line.strip().startswith("#")]
    match = re.fullmatch(r"lm-eval\[hf\]>=(0\.4\.\d+),<(0\.5)", spec.strip())
    assert match, spec
    return match.group(1), match.group(2)


def test_makefile_tests_the_oldest_declared_release():
    oldest, _ = _declared()
    dry = subprocess.run(["make", "-n", "test-lmeval-oldest"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert f'LMEVAL_PIN="lm-eval[hf]=={oldest}"' in dry.stdout and f".venv-lmeval-{oldest}/bin/python -m pytest" in dry.stdout


def test_docs_name_the_declared_range():
    oldest, upper = _declared()
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert f"`lm-eval[hf]>={oldest},<{upper}`" in text and f"the oldest, {oldest}" in text
    assert f"Releases before {oldest}" in text
