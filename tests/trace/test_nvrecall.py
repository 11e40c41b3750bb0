"""Tests for near-verbatim recall (docs/method.md, NV-recall)."""

import random
from difflib import SequenceMatcher

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from propme_metrics.trace.nvrecall import (
    NVParams,
    _matching_blocks,
    normalize_words,
    nv_recall,
    nv_scores,
)
from support.reference_trace import published_nv_recall

DANISH = (
    "Den gamle færgemand på Ærø fortalte, at øens børn om sommeren plukkede blåbær i skoven "
    "bag kirken, mens fædrene sejlede ud før solopgang for at sætte garn i sundet."
)


def _random_text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(f"ord{rng.randrange(100_000)}" for _ in range(n_words))


# --- adaptive parameters -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (10, (2, 4, 1, 1, 2, 1)),  # the worked examples of docs/method.md
        (100, (15, 35, 2, 1, 8, 3)),
        (300, (20, 100, 6, 3, 12, 5)),
        (0, (2, 4, 1, 1, 2, 1)),  # everything clamped to lo
        (1, (2, 4, 1, 1, 2, 1)),
        (1000, (20, 100, 6, 3, 12, 5)),  # everything clamped to hi
        (30, (4, 10, 1, 1, 2, 1)),  # 4.5 -> 4 and 10.5 -> 10: half to even
        (50, (8, 18, 1, 1, 4, 2)),  # 7.5 -> 8, 17.5 -> 18, 1.5 -> 2: half to even
    ],
)
def test_adaptive_params(n, expected):
    p = NVParams.adaptive(n)
    assert (p.l1, p.l2, p.gap1, p.align1, p.gap2, p.align2) == expected


# --- normalization -------------------------------------------------------------------------


def test_normalization_folds_quotes_dashes_ellipsis_and_case():
    assert normalize_words("“Hej” – verden…") == normalize_words('"hej" — verden...')
    assert normalize_words("“Hej” – verden…") == ['"hej"', "—", "verden..."]


def test_normalization_is_the_published_one():
    # exactly the published folds: these quotes and dashes, nothing else (a hyphen stays)
    assert normalize_words("‘a’ ‚b‛") == ["'a'", "'b'"]
    assert normalize_words("“a” „b‟ «d»") == ['"a"', '"b"', '"d"']
    assert normalize_words("a–b a―b a−b a—b a-b") == ["a—b"] * 4 + ["a-b"]
    assert normalize_words("′c′ ‹d›") == ["′c′", "‹d›"]
    # spaced ellipsis, ellipsis glued to a word, _emphasis_
    assert normalize_words("vent . . . nu") == ["vent", "...", "nu"]
    assert normalize_words("vent...nu og...Ja") == ["vent...", "nu", "og...", "ja"]
    assert normalize_words("det var _meget_ godt") == ["det", "var", "meget", "godt"]


def test_normalization_nfkc_and_whitespace():
    # Full-width letters and a no-break space fold under NFKC; any whitespace splits.
    assert normalize_words("ＡＢＣ\u00a0def\n\tGHI  ") == ["abc", "def", "ghi"]


def test_danish_letters_round_trip():
    assert normalize_words("Blåbærgrød PÅ Ærø ØL") == ["blåbærgrød", "på", "ærø", "øl"]
    # A decomposed å (a + combining ring) is composed by NFKC and matches the precomposed one.
    decomposed = DANISH.replace("å", "a\u030a")
    assert normalize_words(decomposed) == normalize_words(DANISH)
    assert nv_recall(DANISH, decomposed) == 1.0


# --- recall values -------------------------------------------------------------------------


def test_self_recall_is_one():
    assert nv_recall(DANISH, DANISH) == 1.0
    text = _random_text(200, seed=1)
    assert nv_recall(text, text) == 1.0


def test_unrelated_text_is_zero():
    assert nv_recall(_random_text(200, seed=1), _random_text(1000, seed=2)) == 0.0
    assert nv_recall(DANISH, _random_text(500, seed=3)) == 0.0


def test_empty_inputs():
    assert nv_recall("", DANISH) == 0.0
    assert nv_recall("   \n", DANISH) == 0.0
    assert nv_recall(DANISH, "") == 0.0
    assert [x.recall for x in nv_scores("", [DANISH, ""])] == [0.0, 0.0]


def test_word_counts_are_recorded():
    gen = "den gamle mand gik langsomt ned ad vejen mod byen i går"
    score = nv_scores(gen, ["den gamle mand gik langsomt op ad vejen mod byen i går nu"])[0]
    assert (score.matched_words, score.reference_words, score.candidate_words) == (11, 12, 13)
    assert score.recall == round(11 / 12, 9)


def test_one_word_in_fifty_changed_stays_close_to_one():
    words = _random_text(200, seed=4).split()
    for k in range(25, 200, 50):
        words[k] = "ændret"
    # the definition: stays close to 1. n = 200: gap1 = 4, so the four 1-word substitutions merge
    # away and only they are missing: 196 / 200.
    assert nv_recall(_random_text(200, seed=4), " ".join(words)) == pytest.approx(0.98)


def test_generation_embedded_in_longer_window():
    generation = _random_text(120, seed=5)
    window = f"{_random_text(400, seed=6)} {generation} {_random_text(400, seed=7)}"
    assert nv_recall(generation, window) == 1.0


