"""SimpleTrace: trace a generation back to training documents, as the published tracer does.

For a completion g exactly as the model wrote it (a leading space or newline stays part of its
first token, as inside a training document), tokenized with the index tokenizer into L tokens:
0. mixed mode: look the whole of g up; its documents are full-span candidates;
1. longest corpus match at every start (text mode: word starts only);
2. clean spans (text: cut at sentence boundaries, whole words; mixed: 4+ tokens, not blank),
   then maximal spans;
3. the K = ceil(L/20) rarest spans (unigram log-probability) are kept;
4. overlapping kept spans merge only when their union occurs; each final span gets up to 10
   documents (a seeded sample of its occurrences, one window of 5L tokens each, classified
   full_raw / full_normalized / partial and scored with NV-recall);
5. mixed mode: the full-generation span (0, L) with its documents, or, when g does not occur as
   tokenized, with the full matches found through long anchor spans.

The suffix arrays are searched with numpy over the memory-mapped shards (`search.py`), all
starts of a generation at once, both neighbours of every insertion point checked; counts, rank
ranges and windows are exactly what infini-gram's engine returns. Where the published code has a
defect PropMe deviates (word starts of byte-level tokenizers, log-probabilities instead of an
underflowing product, counts in the unigram table, the rank-0 neighbour, no spans for a completion
that is only white space); nothing else differs.
"""
from __future__ import annotations

import gc
import math
import os
import random
import time
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np

from propme_metrics.core.errors import IndexFormatError, TraceWorkerError
from propme_metrics.index.decode import TokenDecoder
from propme_metrics.index.format import parse_metadata
from propme_metrics.index.reader import Index, open_index
from propme_metrics.index.search import DocWindow, IndexSearch, Occurrences
from propme_metrics.index.tokenizer import check_encodes
from propme_metrics.trace.nvrecall import nv_scores
from propme_metrics.trace.result import FinalSpan, RarityKind, Span, TraceConfig, TracedDocument, TraceMode, TraceResult
from propme_metrics.trace.text_rules import (
    BOUNDARY_CHARS,
    MIXED_MIN_TOKENS,
    continuation_reproduced,
    has_text,
    is_degenerate,
    normalize_text,
)

#: the version of the tracing rules: a stored trace made under other rules is not reused (the
#: `propme trace` journal is keyed by it); raise it whenever a rule changes what a trace holds
TRACE_RULES_VERSION = 2


def source_id(metadata: dict[str, Any], doc_ix: int) -> Any:
    """The first non-empty of the metadata fields id, doc_id, source, url; else the document index."""
    for key in ("id", "doc_id", "source", "url"):
        if metadata.get(key):
            return metadata[key]
    return doc_ix


