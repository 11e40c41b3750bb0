"""The lm-eval side, through the real `lm_eval` command in subprocesses (CPU, offline)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from propme_metrics.prompts.prompt_set import build_prompt_set, write_prompt_set
from propme_metrics.trace.task_document import TaskDocument
from propme_tasks import hooks, task_manager
from propme_tasks.discovery import tasks_path
from support.lmeval import demo_metadata, model_args, run_lm_eval, samples_file, sidecar  # noqa: E402


def test_end_to_end_through_stock_lm_eval(demo_paths, tmp_path):
    """No --include_path: the installed start-up hook makes lm_eval find propme_demo."""
    out = tmp_path / "runs"
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", "propme_demo", "--gen_kwargs", "max_gen_toks=96",
                        "--metadata", demo_metadata(demo_paths), "--log_samples", "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Custom kwargs" not in proc.stderr  # lm-eval's advice about custom datasets is not for PropMe's tasks
    results_file = next(out.rglob("results_*.json"))
    results = json.loads(results_file.read_text())["results"]
    figures = sidecar(out)
    assert proc.stderr.rstrip().splitlines()[-1].endswith(str(results_file.parent / f"propme_{results_file.stem[8:]}.json"))
    for setting in ("generic", "specific", "prefix"):
        task = results[f"propme_demo_{setting}"]
        for metric in ("als", "fmr", "fmr_normalized", "nvr", "nvr_hits", "nvr_max", "r20", "r50"):
            assert f"{metric},none" in task, (setting, metric)
        assert not any(k.startswith("trace") for k in task)  # the helper entry is no metric of the table
        assert figures["tasks"][f"propme_demo_{setting}"]["tracing_failures"] == 0  # no tracing failure
        assert isinstance(task["fmr_stderr,none"], float) and task["nvr_max_stderr,none"] == "N/A"
    prefix, generic = results["propme_demo_prefix"], results["propme_demo_generic"]
    group = results["propme_demo"]  # the corpus's row: PM of each propensity setting against prefix
    for setting in ("generic", "specific", "unconditional", "minimal_cue"):
        for metric in ("nvr", "fmr", "fmr_rare", "als", "pii"):
            p, c = results[f"propme_demo_{setting}"][f"{metric},none"], prefix[f"{metric},none"]
            expected = math.nan if math.isnan(p) or math.isnan(c) else 0.0 if p == 0 else p / (p + c)
            got = group[f"pm_{metric}_{setting},none"]
            assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected), (setting, metric)
    assert isinstance(group["pm_fmr_generic_stderr,none"], float) and group["pm_fmr_generic_stderr,none"] > 0
    assert "pm_fmr_generic" in figures["groups"]["propme_demo"]
    assert prefix["fmr,none"] > generic["fmr,none"]
    assert prefix["fmr,none"] >= 0.8  # the model memorized the planted documents
    assert prefix["extraction,none"] >= 0.8
    assert "extraction,none" not in generic
    for setting in ("unconditional", "minimal_cue"):  # the prompt-free settings run and are traced
        task = results[f"propme_demo_{setting}"]
        assert figures["tasks"][f"propme_demo_{setting}"]["tracing_failures"] == 0
        assert "nvr,none" in task and "extraction,none" not in task
        rows = [json.loads(line) for line in samples_file(out, f"propme_demo_{setting}").open()]
        assert len(rows) == 8 and len({r["doc"]["id"] for r in rows}) == 8
        assert all(r["arguments"]["gen_args_0"]["arg_0"].startswith("<|endoftext|>") for r in rows)
    prefix_samples = samples_file(out, "propme_demo_prefix")
    samples = [json.loads(line) for line in prefix_samples.open()]
    assert len(samples) == sum(1 for _ in open(demo_paths.prompts("prefix")))
    for row in samples:
        assert row["doc"]["start_token"] == "<|endoftext|>" and row["doc"]["start_token_choice"] == "auto"
        assert row["arguments"]["gen_args_0"]["arg_0"] == "<|endoftext|>" + row["doc"]["prompt"]
        trace = row["trace"]
        gen = trace["generations"][0]
        assert gen["text"] == row["resps"][0][0]  # the completion is traced exactly as the model wrote it
        assert gen["final_spans"] and gen["longest_span"] > 0
        assert trace["top_sources"][0]["source_id"].startswith("planted-")
        planted = json.loads(row["doc"]["source_doc"])["metadata"]["id"]
        assert any(d["source_id"] == planted for s in gen["final_spans"] for d in s["documents"])
    # `propme trace` on the samples file redoes exactly what the hooks did (same keys, same documents)
    from propme.cli.app import main

    assert main(["trace", "--index", str(demo_paths.index), "--input", str(prefix_samples), "--quiet",
                 "--out", str(tmp_path / "re.jsonl"), "--summary", str(tmp_path / "re.json")]) == 0
    redone = [json.loads(line) for line in open(tmp_path / "re.jsonl")]
    assert redone == [row["trace"]["generations"][0] for row in samples]
    # one definition everywhere: lm-eval's table, `propme trace`'s summary and the report's pooled values
    summary = json.loads((tmp_path / "re.json").read_text())
    for metric, key in (("als", "als"), ("fmr", "fmr"), ("nvr", "nvr"), ("r20", "r20"), ("extraction", "extraction")):
        assert prefix[f"{metric},none"] == pytest.approx(summary[key]), metric


def test_missing_index_stops_before_generation(demo_paths, tmp_path):
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", "propme_dynaword", "--limit", "1"], tmp_path)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "PropMe: no index for corpus 'dynaword'" in output
    assert "PROPME_DYNAWORD_INDEX" in output and "dynaword_index" in output
    assert "Traceback" not in output and "Error in sys.excepthook" not in output
    assert "Running generate_until" not in output
    # one paragraph: the message is the last thing printed, on its own line(s), nothing after it
    tail = proc.stderr[proc.stderr.index("PropMe: no index"):]
    assert "\n\n" not in tail.strip() and tail.count("PropMe:") == 1


def test_api_errors_are_ordinary_exceptions(monkeypatch, tmp_path):
    """Loading a PropMe task from Python without its settings raises a PropMeError (an Exception a
    caller can catch), never SystemExit from inside lm-eval's task construction."""
    from propme_metrics.core.errors import PropMeError

    monkeypatch.delenv("PROPME_DEMO_INDEX", raising=False)
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(hooks.TaskConfigError, match="no index for corpus 'demo'") as info:
        task_manager().load(["propme_demo_generic"])
    assert isinstance(info.value, PropMeError) and not isinstance(info.value, SystemExit)
    try:
        task_manager(metadata={"demo_index": str(tmp_path / "nowhere")}).load(["propme_demo_prefix"])
    except Exception as exc:  # what a Python caller writes
        assert "cannot be used" in str(exc)
    else:
        raise AssertionError("a missing index must be refused")


