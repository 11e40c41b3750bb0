"""`propme report` checks the runs' benchmark items by the contamination rule its options give
(the options of `propme contamination`), not only by the default rule."""
from __future__ import annotations

import json
import shutil

import pytest
from test_contamination import _items, index, lm_eval_run, local_tasks, planted  # noqa: F401 (fixtures)

from propme_metrics.contamination.check import KgramCounts, apply_rule, match_items
from propme_metrics.contamination.match import CorpusMatcher
from propme_metrics.contamination.rule import ContaminationRule


@pytest.mark.slow  # a stock lm_eval run (the `lm_eval_run` fixture)
def test_report_passes_the_rule_options_to_the_check(cli_run, lm_eval_run, local_tasks, planted, index,  # noqa: F811
                                                     tmp_path):
    from support.runs import DFM, stage1_settings, write_run

    rule = ContaminationRule(k=4, min_coverage=0.5, field="answer", boilerplate_share=0.5)
    items = _items(planted["rows"])
    matcher = CorpusMatcher(index)
    results = match_items(items, matcher)
    expected = [r.contaminated for r in apply_rule("contam_mc", results, rule, KgramCounts(matcher)).items]
    default = [r.contaminated for r in apply_rule("contam_mc", results, ContaminationRule(), KgramCounts(matcher)).items]
    assert expected != default  # so the test tells the two rules apart
    write_run(tmp_path / "propme", DFM, "", stage1_settings())
    shutil.copytree(lm_eval_run, tmp_path / "bench")
    code, _, err = cli_run("report", tmp_path / "propme", tmp_path / "bench", "--out", tmp_path / "r", "--index",
                           planted["index"], "--include-path", local_tasks, "--bootstrap", 100, "--no-html",
                           "--k", 4, "--min-coverage", 0.5, "--field", "answer", "--boilerplate-share", 0.5)
    assert code == 0, err
    folder = tmp_path / "r" / "contamination"
    doc = json.loads((folder / "contamination.json").read_text())
    assert doc["rule"] == rule.to_dict()
    rows = [json.loads(line) for line in (folder / "contamination_items.jsonl").read_text().splitlines()]
    flagged = {r["doc_id"]: r["contaminated"] for r in rows if r["task"] == "contam_mc"}
    assert [flagged[i] for i in range(len(items))] == expected
    assert doc["tasks"]["contam_mc"]["contaminated"] == sum(expected)
