"""Near-verbatim recall (NV-recall) of a generation against a document window (docs/method.md, NV-recall).

The published definition: normalize both texts, take `difflib.SequenceMatcher(None, generation
words, window words)`'s matching blocks (defaults, autojunk included), merge them in two passes and
count the matched words that survive, over the generation's words. The blocks come from cydifflib
(difflib's algorithm in compiled code; `difflib` itself is the test oracle), and a cheap exact
bound skips windows that cannot reach the second pass' minimum.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import NamedTuple

from cydifflib import SequenceMatcher
from rapidfuzz.distance import LCSseq

#: characters folded before matching (after NFKC): quotes to ASCII, dashes to an em dash, ellipsis
_FOLD = (("\u2018", "'"), ("\u2019", "'"), ("\u201a", "'"), ("\u201b", "'"),
         ("\u201c", '"'), ("\u201d", '"'), ("\u201e", '"'), ("\u201f", '"'), ("\u00ab", '"'), ("\u00bb", '"'),
         ("\u2013", "\u2014"), ("\u2015", "\u2014"), ("\u2212", "\u2014"), ("\u2026", "..."))
_SPACED_ELLIPSIS = re.compile(r"\.\s+\.\s+\.")
_GLUED_ELLIPSIS = re.compile(r"\.\.\.(?=[0-9A-Za-z])")
_EMPHASIS = re.compile(r"_([^_]+)_")
#: NV-recall values are rounded half-up to this many decimals, as published
DECIMALS = 9


def normalize_words(text: str) -> list[str]:
    """The comparable words of a text: NFKC, folded quotes/dashes/ellipses, `_x_` emphasis
    unwrapped, lowercase, split on white space."""
    norm = unicodedata.normalize("NFKC", text)
    for old, new in _FOLD:  # chained replace: far faster than str.translate on non-ASCII text
        if old in norm:
            norm = norm.replace(old, new)
    norm = _SPACED_ELLIPSIS.sub("...", norm)
    if "..." in norm:  # substring tests first: far cheaper than a regex scan that finds nothing
        norm = _GLUED_ELLIPSIS.sub("... ", norm)
    if "_" in norm:
        norm = _EMPHASIS.sub(r"\1", norm)
    return norm.lower().split()


def _adaptive(n: int, factor: float, lo: int, hi: int) -> int:
    return min(max(round(factor * n), lo), hi)


@dataclass(frozen=True)
class NVParams:
    """Merge thresholds: minimum matched lengths l1/l2 and maximum gaps/misalignments per pass."""

    l1: int
    l2: int
    gap1: int
    align1: int
    gap2: int
    align2: int

    @classmethod
    def adaptive(cls, n: int) -> NVParams:
        """Parameters scaled to a generation of n words (round half to even, then clamp)."""
        return cls(
            l1=_adaptive(n, 0.15, 2, 20),
            l2=_adaptive(n, 0.35, 4, 100),
            gap1=_adaptive(n, 0.02, 1, 6),
            align1=_adaptive(n, 0.01, 1, 3),
            gap2=_adaptive(n, 0.08, 2, 12),
            align2=_adaptive(n, 0.03, 1, 5),
        )


class NVScore(NamedTuple):
    """NV-recall of one window, with the word counts behind it."""

    recall: float
    matched_words: int    #: generation words inside surviving blocks
    reference_words: int  #: words of the generation (the denominator)
    candidate_words: int  #: words of the window


def round_metric(value: float) -> float:
    """Round half-up to DECIMALS places (the published rounding of NV-recall)."""
    if value == 0 or value == 1:  # most windows: nothing to round
        return float(value) or 0.0
    return float(Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-DECIMALS), rounding=ROUND_HALF_UP)) or 0.0


def _matching_blocks(a: list[int], b: list[int]) -> list[tuple[int, int, int]]:
    """difflib.SequenceMatcher(None, a, b).get_matching_blocks()[:-1] (defaults, autojunk included),
    computed by cydifflib: difflib's own algorithm compiled with Cython, the same blocks."""
    return [tuple(m) for m in SequenceMatcher(None, a, b).get_matching_blocks()[:-1]]


class _Block(NamedTuple):
    a_start: int
    a_end: int
    b_start: int
    b_end: int
    matched: int


def _merge(blocks: list[_Block], gap: int, align: int, min_len: int) -> list[_Block]:
    """Join consecutive blocks with small, similar gaps; drop those matching fewer than min_len."""
    merged: list[_Block] = []
    for blk in blocks:
        if merged:
            last = merged[-1]
            gap_a = blk.a_start - last.a_end
            gap_b = blk.b_start - last.b_end
            if max(gap_a, gap_b) <= gap and abs(gap_a - gap_b) <= align:
                merged[-1] = _Block(last.a_start, blk.a_end, last.b_start, blk.b_end, last.matched + blk.matched)
                continue
        merged.append(blk)
    return [m for m in merged if m.matched >= min_len]


def _matched_words(gen: list[str], ref: list[str], params: NVParams) -> int:
    # The words are compared as strings (no mapping to ids: rapidfuzz and cydifflib read lists of
    # words directly, and a window word absent from the generation matches nothing either way;
    # rapidfuzz compares words by hash, and a collision could only raise the bound below).
    # The matching blocks are in order in both lists, so together they form a common subsequence:
    # their matched words never exceed the longest common subsequence. Below l2 no block can
    # survive pass 2, so the result is exactly 0; the bit-parallel LCS (rapidfuzz) is far cheaper
    # than the blocks and settles most partial documents.
    if LCSseq.similarity(gen, ref, score_cutoff=params.l2) == 0:
        return 0
    raw = _matching_blocks(gen, ref)
    blocks = [_Block(i, i + k, j, j + k, k) for i, j, k in raw]
    blocks = _merge(blocks, params.gap1, params.align1, params.l1)
    blocks = _merge(blocks, params.gap2, params.align2, params.l2)
    return sum(b.matched for b in blocks)


def nv_scores(generation: str, windows: list[str]) -> list[NVScore]:
    """NV-recall of one generation against many windows, normalizing the generation only once."""
    gen = normalize_words(generation)
    win_words = [normalize_words(w) for w in windows]
    if not gen:
        return [NVScore(0.0, 0, 0, len(w)) for w in win_words]
    params = NVParams.adaptive(len(gen))
    out = []
    for words in win_words:
        matched = _matched_words(gen, words, params)
        out.append(NVScore(round_metric(matched / len(gen)), matched, len(gen), len(words)))
    return out


def nv_recall(generation: str, window: str) -> float:
    """Share of the generation's words found near-verbatim in the window (0 for no words)."""
    return nv_scores(generation, [window])[0].recall
