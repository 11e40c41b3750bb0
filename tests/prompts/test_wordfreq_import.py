"""`wordfreq` (58 MB installed) is imported only when minimal_cue prompts are built: library users
who never build prompt-free prompts do not pay its import time."""
from __future__ import annotations

import subprocess
import sys

MODULES = ("propme_metrics.index.reader", "propme_metrics.prompts.prompt_set", "propme_metrics.prompts.prompt_free",
           "propme_metrics.trace.tracer", "propme_metrics.metrics.registry", "propme_metrics.report.assemble",
           "propme.cli.app", "propme_tasks.hooks", "propme_tasks.likelihood")


def _loaded_after(code: str) -> bool:
    proc = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint('wordfreq' in sys.modules)"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()[-1] == "True"


def test_wordfreq_is_imported_only_to_build_minimal_cue_prompts():
    assert not _loaded_after(f"import {', '.join(MODULES)}")
    assert not _loaded_after("from propme_metrics.prompts.prompt_free import prompt_free_records\n"
                             "prompt_free_records('unconditional', 3)")
    assert _loaded_after("from propme_metrics.prompts.prompt_free import prompt_free_records\n"
                         "prompt_free_records('minimal_cue', 3, language='da')")
