"""The `propme` command under interruption, concurrency and hostile input: `propme trace` resumes,
never collides with a parallel run, and every bad input is one message with its exit code; an
unexpected error is one paragraph and exit 70 (PROPME_DEBUG=1 shows the traceback)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import propme_metrics.trace.runner as resume_module
from propme.cli import app as cli
from propme_metrics.trace import tracer as tracer_module
from propme_metrics.trace.runner import journal_path
from propme_metrics.trace.tracer import Tracer
from support.corpora import write_jsonl


def generations_file(path: Path, records: list[dict], n: int = 9) -> Path:
    texts = [r["text"][:200] for r in records[:n - 2]] + ["Zorblax quintessa flumph.", ""]
    return write_jsonl(path, [{"id": f"g{i}", "completion": t} for i, t in enumerate(texts)])


def trace_args(index: Path, inp: Path, out: Path, *extra) -> list:
    return ["trace", "--index", index, "--input", inp, "--out", out / "r.jsonl", "--summary", out / "s.json",
            "--quiet", *extra]


# --- propme trace: resume, concurrency ------------------------------------------------------------


def test_interrupted_trace_resumes_with_identical_results(tmp_path, monkeypatch, synthetic_index,
                                                          synthetic_records, cli_run):
    inp = generations_file(tmp_path / "g.jsonl", synthetic_records)
    assert cli_run(*trace_args(synthetic_index, inp, tmp_path / "once"))[0] == 0
    monkeypatch.setattr(resume_module, "CHUNK_PER_WORKER", 2)
    real_trace_one, calls = Tracer.safe_trace_one, []

    def interrupted(self, text, *args, **kwargs):  # Ctrl-C while the fifth generation is traced
        calls.append(text)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real_trace_one(self, text, *args, **kwargs)

    monkeypatch.setattr(Tracer, "safe_trace_one", interrupted)
    code, _, err = cli_run(*trace_args(synthetic_index, inp, tmp_path / "twice"))
    assert code == 130 and "resume" in err
    assert not (tmp_path / "twice" / "r.jsonl").exists()
    calls.clear()
    monkeypatch.setattr(Tracer, "safe_trace_one", lambda self, text, *a, **k: calls.append(text) or
                        real_trace_one(self, text, *a, **k))
    code, _, err = cli_run(*trace_args(synthetic_index, inp, tmp_path / "twice"))
    assert code == 0, err
    assert "resumed: 4 of 9" in err and len(calls) == 5  # only the rest was traced
    assert (tmp_path / "twice" / "r.jsonl").read_bytes() == (tmp_path / "once" / "r.jsonl").read_bytes()
    once, twice = (json.loads((tmp_path / d / "s.json").read_text()) for d in ("once", "twice"))
    assert twice.pop("results") == str(tmp_path / "twice" / "r.jsonl")
    once.pop("results")
    assert twice == once
    assert sorted(p.name for p in (tmp_path / "twice").iterdir()) == ["r.jsonl", "s.json"]


def _kill_worker_at_g5(job):
    """A worker's job that ends its process without a result on generation g5 (as the out-of-memory killer does)."""
    if job[1] == "g5":
        os._exit(9)
    return tracer_module._WORKER.safe_trace_one(*job)


def test_killed_worker_is_one_message_and_finished_results_resume(tmp_path, monkeypatch, synthetic_index,
                                                                  synthetic_records, cli_run):
    """A tracing worker killed mid-run: exit 4 with one message (no hang, no traceback), the results
    before it are kept, and the same command finishes the run with the results of an unbroken one."""
    inp = generations_file(tmp_path / "g.jsonl", synthetic_records)
    assert cli_run(*trace_args(synthetic_index, inp, tmp_path / "once"))[0] == 0
    monkeypatch.setattr(resume_module, "CHUNK_PER_WORKER", 1)
    monkeypatch.setattr(tracer_module, "PROBE_SECONDS", 0.0)  # every generation to the workers, however few
    with monkeypatch.context() as m:
        m.setattr(tracer_module, "_work", _kill_worker_at_g5)
        code, _, err = cli_run(*trace_args(synthetic_index, inp, tmp_path / "twice", "--workers", "2"))
    assert code == 4 and "tracing worker process stopped" in err and "run again" in err, err
    kept = journal_path(tmp_path / "twice" / "r.jsonl").read_text(encoding="utf-8").splitlines()[1:]
    assert [json.loads(x)["key"] for x in kept] == [f"g{i}" for i in range(len(kept))] and 0 < len(kept) <= 5
    code, _, err = cli_run(*trace_args(synthetic_index, inp, tmp_path / "twice", "--workers", "2"))
    assert code == 0 and f"resumed: {len(kept)} of 9" in err, err
    assert (tmp_path / "twice" / "r.jsonl").read_bytes() == (tmp_path / "once" / "r.jsonl").read_bytes()


