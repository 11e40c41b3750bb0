"""Single cases of hostile input, each one message (or the honest count) instead of a silent guess:
a Tatoeba export with a truncated row, a null completion, a parquet corpus without the text column,
`tasks-new` over the user's own YAML."""
from __future__ import annotations

import json

import yaml

from support.corpora import write_jsonl


def test_tatoeba_export_with_a_truncated_row_names_the_line(tmp_path, synthetic_index, cli_run):
    rows = [f"{1000 + i}\teng\tThe ferry to island number {i} leaves at noon." for i in range(6)]
    rows.insert(3, "1099\teng")  # cut short: no text column
    cands = tmp_path / "eng_sentences.tsv"
    cands.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, _, err = cli_run("prompts", "build", "--index", synthetic_index, "--setting", "generic", "--n", "2",
                           "--language", "en", "--candidates", cands, "--out", tmp_path / "p.jsonl", "--quiet")
    assert code == 2 and f"{cands}:4: not a Tatoeba row" in err, err
    assert not (tmp_path / "p.jsonl").exists()


def test_null_completion_is_a_failed_generation_with_its_reason(tmp_path, synthetic_index, synthetic_records,
                                                               cli_run):
    inp = write_jsonl(tmp_path / "g.jsonl", [{"id": "a", "completion": synthetic_records[0]["text"][:120]},
                                             {"id": "b", "completion": None}])
    code, _, err = cli_run("trace", "--index", synthetic_index, "--input", inp, "--out", tmp_path / "r.jsonl",
                           "--summary", tmp_path / "s.json", "--quiet")
    assert code == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["n_failed"] == 1 and summary["n_counted"] == 1
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert rows[1]["error"] == f"{inp}:2: field 'completion' is null (no generation)"
    assert rows[0]["error"] is None


def test_parquet_without_the_text_column_lists_its_columns(tmp_path, gpt2_dir, cli_run):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "body": ["one text", "another"]}), path)
    code, _, err = cli_run("index", "build", path, "--out", tmp_path / "idx", "--quiet", "--skip-space-check",
                           "--tokenizer", gpt2_dir)
    assert code == 2 and "no column 'text'" in err and "id, body" in err, err


def test_tasks_new_never_overwrites_the_users_yaml(tmp_path, synthetic_index, cli_run):
    out = tmp_path / "tasks"
    out.mkdir()
    mine = out / "propme_mine_generic.yaml"
    mine.write_text("task: my_own_generic\n# hand-tuned\n")
    args = ("tasks-new", "mine", "--index", synthetic_index, "--language", "en", "--out", out)
    code, _, err = cli_run(*args)
    assert code == 2 and "propme_mine_generic.yaml" in err and "never overwrites" in err, err
    assert mine.read_text() == "task: my_own_generic\n# hand-tuned\n" and sorted(out.iterdir()) == [mine]
    mine.unlink()
    assert cli_run(*args)[0] == 0
    assert cli_run(*args)[0] == 0  # its own files: replaced on a re-run
    assert yaml.safe_load(mine.read_text())["task"] == "propme_mine_generic"


def test_tasks_new_refuses_a_missing_index_and_an_unknown_language(tmp_path, synthetic_index, cli_run):
    code, _, err = cli_run("tasks-new", "mine", "--index", tmp_path / "no-index", "--language", "en",
                           "--out", tmp_path / "t")
    assert code == 3 and "no-index" in err, err
    code, _, err = cli_run("tasks-new", "mine", "--index", synthetic_index, "--language", "xx", "--out", tmp_path / "t")
    assert code == 2 and "'xx'" in err and "da, en" in err, err
    assert not (tmp_path / "t").exists()


def _sourced_corpus(path, sources: dict[str, int]):
    docs = [{"id": f"{s}-{i}", "source": s, "text": f"Document {i} of {s} tells of ferries, bridges and harbours."}
            for s, n in sources.items() for i in range(n)]
    return write_jsonl(path, docs)


def _build(corpus, out, tok, *extra):
    return ["index", "build", corpus, "--out", out, "--tokenizer", tok, "--quiet", "--skip-space-check", *extra]


def test_exclude_sources_says_what_it_left_out_and_refuses_an_unknown_source(tmp_path, gpt2_dir, cli_run):
    corpus = _sourced_corpus(tmp_path / "c.jsonl", {"retsinformation": 5, "depbank": 3, "wiki": 4})
    code, out, err = cli_run(*_build(corpus, tmp_path / "idx", gpt2_dir, "--exclude-sources", "depbank"))
    assert code == 0, err
    assert "9 documents" in out and "left out by --exclude-sources: depbank (3 documents)" in out
    code, _, err = cli_run(*_build(corpus, tmp_path / "idx2", gpt2_dir, "--exclude-sources", "depbnak,wiki"))
    assert code == 2 and "'depbnak'" in err and "did you mean 'depbank'" in err, err
    assert not (tmp_path / "idx2").exists()
    for bad in (["--source-field", ""], ["--text-field", " "]):
        code, _, err = cli_run(*_build(corpus, tmp_path / "idx3", gpt2_dir, *bad))
        assert code == 2 and "empty" in err, (bad, err)
