"""`propme_metrics.runs`: lm-eval output read into typed runs, once. Which tasks are PropMe's is
decided by metadata or the whole task name (never a prefix); each task reads its own samples file;
per-sample metric values are decoded by one function; a row's start token and tracing options
come back typed."""
from __future__ import annotations

import json
import math

import pytest

from propme_metrics.prompts.start import StartToken
from propme_metrics.report.load import load_run
from propme_metrics.runs.lmeval import TaskKind, read_run, task_kind
from propme_metrics.runs.samples import read_samples, sample_value
from propme_metrics.trace.result import TraceConfig
from support.runs import DATE1, DFM, stage1_settings, write_run


@pytest.mark.parametrize(("name", "config", "expected"), [
    ("propme_demo_prefix", {}, (TaskKind.GENERATION, "demo", "prefix")),
    ("propme_demo_minimal_cue", {}, (TaskKind.GENERATION, "demo", "minimal_cue")),
    ("propme_demo_likelihood", {"output_type": "loglikelihood"}, (TaskKind.LIKELIHOOD, "demo", None)),
    # the old name (before task version 3.0) of runs made then
    ("propme_demo_prefix_likelihood", {"output_type": "loglikelihood"}, (TaskKind.LIKELIHOOD, "demo", None)),
    ("propme_common_pile_prefix_likelihood", {"output_type": "loglikelihood"}, (TaskKind.LIKELIHOOD, "common_pile", None)),
    ("any_name", {"metadata": {"measure": "likelihood", "corpus": "dfm"}}, (TaskKind.LIKELIHOOD, "dfm", None)),
    ("my_task", {"metadata": {"corpus": "dfm", "setting": "generic"}}, (TaskKind.GENERATION, "dfm", "generic")),
    ("arc_easy", {}, (TaskKind.BENCHMARK, None, None)),
    # a benchmark whose name merely starts like PropMe's is not taken for one of PropMe's tasks
    ("propme_quiz", {}, (TaskKind.BENCHMARK, None, None)),
    # a loglikelihood benchmark ending like the likelihood subtask but not named as one
    ("mmlu_prefix_likelihood", {"output_type": "loglikelihood"}, (TaskKind.BENCHMARK, None, None)),
])
def test_task_kind_reads_metadata_or_the_whole_name(name, config, expected):
    assert task_kind(name, config) == expected


def test_each_task_reads_its_own_samples_file_when_one_name_starts_another(tmp_path):
    """propme_demo_prefix and propme_demo_prefix_likelihood: the prefix task's samples file is its
    own, never the likelihood subtask's (whose name starts with it)."""
    folder = write_run(tmp_path, DFM, "", {"prefix": stage1_settings()["prefix"]}, corpus="demo")
    results = folder / f"results_{DATE1}.json"
    data = json.loads(results.read_text())
    data["configs"]["propme_demo_prefix_likelihood"] = {"task": "propme_demo_prefix_likelihood",
                                                         "output_type": "loglikelihood", "metadata": {"corpus": "demo"}}
    results.write_text(json.dumps(data))
    (folder / f"samples_propme_demo_prefix_likelihood_{DATE1}.jsonl").write_text("")
    (run,) = read_run(tmp_path)
    by_name = {t.name: t for t in run.tasks}
    assert by_name["propme_demo_prefix"].samples_path.name == f"samples_propme_demo_prefix_{DATE1}.jsonl"
    assert by_name["propme_demo_prefix_likelihood"].kind == TaskKind.LIKELIHOOD
    assert [t.name for t in run.of_kind(TaskKind.GENERATION)] == ["propme_demo_prefix"]
    assert (run.model, run.revision, run.limit, run.chat_template_sha) == (DFM, "", None, None)


@pytest.mark.parametrize(("value", "expected"), [
    (True, 1.0), (False, 0.0), (3, 3.0), (0.25, 0.25), (math.nan, None), (math.inf, None), ("0.5", None),
    (["ref", "pred"], None), ({"sum": 1, "n": 2}, None), (None, None),
])
def test_sample_value_decodes_numbers_that_average(value, expected):
    assert sample_value(value) == expected


def test_metric_values_keep_only_values_that_average():
    (row,) = read_samples([(1, {"doc_id": 0, "doc": {}, "metrics": ["acc", "bleu", "f1"], "acc": True,
                                 "bleu": [["a"], ["b"]], "f1": 0.5})])
    assert row.metric_values() == {"acc": 1.0, "f1": 0.5}


def test_a_row_start_token_is_a_start_token_and_unrecorded_is_none():
    doc = {"id": "p1", "prompt": "x", "start_token": "<s>", "start_token_choice": "literal",
           "start_token_note": "start_token literal: prepended '<s>'"}
    old, new = read_samples([(1, {"doc": {"id": "p0", "prompt": "x"}}), (2, {"doc": doc})])
    assert old.start_token is None
    assert new.start_token == StartToken("literal", "<s>", "start_token literal: prepended '<s>'")


def test_loaded_tasks_carry_a_trace_config_and_a_start_token(tmp_path):
    """The samples rows' trace_config (JSON text, as the hooks log it) and start token come back typed."""
    folder = write_run(tmp_path, DFM, "", {"prefix": stage1_settings()["prefix"]})
    config = TraceConfig(mode="text", span_divisor=10)
    for samples in folder.glob("samples_*.jsonl"):
        rows = [json.loads(line) for line in samples.read_text().splitlines()]
        for row in rows:
            row["doc"].update(trace_config=json.dumps(config.to_dict()), start_token="",
                              start_token_choice="none", start_token_note="start_token none: nothing prepended")
        samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (task,) = load_run(tmp_path)
    assert task.trace_config == config
    assert task.start_token == StartToken("none", "", "start_token none: nothing prepended")
