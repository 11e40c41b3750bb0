"""Where the corpus holds the spans of a flagged item: for each span of the rule's field that
corpus k-grams cover, its longest part found in the corpus, located, with up to a few source
documents and a snippet of each around the match (what report.html's span panel shows)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from propme_metrics.contamination.check import ItemResult, TaskCheck
from propme_metrics.contamination.match import CONTEXT_TOKENS, CorpusMatcher
from propme_metrics.trace.result import TracedDocument
from propme_metrics.trace.tracer import select_occurrences, source_id

#: flagged items per task whose spans are located (the ones report.html lists)
SHOWN_ITEMS = 20
#: source documents located per span (evenly spaced over its occurrences)
DOCS_PER_SPAN = 3


@dataclass(frozen=True)
class SpanDocument:
    """One corpus document holding a span: its identity and the text around the occurrence."""

    source_id: Any
    shard: int
    doc_ix: int
    metadata: dict[str, Any]
    snippet: str                     #: decoded window around the occurrence
    snippet_span: tuple[int, int]    #: the span's character range in `snippet`

    def traced(self) -> TracedDocument:
        """The document as a tracer's document entry (what report.html's source panel shows): match
        "verbatim", no NV-recall (NaN: undefined, a benchmark item is not a generation)."""
        return TracedDocument(self.shard, self.doc_ix, self.source_id, self.metadata, "verbatim", math.nan, 0, 0, 0,
                              self.snippet, self.snippet_span)


@dataclass(frozen=True)
class SpanSource:
    """A covered span of an item's text (`chars`, `tokens`) and its longest part found in the corpus
    (`match`: token range, its text and corpus count) with documents holding it."""

    chars: tuple[int, int]
    tokens: tuple[int, int]
    match: tuple[int, int]
    text: str
    count: int
    documents: list[SpanDocument]


@dataclass(frozen=True)
class FlaggedItem:
    """A contaminated item and the sources of its covered spans, in text order."""

    result: ItemResult
    spans: list[SpanSource]


def _longest_inside(lengths: np.ndarray, a: int, b: int) -> tuple[int, int]:
    """The longest corpus match that starts and ends inside tokens [a, b) (the leftmost of equal ones)."""
    inside = np.minimum(lengths[a:b], b - np.arange(a, b))
    p = a + int(np.argmax(inside))
    return p, p + int(inside[p - a])


def locate_flagged(matcher: CorpusMatcher, check: TaskCheck, max_items: int = SHOWN_ITEMS,
                   docs_per_span: int = DOCS_PER_SPAN) -> list[FlaggedItem]:
    """The first `max_items` contaminated items of `check` with their covered spans located in the
    corpus: every span's longest part searched in one call, its windows fetched and decoded in one."""
    field = check.rule.field
    flagged = [r for r in check.items if r.contaminated][:max_items]
    wanted: list[tuple[int, tuple[int, int], tuple[int, int]]] = []   # (item, covered range, match range)
    for i, r in enumerate(flagged):
        m = r.matches[field]
        for a, b in r.coverage[field].spans():
            wanted.append((i, (a, b), _longest_inside(m.lengths, a, b)))
    spans: list[list[SpanSource]] = [[] for _ in flagged]
    if not wanted:
        return [FlaggedItem(r, s) for r, s in zip(flagged, spans)]
    texts = [flagged[i].matches[field] for i, _, _ in wanted]
    bases = np.cumsum([0] + [m.tokens for m in texts[:-1]])
    ids = np.concatenate([m.ids for m in texts])
    occs = matcher.search.locate(ids, [(int(base) + s, int(base) + e) for base, (_, _, (s, e)) in zip(bases, wanted)])
    picks = [select_occurrences(occ, docs_per_span, None) for occ in occs]
    documents = _documents(matcher, [(m.ids[s:e], p) for m, (_, _, (s, e)), p in zip(texts, wanted, picks)])
    for (i, (a, b), (s, e)), m, occ, docs in zip(wanted, texts, occs, documents):
        spans[i].append(SpanSource((m.offsets[a][0], m.offsets[b - 1][1]), (a, b), (s, e), m.char_range(s, e),
                                   occ.count, docs))
    return [FlaggedItem(r, s) for r, s in zip(flagged, spans)]


def _documents(matcher: CorpusMatcher, needles: Sequence[tuple[np.ndarray, list[tuple[int, int]]]]
               ) -> list[list[SpanDocument]]:
    """For each (needle tokens, picked occurrences): a window around each occurrence, decoded, the
    needle's place in it found as the tracer finds it (decoded head, then the needle's text);
    one document per (shard, document)."""
    flat = [(k, len(needle), occ) for k, (needle, picks) in enumerate(needles) for occ in picks]
    by_width: dict[int, list[int]] = {}
    for j, (_, size, _) in enumerate(flat):
        by_width.setdefault(2 * (size + CONTEXT_TOKENS), []).append(j)
    windows: dict[int, Any] = {}
    for width, rows in by_width.items():
        windows.update(zip(rows, matcher.search.windows([flat[j][2] for j in rows], width)))
    wins = [windows[j] for j in range(len(flat))]
    texts = matcher.decoder.decode_batch([w.token_ids for w in wins])
    heads = matcher.decoder.decode_batch([w.token_ids[:w.needle_offset] for w in wins])
    needle_texts = matcher.decoder.decode_batch([needle for needle, _ in needles])
    out: list[list[SpanDocument]] = [[] for _ in needles]
    seen: set[tuple[int, int, int]] = set()
    for (k, _, _), win, text, head in zip(flat, wins, texts, heads):
        if (k, win.shard, win.doc_ix) in seen:
            continue
        seen.add((k, win.shard, win.doc_ix))
        needle = needle_texts[k]
        lo = text.find(needle, max(0, len(head) - 1)) if needle else -1
        lo = len(head) if lo < 0 else lo
        meta = win.meta
        out[k].append(SpanDocument(source_id(meta, win.doc_ix), win.shard, win.doc_ix, meta, text,
                                   (lo, min(len(text), lo + len(needle)))))
    return out
