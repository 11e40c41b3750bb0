"""The demo's other benchmark: `demo_quiz` run through stock lm-eval on the demo model, its
copied half flagged and its made-up half not."""
from __future__ import annotations

import json

from propme.demo.benchmark_task import ITEMS, TASK, run_benchmark_task
from propme_metrics.report.contamination_views import contamination_lines


def test_demo_quiz_contamination_line(demo_paths, tmp_path):
    lines = contamination_lines(run_benchmark_task(demo_paths, tmp_path))
    doc = json.loads((tmp_path / "contamination" / "contamination.json").read_text())
    s = doc["tasks"][TASK]
    assert lines == [line for line in lines if line.startswith(f"{TASK}: {s['contaminated']} of {ITEMS} items")]
    rows = [json.loads(x) for x in (tmp_path / "contamination" / "contamination_items.jsonl").read_text().splitlines()]
    # even documents copy a corpus sentence and the words after it; odd ones are made-up words
    assert [r["contaminated"] for r in sorted(rows, key=lambda r: r["doc_id"])] == [i % 2 == 0 for i in range(ITEMS)]
    (model,) = s["models"]   # the demo model at its final revision, named
    assert "@" in model and rows[0]["metrics"].keys() == {model}
    assert set(s["models"][model]) == {"acc"} and s["models"][model]["acc"]["difference"]["value"] is not None
    again = contamination_lines(run_benchmark_task(demo_paths, tmp_path))
    assert again == lines  # the lm-eval run is reused
