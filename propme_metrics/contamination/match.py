"""Benchmark texts against the corpus: at every token, the longest corpus match starting there
(the tracer's suffix-array search, many texts per call), the longest span with its count and one
source document.

Texts are normalized first as the tracer's normalized match does (`normalize_text`: NFKC, one
space, LF line ends, stripped), so a benchmark's doubled spaces, odd line ends or full-width
characters do not hide a copy; the corpus itself is matched as it was indexed.
"""
from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from propme_metrics.core.errors import TraceWorkerError
from propme_metrics.index.decode import TokenDecoder
from propme_metrics.index.reader import Index
from propme_metrics.index.search import DocWindow, IndexSearch
from propme_metrics.trace.text_rules import normalize_text
from propme_metrics.trace.tracer import select_occurrences, source_id

#: query positions searched together in one vectorized call (bounds the search's working memory)
BATCH_POSITIONS = 1 << 16
#: tokens of source document shown on each side of a longest match
CONTEXT_TOKENS = 24


@dataclass
class TextMatch:
    """One normalized text against the corpus."""

    text: str                                   #: the normalized text that was searched
    ids: np.ndarray = field(repr=False)         #: its index tokens
    offsets: list[tuple[int, int]] = field(repr=False)  #: character range of each token in `text`
    lengths: np.ndarray = field(repr=False)     #: longest corpus match starting at each token
    longest: int = 0                            #: tokens of the longest span found in the corpus
    span: tuple[int, int] = (0, 0)              #: its token range (the leftmost of equally long ones)
    count: int | None = None                    #: its corpus count (None: no token occurs)
    doc_ix: int | None = None                   #: one document holding it (engine order)
    source_id: Any = None                       #: that document's id (the tracer's `source_id`)
    source: str | None = None                   #: that document's `source` metadata field, if any
    context: str = ""                           #: that document's text around the match

    @property
    def tokens(self) -> int:
        return len(self.ids)

    @property
    def longest_text(self) -> str:
        """The longest span's text, as it stands in the normalized text."""
        return self.char_range(*self.span)

    def char_range(self, start: int, end: int) -> str:
        if end <= start:
            return ""
        return self.text[self.offsets[start][0]:self.offsets[end - 1][1]]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of `contamination_items.jsonl` (match lengths left out)."""
        return {"tokens": self.tokens, "longest_match": self.longest, "longest_text": self.longest_text,
                "count": self.count, "doc_ix": self.doc_ix, "source_id": self.source_id, "source": self.source}


#: texts a worker process encodes and searches per job
WORKER_CHUNK = 256

_WORKER: CorpusMatcher | None = None


def _init_worker() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def _work(texts: list[str]) -> list[tuple[str, np.ndarray, list[tuple[int, int]], np.ndarray]]:
    assert _WORKER is not None
    return _WORKER.encode_and_match(texts)


class CorpusMatcher:
    """Matches many texts against one index with the tracer's search (`IndexSearch`), in this
    process or in `workers` forked processes that inherit the opened index (as `propme trace`'s).

    `search` replaces the index's own search path, e.g. one whose shards Ray actors hold
    (`trace.ray_search.ray_search`): then `workers` are driver threads sending searches at once."""

    def __init__(self, index: Index, batch_positions: int = BATCH_POSITIONS, workers: int = 1,
                 search: IndexSearch | None = None):
        self.index = index
        self.search = index.search if search is None else search
        self.threads = search is not None  # a cluster's driver is never forked
        self.batch_positions = batch_positions
        self.workers = workers
        self.decoder = TokenDecoder.of(index.backend)

    def encode_and_match(self, texts: Sequence[str], progress: Callable[[int], None] | None = None
                         ) -> list[tuple[str, np.ndarray, list[tuple[int, int]], np.ndarray]]:
        """(normalized text, token ids, character offsets, match lengths) of every text, in input
        order; the same for any number of workers (each text's result depends on it alone)."""
        if self.workers <= 1 or len(texts) <= WORKER_CHUNK:
            encoded = self.encode(texts)
            lengths = self.match_lengths([ids for _, ids, _ in encoded], progress)
            return [(*enc, lens) for enc, lens in zip(encoded, lengths)]
        chunks = [list(texts[i:i + WORKER_CHUNK]) for i in range(0, len(texts), WORKER_CHUNK)]
        out: list[tuple[str, np.ndarray, list[tuple[int, int]], np.ndarray]] = []
        if self.threads:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(self.workers, len(chunks))) as pool:
                for chunk, done in zip(chunks, pool.map(self.encode_and_match, chunks)):
                    out += done
                    if progress is not None:
                        progress(len(chunk))
            return out
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        global _WORKER
        _WORKER = self
        try:
            with ProcessPoolExecutor(min(self.workers, len(chunks)), mp_context=mp.get_context("fork"),
                                     initializer=_init_worker) as pool:
                gc.freeze()  # inherited objects are never walked (and so never copied) by the workers' collector
                try:
                    results = pool.map(_work, chunks)
                finally:
                    gc.unfreeze()
                for chunk, done in zip(chunks, results):
                    out += done
                    if progress is not None:
                        progress(len(chunk))
        except BrokenProcessPool:
            raise TraceWorkerError("a contamination worker process stopped without a result (killed, or out of "
                                   "memory?)", "run again with fewer --workers") from None
        finally:
            _WORKER = None
        return out

    def encode(self, texts: Sequence[str]) -> list[tuple[str, np.ndarray, list[tuple[int, int]]]]:
        """(normalized text, token ids, character offsets) of each text, no special tokens."""
        normalized = [normalize_text(t) for t in texts]
        encodings = self.index.backend.encode_batch(normalized, add_special_tokens=False)
        return [(t, np.asarray(e.ids, dtype=np.int64), list(e.offsets)) for t, e in zip(normalized, encodings)]

    def match_lengths(self, ids: Sequence[np.ndarray], progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
        """For every text and token: the length of the longest prefix of the text from that token
        on that occurs in the corpus. Texts are concatenated and searched in batches of positions,
        each position bounded by the end of its own text."""
        out = [np.zeros(len(a), dtype=np.int64) for a in ids]
        batch: list[int] = []
        size = 0

        def flush():
            nonlocal batch, size
            if not batch:
                return
            arr = self.search.query(np.concatenate([ids[i] for i in batch]))
            lens = np.asarray([len(ids[i]) for i in batch], dtype=np.int64)
            ends = np.cumsum(lens)
            qstart = np.arange(len(arr), dtype=np.int64)
            qend = np.repeat(ends, lens)
            best = self.search.match_lengths(arr, qstart, qend)
            for i, part in zip(batch, np.split(best, ends[:-1])):
                out[i] = part
            if progress is not None:
                progress(len(batch))
            batch, size = [], 0

        for i, a in enumerate(ids):
            if not len(a):
                if progress is not None:
                    progress(1)
                continue
            batch.append(i)
            size += len(a)
            if size >= self.batch_positions:
                flush()
        flush()
        return out

    def match(self, texts: Sequence[str], progress: Callable[[int], None] | None = None,
              describe: bool = True) -> list[TextMatch]:
        """Every text against the corpus: match lengths, and (`describe`) the longest span, its
        count and one source."""
        matches = [TextMatch(*row) for row in self.encode_and_match(texts, progress)]
        if describe:
            self.describe_longest(matches)
        return matches

    def counts(self, grams: Sequence[np.ndarray]) -> list[int]:
        """Corpus occurrences of each token sequence, all in one search."""
        if not grams:
            return []
        bases = np.cumsum([0] + [len(g) for g in grams[:-1]])
        spans = [(int(b), int(b) + len(g)) for b, g in zip(bases, grams)]
        return [occ.count for occ in self.search.locate(np.concatenate(grams), spans)]

    def describe_longest(self, matches: Sequence[TextMatch]) -> None:
        """Fill in each match's longest span, its corpus count and one source document (the first
        occurrence in engine order), all spans located in one search."""
        found = []
        for m in matches:
            if len(m.lengths) and m.lengths.max() > 0:
                start = int(np.argmax(m.lengths))
                m.longest, m.span = int(m.lengths[start]), (start, start + int(m.lengths[start]))
                found.append(m)
        if not found:
            return
        arr = np.concatenate([m.ids for m in found])
        bases = np.cumsum([0] + [m.tokens for m in found[:-1]])
        occs = self.search.locate(arr, [(int(b) + m.span[0], int(b) + m.span[1]) for b, m in zip(bases, found)])
        picks = [select_occurrences(occ, 1, None)[0] for occ in occs]
        by_width: dict[int, list[int]] = {}  # one window call per window width
        for i, m in enumerate(found):
            by_width.setdefault(2 * (m.longest + CONTEXT_TOKENS), []).append(i)
        windows: dict[int, DocWindow] = {}
        for width, rows in by_width.items():
            windows.update(zip(rows, self.search.windows([picks[i] for i in rows], width)))
        contexts = self.decoder.decode_batch([windows[i].token_ids for i in range(len(found))])
        for i, (m, occ) in enumerate(zip(found, occs)):
            win = windows[i]
            meta = win.meta
            m.count, m.doc_ix = occ.count, win.doc_ix
            m.source_id = source_id(meta, win.doc_ix)
            m.source = str(meta["source"]) if meta.get("source") else None
            m.context = contexts[i]