class _Monotonic:
    """The runner module's `time`, its monotonic clock advancing `step` seconds a reading."""

    def __init__(self, step: float):
        import time

        self.now, self.step, self.time = 0.0, step, time.time

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize("step", [0.0, 2.0])
def test_the_journal_is_forced_to_disk_at_most_once_a_second(tmp_path, monkeypatch, synthetic_index,
                                                            synthetic_records, cli_run, step):
    """Every chunk is written to the journal as it comes (a killed run keeps it), but fsync runs only
    when a second has passed since the last one: a short job waits for no disk flush."""
    inp = generations_file(tmp_path / "g.jsonl", synthetic_records)
    synced, written = [], []
    monkeypatch.setattr(resume_module, "CHUNK_PER_WORKER", 1)
    monkeypatch.setattr(resume_module, "time", _Monotonic(step))
    monkeypatch.setattr(resume_module.os, "fsync", lambda fd: synced.append(fd))
    real_append = resume_module._append
    def append(fh, lines, sync=True):
        before = len(synced)
        real_append(fh, lines, sync)
        written.append((len(lines), len(synced) - before))  # results written, fsyncs of the journal

    monkeypatch.setattr(resume_module, "_append", append)
    assert cli_run(*trace_args(synthetic_index, inp, tmp_path / "out"))[0] == 0
    assert written == [(1, 0 if step == 0.0 else 1)] * 9


def test_journal_of_another_job_or_cut_short_is_not_reused(tmp_path, monkeypatch, synthetic_index,
                                                           synthetic_records, cli_run):
    inp = generations_file(tmp_path / "g.jsonl", synthetic_records)
    assert cli_run(*trace_args(synthetic_index, inp, tmp_path / "once"))[0] == 0
    out = tmp_path / "other"
    out.mkdir()
    journal = journal_path(out / "r.jsonl")
    lines = (tmp_path / "once" / "r.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    journal.write_text(json.dumps({"format": resume_module.JOURNAL_FORMAT, "fingerprint": "another job"}) + "\n"
                       + "".join(lines[:3]), encoding="utf-8")
    code, _, err = cli_run(*trace_args(synthetic_index, inp, out))
    assert code == 0 and "resumed" not in err
    assert (out / "r.jsonl").read_bytes() == (tmp_path / "once" / "r.jsonl").read_bytes()


def test_second_concurrent_trace_on_the_same_out_stops_at_once(tmp_path, synthetic_index, synthetic_records,
                                                              cli_run):
    import fcntl

    inp = generations_file(tmp_path / "g.jsonl", synthetic_records)
    out = tmp_path / "out"
    out.mkdir()
    with open(journal_path(out / "r.jsonl"), "a") as held:  # as a running `propme trace` holds it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        code, _, err = cli_run(*trace_args(synthetic_index, inp, out))
    assert code == 2 and "another `propme trace` is writing" in err
    assert cli_run(*trace_args(synthetic_index, inp, out))[0] == 0


def test_loglikelihood_samples_are_refused(tmp_path, synthetic_index, cli_run):
    row = {"doc_id": 0, "doc": {"query": "q"}, "arguments": {"gen_args_0": {"arg_0": "q", "arg_1": " a"}},
           "resps": [[[-3.5, False]]], "filtered_resps": [[-3.5, False]], "filter": "none"}
    inp = write_jsonl(tmp_path / "samples_hellaswag.jsonl", [row])
    code, _, err = cli_run(*trace_args(synthetic_index, inp, tmp_path))
    assert code == 2 and "loglikelihood" in err


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "-inf"])
def test_non_finite_window_factor_is_refused_before_tracing(value, tmp_path, synthetic_index, synthetic_records,
                                                             cli_run):
    inp = generations_file(tmp_path / "g.jsonl", synthetic_records)
    code, _, err = cli_run(*trace_args(synthetic_index, inp, tmp_path, f"--window-factor={value}"))
    assert code == 2 and "expected an integer" in err
    assert not (tmp_path / "r.jsonl").exists()


# --- the top level: unexpected errors, OS errors ---------------------------------------------------


