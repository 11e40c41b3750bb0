"""Hostile input, generated: arbitrary Unicode (lone surrogates, NUL, control characters, RTL marks,
emoji, 100k characters) as corpus documents, ids, generations and samples-file fields; malformed
JSON lines; NaN, inf, negative and boolean parameters. Each gives a result or one clear error
(PropMeError, or exit 2/3 from the command), never an escaped exception. Examples are bounded so
the file runs in well under a minute on 2 cores."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from propme_metrics.core.errors import ConfigError, PropMeError
from propme_metrics.core.jsonl import REPLACEMENT, json_objects
from propme_metrics.index.reader import open_index
from propme_metrics.index.sources import CorpusSource
from propme_tasks.schema import TaskConfigError, read_options
from support.corpora import make_index, word_level_tokenizer
from support.runs import gen, setting_prompts, write_run

HOSTILE = ["\ud800", "\udfff", "\x00", "\u202e", "\u200f", "\u0645\u0631\u062d\u0628\u0627", "😀", "👩‍👩‍👧",
           "\r", "\x1b[31m", "\ufeff", "</script>", "w1 w2"]
#: any code point, surrogates and control characters included, plus the hand-picked hostile pieces
hostile_text = st.lists(st.one_of(st.text(st.characters(codec=None), max_size=30), st.sampled_from(HOSTILE)),
                        max_size=8).map("".join)
pytestmark = pytest.mark.filterwarnings("ignore:Glyph .* missing from font")
FUZZ = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
SLOW_FUZZ = settings(FUZZ, max_examples=5)


def json_line(obj) -> str:
    """JSON as another program would write it: ensure_ascii escapes lone surrogates as \\udXXX."""
    return json.dumps(obj) + "\n"


def as_read(text: str) -> str:
    """What a reader should make of `text` written as JSON: escaped pairs join, lone surrogates become U+FFFD."""
    return "".join(REPLACEMENT if 0xD800 <= ord(c) <= 0xDFFF else c for c in json.loads(json.dumps(text)))


def no_surrogates(value) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in json.dumps(value, ensure_ascii=False))


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Path:
    return word_level_tokenizer(tmp_path_factory.mktemp("tok"), 100)


# --- JSON lines and corpus documents -----------------------------------------------------------------


@FUZZ
@given(lines=st.lists(st.one_of(hostile_text, st.sampled_from(['{"text": ', "[1, 2]", "null", '{"a": NaN}',
                                                                "[" * 5000, '{"text": "\\ud800"}'])), max_size=6))
def test_malformed_json_lines_give_a_line_or_one_error(lines):
    try:
        for _lineno, record in json_objects(lines, "fuzz.jsonl"):
            assert isinstance(record, dict) and no_surrogates(record)
    except ConfigError as exc:
        assert "fuzz.jsonl:" in exc.message


@FUZZ
@given(texts=st.lists(hostile_text, min_size=1, max_size=5), ids=st.lists(hostile_text, min_size=5, max_size=5))
@example(texts=["x" * 100_000 + "\ud800"], ids=["\udfff"] * 5)
def test_corpus_documents_and_ids_are_read_or_refused(tmp_path, texts, ids):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json_line({"id": i, "text": t}) for i, t in zip(ids, texts)), encoding="utf-8")
    try:
        docs = list(CorpusSource(str(path)))
    except ConfigError:
        return
    assert [d.text for d in docs] == [as_read(t) for t in texts]
    assert [d.metadata["id"] for d in docs] == [as_read(i) for i in ids[:len(texts)]]


@SLOW_FUZZ
@given(texts=st.lists(hostile_text, min_size=1, max_size=4), ids=st.lists(hostile_text, min_size=4, max_size=4))
@example(texts=["w1 \ud800 w2 \x00 \u202e w3 😀 " * 4000], ids=["\ud800-id", "", "", ""])
def test_hostile_corpus_builds_an_index_that_opens(tmp_path_factory, tok, texts, ids):
    root = tmp_path_factory.mktemp("fuzz-build")
    padding = [{"id": f"pad{i}", "text": " ".join(f"w{(i * 7 + k) % 100}" for k in range(40))} for i in range(20)]
    records = [{"id": i, "text": t} for i, t in zip(ids, texts)] + padding
    corpus = root / "c.jsonl"
    corpus.write_text("".join(json_line(r) for r in records), encoding="utf-8")
    try:
        manifest = make_index(corpus, root / "idx", tok, cpus=1)
    except PropMeError:
        return
    index = open_index(root / "idx")
    assert manifest.total_documents == len(records)
    stored = [index.document(i).meta["id"] for i in range(len(records))]
    assert stored == [as_read(r["id"]) for r in records]
    assert index.decode(index.document(0).token_ids) == index.decode(index.encode(as_read(texts[0])))


# --- generations and samples files ------------------------------------------------------------------


@SLOW_FUZZ
@given(texts=st.lists(hostile_text, min_size=1, max_size=6))
@example(texts=["\ud800" + "emoji 😀 " * 12_000])
def test_hostile_generations_are_traced(tmp_path_factory, synthetic_index, cli_run, texts):
    root = tmp_path_factory.mktemp("fuzz-trace")
    inp = root / "g.jsonl"
    inp.write_text("".join(json_line({"id": f"g{i}\ud800", "completion": t}) for i, t in enumerate(texts)),
                   encoding="utf-8")
    code, _, err = cli_run("trace", "--index", synthetic_index, "--input", inp, "--out", root / "r.jsonl",
                           "--summary", root / "s.json", "--quiet")
    assert code == 0, err
    # JSON Lines end at "\n" only: str.splitlines() would also split at U+0085 or U+2028 inside a string
    rows = [json.loads(x) for x in (root / "r.jsonl").read_text(encoding="utf-8").split("\n") if x]
    assert len(rows) == len(texts) and all(r["key"].startswith("g") for r in rows)


@SLOW_FUZZ
@given(model=hostile_text, prompt=hostile_text, text=hostile_text)
def test_hostile_samples_fields_give_a_report(tmp_path_factory, cli_run, model, prompt, text):
    root = tmp_path_factory.mktemp("fuzz-report")
    settings_ = {"generic": [[gen("generic-0#0", 3, (0.2,), text="TEXT-MARKER")]] +
                 setting_prompts("generic", 2, [(2, 4)], {}, set())[0:2],
                 "prefix": setting_prompts("prefix", 3, [(3, 5)], {0: 0.5}, {0})}
    run = write_run(root / "run", "MODEL-MARKER", "", settings_, prompt_text="PROMPT-MARKER").parent
    for f in [*run.rglob("samples_*.jsonl"), *run.rglob("results_*.json")]:  # as lm-eval writes them: JSON escapes
        data = f.read_text(encoding="utf-8")
        for marker, value in (("TEXT-MARKER", text), ("PROMPT-MARKER", prompt), ("MODEL-MARKER", model or "m")):
            data = data.replace(marker, json.dumps(value)[1:-1])
        f.write_text(data, encoding="utf-8")
    code, _, err = cli_run("report", run, "--out", root / "rep", "--bootstrap", "20")
    assert code == 0, err
    assert (root / "rep" / "report.html").stat().st_size > 1000


# --- parameters ----------------------------------------------------------------------------------------

bad_numbers = st.one_of(st.sampled_from([float("nan"), float("inf"), float("-inf"), True, False, -1, -0.5, 0,
                                         "nan", "inf", "true", "", "1e309", "2.5", [], {}]),
                        st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10))


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(["span_divisor", "docs_per_span", "window_factor", "max_anchors", "seed",
                              "snippet_chars", "max_tokens", "mode", "rarity"]), value=bad_numbers)
def test_tracing_metadata_is_a_config_or_one_message(field, value):
    try:
        config = read_options({f"trace_{field}": value}).trace
    except TaskConfigError as exc:  # one message, never a traceback or another exception
        assert str(exc) and "\n\n" not in str(exc)
        return
    got = getattr(config, field)
    assert not isinstance(value, bool) and type(got) is type(getattr(type(config)(), field))
    if isinstance(got, float):
        assert got == got and got not in (float("inf"), float("-inf")) and got >= 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(["--window-factor", "--span-divisor", "--docs-per-span", "--max-anchors",
                               "--seed", "--snippet-chars", "--max-tokens", "--workers"]),
       value=st.sampled_from(["nan", "inf", "-inf", "-1", "0", "true", "1e309", "2.5", "", "-0"]))
def test_trace_parameters_are_refused_with_exit_2(tmp_path, cli_run, option, value):
    code, _, err = cli_run("trace", "--index", tmp_path / "none", "--input", tmp_path / "none.jsonl",
                           "--out", tmp_path / "r.jsonl", "--summary", tmp_path / "s.json", f"{option}={value}")
    assert code in (2, 3), err  # refused, or valid and then the missing input/index is named
    assert not (tmp_path / "r.jsonl").exists()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(["--shards", "--batch-size", "--cpus"]),
       value=st.sampled_from(["nan", "-1", "0", "true", "2.5", "-0", "1e3"]))
def test_build_parameters_are_refused_with_exit_2(tmp_path, cli_run, option, value):
    code, _, err = cli_run("index", "build", tmp_path / "none.jsonl", "--out", tmp_path / "idx",
                           f"{option}={value}")
    assert code == 2 and "error" in err
