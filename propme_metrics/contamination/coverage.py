"""Coverage of texts by corpus spans of at least k tokens, with a task's boilerplate left out.

A token is covered when some k-gram holding it occurs in the corpus (the same as lying inside a
corpus span of at least k tokens) and that k-gram is not boilerplate. A k-gram that many of a
task's items share (`ContaminationRule.boilerplate_items`) is boilerplate when it marks a
template, not copied text: it is frequent in the corpus (at least `boilerplate_min_count`
occurrences: instructions and stock phrases), or no corpus k-gram touches it and it stands at a
fixed position in every item holding it (the task's own scaffolding: "Question:", "Answer:"). A shared
k-gram the corpus holds only a few times is text copied from the corpus into several items (a
reading passage, duplicated items): it counts like any other. The tokens boilerplate holds are
left out of the share altogether, so a template neither flags the items nor dilutes the share of
an item whose own text is copied; each text lists the runs it left out, and why (`Discounted`).

All texts of a task's field are handled at once, concatenated (k-grams never cross two texts).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

_HASH_BASE = np.uint64(0x9E3779B97F4A7C15)  #: odd 64-bit multiplier of the k-gram hash
#: why a run of tokens was left out: a shared k-gram frequent in the corpus, or a shared k-gram
#: at a fixed position that the corpus lacks
FREQUENT, TEMPLATE = "frequent in the corpus", "template"


def kgram_keys(ids: np.ndarray, k: int) -> np.ndarray:
    """A 64-bit key of every k-gram of `ids` (a polynomial hash, wrapping), in position order."""
    if len(ids) < k:
        return np.zeros(0, dtype=np.uint64)
    powers = _HASH_BASE ** np.arange(k - 1, -1, -1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        windows = sliding_window_view(np.asarray(ids, dtype=np.uint64) + np.uint64(1), k)
        return (windows * powers).sum(axis=1, dtype=np.uint64)


@dataclass(frozen=True)
class Discounted:
    """A run of a text's tokens left out of its share as boilerplate, and why."""

    start: int          #: token range
    end: int
    reason: str         #: FREQUENT or TEMPLATE
    items: int          #: items of the task holding its k-grams (the most of them)
    corpus_count: int   #: occurrences of its k-grams in the corpus (the most; 0 for a template)


@dataclass
class Coverage:
    """A text's coverage: the share of its non-boilerplate tokens that corpus spans cover."""

    value: float | None      #: None when no token lies outside boilerplate (or the text is shorter than k)
    covered: np.ndarray      #: per token: inside a non-boilerplate corpus k-gram
    boilerplate: np.ndarray  #: per token: inside a boilerplate k-gram
    discounted: list[Discounted] = field(default_factory=list)   #: the boilerplate runs, in text order

    def spans(self) -> list[tuple[int, int]]:
        """Token ranges of the covered tokens (boilerplate left out), merged."""
        return _runs(self.covered & ~self.boilerplate)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of every run of True in `mask`."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def _fixed(key_ix: np.ndarray, where: np.ndarray, text: np.ndarray, holders: np.ndarray) -> np.ndarray:
    """Per shared key: whether one position (`where`: offset from the text's start, or its end)
    holds it in every text that holds it (`holders` texts)."""
    rows = np.unique(np.stack([key_ix, where, text], axis=1), axis=0)
    pairs, per_pair = np.unique(rows[:, :2], axis=0, return_counts=True)
    most = np.zeros(len(holders), dtype=np.int64)
    np.maximum.at(most, pairs[:, 0], per_pair)
    return most == holders


def _spread(starts: np.ndarray, text_start: np.ndarray, k: int) -> np.ndarray:
    """Per position: whether a marked k-gram start lies in [max(p - k + 1, its text's start), p]."""
    marks = np.concatenate(([0], np.cumsum(starts, dtype=np.int64)))
    pos = np.arange(len(starts))
    lo = np.maximum(pos - k + 1, text_start)
    return marks[pos + 1] - marks[lo] > 0


def field_coverages(ids: Sequence[np.ndarray], lengths: Sequence[np.ndarray], k: int, min_items: int,
                    min_count: int, counts: Callable[[list[np.ndarray]], list[int]]) -> tuple[list[Coverage], int]:
    """Coverage of every text from its tokens and match lengths (`CorpusMatcher.match_lengths`),
    with spans of at least `k` tokens; a k-gram found in at least `min_items` texts is boilerplate
    when `counts` (corpus occurrences of k-grams) gives it `min_count` or more, or when the corpus
    lacks it and it stands at one position (from the start or the end) in every text holding it.
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
    shared_keys, holders = uniq[per_key >= min_items], per_key[per_key >= min_items]
    reason = np.zeros(len(flat), dtype=np.int8)   # per k-gram start: 0 counted, 1 frequent, 2 template
    items = np.zeros(len(flat), dtype=np.int64)
    corpus = np.zeros(len(flat), dtype=np.int64)
    boiler_keys = 0
    if len(shared_keys):
        at = np.flatnonzero(valid)[np.isin(kv, shared_keys)]        # every start of a shared k-gram
        key_ix = np.searchsorted(shared_keys, keys[at])
        in_corpus = np.zeros(len(shared_keys), dtype=bool)
        in_corpus[key_ix[lens[at] >= k]] = True
        # a k-gram that corpus k-grams partly cover is copied text (absent itself only because a
        # text's first word has no space before it, or because it runs into the item's own text):
        # never a template
        raw = np.concatenate(([0], np.cumsum(_spread(valid & (lens >= k), first[text], k), dtype=np.int64)))
        touched = np.zeros(len(shared_keys), dtype=bool)
        touched[key_ix[raw[at + k] - raw[at] > 0]] = True
        fixed = (_fixed(key_ix, offset[at], text[at], holders)
                 | _fixed(key_ix, (sizes[text[at]] - k) - offset[at], text[at], holders))
        first_at = np.full(len(shared_keys), -1, dtype=np.int64)
        first_at[key_ix[::-1]] = at[::-1]
        asked = np.flatnonzero(in_corpus)
        found = np.zeros(len(shared_keys), dtype=np.int64)
        if len(asked):
            found[asked] = counts([flat[first_at[j]:first_at[j] + k] for j in asked])
        kind = np.where(in_corpus & (found >= min_count), 1, np.where(~touched & fixed, 2, 0)).astype(np.int8)
        reason[at], items[at], corpus[at] = kind[key_ix], holders[key_ix], found[key_ix]
        boiler_keys = int((kind > 0).sum())
    shared = reason > 0
    in_corpus_kgram = valid & (lens >= k) & ~shared
    text_start = first[text]
    covered = _spread(in_corpus_kgram, text_start, k)
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
        out.append(Coverage(value, covered[a:b], boiler[a:b], _discounted(reason[a:b], items[a:b], corpus[a:b], k)))
    return out, boiler_keys


def _discounted(reason: np.ndarray, items: np.ndarray, corpus: np.ndarray, k: int) -> list[Discounted]:
    """A text's boilerplate runs: the tokens its boilerplate k-grams of one reason hold, merged."""
    out = []
    for code, why in ((1, FREQUENT), (2, TEMPLATE)):
        starts = reason == code
        if not starts.any():
            continue
        held = _spread(starts, np.zeros(len(starts), dtype=np.int64), k)
        for a, b in _runs(held):
            inside = starts[a:b - k + 1]
            out.append(Discounted(a, b, why, int(items[a:b - k + 1][inside].max()),
                                  int(corpus[a:b - k + 1][inside].max())))
    return sorted(out, key=lambda d: d.start)
