"""Near-verbatim recall (NV-recall) of a generation against a document window (SPEC section 5)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

import numpy as np
from rapidfuzz.distance import LCSseq

_SINGLE_QUOTES = "\u2018\u2019\u201a\u201b\u2032\u2039\u203a"  # ‘ ’ ‚ ‛ ′ ‹ ›
_DOUBLE_QUOTES = "\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb"  # “ ” „ ‟ ″ « »
# ‐ ‑ ‒ – — ― ⁃ − ⸺ ⸻ ﹘ ﹣ －
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2043\u2212\u2e3a\u2e3b\ufe58\ufe63\uff0d"
_FOLDS: tuple[tuple[str, str], ...] = (
    *((ch, "'") for ch in _SINGLE_QUOTES),
    *((ch, '"') for ch in _DOUBLE_QUOTES),
    *((ch, "-") for ch in _DASHES),
    ("\u2026", "..."),
)


def _fold(text: str) -> str:
    # Chained str.replace is far faster than str.translate on non-ASCII (e.g. Danish) text.
    for old, new in _FOLDS:
        text = text.replace(old, new)
    return text


def normalize_words(text: str) -> list[str]:
    """Split text into comparable words: NFKC, straight quotes, one dash, '...', lowercase.

    Folding runs before NFKC (which would turn a double prime into two primes) and after it.
    """
    return _fold(unicodedata.normalize("NFKC", _fold(text))).lower().split()


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
        """Parameters scaled to a generation of n words (SPEC table: round half to even, clamp)."""
        return cls(
            l1=_adaptive(n, 0.15, 2, 20),
            l2=_adaptive(n, 0.35, 4, 100),
            gap1=_adaptive(n, 0.02, 1, 6),
            align1=_adaptive(n, 0.01, 1, 3),
            gap2=_adaptive(n, 0.08, 2, 12),
            align2=_adaptive(n, 0.03, 1, 5),
        )


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


def _matching_blocks(rows: np.ndarray, cols: np.ndarray, n: int) -> list[tuple[int, int, int]]:
    """Exactly difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()[:-1].

    Same recursion (longest match in a rectangle, earliest in a then in b, recurse left and
    right), but each rectangle is one vectorized pass over its equal pairs, using each pair's
    diagonal run length ending there, clipped to start inside the rectangle.
    """
    if rows.size == 0:
        return []
    diag_key = (cols - rows + n) * (n + 1) + rows
    order = np.argsort(diag_key)
    sorted_key = diag_key[order]
    run_start = np.ones(rows.size, dtype=bool)
    run_start[1:] = sorted_key[1:] != sorted_key[:-1] + 1
    idx = np.arange(rows.size)
    run_len = np.empty(rows.size, dtype=np.int64)
    run_len[order] = idx - np.maximum.accumulate(np.where(run_start, idx, 0)) + 1

    found: list[tuple[int, int, int]] = []
    stack = [(0, 0, np.stack([rows, cols, run_len]))]
    while stack:
        alo, blo, pairs = stack.pop()
        r, c, runs = pairs
        clipped = np.minimum(runs, np.minimum(r - (alo - 1), c - (blo - 1)))
        p = int(clipped.argmax())  # first maximum in row-major order = difflib's tie-break
        k = int(clipped[p])
        i, j = int(r[p]) - k + 1, int(c[p]) - k + 1
        found.append((i, j, k))
        left = pairs[:, (r < i) & (c < j)]
        right = pairs[:, (r >= i + k) & (c >= j + k)]
        if left.shape[1]:
            stack.append((alo, blo, left))
        if right.shape[1]:
            stack.append((i + k, j + k, right))

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
            if gap_a <= gap and gap_b <= gap and abs(gap_a - gap_b) <= align:
                merged[-1] = _Block(
                    last.a_start, blk.a_end, last.b_start, blk.b_end, last.matched + blk.matched
                )
                continue
        merged.append(blk)
    return [m for m in merged if m.matched >= min_len]


def _encode(words: list[str], vocab: dict[str, int]) -> np.ndarray:
    """Map words to generation word ids; words not in the generation can never match: -1."""
    return np.fromiter(map(vocab.get, words, repeat(-1)), dtype=np.int64, count=len(words))


def _recall_encoded(gen: np.ndarray, ref: np.ndarray, params: NVParams) -> float:
    # The matching blocks are in order in both lists, so together they form a common subsequence:
    # their matched words never exceed the longest common subsequence. Below l2 no block can
    # survive pass 2, so the result is exactly 0; the bit-parallel LCS (rapidfuzz) is ~10x cheaper
    # than the blocks and settles most partial documents.
    if LCSseq.similarity(gen, ref, score_cutoff=params.l2) == 0:
        return 0.0
    rows, cols = _equal_pairs(gen, ref)
    # Matched words sit at distinct generation positions that have a partner in the reference:
    # with fewer than l2 such positions no block can survive pass 2.
    if rows.size == 0 or np.count_nonzero(np.diff(rows)) + 1 < params.l2:
        return 0.0
    raw = _matching_blocks(rows, cols, len(gen))
    blocks = [_Block(i, i + k, j, j + k, k) for i, j, k in raw]
    blocks = _merge(blocks, params.gap1, params.align1, params.l1)
    blocks = _merge(blocks, params.gap2, params.align2, params.l2)
    return min(max(sum(b.matched for b in blocks) / len(gen), 0.0), 1.0)


def nv_recall(generation: str, reference: str, params: NVParams | None = None) -> float:
    """Share of the generation's words found near-verbatim in the reference (0 for no words)."""
    return nv_recall_many(generation, [reference], params)[0]


def nv_recall_many(
    generation: str, references: list[str], params: NVParams | None = None
) -> list[float]:
    """NV-recall of one generation against many windows, normalizing the generation only once.

    params default to NVParams.adaptive(number of generation words).
    """
    gen_words = normalize_words(generation)
    if not gen_words:
        return [0.0] * len(references)
    vocab = {w: i for i, w in enumerate(dict.fromkeys(gen_words))}
    gen = _encode(gen_words, vocab)
    params = params or NVParams.adaptive(len(gen))
    return [
        _recall_encoded(gen, _encode(normalize_words(ref), vocab), params) for ref in references
    ]
