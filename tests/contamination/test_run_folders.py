"""`propme contamination` and the report's contamination section on lm-eval output folders as
lm-eval writes them (tests/support/runs.py): two models that ran one benchmark each keep their own
scores, a run folder alone rebuilds its local task, --limit applies to runs, and a wrong
--include-path or a results file lm-eval did not name says what is wrong."""
from __future__ import annotations

import json
import random
import shutil

import pytest
import yaml

from propme_metrics.contamination.coverage import TEMPLATE
from propme_metrics.report.cells import fmt_value
from support.corpora import make_index, write_jsonl
from support.runs import COMMA, DATE1, DATE2, DFM, quiz_config, stage1_settings, write_benchmark_run, write_run

ITEMS = 8
PLANTED = range(4)            #: items copied verbatim into the corpus
A = f"{DFM}@stage1"           #: the two models as the outputs name them
B = COMMA
SCORES = {A: [1, 1, 1, 0, 0, 0, 0, 1], B: [0, 0, 1, 0, 1, 1, 0, 1]}


def _words(rng: random.Random, n: int) -> str:
    syllables = ["ka", "lo", "mir", "ten", "su", "vor", "ba", "dri", "pel", "nu", "gos", "fa", "ri", "mon", "te"]
    return " ".join("".join(rng.choice(syllables) for _ in range(3)) for _ in range(n))


@pytest.fixture(scope="module")
def bench(tmp_path_factory, gpt2_dir):
    """A local task `quiz` of 8 items (the first 4 planted in the corpus), its YAML folder, an
    index, and one folder holding the runs of two models (one subfolder each, as lm-eval writes)."""
    rng = random.Random(3)
    root = tmp_path_factory.mktemp("bench-runs")
    rows = [{"question": _words(rng, 16), "answer": _words(rng, 3)} for _ in range(ITEMS)]
    docs = [{"id": f"p{i}", "text": f"{_words(rng, 10)} {rows[i]['question']} {rows[i]['answer']} {_words(rng, 10)}"}
            for i in PLANTED]
    docs += [{"id": f"f{j}", "text": _words(rng, 40)} for j in range(8)]
    passage = _words(rng, 60)
    docs.append({"id": "passage", "text": f"{_words(rng, 5)} {passage} {_words(rng, 5)}"})
    write_jsonl(root / "corpus.jsonl", docs)
    make_index(root / "corpus.jsonl", root / "index", gpt2_dir)
    data = write_jsonl(root / "data" / "quiz.jsonl", rows)
    config = quiz_config("quiz", data)
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "quiz.yaml").write_text(yaml.safe_dump({k: v for k, v in config.items() if k != "metadata"}))
    runs = root / "runs"
    write_benchmark_run(runs, DFM, "quiz", config, rows, SCORES[A], revision="stage1")
    write_benchmark_run(runs, COMMA, "quiz", config, rows, SCORES[B], date=DATE2)
    return {"root": root, "rows": rows, "index": root / "index", "tasks": tasks, "runs": runs, "config": config,
            "passage": passage, "rng": rng}


def _mean(values):
    return sum(values) / len(values)


def _split(model: str) -> tuple[float, float]:
    """(contaminated, clean) mean of the model's scores, by hand."""
    scores = SCORES[model]
    return (_mean([scores[i] for i in PLANTED]), _mean([s for i, s in enumerate(scores) if i not in PLANTED]))


def test_two_models_of_one_benchmark_keep_their_own_scores(cli_run, bench, tmp_path):
    out = tmp_path / "c"
    code, printed, err = cli_run("contamination", bench["runs"], "--index", bench["index"], "--out", out,
                                 "--include-path", bench["tasks"], "--bootstrap", 50, "--quiet")
    assert code == 0, err
    doc = json.loads((out / "contamination.json").read_text())
    s = doc["tasks"]["quiz"]
    assert (s["items"], s["contaminated"]) == (ITEMS, len(PLANTED))   # the share is the task's, once
    assert set(s["models"]) == {A, B}
    for model in (A, B):
        dirty, clean = _split(model)
        m = s["models"][model]["exact_match"]
        assert m["contaminated"]["value"] == pytest.approx(dirty) and m["clean"]["value"] == pytest.approx(clean)
        assert m["difference"]["value"] == pytest.approx(dirty - clean)
        point = next(p for p in s["curve"] if p["k"] == 8 and p["min_coverage"] == 0.7)
        assert point["clean"][model]["exact_match"] == pytest.approx(clean)
        assert (f"; {model}: exact_match clean {fmt_value(clean)}, contaminated {fmt_value(dirty)}, difference "
                in " ".join(printed.split()))
    board = {row["model"]: row for row in doc["leaderboard"]}
    assert set(board) == {A, B}
    assert board[B]["quiz_exact_match_clean"] == pytest.approx(_split(B)[1])
    assert board[A]["quiz_contaminated_share"] == board[B]["quiz_contaminated_share"] == pytest.approx(0.5)
    rows = [json.loads(line) for line in (out / "contamination_items.jsonl").read_text().splitlines()]
    assert len(rows) == ITEMS
    for r in rows:
        assert r["metrics"] == {A: {"exact_match": SCORES[A][r["doc_id"]]}, B: {"exact_match": SCORES[B][r["doc_id"]]}}
    table = (out / "contamination.csv").read_text().splitlines()
    assert table[0].split(",")[:8] == ["task", "items", "contaminated", "share", "share_low", "share_high", "model",
                                       "metric"]
    assert sorted(line.split(",")[6] for line in table[1:]) == sorted([A, B])


