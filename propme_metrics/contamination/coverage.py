"""Coverage of a text by corpus spans of at least k tokens, with a task's boilerplate left out.

A token is covered when some k-gram holding it occurs in the corpus (the same as lying inside a
corpus span of at least k tokens) and that k-gram is not boilerplate. Boilerplate k-grams are
those that many of a task's items share (`ContaminationRule.boilerplate_items`); the tokens they
hold are left out of the share altogether, so an instruction repeated in every item neither flags
the items nor dilutes the share of an item whose own text is copied.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

_HASH_BASE = np.uint64(0x9E3779B97F4A7C15)  #: odd 64-bit multiplier of the k-gram hash


def kgram_keys(ids: np.ndarray, k: int) -> np.ndarray:
    """A 64-bit key of every k-gram of `ids` (a polynomial hash, wrapping), in position order."""
    if len(ids) < k:
        return np.zeros(0, dtype=np.uint64)
    powers = _HASH_BASE ** np.arange(k - 1, -1, -1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        windows = sliding_window_view(np.asarray(ids, dtype=np.uint64) + np.uint64(1), k)
        return (windows * powers).sum(axis=1, dtype=np.uint64)


def boilerplate_keys(texts: Sequence[np.ndarray], k: int, min_items: int) -> np.ndarray:
    """Sorted keys of the k-grams that occur in at least `min_items` of the texts."""
    per_text = [np.unique(kgram_keys(ids, k)) for ids in texts]
    if not per_text:
        return np.zeros(0, dtype=np.uint64)
    keys, counts = np.unique(np.concatenate(per_text), return_counts=True)
    return keys[counts >= min_items]


@dataclass
class Coverage:
    """A text's coverage: the share of its non-boilerplate tokens that corpus spans cover."""

    value: float | None      #: None when no token lies outside boilerplate (or the text is shorter than k)
    covered: np.ndarray      #: per token: inside a non-boilerplate corpus k-gram
    boilerplate: np.ndarray  #: per token: inside a boilerplate k-gram

    def spans(self) -> list[tuple[int, int]]:
        """Token ranges of the covered tokens (boilerplate left out), merged."""
        mask = self.covered & ~self.boilerplate
        edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
        return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def _spread(starts: np.ndarray, n: int, k: int) -> np.ndarray:
    """Per token: whether some k-gram starting at a marked position holds it."""
    marks = np.concatenate(([0], np.cumsum(starts.astype(np.int64))))
    pos = np.arange(n)
    lo = np.maximum(pos - k + 1, 0)
    hi = np.minimum(pos, len(starts) - 1)
    return (hi >= lo) & (marks[np.maximum(hi + 1, 0)] - marks[lo] > 0)


def coverage(ids: np.ndarray, lengths: np.ndarray, k: int, boilerplate: np.ndarray) -> Coverage:
    """Coverage of a text from its match lengths (`CorpusMatcher.match_lengths`) with spans of at
    least `k` tokens; `boilerplate` are sorted k-gram keys (`boilerplate_keys`)."""
    n = len(ids)
    if n < k:
        empty = np.zeros(n, dtype=bool)
        return Coverage(None, empty, empty)
    keys = kgram_keys(ids, k)
    shared = np.isin(keys, boilerplate, assume_unique=False) if len(boilerplate) else np.zeros(len(keys), bool)
    in_corpus = np.asarray(lengths[: len(keys)]) >= k
    covered = _spread(in_corpus & ~shared, n, k)
    boiler = _spread(shared, n, k)
    own = int((~boiler).sum())
    value = float((covered & ~boiler).sum() / own) if own else None
    return Coverage(value, covered, boiler)
