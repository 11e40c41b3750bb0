"""JSON Lines through `jsonlines` (core/jsonl.py): values as the standard library reads them, errors
naming the file and the right line (blank lines counted), lone surrogates replaced, and the writer's
bytes as the hand-written writer's were."""
from __future__ import annotations

import io
import json
import math
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import json_line, json_objects, write_json_lines

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


@given(st.lists(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5), max_size=6),
       st.lists(st.sampled_from(["", "  ", "\t"]), max_size=6))
def test_objects_read_as_the_standard_library_reads_them(records, blanks):
    lines, expected = [], []
    for i, rec in enumerate(records):
        if i < len(blanks):
            lines.append(blanks[i] + "\n")  # blank lines are skipped but counted
        lines.append(json.dumps(rec) + "\n")
        expected.append((len(lines), json.loads(json.dumps(rec))))
    assert list(json_objects(lines, "f.jsonl")) == expected


def test_errors_name_the_line_and_keep_the_standard_messages():
    with pytest.raises(ConfigError, match=r"^f\.jsonl:3: not valid JSON \(Expecting ',' delimiter\)"):
        list(json_objects(['{"a": 1}\n', "\n", '{"a": 1 "b": 2}\n'], "f.jsonl"))
    with pytest.raises(ConfigError, match=r"^f\.jsonl:2: a JSON list, not an object"):
        list(json_objects(['{"a": 1}\n', "[1, 2]\n"], "f.jsonl"))
    with pytest.raises(ConfigError, match=r"^f\.jsonl:1: a JSON NoneType, not an object"):
        list(json_objects(["null\n"], "f.jsonl"))
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ConfigError, match=r"^f\.jsonl:2: JSON nested too deeply") as caught:
        list(json_objects(["{}\n", deep + "\n"], "f.jsonl", hint="re-run it"))
    assert caught.value.hint == "re-run it"


def test_nan_lone_surrogates_and_huge_integers_are_read():
    lines = ['{"v": NaN, "w": Infinity}\n', '{"s": "a\\ud800b", "ok": "\\ud83d\\ude00"}\n', '{"n": 123456789012345678901234567890}\n']
    scrubbed = []
    (_, a), (_, b), (_, c) = json_objects(lines, "f.jsonl", on_scrub=scrubbed.append)
    assert math.isnan(a["v"]) and a["w"] == math.inf  # read, so the report can name the non-finite value
    assert b == {"s": "a\ufffdb", "ok": "\U0001F600"} and scrubbed == [2]
    assert c["n"] == 123456789012345678901234567890


@given(st.lists(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5), max_size=6))
def test_writer_gives_the_bytes_of_one_dumps_per_line(records):
    for dumps in (json_line, partial(json.dumps, ensure_ascii=False)):
        text = io.StringIO()
        write_json_lines(text, records, dumps)
        assert text.getvalue() == "".join(dumps(r).rstrip("\n") + "\n" for r in records)
        binary = io.BytesIO()
        write_json_lines(binary, records, dumps)
        assert binary.getvalue() == text.getvalue().encode("utf-8")
        assert [r for _, r in json_objects(io.StringIO(text.getvalue()), "f")] == records
