"""Tracing in bulk before lm-eval scores a task (`propme_tasks.deferred`, `hooks.trace_task`): the same
samples and numbers as tracing in `process_results`, in real `lm_eval` runs and when the workers fail;
every logged metric a number (what standard tools read), its pooled pair beside it; the
`trace_workers` setting."""
from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from propme_metrics.metrics import registry
from propme_metrics.metrics.values import contributions, counts_for_metrics, pool
from propme_metrics.trace import tracer as tracer_module
from propme_metrics.trace.result import TraceResult
from propme_tasks import deferred, hooks
from support.lmeval import demo_metadata, model_args, run_lm_eval, samples_file, sidecar

TASKS = ("propme_demo_prefix", "propme_demo_generic", "propme_demo_unconditional")
SPY = str(Path(__file__).parents[1] / "support" / "lmeval_trace_spy.py")


def _spy_lm_eval(calls: Path, args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """`run_lm_eval` through the stock CLI with PropMe's tracing calls logged to `calls`."""
    full_env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                    PROPME_CACHE_DIR=str(tmp_path / "cache"), **env)
    full_env.pop("PROPME_DEMO_INDEX", None)
    return subprocess.run([sys.executable, SPY, str(calls), *args], env=full_env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=900)


@pytest.fixture(scope="module")
def lm_eval_runs(demo_paths, tmp_path_factory):
    """Three `lm_eval` runs of the same tasks: `trace_workers` 1 (metadata) and 2 (environment) with
    --log_samples, the second with PropMe's tracing calls logged; and 2 without --log_samples."""
    root = tmp_path_factory.mktemp("deferred")
    runs = {}
    for name, workers, env, log in (("one", {"trace_workers": 1}, {}, True),
                                    ("two", {}, {"PROPME_TRACE_WORKERS": "2"}, True),
                                    ("unlogged", {"trace_workers": 2}, {}, False)):
        out = root / name
        metadata = json.dumps({**json.loads(demo_metadata(demo_paths)), **workers})
        args = [*model_args(demo_paths), "--tasks", ",".join(TASKS), "--gen_kwargs", "max_gen_toks=64",
                "--metadata", metadata, *(["--log_samples"] if log else []), "--output_path", str(out)]
        if name == "two":
            proc = _spy_lm_eval(root / "calls.jsonl", args, root, **env)
        else:
            proc = run_lm_eval(args, root, **env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "parallel tracing failed" not in proc.stderr
        runs[name] = out
    runs["calls"] = [json.loads(line) for line in open(root / "calls.jsonl")]
    return runs


def _results(out) -> dict:
    return json.loads(next(out.rglob("results_*.json")).read_text())


def _samples(out, task: str) -> list[dict]:
    return [json.loads(line) for line in samples_file(out, task).open(encoding="utf-8")]


def test_any_number_of_workers_logs_the_same_samples_and_results(lm_eval_runs):
    one, two = (_results(lm_eval_runs[n]) for n in ("one", "two"))
    for task in TASKS:
        assert one["configs"][task]["metadata"]["trace_workers"] == 1  # the setting is recorded with the run
        rows = {n: _samples(lm_eval_runs[n], task) for n in ("one", "two")}
        assert {r["doc"]["trace_workers"] for r in rows["one"]} == {1}
        assert {r["doc"]["trace_workers"] for r in rows["two"]} == {2}
        assert len(rows["one"]) == len(rows["two"]) > 0
        for a, b in zip(rows["one"], rows["two"]):
            for row in (a, b):  # what differs by design: the recorded setting and the document's hash
                del row["doc"]["trace_workers"], row["doc_hash"]
            assert a == b
    # NaN (undefined) compares equal through its JSON spelling
    assert json.dumps(one["results"], sort_keys=True) == json.dumps(two["results"], sort_keys=True)
    unlogged = _results(lm_eval_runs["unlogged"])
    assert json.dumps(unlogged["results"], sort_keys=True) == json.dumps(two["results"], sort_keys=True)
    assert not list(lm_eval_runs["unlogged"].rglob("samples_*.jsonl"))
    prefix = two["results"]["propme_demo_prefix"]
    assert prefix["fmr,none"] >= 0.8 and sidecar(lm_eval_runs["two"])["tasks"]["propme_demo_prefix"]["tracing_failures"] == 0
    # with 2 workers each task was traced in one bulk call, all of its generations at once
    assert sorted(c["generations"] for c in lm_eval_runs["calls"]) == sorted(
        len(_samples(lm_eval_runs["two"], task)) for task in TASKS)
    assert {c["workers"] for c in lm_eval_runs["calls"]} == {2}


def test_every_logged_item_is_the_final_value(lm_eval_runs):
    """Each logged metric item is the prompt's own value as a number (null where undefined), the one
    its trace gives, its pooled pair in `trace.pooled`; lm-eval's table pools exactly those pairs."""
    results = _results(lm_eval_runs["two"])["results"]
    for task in TASKS:
        rows = _samples(lm_eval_runs["two"], task)
        setting = rows[0]["doc"]["setting"]
        metrics = registry.for_setting(setting)
        assert rows[0]["metrics"] == ["trace", *(m.name for m in metrics)]
        for row in rows:
            trace = row["trace"]
            assert trace["prompt_id"] == row["doc"]["id"] and trace["failed"] == 0
            traces = [TraceResult.from_dict(g) for g in trace["generations"]]
            assert [t.text for t in traces] == [row["filtered_resps"][0]]
            counted = [contributions(t, metrics, rare_max_count=row["doc"]["rare_max_count"])
                       for t in traces if counts_for_metrics(t)]
            for m in metrics:
                pair = pool(m, counted)
                assert trace["pooled"][m.name] == m.pooling.pooled_record(pair), (task, m.name)
                own = m.pooling.value(*pair) if pair[1] else None
                assert row[m.name] == own and (own is None or isinstance(row[m.name], float)), (task, m.name)
        for m in metrics:
            pooled = [row["trace"]["pooled"][m.name] for row in rows]
            if m.pooling is registry.MAXIMUM:
                counted_max = [i["max"] for i in pooled if i["n"]]
                expected = max(counted_max) if counted_max else math.nan
            else:
                n = sum(i["n"] for i in pooled)
                expected = sum(i["sum"] for i in pooled) / n if n else math.nan
            got = results[task][f"{m.name},none"]
            assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected), (task, m.name)
        failures = sidecar(lm_eval_runs["two"])["tasks"][task]["tracing_failures"]
        assert failures == sum(row["trace"]["failed"] for row in rows)