def evenly_spaced(n: int, k: int) -> list[int]:
    """k of the indices 0..n-1 spread evenly (round(i(n-1)/(k-1))), de-duplicated and topped up
    with the first unused ones; k = 1 gives the middle one."""
    if k <= 0 or n <= 0:
        return []
    if k >= n:
        return list(range(n))
    if k == 1:
        return [n // 2]
    picked = list(dict.fromkeys(round(i * (n - 1) / (k - 1)) for i in range(k)))
    taken = set(picked)
    for i in range(n):
        if len(picked) == k:
            break
        if i not in taken:
            picked.append(i)
    return picked


def select_occurrences(occ: Occurrences, limit: int, rng: random.Random | None) -> list[tuple[int, int]]:
    """Up to `limit` (engine shard, rank) occurrences, in (shard, rank) order when all are taken;
    else `rng.sample` of their positions (the published sample), or evenly spaced ones without rng."""
    sizes = [hi - lo for lo, hi in occ.segment_by_shard]
    total = sum(sizes)
    if total <= limit:
        picks: Sequence[int] = range(total)
    else:
        picks = rng.sample(range(total), limit) if rng is not None else evenly_spaced(total, limit)
    bounds = list(accumulate(sizes, initial=0))
    return [(s, int(occ.segment_by_shard[s][0]) + p - bounds[s]) for p in picks
            for s in (bisect_right(bounds, p) - 1,)]


@dataclass
class _Retrieved:
    """A fetched window before classification: the occurrence, its decoded text and where the needle sits."""

    win: DocWindow
    text: str
    needle: tuple[int, int]   #: character offsets of the needle in `text`


class Tracer:
    """SimpleTrace over one index, opened once (memory-mapped) and reused for many generations.

    Raises IndexFormatError when the index is missing or broken, or when the tokenizer copy inside
    it no longer hashes to the manifest's sha256 (spans would be counted in the wrong tokens).
    """

    def __init__(self, index: Index | str | Path, config: TraceConfig | None = None):
        self.index = index if isinstance(index, Index) else open_index(index)
        self.config = config or TraceConfig()
        self.index.check_tokenizer()
        backend = self.index.backend
        self._separator = self.index.separator
        self._log_total = math.log(self.index.total_positions)
        self._backend = backend
        self._byte_level = type(backend.decoder).__name__ == "ByteLevel"
        # the search, the byte table and the word starts are built on first use: a job whose
        # generations are all empty needs none of them
        self._warm = False

    def warm(self) -> None:
        """Build now what tracing builds on first use (before forking workers, or sharing the tracer
        between threads)."""
        for name in ("search", "_decoder", "_word_initial", "_logprob"):
            getattr(self, name)
        self._warm = True

    @cached_property
    def search(self) -> IndexSearch:
        return self._open_search()

    def _open_search(self) -> IndexSearch:
        """Where the suffix arrays are searched: this process (a cluster backend overrides it)."""
        return self.index.search

    @cached_property
    def _decoder(self) -> TokenDecoder:
        return TokenDecoder.of(self._backend)

    @cached_property
    def _word_initial(self) -> bytes:
        """1 at each id whose surface form begins with the space marker (docs/method.md, word starts): the
        stored word starts without the newline pieces (a newline is no space marker); one byte per id."""
        newline = ("Ċ", "<0x0A>", "<0x0D>", "\n")
        starts = self.index.word_starts.tolist()
        mask = bytearray(max(starts, default=-1) + 1)  # an id past the end is no word start
        id_to_token = self._backend.id_to_token
        for i in starts:
            if not (id_to_token(i) or "").startswith(newline):
                mask[i] = 1
        return bytes(mask)

    @cached_property
    def _logprob(self) -> np.ndarray:
        """Unigram log-probability by token id (separator included in the total); an id missing
        from the table has probability 1 (it cannot be in a span anyway)."""
        counts = self.index.unigram_table
        table = np.zeros(max(len(counts), self.index.manifest.tokenizer.max_id + 1))
        seen = np.flatnonzero(counts)
        table[seen] = [math.log(c) - self._log_total for c in counts[seen].tolist()]
        return table

    @cached_property
    def _prob(self) -> list[float]:
        """Unigram probability by token id (count / total), 1 where the table has no count."""
        counts, total = self.index.unigram_table, self.index.total_positions
        table = [1.0] * len(self._logprob)
        for t in np.flatnonzero(counts).tolist():
            table[t] = int(counts[t]) / total
        return table

    def _rarity(self, ids: list[int]) -> float:
        if self.config.rarity == RarityKind.PRODUCT:
            prob = self._prob
            return math.prod(prob[t] for t in ids)
        return math.fsum(self._logprob[ids].tolist())

    def _decode(self, ids) -> str:
        """The tokenizer's decode of ids (special tokens kept), through the byte table (`index/decode.py`)."""
        return self._decoder.decode(ids)

    def _decode_batch(self, seqs: list) -> list[str]:
        return self._decoder.decode_batch(seqs)

    # -- steps 1 and 2 --------------------------------------------------------------------------

    def step1_spans(self, ids: list[int]) -> list[tuple[int, int]]:
        """Step 1: (start, end of the longest corpus match) for each start 0..L-2 (text mode: word
        starts only, the first token counting as one)."""
        n = len(ids)
        starts = [b for b in range(n - 1) if self.config.mode == TraceMode.MIXED or b == 0 or self._is_word_initial(ids, b)]
        ends = self.search.longest_matches(ids, starts).tolist() if starts else []
        return list(zip(starts, ends))

    def clean_spans(self, ids: list[int], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Filter 1 (clean spans, by mode) and filter 2 (maximal spans) over step 1's spans."""
        n = len(ids)
        kept: list[tuple[int, int]] = []
        if self.config.mode == TraceMode.MIXED:
            cand = [(s, e) for s, e in spans if (s, e) == (0, n) or e - s >= MIXED_MIN_TOKENS]
            visible = self._decoder.surely_visible
            kept = [(s, e) for s, e in cand
                    if (s, e) == (0, n) or visible(ids[s:e]) or not (t := self._decode(ids[s:e])).isspace() and t]
        else:
            boundary = [any(c in BOUNDARY_CHARS for c in t) for t in self._decode_batch([[t] for t in ids])]
            for s, e in spans:
                e = self._trim(ids, s, e, boundary)
                if e > s and self._text_clean(ids, s, e):
                    kept.append((s, e))
        maximal, last = [], -1
        for s, e in sorted(kept):
            if e > last:
                maximal.append((s, e))
                last = e
        return maximal

    def _is_word_initial(self, ids: list[int], pos: int) -> bool:
        return pos == 0 or ids[pos] < len(self._word_initial) and self._word_initial[ids[pos]] == 1

    def _inner_boundary(self, text: str) -> bool:
        return any(c in BOUNDARY_CHARS for c in text[:-1])

    def _trim(self, ids: list[int], start: int, end: int, boundary: list[bool]) -> int:
        """Text mode: the largest end from the first boundary token on whose span text holds a
        boundary character only as its last character, then back to a word start."""
        first = next((i for i in range(start, end) if boundary[i]), None)
        if first is not None:
            lo, hi = first, end
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._inner_boundary(self._decode(ids[start:mid])):
                    hi = mid - 1
                else:
                    lo = mid
            end = lo
        while start < end < len(ids) and not self._is_word_initial(ids, end):
            end -= 1
        return end

    def _text_clean(self, ids: list[int], start: int, end: int) -> bool:
        return (not self._inner_boundary(self._decode(ids[start:end])) and self._is_word_initial(ids, start)
                and (end == len(ids) or self._is_word_initial(ids, end)))

    # -- whole pipeline -------------------------------------------------------------------------

    def trace_one(self, text: str, key: str = "", continuation: str | None = None) -> TraceResult:
        """Trace one completion (the model's output only), exactly as given: never stripped. One that
        is empty or only white space has no tokens, spans or documents (and still counts)."""
        cfg = self.config
        g = text
        ids = self.index.encode(g) if has_text(g) else []
        n = len(ids)
        result = TraceResult(key=key, text=g, n_tokens=n, degenerate=is_degenerate(g), mode=cfg.mode,
                             extracted=None if continuation is None else continuation_reproduced(g, continuation))
        if not ids:
            return result
        if n > cfg.max_tokens:
            # K = ceil(L/20) spans x 10 documents would make one generation cost minutes: say so instead
            raise ValueError(f"generation has {n:,} index tokens, more than max_tokens={cfg.max_tokens:,}; "
                             "raise it (--max-tokens, metadata trace_max_tokens) to trace it")
        ctx = _Context(self, g, ids)
        whole = self.search.locate(ids, [(0, n)])[0] if cfg.mode == TraceMode.MIXED else None
        full_docs = ctx.retrieve(whole, (0, n), None) if whole is not None and whole.count else []
        anchors: list[tuple[int, int]] = []
        if whole is not None and whole.count:
            # every other start's match is a suffix of g, contained in (0, L): only (0, L) is maximal; a
            # one-token generation has no start (the published range(L - 1)): its full-match documents alone
            step1, maximal, found = ([], [(0, n)], [whole]) if n > 1 else ([], [], [])
        else:
            step1 = self.step1_spans(ids)
            maximal = self.clean_spans(ids, step1)
            # mixed mode without full-span documents: the anchors' occurrences come with the spans' (one search)
            anchors = ctx.anchor_spans(step1) if cfg.mode == TraceMode.MIXED else []
            found = self.search.locate(ids, maximal + anchors)
            self.search.check_found(found[:len(maximal)])
        found, anchor_occ = found[:len(maximal)], found[len(maximal):]
        result.spans = [Span(start=s, end=e, count=f.count, rarity=self._rarity(ids[s:e]))
                        for (s, e), f in zip(maximal, found)]
        for sp, t in zip(result.spans, self._decode_batch([ids[s:e] for s, e in maximal])):
            sp.text = t
        order = sorted(range(len(maximal)), key=lambda i: result.spans[i].rarity)  # stable: ties by position
        kept = sorted(order[: cfg.k(n)])
        for i in kept:
            result.spans[i].kept = True
        finals = ctx.final_spans([maximal[i] for i in kept], [found[i] for i in kept], dict(step1))
        if cfg.mode == TraceMode.MIXED:
            if not full_docs:
                full_docs = ctx.anchor_documents(anchors, anchor_occ)
            finals = ctx.attach_full_span(finals, whole.count, full_docs)
        finals.sort(key=lambda s: s.length, reverse=True)  # stable: equal lengths keep their order
        ctx.score(finals)
        result.final_spans = finals
        return result

    def trace(self, texts: Sequence[str], keys: Sequence[str] | None = None,
              continuations: Sequence[str | None] | None = None, workers: int = 1,
              progress: bool = False) -> list[TraceResult]:
        """Trace a batch; results are in input order and identical for any number of workers.

        A generation whose tracing fails is returned with `error` set (see `safe_trace_one`).
        `progress` shows a bar with generations per second on stderr.
        """
        return list(self.iter_trace(texts, keys, continuations, workers, progress))

    def iter_trace(self, texts: Sequence[str], keys: Sequence[str] | None = None,
                   continuations: Sequence[str | None] | None = None, workers: int = 1,
                   progress: bool = False) -> Iterator[TraceResult]:
        """`trace`, yielding each result (in input order) as soon as it is ready."""
        from propme_metrics.core.progress import progress_bar, rate

        done = 0
        started = time.time()
        with self.runner(texts, keys, continuations, workers) as runner:  # forks before the progress thread starts
            with progress_bar(progress) as bar:
                task = bar.add_task("tracing", total=len(runner.jobs), rate="")
                for res in runner:
                    done += 1
                    bar.update(task, advance=1, rate=rate(done, time.time() - started, "gen"))
                    yield res

    def runner(self, texts: Sequence[str], keys: Sequence[str] | None = None,
               continuations: Sequence[str | None] | None = None, workers: int = 1) -> TraceRunner:
        """What runs a batch: a context manager that iterates the results in input order, in this
        process or in `workers` forked processes, forked on entering (enter it before starting threads)."""
        keys = list(keys) if keys is not None else [str(i) for i in range(len(texts))]
        conts = list(continuations) if continuations is not None else [None] * len(texts)
        if len(keys) != len(texts) or len(conts) != len(texts):
            raise ValueError("texts, keys and continuations must have the same length")
        self.check_encodes(texts)
        return self._runner(list(zip(texts, keys, conts)), workers)

    def check_encodes(self, texts: Sequence[str]) -> None:
        """Refuse (before any tracing) an index whose tokenizer encodes these generations to nothing,
        which would trace every one of them as new text."""
        check_encodes(lambda batch: [self.index.encode(t) for t in batch], texts,
                      f"the tokenizer stored in {self.index.path}",
                      "the index was built with a tokenizer that cannot encode this text: rebuild it with "
                      "`propme index build` and the model's tokenizer saved whole (tokenizer.json)")

    def _runner(self, jobs: list[tuple[str, str, str | None]], workers: int) -> TraceRunner:
        """The runner of `runner` (the Ray tracer runs jobs in driver threads instead)."""
        return TraceRunner(self, jobs, workers)

    def safe_trace_one(self, text: str, key: str = "", continuation: str | None = None) -> TraceResult:
        """`trace_one` that records a failure in `error` instead of raising (one bad generation never loses a run).
        What tracing opens on first use (the shards, the byte table) is opened outside that: a broken
        index raises, as it would have when the tracer was made."""
        if not self._warm and has_text(text):
            self.warm()
        try:
            return self.trace_one(text, key, continuation)
        except IndexFormatError:  # a damaged index fails every generation alike: stop, naming the file
            raise
        except Exception as exc:  # deliberately broad: the failure is kept and reported, not hidden
            g = text
            return TraceResult(key=key, text=g, n_tokens=0, degenerate=is_degenerate(g), mode=self.config.mode,
                               extracted=None if continuation is None else continuation_reproduced(g, continuation),
                               error=f"{type(exc).__name__}: {exc}")


class _Context:
    """The per-generation state of steps 3-5: the generation, its window length and its RNG."""

    def __init__(self, tracer: Tracer, g: str, ids: list[int]):
        self.tracer, self.g, self.ids = tracer, g, ids
        self.cfg = tracer.config
        self.max_disp_len = self.cfg.window_factor * len(ids)
        self.rng = random.Random(f"{self.cfg.seed}:{g}")
        self.norm_g = normalize_text(g) if self.cfg.mode == TraceMode.MIXED else ""
        # normalize_text only changes white space once NFKC is applied, so a normalized match needs
        # each word of NFKC(g) inside NFKC(window) and g's non-space characters in the window's:
        # exact pre-checks, the first (a few words, spread over g) the cheapest
        words = _nfkc(g).split()
        self.probes = tuple(dict.fromkeys(words[i] for i in (0, len(words) // 2, -1))) if words else ()
        self.core_g = "".join(words)
        self._classes: dict[str, str] = {}  #: match class by window text (a window is classified up to three times)
        #: `fetch`'s windows by (picks, needle tokens): a loop's spans repeat one text, so the same
        #: occurrences of the same tokens are fetched again and again (about half of the fetches)
        self._fetched: dict[tuple, list[_Retrieved]] = {}

    def fetch(self, picks: list[tuple[int, int]], needle: tuple[int, int]) -> list[_Retrieved]:
        """Windows of the picked occurrences of ids[needle], skipping a (shard, document) seen
        before in this retrieval; decoded in one batch. The windows depend on the picks and the
        needle's tokens alone, so a repeated request is answered from the first (a new list of the
        same, never changed, windows)."""
        key = (tuple(picks), tuple(self.ids[needle[0]:needle[1]]))
        found = self._fetched.get(key)
        if found is None:
            found = self._fetched[key] = self._fetch(picks, needle)
        return list(found)

    def _fetch(self, picks: list[tuple[int, int]], needle: tuple[int, int]) -> list[_Retrieved]:
        """`fetch` itself."""
        wins, seen = [], set()
        fetched = self.tracer.search.windows(picks, self.max_disp_len)
        self.tracer.search.check_holds(fetched, self.ids[needle[0]:needle[1]])
        for win in fetched:
            if (win.shard, win.doc_ix) not in seen:
                seen.add((win.shard, win.doc_ix))
                wins.append(win)
        tracer = self.tracer
        needle_text = tracer._decode(self.ids[needle[0]:needle[1]])
        out = []
        if tracer._byte_level:
            # a byte-level decoder maps tokens to bytes and bytes to text, so the part before the
            # occurrence and the rest decode separately to the window's text, unless a character
            # straddles the cut (then a replacement character shows it): decode that window whole
            pieces = tracer._decode_batch([part for w in wins for part in
                                           (w.token_ids[:w.needle_offset], w.token_ids[w.needle_offset:])])
            for win, head, rest in zip(wins, pieces[0::2], pieces[1::2]):
                if head.endswith("\ufffd") or rest.startswith("\ufffd"):
                    text = tracer._decode(win.token_ids)
                    out.append(self._located(win, text, text.find(needle_text), needle_text))
                else:
                    out.append(self._located(win, head + rest, len(head), needle_text))
            return out
        texts = tracer._decode_batch([w.token_ids for w in wins])
        heads = tracer._decode_batch([w.token_ids[:w.needle_offset] for w in wins])
        for win, text, head in zip(wins, texts, heads):
            lo = len(head) if text.startswith(head) else 0
            if not text.startswith(needle_text, lo):  # e.g. SentencePiece strips a leading space
                lo = text.find(needle_text, max(0, lo - 1))
            out.append(self._located(win, text, lo, needle_text))
        return out

    @staticmethod
    def _located(win: DocWindow, text: str, lo: int, needle_text: str) -> _Retrieved:
        lo = max(lo, 0)
        return _Retrieved(win, text, (lo, min(len(text), lo + len(needle_text))))

    def retrieve(self, occ: Occurrences, needle: tuple[int, int], rng: random.Random | None) -> list[_Retrieved]:
        return self.fetch(select_occurrences(occ, self.cfg.docs_per_span, rng), needle)

    def classify(self, text: str) -> str:
        found = self._classes.get(text)
        if found is None:
            found = self._classes[text] = self._classify(text)
        return found

    def _classify(self, text: str) -> str:
        if self.g in text:
            return "full_raw"
        if self.norm_g:
            nfkc = _nfkc(text)
            if all(p in nfkc for p in self.probes) and self.core_g in _without_space(nfkc) \
                    and self.norm_g in normalize_text(text):
                return "full_normalized"
        return "partial"

    def final_spans(self, kept: list[tuple[int, int]], occs: list[Occurrences],
                    longest: dict[int, int]) -> list[FinalSpan]:
        """Steps 3-4: merge kept spans whose union occurs; documents for each final span, drawn
        from the generation's RNG in the published order (kept spans, then unions). `longest`:
        step 1's end of the longest match by start, so a union reaching past it is not searched."""
        tracer = self.tracer
        groups: list[list[int]] = []
        unions: list[tuple[int, int]] = []
        union_occ: list[Occurrences] = []  #: occurrences of each group's union (its span's own for one span)
        for i, (s, e) in enumerate(kept):
            if groups and s < unions[-1][1]:
                union = (min(unions[-1][0], s), max(unions[-1][1], e))
                # no match from a start is longer than step 1's: in mixed mode no union of two spans occurs
                occ = tracer.search.locate(self.ids, [union])[0] if union[1] <= longest.get(union[0], union[1]) \
                    else None
                if occ is not None and occ.count:
                    groups[-1].append(i)
                    unions[-1], union_occ[-1] = union, occ
                    continue
            groups.append([i])
            unions.append((s, e))
            union_occ.append(occs[i])
        draws = [select_occurrences(o, self.cfg.docs_per_span, self.rng) for o in occs]
        finals = []
        for group, union, occ in zip(groups, unions, union_occ):
            if len(group) == 1:
                picks = draws[group[0]]
            else:  # documents retrieved afresh for the union, from the same RNG
                picks = select_occurrences(occ, self.cfg.docs_per_span, self.rng)
            docs = self.fetch(picks, union)
            finals.append(FinalSpan(start=union[0], end=union[1], text=tracer._decode(self.ids[union[0]:union[1]]),
                                    count=occ.count, documents=docs))
        return finals

    def anchor_spans(self, step1: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Mixed mode, g not found as tokenized: up to `max_anchors` long step-1 spans (longest, then
        rarest, then earliest) through which full matches are looked for."""
        tracer, cfg = self.tracer, self.cfg
        bounds = list(dict.fromkeys((s, e) for s, e in step1 if e - s >= MIXED_MIN_TOKENS))
        bounds.sort(key=lambda se: -(se[1] - se[0]))
        if len(bounds) > cfg.max_anchors:  # rarity only matters among the lengths that reach the cut
            cut = bounds[cfg.max_anchors - 1][1] - bounds[cfg.max_anchors - 1][0]
            bounds = [se for se in bounds if se[1] - se[0] >= cut]
        bounds.sort(key=lambda se: (-(se[1] - se[0]), tracer._rarity(self.ids[se[0]:se[1]]), se[0]))
        return bounds[: cfg.max_anchors]

    def anchor_documents(self, anchors: list[tuple[int, int]], occs: list[Occurrences]) -> list[_Retrieved]:
        """Full matches through the anchor spans (`anchor_spans`, with their occurrences): evenly
        spaced windows of each."""
        cfg = self.cfg
        if not anchors:
            return []
        per_anchor = max(1, math.ceil(cfg.docs_per_span / len(anchors)))
        found, seen = [], set()
        for anchor, occ in zip(anchors, occs):
            if not occ.count:
                continue
            for doc in self.fetch(select_occurrences(occ, per_anchor, None), anchor):
                if self.classify(doc.text) == "partial":
                    continue
                ident = (str(source_id(parse_metadata(doc.win.metadata, unwrap=True), doc.win.doc_ix)).strip(), doc.text)
                if ident in seen:
                    continue
                seen.add(ident)
                found.append(doc)
                if len(found) >= cfg.docs_per_span:
                    return found
        return found

    def attach_full_span(self, finals: list[FinalSpan], count: int, full_docs: list[_Retrieved]) -> list[FinalSpan]:
        """Mixed mode: (0, L) first, with the full-span documents (then those of an existing (0, L)
        span), de-duplicated by (source id, match class, window text)."""
        if not full_docs:
            return finals
        n = len(self.ids)
        existing = next((i for i, s in enumerate(finals) if (s.start, s.end) == (0, n)), None)
        docs = full_docs + (finals[existing].documents if existing is not None else [])
        unique, seen = [], set()
        for doc in docs:
            ident = (str(source_id(parse_metadata(doc.win.metadata, unwrap=True), doc.win.doc_ix)).strip(),
                     self.classify(doc.text), doc.text)
            if ident not in seen:
                seen.add(ident)
                unique.append(doc)
        rest = [s for i, s in enumerate(finals) if i != existing]
        return [FinalSpan(start=0, end=n, text=self.g, count=count, documents=unique)] + rest

    def score(self, finals: list[FinalSpan]) -> None:
        """Classify every retrieved window of every final span and score its NV-recall (in place)."""
        entries = [(s, j, doc) for s in finals for j, doc in enumerate(s.documents)]
        texts = list(dict.fromkeys(doc.text for _, _, doc in entries))
        scores = dict(zip(texts, nv_scores(self.g, texts)))
        chars = self.cfg.snippet_chars
        for s, j, doc in entries:
            nv = scores[doc.text]
            meta = parse_metadata(doc.win.metadata, unwrap=True)
            lo, hi = doc.needle
            a = max(0, lo - chars)
            s.documents[j] = TracedDocument(
                shard=doc.win.shard, doc_ix=doc.win.doc_ix, source_id=source_id(meta, doc.win.doc_ix), metadata=meta,
                match=self.classify(doc.text), nv_recall=nv.recall, nv_matched_words=nv.matched_words,
                nv_reference_words=nv.reference_words, nv_candidate_words=nv.candidate_words,
                snippet=doc.text[a:hi + chars], snippet_span=(lo - a, hi - a))


def _without_space(text: str) -> str:
    """The text without any white space (what `"".join(text.split())` gives): spaces and newlines
    removed by `str.replace`, the split only when another white-space character (never printable)
    or a non-printable one is left."""
    core = text.replace(" ", "").replace("\n", "")
    return core if core.isprintable() else "".join(core.split())


def _nfkc(text: str) -> str:
    """The NFKC form of a text (the text itself when it is in that form already)."""
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


# -- parallel execution ---------------------------------------------------------------------------

_WORKER: Tracer | None = None


def _init_worker(parent_pid: int) -> None:
    from propme_metrics.core.lifetime import die_with_parent

    die_with_parent(parent_pid)  # a SIGKILLed parent leaves no worker behind
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def _work(job: tuple[str, str, str | None]) -> TraceResult:
    assert _WORKER is not None
    return _WORKER.safe_trace_one(*job)


#: a batch given workers is traced in this process for up to this many seconds first; workers are
#: forked for the rest only when it would take longer than WORKERS_PAY_AFTER seconds more at the rate
#: measured: forking, sending results back and the parent's idle wait cost more than a short rest saves
PROBE_SECONDS = 0.05
WORKERS_PAY_AFTER = 0.4
#: a generation's weight in the estimate of the rest: its characters and a few more for the fixed part
_FIXED_CHARS = 8


def _weight(job: tuple[str, str, str | None]) -> int:
    return len(job[0]) + _FIXED_CHARS


class TraceRunner:
    """Iterates the results of `jobs` in input order, in this process or in forked workers.

    With workers, the first jobs are traced here for up to PROBE_SECONDS; the rest goes to workers
    only when it pays (WORKERS_PAY_AFTER), so a small job is traced in this process alone. Workers
    inherit the opened, warmed tracer (memory maps are shared, nothing is reopened); each result
    depends on its own input only, so any number of workers, and any split, gives the same results.
    A worker that dies (killed, out of memory) ends the iteration with TraceWorkerError instead of
    a hang."""

    def __init__(self, tracer: Tracer, jobs: list[tuple[str, str, str | None]], workers: int):
        self.tracer, self.jobs, self.workers, self.pool, self.results = tracer, jobs, workers, None, None
        self.probed: list[TraceResult] = []

    def __enter__(self) -> TraceRunner:
        if self.workers > 1 and len(self.jobs) > 1:
            self._probe()
            rest = self.jobs[len(self.probed):]
            if len(rest) > 1 and self._pays(rest):
                self._fork(rest)
        return self

    def _probe(self) -> None:
        """Trace jobs here, in order, until PROBE_SECONDS have passed or none is left (the tracer is
        warmed first when some job has text: its one-off cost is no rate of the rest)."""
        if any(has_text(job[0]) for job in self.jobs):
            self.tracer.warm()
        started = time.perf_counter()
        for job in self.jobs:
            if time.perf_counter() - started >= PROBE_SECONDS:
                break
            self.probed.append(self.tracer.safe_trace_one(*job))
        self._probe_seconds = time.perf_counter() - started

    def _pays(self, rest: list[tuple[str, str, str | None]]) -> bool:
        """Whether the rest, at the probe's rate per weight, takes longer than WORKERS_PAY_AFTER
        (nothing probed: it is not known, so it is taken to pay)."""
        done = sum(map(_weight, self.jobs[:len(self.probed)]))
        return not done or self._probe_seconds * sum(map(_weight, rest)) / done > WORKERS_PAY_AFTER

    def _fork(self, rest: list[tuple[str, str, str | None]]) -> None:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        global _WORKER
        self.tracer.warm()  # what the workers would each build lazily is built once, here, and inherited
        _WORKER = self.tracer
        workers = min(self.workers, len(rest))
        self.pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"),
                                        initializer=_init_worker, initargs=(os.getpid(),))
        # objects alive now are never collected by the workers: their garbage collector leaves
        # them alone instead of walking them (which copies every inherited page it touches)
        gc.freeze()
        try:  # the first submission forks every worker, before the executor starts its thread
            self.results = self.pool.map(_work, rest, chunksize=max(1, min(8, len(rest) // (8 * workers))))
        finally:
            gc.unfreeze()

    def __iter__(self) -> Iterator[TraceResult]:
        yield from self.probed
        rest = self.jobs[len(self.probed):]
        if self.pool is None:
            yield from (self.tracer.safe_trace_one(*job) for job in rest)
            return
        from concurrent.futures.process import BrokenProcessPool

        try:
            yield from self.results
        except BrokenProcessPool:
            raise TraceWorkerError("a tracing worker process stopped without a result (killed, or out of memory?)",
                                   "run again (fewer --workers need less memory); finished results are kept") from None

    def __exit__(self, *exc) -> None:
        global _WORKER
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            _WORKER = None
