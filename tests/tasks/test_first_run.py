"""The first stock run a new user makes: the demo index, lm-eval's defaults, only the index given."""
from __future__ import annotations

import json

from propme_metrics.index.reader import Index
from propme_metrics.prompts.prompt_set import eligible_documents
from support.lmeval import model_args, run_lm_eval


def test_the_prefix_setting_takes_what_the_index_allows(demo_paths, tmp_path):
    """The demo index has fewer long documents than n_prompts' default (100): the prefix subtask and
    its likelihood twin run on all of them and say how many, instead of refusing."""
    out = tmp_path / "runs"
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", "propme_demo_prefix,propme_demo_likelihood",
                        "--gen_kwargs", "max_gen_toks=32", "--metadata", json.dumps({"demo_index": str(demo_paths.index)}),
                        "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    n = len(eligible_documents(Index(demo_paths.index)))
    assert 0 < n < 100
    assert f"demo/prefix: {n} prompts, fewer than n_prompts 100" in proc.stderr
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    assert results["n-samples"]["propme_demo_prefix"]["effective"] == n
    assert results["n-samples"]["propme_demo_likelihood"]["effective"] == n
