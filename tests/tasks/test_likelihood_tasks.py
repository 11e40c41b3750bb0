"""The likelihood subtask `propme_<corpus>_prefix_likelihood` through the real `lm_eval` with the
demo's memorizing model: planted documents are discoverable at n = 1, unplanted ones far below,
and the greedy flag agrees with the prefix setting's extraction on the same documents."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from propme.demo.synthetic import generate_corpus
from propme_metrics.index.reader import open_index
from propme_metrics.metrics import registry
from propme_metrics.metrics.likelihood import extraction_probability
from propme_metrics.prompts.prompt_set import build_prompt_set, write_prompt_set
from propme_metrics.prompts.settings import PREFIX_MIN_DOC_TOKENS
from propme_metrics.report.request import ReportRequest
from propme_tasks import hooks, likelihood, task_manager
from propme_tasks.discovery import tasks_path
from support.corpora import make_index, write_jsonl
from support.lmeval import model_args, run_lm_eval, samples_file, sidecar

TASKS = "propme_demo_prefix,propme_demo_likelihood"


@pytest.fixture(scope="module")
def mixed(demo_paths, tmp_path_factory):
    """The demo corpus plus long documents the model never saw: its prefix set mixes both."""
    root = tmp_path_factory.mktemp("likelihood")
    records = [json.loads(line) for line in open(demo_paths.corpus, encoding="utf-8")]
    unseen = [dict(r, id=f"unplanted-{i}", memorized=False)
              for i, r in enumerate(generate_corpus(6, seed=11, min_sentences=12, max_sentences=14))]
    make_index(write_jsonl(root / "corpus.jsonl", records + unseen), root / "index", demo_paths.tokenizer)
    index = open_index(root / "index")
    eligible = int((index.document_lengths >= PREFIX_MIN_DOC_TOKENS).sum())
    write_prompt_set(build_prompt_set(index, "prefix", n=eligible, seed=42), root / "prefix.jsonl")
    return root


def _metadata(mixed: Path) -> str:
    return json.dumps({"demo_index": str(mixed / "index"), "demo_prefix_prompts": str(mixed / "prefix.jsonl")})


@pytest.fixture(scope="module")
def run(demo_paths, mixed, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("likelihood-run")
    out = tmp / "runs"
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", TASKS, "--include_path", tasks_path(),
                        "--gen_kwargs", "max_gen_toks=64", "--metadata", _metadata(mixed),
                        "--log_samples", "--output_path", str(out)], tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def _rows(out: Path, task: str) -> list[dict]:
    return [json.loads(line) for line in samples_file(out, task).open(encoding="utf-8")]


def _planted(row: dict) -> bool:
    return json.loads(row["doc"]["source_doc"])["metadata"]["id"].startswith("planted-")


def test_planted_documents_are_discoverable_unplanted_far_below(run, mixed):
    out, _ = run
    rows = _rows(out, "propme_demo_likelihood")
    prompts = [json.loads(line) for line in open(mixed / "prefix.jsonl", encoding="utf-8")]
    assert sorted(r["doc"]["id"] for r in rows) == sorted(p["id"] for p in prompts)  # the prefix documents, once each
    planted = [r for r in rows if _planted(r)]
    unplanted = [r for r in rows if not _planted(r)]
    assert len(planted) >= 6 and len(unplanted) >= 4
    for r in rows:
        # context = start token + the first 50 tokens' text, target = the next 50's, nothing between
        context, target = r["arguments"]["gen_args_0"]["arg_0"], r["arguments"]["gen_args_0"]["arg_1"]
        assert context == "<|endoftext|>" + r["doc"]["prompt"] and target == r["doc"]["continuation"]
        record = r["likelihood"]
        logp, greedy = r["filtered_resps"][0]  # lm-eval logs (loglikelihood, is_greedy) as text
        assert record["logp"] == pytest.approx(float(logp)) and record["greedy"] == (greedy == "True")
        assert r["discoverable@1"] == float(math.exp(record["logp"]) >= 0.5)
    for r in planted:
        assert r["likelihood"]["logp"] > -1.0  # log P(z) near 0 (P(z) > 0.37): memorized
        assert r["discoverable@10"] == 1.0
    # at n = 1 (P(z) >= 0.5): most of them; the tiny model is a little less sure of some (P(z) ~ 0.45)
    assert sum(r["discoverable@1"] for r in planted) >= 0.75 * len(planted)
    for r in unplanted:
        assert r["likelihood"]["logp"] < -30.0  # far below: e^-30 is not found in 10,000 samples
        assert r["discoverable@10000"] == 0.0
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]["propme_demo_likelihood"]
    for m in registry.LIKELIHOOD_METRICS:
        assert f"{m.name},none" in results
    assert "likelihood,none" not in results
    assert sidecar(out)["tasks"]["propme_demo_likelihood"]["documents_scored"] == len(rows)
    share = len(planted) / len(rows)
    assert results["discoverable@10000,none"] == pytest.approx(share)
    assert results["greedy_extraction,none"] == pytest.approx(share)
    assert results["discoverable@1,none"] == pytest.approx(sum(r["discoverable@1"] for r in rows) / len(rows))


def test_target_tokens_are_counted_in_the_model_tokenizer(run, demo_paths):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(demo_paths.model))
    out, _ = run
    for r in _rows(out, "propme_demo_likelihood"):
        ctx, z = "<|endoftext|>" + r["doc"]["prompt"], r["doc"]["continuation"]
        whole, head = tok.encode(ctx + z), tok.encode(ctx)
        if whole[:len(head)] == head:  # a clean split: z's tokens are exactly the tail
            assert r["likelihood"]["boundary_clean"] is True
            assert r["likelihood"]["target_tokens"] == len(tok.encode(z)) == len(whole) - len(head)
        else:
            assert r["likelihood"]["boundary_clean"] is False


def test_greedy_extraction_equals_prefix_extraction(run):
    out, _ = run
    extracted = {r["doc"]["id"]: r["trace"]["generations"][0]["extracted"] for r in _rows(out, "propme_demo_prefix")}
    greedy = {r["doc"]["id"]: r["greedy_extraction"] for r in _rows(out, "propme_demo_likelihood")}
    assert set(greedy) == set(extracted) and len(set(greedy.values())) == 2  # both outcomes occur
    assert greedy == {k: float(v) for k, v in extracted.items()}
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    assert results["propme_demo_likelihood"]["greedy_extraction,none"] == \
        pytest.approx(results["propme_demo_prefix"]["extraction,none"])


def test_report_shows_the_curve_next_to_prefix_fmr(run, tmp_path):
    from support.reports import make_report

    out, _ = run
    report = make_report(ReportRequest([out], tmp_path / "report", bootstrap=200, seed=0, html=True))
    (res,) = report.report.likelihood
    rows = _rows(out, "propme_demo_likelihood")
    logps = [r["likelihood"]["logp"] for r in rows]
    for n, est in res.curve.items():  # the curve recomputed from the samples
        assert est.estimate == pytest.approx(sum(extraction_probability(lp, n) >= 0.5 for lp in logps) / len(logps))
        assert est.low <= est.estimate <= est.high
    assert res.prefix_fmr is not None and res.prefix_fmr.estimate == report.report.results[0].settings["prefix"].metrics["fmr"].estimate
    (row,) = json.loads((tmp_path / "report" / "leaderboard.json").read_text())["rows"]
    assert row["propme_demo_prefix_likelihood_discoverable@100"] == res.curve[100].estimate
    assert row["propme_demo_prefix_likelihood_greedy_extraction"] == pytest.approx(
        sum(r["greedy_extraction"] for r in rows) / len(rows))
    assert row["propme_demo_n_prefix_likelihood"] == len(rows)
    import re

    from propme_metrics.report.columns import leaderboard_columns

    patterns = [name for name, _ in leaderboard_columns()]
    regexes = [re.compile("^" + re.sub(r"<[a-z_]+>", "[a-z0-9_]+", name) + "$") for name in patterns]
    assert all(any(r.match(col) for r in regexes) for col in report.layout.columns if "likelihood" in col)
    assert {c for c in report.layout.columns if "likelihood" in c} == {
        f"propme_demo_{x}" for x in ("n_prefix_likelihood", *(f"prefix_likelihood_{m}{e}" for m in (
            "discoverable@100", "greedy_extraction") for e in ("", "_low", "_high")))}
    assert (tmp_path / "report" / "likelihood_demo.png").is_file()
    assert "probabilistic extraction" in (tmp_path / "report" / "leaderboard.md").read_text()
    assert "likelihood_demo.png" in (tmp_path / "report" / "report.html").read_text()
    # another grid and p from the report's options
    other = make_report(ReportRequest([out], tmp_path / "r2", bootstrap=0, discoverable_n=[3], discoverable_p=0.9,
                         html=False, plots=False))
    (res2,) = other.report.likelihood
    assert list(res2.curve) == [3] and res2.p == 0.9
    assert res2.curve[3].estimate == sum(extraction_probability(lp, 3) >= 0.9 for lp in logps) / len(logps)


def test_lm_eval_task_checks(demo_paths, mixed, tmp_path, monkeypatch):
    """What lm-eval's own BaseTasks checks ask of a task: text and target strings, requests built."""
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    meta = json.loads(_metadata(mixed)) | {"pretrained": str(demo_paths.model)}
    from lm_eval.tasks import get_task_dict

    task = get_task_dict(["propme_demo_likelihood"], task_manager(metadata=meta))["propme_demo_likelihood"]
    assert task.OUTPUT_TYPE == "loglikelihood" and task.has_test_docs() and not task.has_training_docs()
    docs = list(task.test_docs())
    assert all(isinstance(task.doc_to_text(d), str) and isinstance(task.doc_to_target(d), str) for d in docs)
    task.build_all_requests(limit=3, rank=0, world_size=1)
    assert len(task.instances) == 3
    for inst in task.instances:
        assert inst.request_type == "loglikelihood"
        assert inst.arguments == (inst.doc["model_prompt"], inst.doc["continuation"])
    (req,) = [task.construct_requests(doc=docs[0], ctx=task.doc_to_text(docs[0]), metadata=("t", 0, 1))]
    assert (req[0] if isinstance(req, list) else req).arguments[1] == docs[0]["continuation"]