def test_unexpected_error_is_one_paragraph_and_exit_70(tmp_path, monkeypatch, cli_run):
    import propme_metrics.index.reader as index_module

    def broken(path):
        raise ZeroDivisionError("something PropMe did not expect")

    monkeypatch.setattr(index_module, "index_info", broken)
    code, _, err = cli_run("index", "info", tmp_path)
    assert code == 70
    assert "ZeroDivisionError" in err and "PROPME_DEBUG=1" in err and "bug" in err
    monkeypatch.setenv("PROPME_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(["index", "info", str(tmp_path)])


def test_unexpected_error_in_the_installed_command(tmp_path):
    """In a real process: no traceback without PROPME_DEBUG, a traceback with it."""
    code = ("import sys, propme_metrics.index.reader as m; from propme.cli import app as cli\n"
            "m.index_info = lambda p: 1 / 0\nsys.exit(cli.main(['index', 'info', 'x']))")
    env = {k: v for k, v in os.environ.items() if k != "PROPME_DEBUG"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 70 and "Traceback" not in proc.stderr and "PROPME_DEBUG=1" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "PROPME_DEBUG": "1"}, timeout=120)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "ZeroDivisionError" in proc.stderr


def test_read_only_report_folder_is_one_message(tmp_path, cli_run):
    code, _, err = cli_run("report", tmp_path, "--out", "/sys/propme-test-report")
    assert code == 2 and "error:" in err


def test_read_only_demo_folder_is_one_message(cli_run):
    code, _, err = cli_run("demo", "--out", "/sys/propme-test-demo", "--small", "--quiet")
    assert code == 2 and "Operation not permitted" in err


# --- the lm-eval hooks: a configuration error stops the run before generation, as one message -------


@pytest.mark.parametrize("meta,fragment", [
    ({"demo_index": 123}, "'demo_index' must be a path (a non-empty string), not 123"),
    ({"trace_max_tokens": True}, "'trace_max_tokens' must be an integer, not True"),
    ({"trace_window_factor": float("nan")}, "'trace_window_factor' must be an integer"),
    ({"trace_window_factor": "inf"}, "'trace_window_factor' must be an integer"),
    ({"trace_window_factor": float("inf")}, "'trace_window_factor' must be an integer"),
    ({"n_prompts": 2.5}, "'n_prompts' must be an integer"),
    ({"cache_dir": 7}, "'cache_dir' must be a path (a non-empty string), not 7"),
    ({"demo_generic_prompts": ["a"]}, "'demo_generic_prompts' must be a path (a non-empty string), not ['a']"),
    # the metadata schema's upper bounds come first (propme_tasks/schema.py)
    ({"prompt_free_generations": 10**12}, "'prompt_free_generations' must be between 1 and 10,000,000"),
    ({"cache_dir": "/sys/propme-test-cache"}, "cannot create the prompt cache /sys/propme-test-cache/prompts"),
])
def test_task_configuration_errors_are_one_message(meta, fragment, synthetic_index):
    from propme_tasks.hooks import TaskConfigError, load_prompts

    meta = {"demo_index": str(synthetic_index), "start_token": "none", **meta}
    with pytest.raises(TaskConfigError) as info:
        load_prompts(corpus="demo", setting="generic", language="en", **meta)
    assert fragment in str(info.value)


# --- limits are checked before any work --------------------------------------------------------------


@pytest.mark.parametrize("meta,fragment", [
    # each key within its schema range, the product beyond any machine's memory
    ({"n_prompts": 10**7, "generations_per_prompt": 10**5}, "n_prompts x generations_per_prompt"),
])
def test_work_sized_beyond_memory_is_refused_at_once(meta, fragment, synthetic_index):
    from propme_tasks.hooks import TaskConfigError, load_prompts

    setting = "generic"
    meta = {"demo_index": str(synthetic_index), "start_token": "<|endoftext|>", **meta}
    with pytest.raises(TaskConfigError) as info:
        load_prompts(corpus="demo", setting=setting, language="en", **meta)
    assert fragment in str(info.value) and "memory free" in str(info.value)


