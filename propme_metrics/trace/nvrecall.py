"""Near-verbatim recall (NV-recall) of a generation against a document window (docs/method.md, NV-recall).

The published definition: normalize both texts, take `difflib.SequenceMatcher(None, generation
words, window words)`'s matching blocks (defaults, autojunk included), merge them in two passes and
count the matched words that survive, over the generation's words. The blocks are computed here
with numpy (same recursion, same tie-breaks, same autojunk rule: `difflib` itself is the test
oracle), and a cheap exact bound skips windows that cannot reach the second pass' minimum.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from itertools import repeat
from typing import NamedTuple

import numpy as np
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
#: difflib's autojunk: sequences of at least this many words drop their popular words (> 1% + 1)
AUTOJUNK_MIN = 200
#: `_matching_blocks`: a rectangle with at most this many equal pairs is searched in plain Python
SMALL_RECTANGLE = 48


def normalize_words(text: str) -> list[str]:
    """The comparable words of a text: NFKC, folded quotes/dashes/ellipses, `_x_` emphasis
    unwrapped, lowercase, split on white space."""
    norm = unicodedata.normalize("NFKC", text)
    for old, new in _FOLD:  # chained replace: far faster than str.translate on non-ASCII text
        if old in norm:
            norm = norm.replace(old, new)
    norm = _SPACED_ELLIPSIS.sub("...", norm)
    norm = _GLUED_ELLIPSIS.sub("... ", norm)
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


def _equal_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (i, j) with a[i] == b[j], in row-major order, without a len(a) x len(b) matrix."""
    order_b = np.argsort(b, kind="stable")  # stable: equal words keep ascending positions
    sorted_b = b[order_b]
    lo = np.searchsorted(sorted_b, a, "left")
    counts = np.searchsorted(sorted_b, a, "right") - lo
    starts = np.cumsum(counts) - counts
    total = int(counts.sum())
    rows = np.repeat(np.arange(len(a)), counts)
    cols = order_b[np.arange(total) - np.repeat(starts - lo, counts)]
    return rows, cols


def popular_mask(b: np.ndarray) -> np.ndarray:
    """difflib's autojunk: in a sequence of AUTOJUNK_MIN+ items, items occurring more than
    len // 100 + 1 times are 'popular' and never start a match (they may still extend one)."""
    mask = np.zeros(len(b), dtype=bool)
    if len(b) >= AUTOJUNK_MIN:
        values, inverse, counts = np.unique(b, return_inverse=True, return_counts=True)
        mask = counts[inverse] > len(b) // 100 + 1
    return mask