def test_bad_discoverability_settings_stop_before_scoring(demo_paths, mixed, tmp_path):
    meta = json.loads(_metadata(mixed)) | {"discoverable_p": 1.5}
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", "propme_demo_likelihood", "--include_path",
                        tasks_path(), "--metadata", json.dumps(meta)], tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "discoverable_p" in output and "between 0 and 1" in output
    assert "Traceback" not in output and "Running loglikelihood" not in output


def test_split_counts_mirror_lm_evals_encode_pair(gpt2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gpt2_dir))
    assert likelihood.split_counts(tok, "<|endoftext|>Hello", " world, again") == (3, True)
    # trailing white space of the context moves to the target, as lm-eval does before encoding
    n, clean = likelihood.split_counts(tok, "Hello ", "world")
    assert n == len(tok.encode(" world")) and clean is False
    # a word cut in two: the model's tokenizer merges across the boundary
    n, clean = likelihood.split_counts(tok, "Hello wor", "ld and more")
    assert clean is False and n == len(tok.encode("Hello world and more")) - len(tok.encode("Hello wor"))


def test_damaged_likelihood_samples_are_named(run, tmp_path):
    import shutil

    from propme_metrics.core.errors import ConfigError
    from support.reports import make_report

    out, _ = run
    copy = tmp_path / "runs"
    shutil.copytree(out, copy)
    samples = samples_file(copy, "propme_demo_likelihood")
    rows = samples.read_text(encoding="utf-8").splitlines()
    bad = json.loads(rows[1])
    bad["likelihood"]["logp"] = 3.0  # a log-probability above 0
    rows[1] = json.dumps(bad)
    samples.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"line 2: no valid 'likelihood' record") as err:
        make_report(ReportRequest([copy], tmp_path / "report", bootstrap=0, html=False, plots=False))
    assert samples.name in str(err.value)
    with pytest.raises(ConfigError, match="--discoverable-p"):
        make_report(ReportRequest([out], tmp_path / "r", bootstrap=0, discoverable_p=2, html=False, plots=False))