def test_the_report_section_and_eee_records_cover_every_model(cli_run, bench, tmp_path):
    write_run(tmp_path / "propme", DFM, "stage1", stage1_settings())
    code, _, err = cli_run("report", tmp_path / "propme", bench["runs"], "--out", tmp_path / "r", "--index",
                           bench["index"], "--include-path", bench["tasks"], "--bootstrap", 50)
    assert code == 0, err
    page = (tmp_path / "r" / "report.html").read_text()
    section = page[page.index("<section id='contamination'>"):]
    assert A in section and B in section
    records = [json.loads(p.read_text()) for p in (tmp_path / "r" / "eee").rglob("*.json")]
    by_model = {(r["model_info"]["id"], r["model_info"]["additional_details"].get("revision", "")): r for r in records}
    for (model, revision), label in (((DFM, "stage1"), A), ((COMMA, ""), B)):
        results = {x["evaluation_result_id"]: x for x in by_model[(model, revision)]["evaluation_results"]}
        dirty, clean = _split(label)
        assert results["propme.contamination.quiz.exact_match.clean"]["score_details"]["score"] == pytest.approx(clean)
        assert results["propme.contamination.quiz.exact_match.contaminated"]["score_details"]["score"] == \
            pytest.approx(dirty)
        assert results["propme.contamination.quiz.contaminated_share"]["score_details"]["score"] == pytest.approx(0.5)


def test_a_run_folder_alone_rebuilds_its_local_task(cli_run, bench, tmp_path):
    """No --include-path: the task is rebuilt from the config the results file recorded (its YAML
    folder moved away, so nothing else could have supplied it)."""
    runs = tmp_path / "runs"
    shutil.copytree(bench["runs"], runs)
    moved = tmp_path / "elsewhere"
    shutil.copytree(bench["tasks"], moved)
    code, _, err = cli_run("contamination", runs, "--index", bench["index"], "--out", tmp_path / "c", "--quiet")
    assert code == 0, err
    doc = json.loads((tmp_path / "c" / "contamination.json").read_text())
    assert doc["tasks"]["quiz"]["contaminated"] == len(PLANTED) and set(doc["tasks"]["quiz"]["models"]) == {A, B}
    rows = {json.loads(line)["doc_id"]: json.loads(line) for line in (tmp_path / "c" / "contamination_items.jsonl")
            .read_text().splitlines()}
    assert [rows[i]["fields"]["question"]["text"] for i in range(ITEMS)] == [r["question"] for r in bench["rows"]]


@pytest.mark.slow  # a task with Python code is looked up among lm-eval's ~15k built-in task files
def test_a_recorded_config_with_python_code_asks_for_the_include_path(cli_run, bench, tmp_path):
    config = dict(bench["config"], task="coded", process_docs="def process_docs(dataset):\n    return dataset\n")
    write_benchmark_run(tmp_path / "runs", DFM, "coded", config, bench["rows"], SCORES[A])
    code, _, err = cli_run("contamination", tmp_path / "runs", "--index", bench["index"], "--out", tmp_path / "c")
    assert code == 2 and "process_docs" in err and "--include-path" in err and "Python code" in err


def test_limit_applies_to_run_folders(cli_run, bench, tmp_path):
    code, _, err = cli_run("contamination", bench["runs"], "--index", bench["index"], "--out", tmp_path / "c",
                           "--include-path", bench["tasks"], "--limit", 6, "--quiet")
    assert code == 0, err
    s = json.loads((tmp_path / "c" / "contamination.json").read_text())["tasks"]["quiz"]
    assert (s["items"], s["contaminated"]) == (6, len(PLANTED))
    clean = [SCORES[A][i] for i in range(len(PLANTED), 6)]
    assert s["models"][A]["exact_match"]["clean"]["value"] == pytest.approx(_mean(clean))


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_an_include_path_that_is_no_folder_says_so(cli_run, bench, tmp_path, kind):
    path = tmp_path / "nowhere" if kind == "missing" else bench["tasks"] / "quiz.yaml"
    code, _, err = cli_run("contamination", "--tasks", "quiz", "--include-path", path, "--index", bench["index"],
                           "--out", tmp_path / "c")
    assert code == 2 and str(path) in err
    assert ("does not exist" in err) if kind == "missing" else ("is a file, not a folder" in err)