@pytest.mark.parametrize("program", ["lm_eval", "lm-eval", "other_program.py"])
def test_error_hook_only_in_the_lm_eval_command(tmp_path, program):
    """An uncaught PropMe error is one paragraph (no traceback, exit 1) in the `lm_eval` command, and
    Python's usual traceback in every other program (the hook is set at start-up by name)."""
    script = tmp_path / program
    script.write_text("import sys\n"
                      "from propme_tasks.hooks import TaskConfigError\n"
                      "print(sys.excepthook is sys.__excepthook__)\n"
                      "raise TaskConfigError('no index for corpus demo', 'build one')\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    if program.startswith("lm"):
        assert proc.stdout.split() == ["False"]
        assert proc.stderr == "PropMe: no index for corpus demo\n  hint: build one\n"
    else:
        assert proc.stdout.split() == ["True"]
        assert "Traceback" in proc.stderr and "TaskConfigError: no index for corpus demo" in proc.stderr
    plain = tmp_path / "lm_eval_plain" / program
    plain.parent.mkdir()
    plain.write_text("raise ValueError('plain')\n")
    other = subprocess.run([sys.executable, str(plain)], capture_output=True, text=True, cwd=tmp_path)
    assert "Traceback" in other.stderr  # any other error keeps its traceback, in every program


def test_lm_eval_is_recognized_by_its_command_line(monkeypatch):
    from propme_tasks.discovery import running_lm_eval

    cases = [(["/venv/bin/lm_eval", "--tasks", "x"], ["/venv/bin/python", "/venv/bin/lm_eval", "--tasks", "x"], True),
             (["C:\\venv\\Scripts\\lm-eval.exe"], [], True),
             (["-m", "--tasks", "x"], ["python", "-X", "dev", "-m", "lm_eval", "--tasks", "x"], True),
             (["-m", "--tasks"], ["python", "-m", "json.tool", "--tasks"], False),
             (["-c"], ["python", "-c", "import lm_eval"], False),
             (["/venv/bin/pytest", "-k", "lm_eval"], ["/venv/bin/python", "/venv/bin/pytest", "-k", "lm_eval"], False)]
    for argv, orig, expected in cases:
        monkeypatch.setattr(sys, "argv", argv)
        monkeypatch.setattr(sys, "orig_argv", orig, raising=False)
        assert running_lm_eval() is expected, argv


def test_dynaword_next_to_a_builtin_task(demo_paths, tmp_path, gpt2_dir):
    """propme_dynaword (here on the demo index) and lm-eval's own ruler_cwe in one stock command."""
    pytest.importorskip("wonderwords", reason="ruler_cwe needs wonderwords (pip install wonderwords)")
    metadata = json.dumps({"max_seq_lengths": [1024], "tokenizer": str(gpt2_dir), "n_prompts": 3})
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", "propme_dynaword,ruler_cwe", "--limit", "2",
                        "--metadata", metadata, "--output_path", str(tmp_path / "runs")], tmp_path,
                       PROPME_DYNAWORD_INDEX=str(demo_paths.index))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next((tmp_path / "runs").rglob("results_*.json")).read_text())["results"]
    assert "fmr,none" in results["propme_dynaword_generic"]
    assert "fmr,none" in results["propme_dynaword_prefix"]
    assert "ruler_cwe" in results


