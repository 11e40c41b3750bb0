"""PropMe's samples read from outside, by Every Eval Ever's own lm-eval converter (`every-eval-ever==0.3.0`,
in the official validator's Python 3.12 environment: tests/support/eee_validator.py): it finds each
subtask's samples file by its task name and scores every sample by the numbers logged per metric."""
from __future__ import annotations

import json
import subprocess

from propme_metrics.metrics import registry
from propme_metrics.trace.result import TraceResult
from support.eee_validator import validator_python
from support.lmeval import demo_metadata, model_args, run_lm_eval, samples_file

TASKS = ("propme_demo_prefix", "propme_demo_likelihood", "propme_demo_generic")

#: run in the converter's environment: the samples file it finds for each task and the instance
#: lines it makes of it, as its `convert lm_eval --include_samples` does (find_samples_file, then
#: LMEvalInstanceLevelAdapter.transform_samples)
CONVERT = """
import json, sys
from pathlib import Path
from every_eval_ever.converters.lm_eval.instance_level_adapter import LMEvalInstanceLevelAdapter
from every_eval_ever.converters.lm_eval.utils import find_samples_file
folder, tasks = Path(sys.argv[1]), sys.argv[2:]
out = {}
for task in tasks:
    path = find_samples_file(folder, task)
    logs = LMEvalInstanceLevelAdapter().transform_samples(path, "propme-test", "model", task)
    out[task] = {"file": path.name, "lines": [log.model_dump(mode="json") for log in logs]}
print(json.dumps(out))
"""


def test_the_eee_converter_reads_each_subtasks_own_samples_and_their_values(demo_paths, tmp_path):
    out = tmp_path / "runs"
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", ",".join(TASKS), "--gen_kwargs", "max_gen_toks=48",
                        "--metadata", demo_metadata(demo_paths), "--log_samples", "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = samples_file(out, "propme_demo_prefix").parent
    python = validator_python()  # skips, with the reason, where the converter cannot be had
    conv = subprocess.run([python, "-c", CONVERT, str(folder), *TASKS], capture_output=True, text=True, timeout=600)
    assert conv.returncode == 0, conv.stderr[-3000:]
    found = json.loads(conv.stdout)
    for task in TASKS:
        # its own file: `propme_demo_prefix` is no longer the beginning of the likelihood subtask's name
        assert found[task]["file"] == samples_file(out, task).name, task
    for task in ("propme_demo_prefix", "propme_demo_generic"):
        rows = [json.loads(line) for line in samples_file(out, task).open(encoding="utf-8")]
        lines = found[task]["lines"]
        assert lines and all(x["evaluation_result_id"] is not None for x in lines)  # no sample left unscored
        # the converter's result id of a sample's line is the metric's name (filter `none`)
        by_sample = {(x["sample_id"], x["evaluation_result_id"]): x["evaluation"]["score"] for x in lines}
        setting = rows[0]["doc"]["setting"]
        for row in rows:
            traces = [TraceResult.from_dict(g) for g in row["trace"]["generations"]]
            # the independent expectation: FMR of the sample is its generation's full match, as 0 or 1
            expected_fmr = float(sum(t.full_match for t in traces) / len(traces))
            got = {m: s for (sid, m), s in by_sample.items() if sid == str(row["doc_id"])}
            assert got["fmr"] == expected_fmr, (task, row["doc_id"])
            # every numeric metric of the row is one line with that number; an undefined one (null) none
            numeric = {m: float(row[m]) for m in row["metrics"] if isinstance(row[m], (int, float))}
            assert got == numeric and set(numeric) <= {m.name for m in registry.for_setting(setting)}
        if task == "propme_demo_prefix":  # the demo model memorized the prefix documents: FMR 1.0 read as 1.0
            assert any(s == 1.0 for (_, m), s in by_sample.items() if m == "fmr")
