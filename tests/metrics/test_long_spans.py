"""Loop spans, the long-span metrics and natural language apart from code (the study's report,
sections 5.2 and 5.3), each checked against a definition computed here on inputs built for it."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from propme_metrics.metrics import registry
from propme_metrics.metrics.code_like import is_code_like, looks_like_code
from propme_metrics.metrics.loops import is_loop, is_periodic, without_loops
from propme_metrics.metrics.pm import pm
from propme_metrics.metrics.values import contributions, summarize
from propme_metrics.trace.result import FinalSpan, TracedDocument, TraceResult


def brute_periodic(text: str) -> bool:
    """The definition, character by character: white space collapsed, some period p <= 200 with
    3p <= n and at least 90% of the n - p characters equal to the one p later."""
    s = " ".join(text.split())
    n = len(s)
    for p in range(1, 201):
        if 3 * p > n:
            break
        same = sum(s[i] == s[i + p] for i in range(n - p))
        if 10 * same >= 9 * (n - p):
            return True
    return False


def doc(nv: float, match: str = "partial") -> TracedDocument:
    return TracedDocument(shard=0, doc_ix=0, source_id="d", metadata={}, match=match, nv_recall=nv,
                          nv_matched_words=0, nv_reference_words=10, nv_candidate_words=50, snippet="",
                          snippet_span=(0, 0))


def trace(text: str, n_tokens: int, finals) -> TraceResult:
    """finals: (start, end, text, [documents]) per final span."""
    return TraceResult(key=text[:10], text=text, n_tokens=n_tokens, degenerate=False,
                       final_spans=[FinalSpan(s, e, t, 1, list(d)) for s, e, t, d in finals])


LINE = "Hvad er der i vejen? "
UNIT_210 = "".join(random.Random(3).choices("abcdefgh ", k=210))
PROSE = ("The committee met on Tuesday to discuss the budget, and after a long debate it agreed to fund "
         "the new library, the repairs to the bridge and a study of traffic in the old town centre.")


@pytest.mark.parametrize("text, expected", [
    (LINE * 5, True),                               # a line five times
    ("I'm sorry.\n I'm   sorry.\tI'm sorry.  I'm sorry.", True),  # white space collapsed first
    ("I'm sorry. I'm sorry. I'm sorry.", False),   # the third unit lacks its last character: under 3 repeats
    ("| " * 40, True), ("r" * 30, True),
    ("| 120 | 120 | 121 | 120 | 120 | 120 | 120 | 120 | 120 | 120 |", True),  # 90%, not 100%, agree
    (LINE * 2, False),                              # twice is not a loop
    (PROSE, False),
    (UNIT_210 * 3, False),                          # a unit over 200 characters
    (UNIT_210[:200] * 3, True),                     # 200 characters: a loop
    ("", False),
])
def test_periodic_examples(text, expected):
    assert is_periodic(text) is expected
    assert brute_periodic(text) is expected


@settings(max_examples=300, deadline=None)
@given(unit=st.text(alphabet="ab .|\n1", min_size=1, max_size=12), repeats=st.integers(1, 9),
       edits=st.lists(st.tuples(st.integers(0, 200), st.sampled_from("xyz")), max_size=4))
def test_periodic_equals_the_definition(unit, repeats, edits):
    text = list(unit * repeats)
    for pos, ch in edits:
        if text:
            text[pos % len(text)] = ch
    text = "".join(text)
    assert is_periodic(text) == brute_periodic(text)


def test_only_spans_of_20_tokens_are_loops():
    assert is_loop(FinalSpan(0, 20, LINE * 5, 1))
    assert not is_loop(FinalSpan(0, 19, LINE * 5, 1))  # too short to be tested
    assert not is_loop(FinalSpan(0, 60, PROSE, 1))


def test_a_loop_span_is_left_out_and_counted_apart():
    loop = LINE * 5
    # a generation that repeats a corpus line five times: its whole-generation span is a full match
    looped = trace(loop, 30, [(0, 30, loop, [doc(1.0, "full_raw"), doc(0.9)]), (0, 6, LINE, [doc(0.2)])])
    other = trace(PROSE, 60, [(0, 60, PROSE, [doc(1.0, "full_raw")]), (10, 30, PROSE[40:90], [doc(0.5)])])
    view = without_loops(looped)
    assert view.loops == 1 and [s.length for s in view.trace.final_spans] == [6]
    assert without_loops(other).trace is other and without_loops(other).loops == 0
    s = summarize([looped, other])
    assert s.n_loops == 1 and s.loops == pytest.approx(1 / 2)
    # what is left: the looping generation keeps only its 6-token span and its one entry
    assert s.fmr == pytest.approx(1 / 2)                      # its full match does not count
    assert s.nvr == pytest.approx((0.2 + 1.0 + 0.5) / 3)      # its loop's entries neither
    assert s.als == pytest.approx((6 + 60) / 2) and s.r20 == pytest.approx(1 / 2)
    assert s.fmr20 == pytest.approx(1 / 2) and s.nvr50 == pytest.approx(1.0 / 3)
    assert s.to_dict()["n_loops"] == 1


def test_long_span_metrics():
    # 60-token generation, full match; its entries: 1.0 on the 60-token span, 0.5 on a 25-token one
    long = trace(PROSE, 60, [(0, 60, PROSE, [doc(1.0, "full_raw")]), (5, 30, PROSE[20:100], [doc(0.5), doc(0.0)])])
    # 30-token full match: counts in FMR20, not in FMR50; no span reaches 50 tokens
    mid = trace(PROSE[:120], 30, [(0, 30, PROSE[:120], [doc(0.8, "full_raw")])])
    # 12-token full match: in FMR only
    short = trace(" He is a gentleman.", 12, [(0, 12, " He is a gentleman.", [doc(1.0, "full_raw")])])
    none = trace(" Nothing here", 3, [])
    s = summarize([long, mid, short, none])
    assert s.fmr == pytest.approx(3 / 4)
    assert s.fmr20 == pytest.approx(2 / 4) and s.fmr50 == pytest.approx(1 / 4)
    entries = [1.0, 0.5, 0.0, 0.8, 1.0]
    assert s.nvr == pytest.approx(sum(entries) / 5)
    assert s.nvr50 == pytest.approx(1.0 / 5)       # only the 60-token span's entry, over every entry
    assert s.r50 == pytest.approx(1 / 4)
    assert summarize([none]).nvr50 is None          # no document entry: undefined, never 0


def test_pm_of_the_long_span_metrics():
    assert {"r50", "nvr50", "fmr20", "fmr50"} <= set(registry.DEFAULT_PM_METRICS)
    gen = [trace(PROSE[:120], 30, [(0, 30, PROSE[:120], [doc(0.8, "full_raw")])]), trace(" x", 1, [])]
    pre = [trace(PROSE, 60, [(0, 60, PROSE, [doc(1.0, "full_raw")])]), trace(PROSE[:120], 30, [(0, 30, PROSE[:120], [doc(1.0, "full_raw")])])]
    p, c = summarize(gen), summarize(pre)
    assert pm(p.fmr20, c.fmr20) == pytest.approx(0.5 / (0.5 + 1.0))
    assert pm(p.fmr50, c.fmr50) == 0.0              # p = 0: PM 0 by the paper's rule
    assert pm(p.r50, c.r50) == 0.0 and pm(p.nvr50, c.nvr50) == 0.0


CODE = """import os
from pathlib import Path