@pytest.mark.slow  # an unknown name indexes lm-eval's ~15k built-in task files
def test_an_include_path_of_yaml_that_does_not_parse_names_the_file(cli_run, bench, tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "quiz.yaml").write_text("task: quiz\ndoc_to_text: [unclosed\n")
    code, _, err = cli_run("contamination", "--tasks", "quiz", "--include-path", folder, "--index", bench["index"],
                           "--out", tmp_path / "c")
    assert code == 2 and "does not parse" in err and "quiz.yaml" in err


@pytest.mark.parametrize("command", ["contamination", "report"])
def test_a_results_file_not_named_as_lm_eval_names_them_is_named(cli_run, bench, tmp_path, command):
    folder = tmp_path / "run"
    folder.mkdir()
    results = write_benchmark_run(tmp_path / "orig", DFM, "quiz", bench["config"], bench["rows"], SCORES[A])
    shutil.copy(results, folder / "results_2025.json")
    shutil.copy(results.parent / f"samples_quiz_{DATE1}.jsonl", folder / "samples_quiz_2025.jsonl")
    extra = ["--index", bench["index"]] if command == "contamination" else []
    code, _, err = cli_run(command, folder, *extra, "--out", tmp_path / "out")
    assert code == 2 and "results_2025.json" in err and "not named as lm-eval names them" in err
    # the file itself is read (its samples end in the same date id)
    if command == "contamination":
        code, _, err = cli_run(command, folder / "results_2025.json", *extra, "--out", tmp_path / "out",
                               "--include-path", bench["tasks"], "--quiet")
        assert code == 0, err