def test_process_results_reads_p_from_the_document():
    doc = {"id": "d", "target_tokens": 50, "boundary_clean": True, "discoverable_p": 0.05, "discoverable_n": [3, 7],
           "index_identity": "idx"}
    items = likelihood.process_results(doc, [(math.log(0.01), False)])
    # P(z) = 0.01 at p = 0.05: 1 - 0.99^n >= 0.05 from n = 6 on (1 - 0.99^5 = 0.049)
    assert [items[f"discoverable@{n}"] for n in (1, 10, 100)] == [0.0, 1.0, 1.0]
    assert items["greedy_extraction"] == 0.0 and items["log10_p_median"] == pytest.approx(-2.0)
    assert items["likelihood"] == {"id": "d", "logp": math.log(0.01), "greedy": False, "target_tokens": 50,
                                   "boundary_clean": True, "discoverable_p": 0.05, "discoverable_n": [3, 7],
                                   "index_identity": "idx"}
    assert likelihood.agg_median([-3.0, -1.0, -2.0, -10.0]) == -2.5 and math.isnan(likelihood.agg_median([]))


def test_report_uses_the_runs_recorded_p_and_grid(run, tmp_path):
    import shutil

    from support.reports import make_report

    out, _ = run
    copy = tmp_path / "runs"
    shutil.copytree(out, copy)
    samples = samples_file(copy, "propme_demo_likelihood")
    rows = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    for r in rows:  # as a run with discoverable_p 0.99 and discoverable_n [2, 5000] records them
        r["likelihood"] |= {"discoverable_p": 0.99, "discoverable_n": [2, 5000]}
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (res,) = make_report(ReportRequest([copy], tmp_path / "report", bootstrap=0, html=False, plots=False)).report.likelihood
    assert res.p == 0.99 and list(res.curve) == [2, 5000]
    logps = [r["likelihood"]["logp"] for r in rows]
    assert res.curve[2].estimate == sum(extraction_probability(lp, 2) >= 0.99 for lp in logps) / len(logps)


