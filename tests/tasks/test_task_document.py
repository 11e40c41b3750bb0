"""The document row of a PropMe task (`TaskDocument`): one writer, one reader, the PropMe version in
every row, and rows written by earlier releases still read (and reported)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import propme_metrics
from propme_metrics.metrics.provenance import RARE_MAX_COUNT_KEY
from propme_metrics.report.request import ReportRequest
from propme_metrics.trace.result import TraceConfig
from propme_metrics.trace.task_document import CHAT_TEMPLATE_NOTE, RayBackend, TaskDocument
from propme_tasks import hooks
from support.reports import make_report
from support.runs import reference_settings, write_run

#: the keys of a row as PropMe 0.2.0 wrote them (load_prompts at f8ca2e0), in that order
KEYS_0_2_0 = ["id", "sample_ix", "prompt", "model_prompt", "setting", "domain", "language", "continuation",
              "source_doc", "prompt_longest_span", "corpus", "index_path", "index_identity", "trace_config",
              "trace_backend", "trace_workers", "start_token", "start_token_choice", "start_token_note", "pii_show",
              "rare_max_count", "chat_template"]


def full_document() -> TaskDocument:
    return TaskDocument(id="prefix-0003", sample_ix=1, prompt="Der var", model_prompt="<s>Der var", setting="prefix",
                        domain="wiki", language="da", continuation=" engang", source_doc='{"doc_ix": 3}',
                        prompt_longest_span=2, corpus="demo", index_path="/idx", index_identity="abc",
                        trace=TraceConfig(mode="text", seed=7), backend=RayBackend("ray://head:10001", 3),
                        trace_workers=2, start_token="<s>", start_token_choice="literal", start_token_note="given",
                        pii_show=True, rare_max_count=9, chat_template=False, propme_version="9.9.9")


def test_row_keeps_the_keys_of_earlier_releases_in_order_then_the_version():
    doc = full_document()
    row = doc.to_row()
    assert list(row) == [*KEYS_0_2_0, "propme_version"]
    assert RARE_MAX_COUNT_KEY in row  # the report reads the threshold under the metrics' key
    assert json.loads(row["trace_config"]) == {**TraceConfig().to_dict(), "mode": "text", "seed": 7}
    assert json.loads(row["trace_backend"]) == {"backend": "ray", "address": "ray://head:10001", "actors": 3}
    assert all(type(v) in (str, int, bool) for v in row.values())  # plain values: Arrow and JSON take them
    assert TaskDocument.from_row(row) == doc
    assert TaskDocument.from_row(json.loads(json.dumps(row))) == doc  # as a samples file gives it back


def test_rows_of_earlier_releases_are_read_with_not_recorded_values():
    config = json.dumps(TraceConfig().to_dict(), sort_keys=True)
    row_0_2_0 = {k: v for k, v in full_document().to_row().items() if k != "propme_version"}
    row_0_2_0["trace_config"], row_0_2_0["trace_backend"] = config, ""
    doc = TaskDocument.from_row(row_0_2_0)
    assert doc.propme_version is None and doc.backend is None and doc.trace == TraceConfig()
    # an older row: no start token choice, no fmr_rare threshold, no chat-template flag; extra keys ignored
    older = {"id": "g-1", "sample_ix": 0, "prompt": "p", "setting": "generic", "index_path": "/idx",
             "index_identity": "abc", "trace_config": config, "start_token": "", "start_token_note": "",
             "target_tokens": 50, "boundary_clean": True}
    doc = TaskDocument.from_row(older)
    assert (doc.start_token_choice, doc.rare_max_count, doc.chat_template, doc.propme_version) == (None, None, False, None)
    assert (doc.id, doc.setting, doc.trace) == ("g-1", "generic", TraceConfig())
    assert TaskDocument.from_row({"id": "x"}).trace is None  # tracing options not recorded


def test_chat_template_turn_drops_the_start_token_only():
    doc = full_document().under_chat_template()
    assert (doc.model_prompt, doc.start_token, doc.chat_template, doc.start_token_note) == \
        ("Der var", "", True, CHAT_TEMPLATE_NOTE)
    assert doc.start_token_choice == "literal" and doc.trace == full_document().trace


def test_loaded_rows_carry_the_version_and_score_like_rows_without_it(synthetic_index, synthetic_records,
                                                                      tmp_path, monkeypatch):
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    rows = hooks.load_prompts(corpus="syn", setting="prefix", syn_index=str(synthetic_index), start_token="none",
                              n_prompts=3, trace_workers=1)["test"]
    assert len(rows) == 3
    for row in rows:
        assert list(row) == [*KEYS_0_2_0, "propme_version"]
        assert row["propme_version"] == propme_metrics.__version__
        assert TaskDocument.from_row(row).to_row() == row
    row = rows[0]
    gens = [row["continuation"], synthetic_records[5]["text"][:200]]
    old = {k: v for k, v in row.items() if k not in ("propme_version", "chat_template", "start_token_choice")}
    assert hooks.process_results(old, [gens]) == hooks.process_results(row, [gens])


def test_runs_with_and_without_the_version_report_the_same(tmp_path):
    old_runs = tmp_path / "old"
    write_run(old_runs, "org/model", "main", reference_settings())
    new_runs = tmp_path / "new"
    shutil.copytree(old_runs, new_runs)
    for samples in new_runs.rglob("samples_*.jsonl"):
        rows = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
        samples.write_text("".join(json.dumps({**r, "doc": {**r["doc"], "propme_version": "0.2.1"}}) + "\n"
                                   for r in rows), encoding="utf-8")
    for runs in (old_runs, new_runs):
        make_report(ReportRequest([runs], tmp_path / f"report-{runs.name}", bootstrap=200, seed=1, html=False, plots=False))
    for name in ("leaderboard.csv", "leaderboard_full.csv", "leaderboard.md"):
        old, new = (Path(tmp_path / f"report-{r}" / name).read_bytes() for r in ("old", "new"))
        assert old == new, name