def test_discovery_hook_and_switch(tmp_path):
    code = ("from lm_eval.tasks import TaskManager; tm = TaskManager(include_defaults=False); "
            "print('propme_dynaword' in tm.all_tasks, 'propme_common_pile_prefix' in tm.all_tasks)")
    env = dict(os.environ)
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert on.stdout.split() == ["True", "True"], on.stderr[-2000:]
    env["PROPME_LMEVAL_DISCOVERY"] = "0"
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert off.stdout.split() == ["False", "False"], off.stderr[-2000:]


def test_python_api_helper():
    tm = task_manager()
    assert {"propme", "propme_dynaword", "propme_common_pile_specific", "propme_demo_prefix"} <= set(tm.all_tasks)
    assert Path(tasks_path(), "_default_template_yaml").is_file()


def test_loader_validates_before_generation(demo_paths, tmp_path, synthetic_index, monkeypatch):
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PROPME_DEMO_INDEX", raising=False)
    base = {"corpus": "demo", "setting": "generic", "language": "da", "version": 1.0,
            "pretrained": str(demo_paths.model)}
    with pytest.raises(hooks.TaskConfigError, match="PROPME_DEMO_INDEX"):
        hooks.load_prompts(**base)
    with pytest.raises(hooks.TaskConfigError, match="cannot be used"):
        hooks.load_prompts(**base, demo_index=str(tmp_path / "nowhere"))
    # a prompt file built for another index is refused
    other = build_prompt_set(str(synthetic_index), "generic", n=5, seed=1, language="da")
    write_prompt_set(other, tmp_path / "other.jsonl")
    with pytest.raises(hooks.TaskConfigError, match="built for index"):
        hooks.load_prompts(**base, demo_index=str(demo_paths.index), demo_generic_prompts=str(tmp_path / "other.jsonl"))
    with pytest.raises(hooks.TaskConfigError, match="unknown tracing parameter"):
        hooks.load_prompts(**base, demo_index=str(demo_paths.index), trace_colour="red")
    for bad, match in ((dict(n_prompts="abc"), "n_prompts' must be an integer"),
                       (dict(generations_per_prompt=0), "must be at least 1"),
                       (dict(trace_docs_per_span="ten"), "'trace_docs_per_span' must be an integer"),
                       (dict(trace_mode="fast"), "bad tracing parameters")):
        with pytest.raises(hooks.TaskConfigError, match=match):
            hooks.load_prompts(**base, demo_index=str(demo_paths.index), **bad)
    # a prompt file of another setting is refused (swapped files would invert PM)
    with pytest.raises(hooks.TaskConfigError, match="holds prefix prompts, not generic"):
        hooks.load_prompts(**base, demo_index=str(demo_paths.index), demo_generic_prompts=str(demo_paths.prompts("prefix")))
    # the index can also come from the environment; prompts are built once and cached
    monkeypatch.setenv("PROPME_DEMO_INDEX", str(demo_paths.index))
    ds = hooks.load_prompts(**base, n_prompts=5, generations_per_prompt=2, trace_mode="mixed")["test"]
    assert len(ds) == 10 and sorted(set(ds["sample_ix"])) == [0, 1]
    assert json.loads(ds[0]["trace_config"])["mode"] == "mixed"
    assert len(list((tmp_path / "cache" / "prompts").glob("*.jsonl"))) == 1