def _matching_blocks(a: np.ndarray, b: np.ndarray, autojunk: bool = True) -> list[tuple[int, int, int]]:
    """Exactly difflib.SequenceMatcher(None, a, b, autojunk=autojunk).get_matching_blocks()[:-1].

    Same recursion (longest match in a rectangle, earliest in a then in b, extended over equal
    neighbours, recurse left and right). Each rectangle is one vectorized pass over its equal
    pairs (popular b items excluded), using each pair's diagonal run length ending there,
    clipped to start inside the rectangle; one with few pairs (`SMALL_RECTANGLE`) a plain loop.
    """
    rows, cols = _equal_pairs(a, b)
    if autojunk:
        keep = ~popular_mask(b)[cols]
        rows, cols = rows[keep], cols[keep]
    n = len(a)
    a_list, b_list = a.tolist(), b.tolist()
    diag_key = (cols - rows + n) * (n + 1) + rows
    order = np.argsort(diag_key)
    sorted_key = diag_key[order]
    run_start = np.ones(rows.size, dtype=bool)
    run_start[1:] = sorted_key[1:] != sorted_key[:-1] + 1
    idx = np.arange(rows.size)
    run_len = np.empty(rows.size, dtype=np.int64)
    run_len[order] = idx - np.maximum.accumulate(np.where(run_start, idx, 0)) + 1
    found: list[tuple[int, int, int]] = []
    stack: list = [(0, len(a), 0, len(b), np.stack([rows, cols, run_len]))]
    while stack:
        alo, ahi, blo, bhi, pairs = stack.pop()
        if isinstance(pairs, np.ndarray) and pairs.shape[1] <= SMALL_RECTANGLE:
            pairs = [tuple(x) for x in pairs.T.tolist()]  # (row, col, run) triples in row-major order
        if isinstance(pairs, list):  # a few pairs: plain Python beats a dozen numpy calls
            k = 0
            for r_, c_, run in pairs:
                clipped = min(run, r_ - alo + 1, c_ - blo + 1)
                if clipped > k:  # strictly: the first maximum, as argmax takes it
                    k, i, j = clipped, r_ - clipped + 1, c_ - clipped + 1
            if not k:
                i, j = alo, blo
        else:
            r, c, runs = pairs
            clipped = np.minimum(runs, np.minimum(r - (alo - 1), c - (blo - 1)))
            p = int(clipped.argmax())  # first maximum in row-major order = difflib's tie-break
            k = int(clipped[p])
            i, j = int(r[p]) - k + 1, int(c[p]) - k + 1
        # difflib extends the best match over equal neighbours (popular items included)
        while i > alo and j > blo and a_list[i - 1] == b_list[j - 1]:
            i, j, k = i - 1, j - 1, k + 1
        while i + k < ahi and j + k < bhi and a_list[i + k] == b_list[j + k]:
            k += 1
        if not k:
            continue
        found.append((i, j, k))
        left, right = alo < i and blo < j, i + k < ahi and j + k < bhi
        if isinstance(pairs, list):
            if left:
                stack.append((alo, i, blo, j, [t for t in pairs if t[0] < i and t[1] < j]))
            if right:
                stack.append((i + k, ahi, j + k, bhi, [t for t in pairs if t[0] >= i + k and t[1] >= j + k]))
        else:
            if left:
                stack.append((alo, i, blo, j, pairs[:, (r < i) & (c < j)]))
            if right:
                stack.append((i + k, ahi, j + k, bhi, pairs[:, (r >= i + k) & (c >= j + k)]))
    found.sort()
    blocks: list[tuple[int, int, int]] = []
    for i, j, k in found:
        if blocks and blocks[-1][0] + blocks[-1][2] == i and blocks[-1][1] + blocks[-1][2] == j:
            blocks[-1] = (blocks[-1][0], blocks[-1][1], blocks[-1][2] + k)
        else:
            blocks.append((i, j, k))
    return blocks


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


def _encode(words: list[str], vocab: dict[str, int]) -> list[int]:
    """Map words to generation word ids; words not in the generation can never match: -1. A list:
    rapidfuzz reads lists of ints several times faster than numpy arrays."""
    return list(map(vocab.get, words, repeat(-1)))


def _matched_words(gen: list[int], ref: list[int], params: NVParams) -> int:
    # The matching blocks are in order in both lists, so together they form a common subsequence:
    # their matched words never exceed the longest common subsequence. Below l2 no block can
    # survive pass 2, so the result is exactly 0; the bit-parallel LCS (rapidfuzz) is far cheaper
    # than the blocks and settles most partial documents.
    if LCSseq.similarity(gen, ref, score_cutoff=params.l2) == 0:
        return 0
    raw = _matching_blocks(np.asarray(gen, dtype=np.int64), np.asarray(ref, dtype=np.int64))
    blocks = [_Block(i, i + k, j, j + k, k) for i, j, k in raw]
    blocks = _merge(blocks, params.gap1, params.align1, params.l1)
    blocks = _merge(blocks, params.gap2, params.align2, params.l2)
    return sum(b.matched for b in blocks)


def nv_scores(generation: str, windows: list[str]) -> list[NVScore]:
    """NV-recall of one generation against many windows, normalizing the generation only once."""
    gen_words = normalize_words(generation)
    win_words = [normalize_words(w) for w in windows]
    if not gen_words:
        return [NVScore(0.0, 0, 0, len(w)) for w in win_words]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(gen_words))}
    gen = _encode(gen_words, vocab)
    params = NVParams.adaptive(len(gen))
    out = []
    for words in win_words:
        matched = _matched_words(gen, _encode(words, vocab), params)
        out.append(NVScore(round_metric(matched / len(gen)), matched, len(gen), len(words)))
    return out


def nv_recall(generation: str, window: str) -> float:
    """Share of the generation's words found near-verbatim in the window (0 for no words)."""
    return nv_scores(generation, [window])[0].recall
