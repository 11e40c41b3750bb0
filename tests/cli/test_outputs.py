"""Outputs never replace an input, another output or an index file (compared by device and inode,
so symlinks and hard links are caught), and every user string prints as written: no rich markup
applied, no `:code:` turned into an emoji. A hypothesis test draws each command's output paths
among its inputs and the index's files and checks that nothing an input holds changes."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.corpora import write_jsonl
from support.runs import DFM, setting_prompts, write_run


def snapshot(*roots: Path) -> dict[str, bytes]:
    """Every file under (or at) each root with its bytes: what must not change."""
    out = {}
    for root in roots:
        for p in sorted([root] if root.is_file() else root.rglob("*")):
            if p.is_file():
                out[str(p)] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def index_copy(tmp_path_factory, synthetic_index) -> Path:
    """A private copy of the synthetic index (a failing guard must not break the shared one)."""
    dst = tmp_path_factory.mktemp("own-index") / "index"
    shutil.copytree(synthetic_index, dst)
    return dst


@pytest.fixture
def generations(tmp_path, synthetic_records) -> Path:
    texts = [r["text"][:160] for r in synthetic_records[:3]]
    return write_jsonl(tmp_path / "g.jsonl", [{"id": f"g{i}", "completion": t} for i, t in enumerate(texts)])


def trace(index: Path, inp: Path, out: Path, summary: Path) -> list:
    return ["trace", "--index", index, "--input", inp, "--out", out, "--summary", summary, "--quiet"]


# --- rule 1: an output never replaces an input or an index ------------------------------------------


@pytest.mark.parametrize("case", ["out=input", "summary=input", "out=summary", "out=symlink to input",
                                  "summary=hard link of input", "out=hard link of summary"])
def test_trace_output_that_is_an_input_or_the_other_output_is_refused(case, tmp_path, index_copy, generations,
                                                                      cli_run):
    out, summary = tmp_path / "r.jsonl", tmp_path / "s.json"
    if case == "out=input":
        out = generations
    elif case == "summary=input":
        summary = generations
    elif case == "out=summary":
        summary = out
        out.write_text("results of an earlier run\n")
    elif case == "out=symlink to input":
        out.symlink_to(generations)
    elif case == "summary=hard link of input":
        os.link(generations, summary)
    else:
        summary.write_text("{}\n")
        os.link(summary, out)
    before = snapshot(tmp_path, index_copy)
    code, _, err = cli_run(*trace(index_copy, generations, out, summary))
    assert code == 2, err
    assert "overwrite" in err or "destroy the input" in err
    assert snapshot(tmp_path, index_copy) == before


@pytest.mark.parametrize("name", ["table.0", "propme-manifest.json", "propme-tokenizer/tokenizer.json", "new.jsonl"])
def test_trace_into_an_index_folder_is_refused(name, tmp_path, index_copy, generations, cli_run):
    before = snapshot(index_copy)
    for args in (trace(index_copy, generations, index_copy / name, tmp_path / "s.json"),
                 trace(index_copy, generations, tmp_path / "r.jsonl", index_copy / name)):
        code, _, err = cli_run(*args)
        assert code == 2 and "inside the index folder" in err, err
    assert snapshot(index_copy) == before and not (tmp_path / "r.jsonl").exists()


def test_prompts_build_into_the_index_or_over_its_candidates_is_refused(tmp_path, index_copy, cli_run):
    cands = tmp_path / "cands.txt"
    cands.write_text("Write a short poem about the sea.\nDescribe your favourite meal.\n")
    before = snapshot(index_copy, cands)
    base = ["prompts", "build", "--index", index_copy, "--setting", "generic", "--n", "2", "--language", "en",
            "--quiet", "--candidates", cands]
    for out, fragment in ((index_copy / "metadata.0", "inside the index folder"), (cands, "destroy the input")):
        code, _, err = cli_run(*base, "--out", out)
        assert code == 2 and fragment in err, err
    assert snapshot(index_copy, cands) == before


def test_prompts_build_out_an_existing_folder_is_refused_before_the_build(tmp_path, index_copy, cli_run):
    folder = tmp_path / "prompts"
    folder.mkdir()
    code, _, err = cli_run("prompts", "build", "--index", index_copy, "--setting", "prefix", "--n", "2",
                           "--quiet", "--out", folder)
    assert code == 2 and "is a folder, not a file" in err, err
    assert list(tmp_path.iterdir()) == [folder] and not list(folder.iterdir())  # no orphan sidecar


def test_report_into_an_index_folder_or_over_a_run_is_refused(tmp_path, index_copy, cli_run):
    run = write_run(tmp_path / "run", DFM, "", {
        "generic": setting_prompts("generic", 4, [(4, 10)], {0: 0.2}, set()),
        "prefix": setting_prompts("prefix", 4, [(4, 12)], {0: 0.5}, {0})})
    before = snapshot(index_copy, run)
    for out in (index_copy, index_copy / "report", run):
        code, _, err = cli_run("report", run, "--out", out, "--bootstrap", "10")
        assert code == 2 and ("index" in err or "input" in err), err
    assert snapshot(index_copy, run) == before


def test_tasks_new_and_index_join_never_write_into_an_index(tmp_path, index_copy, cli_run):
    before = snapshot(index_copy)
    code, _, err = cli_run("tasks-new", "mine", "--index", index_copy, "--language", "en",
                           "--out", index_copy / "tasks")
    assert code == 2 and "index" in err, err
    code, _, err = cli_run("index", "join", index_copy, "--out", index_copy / "joined")
    assert code == 2 and "index" in err, err
    assert snapshot(index_copy) == before


# --- the fuzz test: any output among the inputs and index files changes nothing --------------------


FUZZ = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])


@FUZZ
@given(data=st.data())
def test_no_output_drawn_among_inputs_and_index_files_changes_an_input(data, tmp_path_factory, index_copy,
                                                                        cli_run):
    root = tmp_path_factory.mktemp("fuzz")
    inp = write_jsonl(root / "g.jsonl", [{"id": "g0", "completion": "The editor sold the church tower."}])
    cands = root / "cands.txt"
    cands.write_text("Write a short poem about the sea.\nDescribe your favourite meal.\n")
    run = write_run(root / "run", DFM, "", {"generic": setting_prompts("generic", 2, [(2, 10)], {0: 0.2}, set()),
                                            "prefix": setting_prompts("prefix", 2, [(2, 12)], {0: 0.5}, {0})})
    (root / "link.jsonl").symlink_to(inp)
    os.link(cands, root / "hard.txt")
    index_files = sorted(str(p.relative_to(index_copy)) for p in index_copy.rglob("*") if p.is_file())
    run_files = sorted(run.iterdir())
    pool = st.one_of(st.sampled_from([inp, cands, root / "link.jsonl", root / "hard.txt", index_copy, run,
                                      root / "fresh.jsonl", root / "fresh.json", root / "fresh-folder"]),
                     st.sampled_from(index_files).map(lambda name: index_copy / name),
                     st.sampled_from(run_files))
    command = data.draw(st.sampled_from(["trace", "prompts", "report", "tasks-new", "join"]))
    first, second = data.draw(pool), data.draw(pool)
    inputs = {"trace": [inp], "prompts": [cands], "report": [run]}.get(command, [])
    protected = [*inputs, index_copy]
    before = snapshot(*protected)
    if command == "trace":
        args = trace(index_copy, inp, first, second)
    elif command == "prompts":
        args = ["prompts", "build", "--index", index_copy, "--setting", "generic", "--n", "1", "--language", "en",
                "--quiet", "--candidates", cands, "--out", first]
    elif command == "report":
        args = ["report", run, "--out", first, "--bootstrap", "0", "--no-html"]
    elif command == "tasks-new":
        args = ["tasks-new", "mine", "--index", index_copy, "--language", "en", "--out", first]
    else:
        args = ["index", "join", index_copy, "--out", first]
    code, _, err = cli_run(*args)
    assert code in (0, 2, 3), err
    assert snapshot(*protected) == before, (command, first, second)


# --- rule 5: messages print what they say --------------------------------------------------------


def test_line_numbers_and_markup_in_messages_print_as_written(tmp_path, index_copy, cli_run):
    inp = tmp_path / "g[bold].jsonl"
    inp.write_text("".join(json.dumps({"id": f"g{i}", "completion": "w"}) + "\n" for i in range(99)) + "{bad\n")
    code, _, err = cli_run(*trace(index_copy, inp, tmp_path / "r.jsonl", tmp_path / "s.json"))
    assert code == 2
    assert "g[bold].jsonl:100:" in err and "\N{HUNDRED POINTS SYMBOL}" not in err


def test_markup_in_a_model_name_or_path_prints_and_exits_0(tmp_path, index_copy, cli_run):
    model = "org/[/x] [bold]m[/bold] [link=http://e.x]l[/link] [strike]s[/strike] :100:"
    run = write_run(tmp_path / "run", model, "", {
        "generic": setting_prompts("generic", 4, [(4, 10)], {0: 0.2}, set()),
        "prefix": setting_prompts("prefix", 4, [(4, 12)], {0: 0.5}, {0})})
    code, out, err = cli_run("report", run.parent, "--out", tmp_path / "rep [/x]", "--bootstrap", "10")
    assert code == 0, err
    flat = out.replace("\n", "").replace("│", "").replace(" ", "")
    assert model.replace(" ", "") in flat or "[/x][bold]m[/bold]" in flat
    assert "rep [/x]" in out
    link = tmp_path / "idx [red]b :100:"
    link.symlink_to(index_copy)
    code, out, err = cli_run("index", "info", link)
    assert code == 0, err
    assert "idx[red]b:100:" in "".join(out.split())


def test_markup_in_a_rejected_candidate_id_prints_as_written(tmp_path, index_copy, synthetic_records, cli_run):
    verbatim = synthetic_records[0]["text"].split(". ")[0]  # occurs in the index: rejected
    cands = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "[/x] [strike]gone[/strike] :100:", "prompt": verbatim},
        {"id": "ok", "prompt": "Write a short poem about the sea, please."}])
    code, out, err = cli_run("prompts", "build", "--index", index_copy, "--setting", "generic", "--n", "1",
                             "--language", "en", "--candidates", cands, "--out", tmp_path / "p.jsonl", "--quiet")
    assert code == 0, err
    assert "[/x] [strike]gone[/strike] :100:" in out


def test_demo_stage_lines_print_paths_as_written(capsys):
    import time

    from propme.demo.run import _stage

    _stage("report", False, time.time(), "/tmp/out [/x] [bold]b[/bold] :100:")
    err = capsys.readouterr().err
    assert "/tmp/out [/x] [bold]b[/bold] :100:" in err and "[7/7] report" in err


# --- devices and FIFOs are written in place ----------------------------------------------------------


def test_trace_into_a_fifo_and_a_device_streams_and_keeps_them(tmp_path, index_copy, generations, cli_run,
                                                              monkeypatch):
    """`propme trace --out FIFO` feeds the FIFO's reader (the FIFO stays a FIFO); `--summary` on a
    device node is written in place (it stays that device); no journal is left beside them or in the
    cache."""
    import stat

    from support.special_files import NULL_DEVICE, FifoReader, null_node

    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    pipe = FifoReader(tmp_path / "pipe")
    node = null_node(tmp_path / "null")
    code, _, err = cli_run(*trace(index_copy, generations, tmp_path / "pipe", node))
    assert code == 0, err
    lines = [json.loads(line) for line in pipe.result().decode().splitlines()]
    assert [r["key"] for r in lines] == ["g0", "g1", "g2"]
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)
    assert stat.S_ISCHR(os.stat(node).st_mode) and os.stat(node).st_rdev == NULL_DEVICE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "g.jsonl", "null", "pipe"]
    # the cache keeps only the mark of the manifest text checked (`index.manifest.schema_problem`)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.parent.name != "valid-manifests"]