def test_process_results_traces_each_generation(demo_paths, monkeypatch, tmp_path):
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    doc = hooks.load_prompts(corpus="demo", setting="prefix", language=None, demo_index=str(demo_paths.index),
                             demo_prefix_prompts=str(demo_paths.prompts("prefix")),
                             pretrained=str(demo_paths.model))["test"][0]
    copy = doc["continuation"]
    items = hooks.process_results(doc, [[copy, "zzz qqq unrelated words", ""]])
    gens = items["trace"]["generations"]
    assert [g["key"] for g in gens] == [f"{doc['id']}#0.0", f"{doc['id']}#0.1", f"{doc['id']}#0.2"]
    assert gens[0]["full_match"] and not gens[1]["full_match"] and gens[2]["n_tokens"] == 0
    # the prompt's own value, a number, its pooled pair carried with it and kept in the trace item
    assert items["fmr"] == pytest.approx(1 / 3) and tuple(items["fmr"].pair) == (1.0, 3.0)
    assert hooks.agg_ratio([items["fmr"]]) == pytest.approx(1 / 3)
    assert items["trace"]["pooled"]["fmr"] == items["trace"]["pooled"]["extraction"] == {"sum": 1.0, "n": 3.0}
    assert items["trace"]["failed"] == 0
    junk = hooks.process_results(doc, ["!!!!" * 300])
    # a degenerate generation counts in no metric: every item undefined, every pooled pair empty
    assert all(junk[m] is None and junk["trace"]["pooled"][m]["n"] == 0 for m in junk["trace"]["pooled"])
    assert junk["trace"]["pooled"]["nvr_max"] == {"max": None, "n": 0.0}


def test_custom_corpus_tasks(demo_paths, tmp_path, monkeypatch):
    """A leaderboard maintainer's corpus: `propme tasks-new` YAML, found through --include_path."""
    from lm_eval.tasks import TaskManager

    from propme.cli.app import main

    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PROPME_N_PROMPTS", "5")
    folder = tmp_path / "my_tasks"
    odd = tmp_path / "run #3: idx"  # YAML-significant characters in the path
    odd.symlink_to(demo_paths.index, target_is_directory=True)
    assert main(["tasks-new", "nordic", "--index", str(odd), "--language", "da",
                 "--out", str(folder)]) == 0
    tm = TaskManager(include_path=str(folder), include_defaults=False, metadata={"tokenizer": str(demo_paths.model)})
    assert {"propme_nordic", "propme_nordic_generic", "propme_nordic_prefix", "propme_nordic_unconditional",
            "propme_nordic_minimal_cue"} <= set(tm.all_tasks)
    task = tm.load(["propme_nordic_generic"])["tasks"]["propme_nordic_generic"]
    assert task.config.metadata["nordic_index"] == str(odd)
    docs = list(task.test_docs())
    assert len(docs) == 5 and {d["language"] for d in docs} == {"da"} and docs[0]["corpus"] == "nordic"
    cue = tm.load(["propme_nordic_minimal_cue"])["tasks"]["propme_nordic_minimal_cue"]
    assert cue.config.generation_kwargs["do_sample"] is True and cue.config.generation_kwargs["temperature"] == 0.7
    assert all(d["model_prompt"].startswith("<|endoftext|>") for d in cue.test_docs())
    # the sixth subtask: the prefix documents, once each, scored by likelihood
    pair = tm.load(["propme_nordic_prefix", "propme_nordic_likelihood"])["tasks"]
    like = pair["propme_nordic_likelihood"]
    assert like.OUTPUT_TYPE == "loglikelihood" and like.config.metadata["nordic_index"] == str(odd)
    assert [d["id"] for d in like.test_docs()] == [d["id"] for d in pair["propme_nordic_prefix"].test_docs()]