def test_a_file_that_cannot_be_written_leaves_the_earlier_outputs_whole(cli_run, bench, tmp_path, monkeypatch):
    """The second check (another rule) runs out of disk at its curve: it names that file, and the
    six files of the first check are all still there, unchanged (no mix of two rules)."""
    import errno

    from propme_metrics.report import contamination_views

    out = tmp_path / "c"
    args = ["contamination", bench["runs"], "--index", bench["index"], "--out", out, "--include-path", bench["tasks"],
            "--quiet"]
    assert cli_run(*args)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(before) == set(contamination_views.OUTPUT_NAMES)

    def full(result, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(contamination_views, "curve_plot", full)
    code, _, err = cli_run(*args, "--k", 4)
    assert code == 2 and f"cannot write {out / 'contamination_curve.png'}" in err and "No space left" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def _check(cli_run, bench, tmp_path, task: str, rows: list[dict], doc_to_text: str) -> tuple[dict, list[dict]]:
    """`propme contamination` on a run of a local task of `rows` (its items' texts by `doc_to_text`)."""
    data = write_jsonl(tmp_path / f"{task}.jsonl", rows)
    config = dict(quiz_config(task, data), doc_to_text=doc_to_text)
    write_benchmark_run(tmp_path / "runs", DFM, task, config, rows, [1.0] * len(rows))
    code, _, err = cli_run("contamination", tmp_path / "runs", "--index", bench["index"], "--out", tmp_path / "c",
                           "--quiet")
    assert code == 0, err
    doc = json.loads((tmp_path / "c" / "contamination.json").read_text())["tasks"][task]
    items = sorted((json.loads(x) for x in (tmp_path / "c" / "contamination_items.jsonl").read_text().splitlines()),
                   key=lambda r: r["doc_id"])
    return doc, items


def test_two_items_that_copy_one_corpus_passage_are_both_contaminated(cli_run, bench, tmp_path):
    """Two of five items copy the same corpus passage: both are contaminated (text several items
    share is not boilerplate when the corpus holds it only a few times), the other three not."""
    rng = random.Random(8)
    rows = [{"question": bench["passage"] if i < 2 else _words(rng, 60), "answer": _words(rng, 2)} for i in range(5)]
    doc, items = _check(cli_run, bench, tmp_path, "copies", rows, "{{question}}")
    assert doc["contaminated"] == 2 and [r["contaminated"] for r in items] == [True, True, False, False, False]
    assert all(r["fields"]["joined"]["discounted_spans"] == [] for r in items)


def test_reading_items_that_share_a_copied_passage_are_contaminated(cli_run, bench, tmp_path):
    """Ten reading items share one passage copied from the corpus, at one place in each: all ten
    are contaminated; anything left out is named as a template the corpus lacks, never the passage."""
    rng = random.Random(9)
    rows = [{"passage": bench["passage"], "question": _words(rng, 4), "answer": _words(rng, 1)} for _ in range(10)]
    doc, items = _check(cli_run, bench, tmp_path, "reading", rows, "Passage: {{passage}}\nQuestion: {{question}}")
    assert doc["contaminated"] == 10
    for r in items:
        joined = r["fields"]["joined"]
        assert joined["longest_match"] >= 60 and joined["count"] == 1
        reasons = {d["reason"] for d in joined["discounted_spans"]}
        assert reasons <= {TEMPLATE} and all(d["corpus_count"] == 0 and d["items"] == 10
                                             for d in joined["discounted_spans"])


def test_a_template_the_corpus_lacks_is_left_out_of_the_share(cli_run, bench, tmp_path):
    """Every item opens with the same long instruction, absent from the corpus; item 0's own text
    is a planted corpus item: its share is its own text's (1), not diluted by the instruction."""
    rng = random.Random(10)
    instruction = "Zorq quibble frumious wabe gyre, " + _words(rng, 20) + ":"
    own = [bench["rows"][0]["question"]] + [_words(rng, 16) for _ in range(5)]
    rows = [{"question": f"{instruction} {q}", "answer": _words(rng, 1)} for q in own]
    doc, items = _check(cli_run, bench, tmp_path, "instructed", rows, "{{question}}")
    assert [r["contaminated"] for r in items] == [True] + [False] * 5
    first = items[0]["fields"]["question"]
    assert first["coverage"] == pytest.approx(1.0, abs=0.08)
    (d,) = first["discounted_spans"]
    assert d["reason"] == TEMPLATE and d["items"] == 6 and d["corpus_count"] == 0
    assert d["text"].startswith("Zorq quibble") and instruction[-10:] in d["text"]


def _output_path_json_run(bench, folder):
    """PropMe's tasks and the benchmark run as lm-eval writes them for `--output_path <folder>/x.json`:
    results `x_<date id>.json` (no model subfolder), PropMe's `propme_x_<date id>.json` beside it."""
    from support.runs import DATE1, DATE2

    write_run(folder.parent / "propme", DFM, "stage1", stage1_settings(), date=DATE1)
    write_benchmark_run(folder.parent / "bench", COMMA, "quiz", bench["config"], bench["rows"], SCORES[B], date=DATE2)
    folder.mkdir()
    for written in (folder.parent / "propme", folder.parent / "bench"):
        for path in written.rglob("*.json*"):
            shutil.copy(path, folder / (f"x_{path.name[len('results_'):]}" if path.name.startswith("results_")
                                        else path.name))
    (folder / f"propme_x_{DATE1}.json").write_text(json.dumps({"format": "propme-lm-eval/1", "tasks": {}}))


def test_a_run_written_with_output_path_x_json_gets_its_contamination_section(cli_run, bench, tmp_path):
    run = tmp_path / "run"
    _output_path_json_run(bench, run)
    code, _, err = cli_run("report", run, "--out", tmp_path / "r", "--index", bench["index"], "--include-path",
                           bench["tasks"], "--bootstrap", 50, "--no-html")
    assert code == 0, err
    assert "no contamination section" not in err
    doc = json.loads((tmp_path / "r" / "contamination" / "contamination.json").read_text())
    assert doc["tasks"]["quiz"]["contaminated"] == len(PLANTED) and set(doc["tasks"]["quiz"]["models"]) == {B}


def test_a_benchmark_run_that_cannot_be_read_drops_the_section_with_a_line(cli_run, bench, tmp_path):
    """The benchmark's samples file is missing: the report is written, and says on one line why it
    has no contamination section (docs/cli.md), naming the file."""
    from support.runs import DATE2

    run = tmp_path / "run"
    _output_path_json_run(bench, run)
    (run / f"samples_quiz_{DATE2}.jsonl").unlink()
    code, _, err = cli_run("report", run, "--out", tmp_path / "r", "--index", bench["index"], "--include-path",
                           bench["tasks"], "--bootstrap", 50, "--no-html")
    assert code == 0, err
    line = next(x for x in err.splitlines() if "no contamination section" in x)
    assert f"samples_quiz_{DATE2}.jsonl" in " ".join(err.split()) and "--log_samples" in " ".join(err.split()), line
    assert not (tmp_path / "r" / "contamination").exists()
