"""Coverage of texts by corpus spans of at least k tokens, with a task's boilerplate left out.

A token is covered when some k-gram holding it occurs in the corpus (the same as lying inside a
corpus span of at least k tokens) and that k-gram is not boilerplate. Boilerplate k-grams are
those that many of a task's items share (`ContaminationRule.boilerplate_items`); the tokens they
hold are left out of the share altogether, so an instruction repeated in every item neither flags
the items nor dilutes the share of an item whose own text is copied.

All texts of a task's field are handled at once, concatenated (k-grams never cross two texts).
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


def _spread(starts: np.ndarray, text_start: np.ndarray, k: int) -> np.ndarray:
    """Per position: whether a marked k-gram start lies in [max(p - k + 1, its text's start), p]."""
    marks = np.concatenate(([0], np.cumsum(starts, dtype=np.int64)))
    pos = np.arange(len(starts))
    lo = np.maximum(pos - k + 1, text_start)
    return marks[pos + 1] - marks[lo] > 0


def field_coverages(ids: Sequence[np.ndarray], lengths: Sequence[np.ndarray], k: int,
                    min_items: int) -> tuple[list[Coverage], int]:
    """Coverage of every text from its tokens and match lengths (`CorpusMatcher.match_lengths`),
    with spans of at least `k` tokens; k-grams found in at least `min_items` texts are boilerplate.
    Returns the coverages and the number of boilerplate k-grams."""
    sizes = np.asarray([len(a) for a in ids], dtype=np.int64)
    if not len(sizes) or not sizes.sum():
        return [Coverage(None, np.zeros(n, bool), np.zeros(n, bool)) for n in sizes.tolist()], 0
    flat = np.concatenate([np.asarray(a, dtype=np.int64) for a in ids])
    lens = np.concatenate([np.asarray(a, dtype=np.int64) for a in lengths])
    text = np.repeat(np.arange(len(sizes)), sizes)
    first = np.cumsum(sizes) - sizes
    offset = np.arange(len(flat)) - first[text]
    keys = np.zeros(len(flat), dtype=np.uint64)
    valid = offset <= (sizes - k)[text]   # a whole k-gram of its own text starts here
    keys[: max(0, len(flat) - k + 1)] = kgram_keys(flat, k)
    kv, tv = keys[valid], text[valid]
    order = np.lexsort((tv, kv))
    kv_sorted, tv_sorted = kv[order], tv[order]
    new = np.ones(len(kv_sorted), dtype=bool)
    new[1:] = (kv_sorted[1:] != kv_sorted[:-1]) | (tv_sorted[1:] != tv_sorted[:-1])
    uniq, per_key = np.unique(kv_sorted[new], return_counts=True)
    shared_keys = uniq[per_key >= min_items]
    shared = np.zeros(len(flat), dtype=bool)
    if len(shared_keys):
        shared[valid] = np.isin(kv, shared_keys)
    in_corpus = valid & (lens >= k) & ~shared
    text_start = first[text]
    covered = _spread(in_corpus, text_start, k)
    boiler = _spread(shared, text_start, k)
    counted = covered & ~boiler
    bounds = np.concatenate((first, [len(flat)]))
    own = np.diff(np.concatenate(([0], np.cumsum(~boiler, dtype=np.int64)))[bounds])
    hits = np.diff(np.concatenate(([0], np.cumsum(counted, dtype=np.int64)))[bounds])
    out = []
    for i, n in enumerate(sizes.tolist()):
        a, b = bounds[i], bounds[i + 1]
        if n < k:
            out.append(Coverage(None, np.zeros(n, bool), np.zeros(n, bool)))
            continue
        value = float(hits[i] / own[i]) if own[i] else None
        out.append(Coverage(value, covered[a:b], boiler[a:b]))
    return out, len(shared_keys)