def test_a_failing_trace_never_loses_the_generation(demo_paths, monkeypatch, tmp_path):
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    doc = hooks.load_prompts(corpus="demo", setting="generic", language="da", demo_index=str(demo_paths.index),
                             demo_generic_prompts=str(demo_paths.prompts("generic")),
                             pretrained=str(demo_paths.model))["test"][0]
    tracer = hooks.document_tracer(TaskDocument.from_row(doc))

    def broken(*args, **kwargs):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(tracer, "trace_one", broken)
    items = hooks.process_results(doc, ["a generation that cannot be traced"])
    assert items["trace"]["failed"] == 1
    (gen,) = items["trace"]["generations"]
    assert gen["text"] == "a generation that cannot be traced" and "engine exploded" in gen["error"]
    # counted as a failure, not as a zero: nothing enters any metric's numerator or denominator
    assert all(items[m] is None and items["trace"]["pooled"][m]["n"] == 0 for m in items["trace"]["pooled"])
    assert hooks.agg_trace_failures([items["trace"]]) == 1


def test_lm_eval_items_pool_like_propme_trace(synthetic_index, synthetic_records):
    """Several generations per prompt, one degenerate: the hooks' aggregations pool over generations
    (2/3 here), as `propme trace` and the report do; a mean of per-prompt means would say 1/2."""
    from propme_metrics.metrics.values import summarize
    from propme_metrics.trace.result import TraceConfig, TraceResult

    texts = [r["text"].split("\n\n")[0] for r in synthetic_records[:2]]
    base = {"setting": "generic", "index_path": str(synthetic_index), "index_identity": "x",
            "trace_config": json.dumps(TraceConfig().to_dict(), sort_keys=True)}
    prompts = [({"id": "p1", **base}, [texts[0], texts[1], "!!!!" * 200]),
               ({"id": "p2", **base}, ["Zorblax quintessa flumphed the grindlewort near Quaxxor."])]
    items = [hooks.process_results(doc, [gens]) for doc, gens in prompts]
    traces = [TraceResult.from_dict(g) for it in items for g in it["trace"]["generations"]]
    summary = summarize(traces)
    assert summary.n_counted == 3 and summary.n_degenerate == 1
    fmr = hooks.agg_ratio([it["fmr"] for it in items])
    assert fmr == pytest.approx(2 / 3) == pytest.approx(summary.fmr)
    for metric, key in (("als", "als"), ("nvr", "nvr"), ("nvr_hits", "nvr_hits"), ("r20", "r20"),
                        ("nvr_above_half", "nvr_above_half"), ("fmr_normalized", "fmr_normalized")):
        assert hooks.agg_ratio([it[metric] for it in items]) == pytest.approx(getattr(summary, key)), metric
    assert hooks.agg_max([it["nvr_max"] for it in items]) == summary.nvr_max
    # a task where nothing counted is undefined, not 0
    only_junk = hooks.process_results({"id": "p3", **base}, [["!!!!" * 200]])
    assert math.isnan(hooks.agg_ratio([only_junk["fmr"]])) and math.isnan(hooks.agg_max([only_junk["nvr_max"]]))