def main(path):
    total = 0
    for name in os.listdir(path):
        total += 1
    return total
"""
TABLE = "| 2019 | 1,204 | 3.5% |\n| 2020 | 1,311 | 3.9% |\n| 2021 | 1,420 | 4.1% |"
STORY = "Once upon a time there was a king.\nHe had three daughters.\nThe youngest was the cleverest of them all.\n"


@pytest.mark.parametrize("line, expected", [
    ("import numpy as np", True), ("from a.b import c", True), ("#include <stdio.h>", True),
    ("def f(x):", True), ("public static void main(String[] args) {", True), ("}", True),
    ("int x = 3;", True), ("x = compute(y)", True), ("// a comment", True), ("<div class='a'>", True),
    ("SELECT * FROM t", True), (r"\frac{a}{b}", True), ("print(total)", True),
    ("He had three daughters.", False), ("If you can, come early: we start at nine.", False),
    ("# Chapter one", False), ("The sum is large (see above).", False),
])
def test_code_lines(line, expected):
    assert looks_like_code(line) is expected


def brute_code_like(text: str) -> bool:
    lines = [x for x in text.splitlines() if x.strip()]
    code = [x for x in lines if looks_like_code(x)]
    letters = [c.isalpha() for c in text if not c.isspace()]
    return (len(code) >= 3 and len(code) / len(lines) >= 0.3) or bool(letters) and sum(letters) / len(letters) < 0.5


@pytest.mark.parametrize("text, expected", [
    (CODE, True),                                  # seven code lines of eight
    (TABLE, True),                                 # under half letters
    (STORY, False),
    ("import os\nimport sys\n" + STORY, False),    # two code lines: fewer than three
    ("import os\nimport sys\nx = 1\n" + STORY * 3, False),  # three of twelve lines: under 30%
    ("import os\nimport sys\nx = 1\n" + STORY * 2, True),   # three of nine: at least 30%
    ("", False),
])
def test_code_like_generations(text, expected):
    assert is_code_like(text) is expected
    assert brute_code_like(text) is expected


def test_natural_language_metrics_leave_code_out():
    code = trace(CODE, 60, [(0, 60, CODE, [doc(1.0, "full_raw")])])
    story = trace(STORY, 25, [(0, 25, STORY, [doc(0.4)])])
    both = summarize([code, story])
    only_story = summarize([story])
    assert both.code_like == pytest.approx(1 / 2)
    for name in registry.NATURAL_LANGUAGE_METRICS:
        assert getattr(both, f"{name}_nl") == getattr(only_story, name), name
    assert both.fmr == pytest.approx(1 / 2) and both.fmr_nl == 0.0
    assert summarize([code]).nvr_nl is None         # no natural-language generation: undefined
    assert contributions(code)["als_nl"] == (0.0, 0.0)  # a code-like generation adds nothing