def test_trace_refuses_a_likelihood_samples_file(run, tmp_path):
    """lm-eval writes a loglikelihood response as strings (["-12.5", "False"]): still not text to trace."""
    from propme.cli.app import main

    out, _ = run
    samples = samples_file(out, "propme_demo_likelihood")
    first = json.loads(samples.open(encoding="utf-8").readline())
    assert all(isinstance(x, str) for x in first["resps"][0][0])  # the file's own form
    code = main(["trace", "--index", str(demo_index(out)), "--input", str(samples), "--quiet",
                 "--out", str(tmp_path / "t.jsonl"), "--summary", str(tmp_path / "t.json")])
    assert code == 2 and not (tmp_path / "t.jsonl").exists()


def demo_index(out: Path) -> Path:
    """The index a run's likelihood documents name."""
    row = json.loads(samples_file(out, "propme_demo_likelihood").open(encoding="utf-8").readline())
    return Path(row["doc"]["index_path"])


def test_context_shorter_than_prefix_and_target_stops_before_any_work(demo_paths, mixed, tmp_path, monkeypatch):
    """Before: an AssertionError after every other task's work (context < 50 tokens), or a silent cut
    of the prefix (slightly short). Now: one message naming the length needed, before generation."""
    from transformers import AutoTokenizer

    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    tok = AutoTokenizer.from_pretrained(str(demo_paths.model))
    meta = json.loads(_metadata(mixed))
    task = {"corpus": "demo", "setting": "prefix", "measure": "likelihood"}  # what the task YAML sets
    docs = likelihood.load_documents(**meta, **task, pretrained=str(demo_paths.model))["test"]
    longest = max(len(tok.encode(d["model_prompt"] + d["continuation"], add_special_tokens=False)) for d in docs)
    # lm-eval scores whole when context + continuation <= max_length + 1
    likelihood.load_documents(**meta, **task, pretrained=str(demo_paths.model), max_length=longest - 1)
    for short in (40, longest - 2):
        with pytest.raises(hooks.TaskConfigError, match=f"context of {short} tokens") as err:
            likelihood.load_documents(**meta, **task, pretrained=str(demo_paths.model), max_length=short)
        assert f"at least {longest - 1} tokens" in str(err.value)
    for short in (40, longest - 2):  # the same through the stock command, with a generation task first
        proc = run_lm_eval(["--model", "hf", "--model_args", f"pretrained={demo_paths.model},dtype=float32,max_length={short}",
                            "--device", "cpu", "--tasks", "propme_demo_prefix,propme_demo_likelihood",
                            "--metadata", json.dumps(meta)], tmp_path)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 1, output[-3000:]
        assert "PropMe: propme_demo_likelihood: " in output and "do not fit the model's context" in output
        assert "Traceback" not in output and "AssertionError" not in output and "Running generate_until" not in output