def test_samples_of_earlier_runs_still_load(lm_eval_runs, tmp_path):
    """Runs made before the items became numbers logged {"sum", "n"} dicts (and `nvr_max` a bare
    number before that): the report reads the traces only, so such samples files load as before."""
    from propme_metrics.report.load import load_samples

    path = samples_file(lm_eval_runs["two"], "propme_demo_prefix")
    old = tmp_path / path.name
    with open(old, "w", encoding="utf-8") as fh:
        for row in _samples(lm_eval_runs["two"], "propme_demo_prefix"):
            pooled = row["trace"].pop("pooled")
            row.update({name: pooled[name] for name in row["metrics"] if name in pooled})
            row["nvr_max"] = row["nvr_max"]["max"]
            fh.write(json.dumps(row) + "\n")
    loaded = [load_samples(p, "propme_demo_prefix", setting="prefix").prompts for p in (path, old)]
    assert [(p.id, p.generations, p.values) for p in loaded[0]] == [(p.id, p.generations, p.values) for p in loaded[1]]
    assert loaded[0] and all(p.values for p in loaded[0])


@pytest.fixture
def prefix_docs(demo_paths, monkeypatch, tmp_path):
    """The demo's prefix documents with `trace_workers` 2, and generations for them: the true
    continuation, unrelated words, nothing."""
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    docs = list(hooks.load_prompts(corpus="demo", setting="prefix", language=None, demo_index=str(demo_paths.index),
                                   demo_prefix_prompts=str(demo_paths.prompts("prefix")), trace_workers=2,
                                   pretrained=str(demo_paths.model))["test"])
    gens = [[doc["continuation"], "zzz qqq unrelated words", ""][: 1 + i % 3] for i, doc in enumerate(docs)]
    return docs, gens


def _run_task(docs, gens, workers: int, ahead: bool = True) -> tuple[list[dict], dict]:
    """As lm-eval runs a task: the task class's bulk step over its instances (`ahead`), then
    process_results for every document, then every aggregation; the items as lm-eval logs them
    (JSON) and the aggregated values."""
    docs = [{**doc, "trace_workers": workers} for doc in docs]
    if ahead:
        hooks.trace_task([SimpleNamespace(doc_id=i, idx=0, doc=doc, filtered_resps={"none": g})
                          for i, (doc, g) in enumerate(zip(docs, gens))])
    items = [hooks.process_results(doc, [g]) for doc, g in zip(docs, gens)]
    aggregate = {"trace": hooks.agg_trace_failures,
                 **{m.name: getattr(hooks, f"agg_{m.pooling.name}") for m in registry.METRICS}}
    values = {name: aggregate[name]([it[name] for it in items]) for name in items[0]}
    # what a distributed run hands rank 0: the items pickled; they aggregate alike
    again = pickle.loads(pickle.dumps(items))
    assert _same({name: aggregate[name]([it[name] for it in again]) for name in items[0]}, values)
    return [json.loads(json.dumps(it)) for it in items], values


