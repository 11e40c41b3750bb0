"""Near-verbatim recall (NV-recall) of a generation against a document window (SPEC section 5)."""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import NamedTuple

_SINGLE_QUOTES = "\u2018\u2019\u201a\u201b\u2032\u2039\u203a"  # ‘ ’ ‚ ‛ ′ ‹ ›
_DOUBLE_QUOTES = "\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb"  # “ ” „ ‟ ″ « »
# ‐ ‑ ‒ – — ― ⁃ − ⸺ ⸻ ﹘ ﹣ －
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2043\u2212\u2e3a\u2e3b\ufe58\ufe63\uff0d"

_FOLD = str.maketrans(
    {
        **{ch: "'" for ch in _SINGLE_QUOTES},
        **{ch: '"' for ch in _DOUBLE_QUOTES},
        **{ch: "-" for ch in _DASHES},
        "\u2026": "...",
    }
)


def normalize_words(text: str) -> list[str]:
    """Split text into comparable words: NFKC, straight quotes, one dash, '...', lowercase.

    Folding runs before NFKC (which would split a double prime into two primes) and again after it.
    """
    folded = unicodedata.normalize("NFKC", text.translate(_FOLD)).translate(_FOLD)
    return folded.lower().split()


def _adaptive(n: int, factor: float, lo: int, hi: int) -> int:
    return min(max(round(factor * n), lo), hi)


@dataclass(frozen=True)
class NVParams:
    """Merge thresholds: minimum lengths l1/l2 and maximum gaps/misalignments per pass."""

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


class _Block(NamedTuple):
    a_start: int
    a_end: int
    b_start: int
    b_end: int
    matched: int


def _merge(blocks: list[_Block], gap: int, align: int, min_len: int) -> list[_Block]:
    """Join consecutive blocks separated by small, similar gaps; drop results shorter than min_len."""
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


def _encode(words: list[str], vocab: dict[str, int]) -> list[int]:
    """Map words to ints (new words get new ids) so matching hashes and compares small ints."""
    return [vocab.setdefault(w, len(vocab)) for w in words]


def _recall_encoded(gen: list[int], gen_counts: Counter[int], ref: list[int], params: NVParams) -> float:
    # Matched words are at most the multiset overlap; below l2 no block can survive pass 2.
    ref_counts = Counter(ref)
    if sum(min(c, ref_counts[w]) for w, c in gen_counts.items()) < params.l2:
        return 0.0
    raw = SequenceMatcher(None, gen, ref, autojunk=False).get_matching_blocks()[:-1]
    blocks = [_Block(a, a + size, b, b + size, size) for a, b, size in raw]
    blocks = _merge(blocks, params.gap1, params.align1, params.l1)
    blocks = _merge(blocks, params.gap2, params.align2, params.l2)
    return min(max(sum(b.matched for b in blocks) / len(gen), 0.0), 1.0)


def nv_recall(generation: str, reference: str, params: NVParams | None = None) -> float:
    """Share of the generation's words found near-verbatim in the reference (0 for an empty generation)."""
    gen_words = normalize_words(generation)
    if not gen_words:
        return 0.0
    vocab: dict[str, int] = {}
    gen = _encode(gen_words, vocab)
    ref = _encode(normalize_words(reference), vocab)
    return _recall_encoded(gen, Counter(gen), ref, params or NVParams.adaptive(len(gen)))


def nv_recall_many(
    generation: str, references: list[str], params: NVParams | None = None
) -> list[float]:
    """NV-recall of one generation against many windows, normalizing the generation only once."""
    gen_words = normalize_words(generation)
    if not gen_words:
        return [0.0] * len(references)
    vocab: dict[str, int] = {}
    gen = _encode(gen_words, vocab)
    gen_counts = Counter(gen)
    params = params or NVParams.adaptive(len(gen))
    return [
        _recall_encoded(gen, gen_counts, _encode(normalize_words(ref), vocab), params)
        for ref in references
    ]
