"""The demo's benchmark task (`demo_quiz`) is a complete lm-eval task config: lm-eval logs a warning
for every metric whose aggregation a YAML leaves out ("metric acc is defined, but aggregation is
not"), which a PropMe run must not print."""
from __future__ import annotations

import json

import yaml

from propme.demo.benchmark_task import TASK, write_task


def test_the_quiz_names_every_metric_aggregation(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": " ".join(f"word{j}" for j in range(40))}) + "\n"
                              for i in range(8)), encoding="utf-8")
    config = yaml.safe_load((write_task(corpus, tmp_path / "task") / f"{TASK}.yaml").read_text(encoding="utf-8"))
    assert config["metric_list"], config
    for metric in config["metric_list"]:
        assert {"metric", "aggregation", "higher_is_better"} <= set(metric), metric