def test_a_document_too_large_to_tokenize_is_refused_before_the_build(tmp_path, monkeypatch, cli_run):
    import propme_metrics.index.build as build_module
    from support.corpora import word_level_tokenizer

    tok = word_level_tokenizer(tmp_path / "tok", 10)
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "w1"}, {"id": "b", "text": "w1 " * 400_000}])
    monkeypatch.setattr(build_module, "available_memory", lambda: 100 * 2**20)  # 1.2 MB x 150 > 100 MiB
    code, _, err = cli_run("index", "build", corpus, "--out", tmp_path / "idx", "--quiet", "--skip-space-check",
                           "--tokenizer", tok)
    assert code == 2 and "longest document (1.1 MiB" in err and "split that document" in err, err
    assert not (tmp_path / "idx").exists()
    monkeypatch.setattr(build_module, "available_memory", lambda: 2**40)
    assert cli_run("index", "build", corpus, "--out", tmp_path / "idx", "--quiet", "--skip-space-check",
                   "--tokenizer", tok)[0] == 0


def test_longest_line_is_found_across_blocks(tmp_path):
    from propme_metrics.index.sources import CorpusSource

    lines = ["x" * n for n in (3, 0, 17 * 2**20, 5, 70_000)]  # the long line spans two 16 MiB blocks
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert CorpusSource(str(path)).longest_line_bytes() == 17 * 2**20
    path.write_text("y" * 12)  # no final newline
    assert CorpusSource(str(path)).longest_line_bytes() == 12


def _integer_options() -> list[tuple[list[str], str]]:
    """(command line up to the option, option) for every option of every `propme` subcommand (nested
    ones too) that parses to integers; the line fills each required argument with a placeholder."""
    import argparse

    def walk(parser: argparse.ArgumentParser, words: list[str]):
        actions = parser._actions
        for a in actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, child in a.choices.items():
                    yield from walk(child, [*words, name])
        line = list(words)
        for a in actions:
            if isinstance(a, argparse._SubParsersAction) or not (a.required or not a.option_strings):
                continue
            value = str(next(iter(a.choices))) if a.choices else "x"
            line += [value] if not a.option_strings else [a.option_strings[-1], value]
        for a in actions:
            if not a.option_strings or a.type is None or a.choices:
                continue
            try:
                parsed = a.type("1")
            except (argparse.ArgumentTypeError, TypeError, ValueError):
                continue
            if isinstance(parsed, int) or (isinstance(parsed, list) and parsed and isinstance(parsed[0], int)):
                yield line, a.option_strings[-1]

    return list(walk(cli.build_parser(), []))


def test_every_integer_option_is_bounded_where_it_is_parsed(capsys):
    """Issue 44 item 13: `contamination --k 10^30` and `report --discoverable-n 10^23` exited 70; every
    integer option refuses a huge number as it is parsed, exit 2, naming the option and the bound."""
    options = _integer_options()
    named = {(line[0], option) for line, option in options}
    assert {("contamination", "--k"), ("report", "--discoverable-n"), ("trace", "--actors"), ("index", "--shards"),
            ("index", "--shard-ids"), ("prompts", "--seed")} <= named, named
    huge = str(10 ** 30)
    for line, option in options:
        argv = [*line, option, f"1,{huge}" if option in ("--discoverable-n", "--shard-ids") else huge]
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert option in err and "expected an integer <=" in err, (argv, err)
    # the library and the task metadata read n through the same bound
    from propme_metrics.core.errors import ConfigError
    from propme_metrics.metrics.likelihood import check_n

    with pytest.raises(ConfigError, match="at most 1,000,000,000"):
        check_n(f"1,{huge}")


def test_tasks_new_on_a_full_disk_leaves_nothing_a_rerun_refuses(tmp_path, synthetic_index, monkeypatch, capsys):
    """Issue 44 item 8: `propme tasks-new` on a full disk left a 0-byte YAML that every later run refused
    to overwrite. Its files are written atomically (a failed write leaves none, exit 2 naming it), and an
    empty file where one goes is taken as PropMe's own, replaced; a user's file there is still refused."""
    import errno

    out = tmp_path / "tasks"
    argv = ["tasks-new", "mine", "--index", str(synthetic_index), "--language", "en", "--out", str(out)]
    real_fsync, calls = os.fsync, []

    def full_disk(fd):  # the third file's data cannot reach the disk
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    assert cli.main(argv) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not any(p.stat().st_size == 0 for p in out.iterdir())  # nothing half-written, no temporary left
    monkeypatch.setattr(os, "fsync", real_fsync)
    (out / "propme_mine_generic.yaml").write_text("")  # what the old write left behind on a full disk
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "task: propme_mine_generic" in (out / "propme_mine_generic.yaml").read_text()
    (out / "propme_mine_specific.yaml").write_text("my own: task\n")
    assert cli.main(argv) == 2 and "not written by `propme tasks-new`" in capsys.readouterr().err
    assert (out / "propme_mine_specific.yaml").read_text() == "my own: task\n"