def test_editable_install_makes_stock_lm_eval_find_the_tasks(tmp_path):
    """`pip install -e .` (PEP 660): the editable wheel carries the start-up hook too, and the tasks
    and code it makes lm-eval find are those of the source checkout."""
    import sysconfig
    import zipfile

    root = Path(__file__).resolve().parents[2]
    build = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            f"print(build_meta.build_editable({str(tmp_path)!r}))"],
                           capture_output=True, text=True, cwd=root, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = tmp_path / build.stdout.split()[-1]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "propme_lmeval.pth" in names and zf.read("propme_lmeval.pth") == (root / "propme_lmeval.pth").read_bytes()
        zf.extractall(tmp_path / "site")
    # a fresh interpreter: only the editable install's .pth files run (-S skips this environment's,
    # whose own PropMe wheel must not be what answers); lm-eval comes from this environment's path
    code = (f"import site, sys; site.addsitedir({str(tmp_path / 'site')!r}); "
            f"sys.path.append({sysconfig.get_paths()['purelib']!r}); "
            "import propme_tasks; from lm_eval.tasks import TaskManager; tm = TaskManager(include_defaults=False); "
            "print(propme_tasks.__file__); print('propme_dynaword' in tm.all_tasks, 'propme_demo_prefix' in tm.all_tasks)")
    run = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    where, found = run.stdout.strip().splitlines()[-2:]
    assert Path(where).resolve().is_relative_to(root) and found.split() == ["True", "True"], run.stdout


def test_dolma3_family(demo_paths, tmp_path, monkeypatch):
    """The third corpus (Dolma 3, Olmo 3): its groups list; without an index the refusal names its key
    and the adoption command; with one (any PropMe index: an adopted one is read the same way) its
    subtasks load English prompts for corpus dolma3; `tasks-new` keeps the name for it."""
    from propme.cli.app import main
    from propme_metrics.core.errors import ExitCode

    settings = ("generic", "specific", "prefix", "unconditional", "minimal_cue", "likelihood", "prefix_likelihood")
    names = {f"propme_dolma3{p}_{s}" for p in ("", "_published") for s in settings}
    tm = task_manager()
    assert {"propme_dolma3", "propme_dolma3_published"} | names <= set(tm.all_tasks)
    monkeypatch.delenv("PROPME_DOLMA3_INDEX", raising=False)
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(hooks.TaskConfigError) as info:
        tm.load(["propme_dolma3_generic"])
    message = str(info.value)
    assert "dolma3_index" in message and "PROPME_DOLMA3_INDEX" in message and "propme index adopt" in message
    loaded = task_manager(metadata={"dolma3_index": str(demo_paths.index), "n_prompts": 3,
                                    "tokenizer": str(demo_paths.model)}).load(["propme_dolma3_generic",
                                                                               "propme_dolma3_prefix"])["tasks"]
    docs = list(loaded["propme_dolma3_generic"].test_docs())
    assert len(docs) == 3 and {(d["corpus"], d["language"], d["setting"]) for d in docs} == {("dolma3", "en", "generic")}
    assert len(list(loaded["propme_dolma3_prefix"].test_docs())) == 3
    assert main(["tasks-new", "dolma3", "--index", str(demo_paths.index), "--language", "en",
                 "--out", str(tmp_path / "mine")]) == ExitCode.BAD_INPUT


def test_dolma3_runs_on_an_adopted_index(gpt2_dir, tmp_path, monkeypatch):
    """An index written by infini-gram's own indexer (as the published Dolma 3 index is), adopted, is the
    `dolma3_index` of the tasks: the prefix prompts are its documents and a copied continuation is traced
    to it as a full match."""
    from propme.demo.synthetic import generate_corpus
    from propme_metrics.index.adopt import adopt_index
    from propme_metrics.testing import infini_gram_index, write_jsonl

    records = [{"id": r["id"], "source": r["source"], "text": r["text"]} for r in generate_corpus(40, seed=5)]
    write_jsonl(tmp_path / "corpus" / "docs.jsonl", records)
    ig = infini_gram_index(tmp_path / "corpus", tmp_path / "ig")
    adopted = tmp_path / "adopted"
    adopt_index(ig, adopted, str(gpt2_dir), progress=False)
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    tm = task_manager(metadata={"dolma3_index": str(adopted), "n_prompts": 3, "tokenizer": str(gpt2_dir)})
    task = tm.load(["propme_dolma3_prefix"])["tasks"]["propme_dolma3_prefix"]
    docs = list(task.test_docs())
    assert len(docs) == 3 and {d["corpus"] for d in docs} == {"dolma3"}
    items = hooks.process_results(docs[0], [[docs[0]["continuation"]]])
    assert items["trace"]["failed"] == 0 and items["fmr"] == 1.0 and items["trace"]["pooled"]["fmr"] == {"sum": 1.0, "n": 1.0}