def test_hand_worked_merge_excludes_substituted_word():
    # n = 12 words -> adaptive l1 = 2, l2 = 4, gap1 = 1, align1 = 1, gap2 = 2, align2 = 1.
    # "ned" -> "op": blocks (a=0, b=0, size 5) and (a=6, b=6, size 6). Gaps in generation and
    # reference are both 1 (<= gap1) and equal (diff 0 <= align1), so pass 1 merges them into a
    # block spanning 12 words with 5 + 6 = 11 matched words (>= l1, then >= l2): 11 / 12.
    gen = "den gamle mand gik langsomt ned ad vejen mod byen i går"
    ref = "den gamle mand gik langsomt op ad vejen mod byen i går"
    assert nv_recall(gen, ref) == pytest.approx(11 / 12)


def test_merge_glues_single_word_blocks_and_respects_alignment():
    # n = 10 -> l1 = 2, l2 = 4, gap1 = 1, align1 = 1, gap2 = 2, align2 = 1.
    gen = "a x b y c z d w e v"
    # Five 1-word blocks (a, b, c, d, e) at equal 1-word gaps: each alone is < l1, but pass 1
    # merges them into one block with 5 matched words (the 4 substitutions excluded): 5 / 10.
    assert nv_recall(gen, "a q b r c s d t e u") == pytest.approx(0.5)
    # Three extra words after "a": gaps 1 (generation) vs 3 (reference) exceed gap1 and align1,
    # so "a" stays alone (1 < l1, dropped); b..e merge into 4 matched words (= l2): 4 / 10.
    assert nv_recall(gen, "a q q q b r c s d t e u") == pytest.approx(0.4)


def test_generations_shorter_than_minimum_l2_score_zero():
    # the definition: l2 is clamped to at least 4 words, so a 1-3 word generation can never keep a block.
    for text in ["ja", "ja tak", "ja tak skal"]:
        assert nv_recall(text, text) == 0.0
    assert nv_recall("ja tak skal du", "ja tak skal du") == 1.0


def test_scores_of_many_windows_match_single_calls():
    gen = _random_text(150, seed=8)
    refs = [gen, _random_text(300, seed=9), f"x y {gen[: len(gen) // 2]} z", ""]
    assert [x.recall for x in nv_scores(gen, refs)] == [nv_recall(gen, r) for r in refs]


# --- exactness against difflib and the published definition --------------------------------


def _difflib_blocks(a, b):
    return [tuple(x) for x in SequenceMatcher(None, a, b).get_matching_blocks()[:-1]]


def _fast_blocks(a, b):
    return _matching_blocks(list(a), list(b))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=60),
    st.lists(st.integers(0, 4), max_size=120),
)
def test_matching_blocks_equal_difflib(a, b):
    # A tiny alphabet makes many equally long candidate matches: exercises the tie-breaking.
    assert _fast_blocks(a, b) == _difflib_blocks(a, b)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=80),
    st.lists(st.integers(0, 60), min_size=200, max_size=450),
    st.integers(0, 450),
)
def test_matching_blocks_equal_difflib_with_autojunk(a, b, at):
    # windows of 200+ words: words making up more than 1% of the window cannot start a block
    b = b[:at] + a + b[at:]
    assert _fast_blocks(a, b) == _difflib_blocks(a, b)


def test_matching_blocks_equal_difflib_on_text():
    gen = [int(w[3:]) % 50 for w in _random_text(200, seed=10).split()]
    ref = [int(w[3:]) % 50 for w in _random_text(1000, seed=11).split()]
    ref[300:300] = gen[20:180]
    assert _fast_blocks(gen, ref) == _difflib_blocks(gen, ref)


def _published_nv_recall(generation: str, window: str) -> float:
    """The published definition written out plainly (tests/support/reference_trace.py)."""
    return published_nv_recall(generation, window)[0]


VOCAB = ["og", "i", "det", "på", "en", "blåbær", "“Hej”", "–", "verden…", "Ærø", "hus", "vej", "by", "_fin_"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=120),
       st.lists(st.sampled_from(VOCAB + [f"w{i}" for i in range(40)]), min_size=0, max_size=400),
       st.integers(0, 400), st.integers(0, 10))
def test_nv_recall_equals_the_published_definition(gen_words, noise, at, edits):
    gen = " ".join(gen_words)
    copy = list(gen_words)
    for k in range(edits):  # a near copy with some words replaced, inside noise (often 200+ words)
        copy[(k * 7) % len(copy)] = "ændret"
    window = " ".join(noise[:at] + copy + noise[at:])
    assert nv_recall(gen, window) == _published_nv_recall(gen, window)
    assert 0.0 <= nv_recall(gen, window) <= 1.0


def test_nv_recall_equals_the_published_definition_on_long_windows():
    rng = random.Random(12)
    for trial in range(40):
        gen = [f"ord{rng.randrange(60)}" for _ in range(rng.randrange(20, 260))]
        window = [f"ord{rng.randrange(80)}" for _ in range(rng.randrange(200, 1200))]
        at = rng.randrange(len(window))
        near = [w if rng.random() > 0.08 else "x" for w in gen]
        text_gen, text_win = " ".join(gen), " ".join(window[:at] + near + window[at:])
        assert nv_recall(text_gen, text_win) == _published_nv_recall(text_gen, text_win), trial
