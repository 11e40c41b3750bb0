"""Undefined is never 0: when nothing is counted, or a ratio has no denominator, `propme trace`
writes null in its summary and `n/a` in its table, with the reason once."""
from __future__ import annotations

import json

import pytest

from propme_metrics.metrics import registry
from propme_metrics.metrics.values import summarize
from propme_metrics.trace.result import TraceResult
from support.corpora import write_jsonl
from support.runs import gen


def run_trace(cli_run, index, tmp_path, texts):
    inp = write_jsonl(tmp_path / "g.jsonl", [{"id": f"g{i}", "completion": t} for i, t in enumerate(texts)])
    code, out, err = cli_run("trace", "--index", index, "--input", inp, "--out", tmp_path / "r.jsonl",
                             "--summary", tmp_path / "s.json", "--quiet")
    assert code == 0, err
    return json.loads((tmp_path / "s.json").read_text()), " ".join(out.split())  # unwrapped


def test_every_generation_degenerate_gives_null_and_n_a(tmp_path, synthetic_index, cli_run):
    summary, out = run_trace(cli_run, synthetic_index, tmp_path, ["!!!!!!!!" * 40, "1 1 1 1 " * 40])
    assert summary["n_counted"] == 0 and summary["n_degenerate"] == 2
    for m in ("nvr", "fmr", "als", "nvr_max", "r20", "pii"):
        assert summary[m] is None, m
    assert "n/a" in out and "no generation was counted" in out
    assert out.count("undefined") == 1 and "0.0000" not in out


def test_nvr_without_document_entries_is_null(tmp_path, synthetic_index, cli_run):
    summary, out = run_trace(cli_run, synthetic_index, tmp_path, ["Zorblax quintessa flumph vorpal."])
    assert summary["n_counted"] == 1
    assert summary["nvr"] is None and summary["nvr_hits"] is None and summary["als"] is not None
    assert "no counted generation has a document entry" in out


@pytest.mark.parametrize("metric", registry.METRICS, ids=lambda m: m.name)
def test_no_metric_is_zero_when_nothing_is_counted(metric):
    failed = [gen("a", error="boom"), gen("b", seg_len=5, degenerate=True)]
    assert summarize([TraceResult.from_dict(g) for g in failed]).metrics[metric.name] is None
    assert metric.pooled(0.0, 0.0) is None and metric.pooled(0.0, 2.0) == 0.0