def _same(a: dict, b: dict) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_items_traced_ahead_in_bulk_equal_items_traced_at_once(prefix_docs, monkeypatch):
    docs, gens = prefix_docs
    calls = []
    original = deferred.traced
    monkeypatch.setattr(deferred, "traced", lambda t, jobs, w: calls.append((len(jobs), w)) or original(t, jobs, w))
    ahead_items, ahead_values = _run_task(docs, gens, 2)
    assert calls == [(sum(map(len, gens)), 2)] and not deferred._TRACED  # one bulk call; every trace taken
    now_items, now_values = _run_task(docs, gens, 1, ahead=False)
    assert ahead_items == now_items and _same(ahead_values, now_values)
    assert now_values["fmr"] > 0 and now_values["extraction"] > 0 and now_values["trace"] == 0
    assert sum(len(it["trace"]["generations"]) for it in now_items) == sum(map(len, gens))
    # each metric a number per prompt: the true continuation alone is a full match and extracted
    assert now_items[0]["fmr"] == 1.0 and now_items[0]["extraction"] == 1.0
    assert now_items[0]["trace"]["pooled"]["fmr"] == {"sum": 1.0, "n": 1.0}
    # a generation with no document entry: NVR has nothing to divide by, null (never 0), nothing pooled
    none = hooks.process_results({**docs[0], "trace_workers": 1}, [["\u00e6\u00f8\u00e5 " * 5]])
    assert none["trace"]["pooled"]["nvr"] == {"sum": 0.0, "n": 0.0} and none["nvr"] is None
    assert none["fmr"] == 0.0 and json.loads(json.dumps(none))["nvr"] is None


def _refuse_pool(*args, **kwargs):
    raise OSError(12, "Cannot allocate memory")


def _third_job_fails(job):
    if job[1] == _third_job_fails.key:
        raise RuntimeError("worker lost")
    return tracer_module._WORKER.safe_trace_one(*job)


def _third_job_kills_its_worker(job):
    if job[1] == _third_job_fails.key:
        os._exit(9)  # as the out-of-memory killer ends a process: no exception, no result
    return tracer_module._WORKER.safe_trace_one(*job)


@pytest.mark.parametrize("failure", ["no pool", "worker fails", "worker killed"])
def test_failing_workers_lose_nothing(prefix_docs, monkeypatch, capfd, failure):
    """The pool cannot start, or a worker's job fails after others came back: the rest is traced in
    this process, said in one line, with the same numbers."""
    docs, gens = prefix_docs
    expected = _run_task(docs, gens, 1)
    capfd.readouterr()
    monkeypatch.setattr(tracer_module, "PROBE_SECONDS", 0.0)  # every generation to the workers, however few
    if failure == "no pool":
        monkeypatch.setattr(ProcessPoolExecutor, "_launch_processes", _refuse_pool)  # fork fails
    else:
        _third_job_fails.key = f"{docs[2]['id']}#0.0"
        monkeypatch.setattr(tracer_module, "_work",
                            _third_job_fails if failure == "worker fails" else _third_job_kills_its_worker)
    items, values = _run_task(docs, gens, 2)
    assert items == expected[0] and _same(values, expected[1])
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("PropMe: parallel tracing failed"), err
    assert {"no pool": "Cannot allocate memory", "worker fails": "RuntimeError: worker lost",
            "worker killed": "TraceWorkerError: a tracing worker process stopped"}[failure] in lines[0]
    assert "Traceback" not in err


def test_trace_workers_setting(demo_paths, monkeypatch, tmp_path):
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PROPME_TRACE_WORKERS", raising=False)
    base = {"corpus": "demo", "setting": "prefix", "language": None, "demo_index": str(demo_paths.index),
            "demo_prefix_prompts": str(demo_paths.prompts("prefix")), "pretrained": str(demo_paths.model)}
    assert hooks.load_prompts(**base)["test"][0]["trace_workers"] == deferred.default_trace_workers()
    assert hooks.load_prompts(**base, trace_workers="3")["test"][0]["trace_workers"] == 3
    for bad, match in (("two", "metadata key 'trace_workers' must be an integer, not 'two'"),
                       (0, "metadata key 'trace_workers' must be at least 1, not 0"),
                       (1.5, "must be an integer")):
        with pytest.raises(hooks.TaskConfigError, match=match):
            hooks.load_prompts(**base, trace_workers=bad)
    with pytest.raises(hooks.TaskConfigError, match="unknown tracing parameter.*trace_workers"):
        hooks.load_prompts(**base, trace_worker=2)
    monkeypatch.setenv("PROPME_TRACE_WORKERS", "-1")
    with pytest.raises(hooks.TaskConfigError, match="environment variable PROPME_TRACE_WORKERS must be at least 1"):
        hooks.load_prompts(**base)
    monkeypatch.setenv("PROPME_TRACE_WORKERS", "5")
    assert hooks.load_prompts(**base)["test"][0]["trace_workers"] == 5


def test_default_trace_workers(monkeypatch):
    """The CPUs this process may use, at most MAX_DEFAULT_TRACE_WORKERS."""
    for cpus, expected in (({3}, 1), (set(range(4)), 4), (set(range(64)), deferred.MAX_DEFAULT_TRACE_WORKERS)):
        monkeypatch.setattr(deferred.os, "sched_getaffinity", lambda pid, cpus=cpus: cpus)
        assert deferred.default_trace_workers() == expected
