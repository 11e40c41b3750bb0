"""SimpleTrace: trace a generation back to training documents (SPEC section 4).

1. maximal spans: for every start, the longest prefix of the suffix that occurs in the corpus,
   cut after the first sentence delimiter and backed off to whole words;
2. rarity filter: keep the K = ceil(L/20) spans with the lowest unigram log-probability;
3. documents: up to 10 documents per kept span (seeded sample), classified full_raw /
   full_normalized / partial, each scored with NV-recall on its context window;
4. merging: overlapping kept spans become segments.

The suffix arrays are searched with numpy over the memory-mapped shard files (`search.py`) instead
of through infini-gram's engine: the engine starts one OS thread per start position and per shard
(`creativity`), per `find` and per document fetched, which costs far more than the search itself,
and it never compares a query that sorts before every suffix of a shard with that shard's first
suffix (SPEC section 3). Here all start positions of a generation are binary-searched together,
one vectorized step at a time, comparing only the tokens not already known to match (the lower
of the two bounds' common-prefix lengths), and both neighbours of every insertion point count,
rank 0 included. The sort order is the engine's: byte order of little-endian token ids. Counts,
suffix-array ranges (`segment_by_shard` in engine shard order) and document windows (`doc_ix`,
`needle_offset`, metadata) are exactly what the engine's `find` and `get_doc_by_rank_2` return.

Nothing is loaded into memory: the files are memory-mapped and only the pages a search touches
are read.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import time
import unicodedata
import zlib
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import ConfigError, IndexFormatError
from .index import Index, open_index
from .nvrecall import nv_recall_many
from .search import DocWindow, Occurrences, ShardSearcher
from .tokenizer import tokenizer_hash

@dataclass(frozen=True)
class TraceConfig:
    """Tracing parameters; the defaults are those of the published study (SPEC sections 4-5).

    Every field can be set from the command line (`propme trace`), from lm-eval task metadata
    (`trace_<field>`) or in Python; `asdict(config)` is recorded with every result summary.
    """

    mode: str = "text"                 #: 'text' (sentence and word rules) or 'mixed' (whole-generation lookup first, for code/markup)
    span_divisor: int = 20             #: keep K = ceil(L / span_divisor) rarest spans (at least 1)
    docs_per_span: int = 10            #: documents retrieved per kept span (seeded sample beyond that)
    context_factor: float = 2.5        #: context window of round(context_factor * L) tokens on each side of a span
    min_span_tokens: int = 1           #: shorter maximal spans are ignored
    seed: int = 0                      #: fixed seed; each span's sample seed also uses the generation's key and the span
    snippet_chars: int = 300           #: characters of document context kept on each side of a span in `snippet`
    max_tokens: int = 4096             #: longer generations are not traced: recorded as failed, with the reason

    def __post_init__(self) -> None:
        if self.mode not in ("text", "mixed"):
            raise ValueError(f"mode must be 'text' or 'mixed', not {self.mode!r}")
        if self.span_divisor < 1 or self.docs_per_span < 1 or self.context_factor < 0 or self.min_span_tokens < 1:
            raise ValueError("span_divisor, docs_per_span and min_span_tokens must be >= 1, context_factor >= 0")
        if self.snippet_chars < 0 or self.max_tokens < 1:
            raise ValueError("snippet_chars must be >= 0 and max_tokens >= 1")

    def k(self, n_tokens: int) -> int:
        """Spans kept by the rarity filter for a generation of `n_tokens` tokens."""
        return max(1, math.ceil(n_tokens / self.span_divisor))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Span:
    """A maximal verbatim span [start, end) of the generation's index tokens."""

    start: int
    end: int
    count: int
    rarity: float          #: sum of the tokens' unigram log-probabilities (lower = rarer)
    text: str = ""
    kept: bool = False

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass
class TracedDocument:
    """A retrieved document: where it is, what it is, and how closely the generation matches it."""

    shard: int
    doc_ix: int
    source_id: Any
    metadata: dict[str, Any]
    span: int                      #: index into the result's spans of the span that retrieved it
    match: str                     #: 'full_raw', 'full_normalized' or 'partial'
    nv_recall: float
    snippet: str                   #: the document around the span
    snippet_span: tuple[int, int]  #: character offsets of the span inside the snippet


@dataclass
class Segment:
    """Overlapping kept spans merged; `documents` index into the result's documents."""

    start: int
    end: int
    text: str
    spans: list[int]
    documents: list[int]

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass
class TraceResult:
    """Everything traced for one generation, JSON-able through `to_dict`."""

    key: str
    text: str
    n_tokens: int
    degenerate: bool
    spans: list[Span] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    documents: list[TracedDocument] = field(default_factory=list)
    extracted: bool | None = None   #: prefix prompts: the true continuation was reproduced
    error: str | None = None

    @property
    def longest_span(self) -> int:
        """Longest maximal span (before the rarity filter), in index tokens."""
        return max((s.length for s in self.spans), default=0)

    @property
    def longest_segment(self) -> int:
        """Longest merged segment of kept spans: the per-generation value behind ALS."""
        return max((s.length for s in self.segments), default=0)

    @property
    def full_match(self) -> bool:
        return any(d.match == "full_raw" for d in self.documents)

    @property
    def full_match_normalized(self) -> bool:
        return any(d.match in ("full_raw", "full_normalized") for d in self.documents)

    @property
    def nv_recalls(self) -> list[float]:
        return [d.nv_recall for d in self.documents]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(longest_span=self.longest_span, longest_segment=self.longest_segment,
                    full_match=self.full_match, full_match_normalized=self.full_match_normalized,
                    nv_recall_max=max(self.nv_recalls, default=0.0))
        order = ["key", "text", "n_tokens", "longest_span", "longest_segment", "full_match",
                 "full_match_normalized", "nv_recall_max", "degenerate", "extracted", "error",
                 "spans", "segments", "documents"]
        return {k: data[k] for k in order}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TraceResult":
        spans = [Span(**{k: s[k] for k in ("start", "end", "count", "rarity", "text", "kept")}) for s in data["spans"]]
        segments = [Segment(**s) for s in data["segments"]]
        documents = [TracedDocument(**{**d, "snippet_span": tuple(d["snippet_span"])}) for d in data["documents"]]
        return cls(key=data["key"], text=data["text"], n_tokens=data["n_tokens"], degenerate=data["degenerate"],
                   spans=spans, segments=segments, documents=documents, extracted=data.get("extracted"),
                   error=data.get("error"))


def normalize_text(text: str) -> str:
    """Normalization behind `full_normalized` (SPEC section 4, step 3)."""
    text = unicodedata.normalize("NFKC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def is_degenerate(text: str) -> bool:
    """Repetitive junk: compresses below 10% with zlib and is less than half letters."""
    if not text:
        return False
    raw = text.encode("utf-8")
    letters = sum(c.isalpha() for c in text) / len(text)
    return len(zlib.compress(raw)) / len(raw) < 0.10 and letters < 0.5


def continuation_reproduced(generation: str, continuation: str) -> bool:
    """Discoverable extraction: the generation starts with the true continuation (white space folded)."""
    fold = lambda s: " ".join(s.split())  # noqa: E731
    cont = fold(continuation)
    return bool(cont) and fold(generation).startswith(cont)


class Tracer:
    """SimpleTrace over one index, opened once (memory-mapped) and reused for many generations.

    Raises IndexFormatError when the index is missing or broken, or when the tokenizer copy inside
    it no longer hashes to the manifest's sha256 (spans would be counted in the wrong tokens).
    """

    def __init__(self, index: Index | str | Path, config: TraceConfig | None = None):
        self.index = index if isinstance(index, Index) else open_index(index)
        self.config = config or TraceConfig()
        manifest = self.index.manifest
        try:
            found = tokenizer_hash(self.index.tokenizer)
        except ConfigError as exc:  # the copy inside the index cannot be loaded: the index is broken
            raise IndexFormatError(f"the tokenizer stored in {self.index.path} cannot be loaded: {exc.message}",
                                   "rebuild the index with `propme index build`") from None
        if found != manifest.tokenizer.sha256:
            raise IndexFormatError(
                f"the tokenizer stored in {self.index.path} (sha256 {found[:12]}) is not the one the index was "
                f"built with ({manifest.tokenizer.name}, sha256 {manifest.tokenizer.sha256[:12]})",
                "the tokenizer folder inside the index was altered; rebuild the index or restore that folder")
        self._delims = frozenset(manifest.delimiter_ids)
        self._bow = self.index.word_start_ids
        self._separator = self.index.separator
        self._log_total = math.log(self.index.total_positions)
        backend = self.index.tokenizer.backend_tokenizer
        self._decode_fn = backend.decode
        self._decode_batch = backend.decode_batch
        # A plain byte-level decoder turns tokens into bytes and the bytes into text, so decoding the
        # text before a span and the rest separately gives the window exactly (spans begin on
        # character boundaries); other decoders (e.g. SentencePiece's, which strips a leading space)
        # need the whole window decoded once more.
        self._split_decode = type(backend.decoder).__name__ == "ByteLevel"
        shards, base = [], 0
        docs = {s.id: s.documents for s in manifest.shards}
        for sid in self.index.engine_shards:  # engine order: doc_ix and segment_by_shard follow it
            shards.append(ShardSearcher(self.index.path, sid, self.index.token_width, base))
            base += docs[sid]
        self._shards = shards

    @cached_property
    def _logprob(self) -> np.ndarray:
        """Unigram log-probability by token id (separator included in the total); unseen ids count once."""
        counts = {t: c for t, c in self.index.unigram_counts.items() if t != self._separator}  # never in a span
        size = max(max(counts, default=0), self.index.manifest.tokenizer.max_id) + 1
        table = np.full(size, -self._log_total)
        for t, c in counts.items():
            if c > 0:
                table[t] = math.log(c) - self._log_total
        return table

    def _decode(self, ids) -> str:
        return self._decode_fn(ids.tolist() if isinstance(ids, np.ndarray) else list(ids), skip_special_tokens=False)

    def _decode_windows(self, picked: list[tuple[DocWindow, int]], spans: list[Span]) -> list[tuple[str, int]]:
        """Each window's exact text and the character offset of its span, decoded in one batch."""
        if self._split_decode:
            pieces = []
            for win, _ in picked:
                pieces += [win.token_ids[:win.needle_offset].tolist(), win.token_ids[win.needle_offset:].tolist()]
            texts = self._decode_batch(pieces, skip_special_tokens=False)
            return [(before + rest, len(before)) for before, rest in zip(texts[0::2], texts[1::2])]
        out = []
        wholes = self._decode_batch([win.token_ids.tolist() for win, _ in picked], skip_special_tokens=False)
        for (win, span_i), window in zip(picked, wholes):
            # where the span sits: its text's only occurrence in the window, else the first after the
            # text before it (its own text occurs there: no character straddles a span's ends)
            text = spans[span_i].text
            lo = window.find(text) if text else -1
            if lo < 0 or window.find(text, lo + 1) >= 0:
                before = self._decode(win.token_ids[:win.needle_offset])
                lo = window.find(text, len(before)) if text else -1
                if lo < 0:
                    lo = len(before)
            out.append((window, lo))
        return out

    def _windows(self, s: int, ranks: list[int], needle_len: int, ctx: int) -> list[DocWindow]:
        """Windows around occurrences `ranks` of engine shard `s` (engine's `get_docs_by_ranks_2`)."""
        return self._shards[s].windows(ranks, [needle_len] * len(ranks), ctx)

    # -- search primitives ----------------------------------------------------------------------

    def _query(self, ids: Sequence[int]) -> np.ndarray:
        arr = np.asarray(list(ids), dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self._separator):
            raise ValueError(f"token ids must lie in [0, {self._separator}) for this index")
        return arr

    def longest_matches(self, ids: Sequence[int], starts: Sequence[int] | None = None) -> np.ndarray:
        """For each start (all by default): the longest prefix of ids[start:] occurring in the corpus,
        as an end position. Both suffix-array neighbours of the insertion point, all shards."""
        arr = self._query(ids)
        starts = np.arange(len(arr), dtype=np.int64) if starts is None else np.asarray(starts, dtype=np.int64)
        best = np.zeros(len(starts), dtype=np.int64)
        if not len(starts):
            return starts + best
        qend = np.full(len(starts), len(arr), dtype=np.int64)
        upper = np.zeros(len(starts), dtype=bool)
        for shard in self._shards:
            _lo, _hi, llo, lhi = shard.search(shard.keys(arr), starts, qend, upper)
            best = np.maximum(best, np.maximum(llo, lhi))
        return starts + best

    def locate(self, ids: Sequence[int], spans: Sequence[tuple[int, int]]) -> list[Occurrences]:
        """Count and suffix-array ranges of each span ids[start:end] (what the engine's `find` returns)."""
        arr = self._query(ids)
        if not spans:
            return []
        m = len(spans)
        qstart = np.asarray([s for s, _ in spans] * 2, dtype=np.int64)
        qend = np.asarray([e for _, e in spans] * 2, dtype=np.int64)
        if (qend <= qstart).any() or qstart.min() < 0 or qend.max() > len(arr):
            raise ValueError("spans must be non-empty ranges inside the ids")
        upper = np.repeat([False, True], m)
        counts = np.zeros(m, dtype=np.int64)
        segments: list[list[tuple[int, int]]] = [[] for _ in range(m)]
        for shard in self._shards:
            _lo, hi, _llo, _lhi = shard.search(shard.keys(arr), qstart, qend, upper)
            lo_b, hi_b = hi[:m], hi[m:]
            counts += hi_b - lo_b
            for i in range(m):
                segments[i].append((int(lo_b[i]), int(hi_b[i])))
        return [Occurrences(int(c), seg) for c, seg in zip(counts, segments)]

    def count(self, ids: Sequence[int]) -> int:
        """Occurrences of a token sequence in the corpus (0 for an empty one)."""
        return self.locate(ids, [(0, len(ids))])[0].count if len(ids) else 0

    # -- step 1 ---------------------------------------------------------------------------------

    def maximal_spans(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """Step 1: maximal (start, end) spans under the sentence and whole-word rules.

        Starts are word starts (and position 0: the generation's first token starts a word); a span
        is the longest corpus match from its start, cut after the first sentence delimiter inside it
        (a delimiter as its last token cuts nothing), then shortened until the token after it starts
        a word (or it ends the generation); a span whose end does not pass the previous kept end is
        contained in that span and dropped, as is one shorter than `min_span_tokens`.
        """
        ids = [int(t) for t in ids]
        n = len(ids)
        if n == 0:
            return []
        bow, delims = self._bow, self._delims
        starts = [0] + [i for i in range(1, n) if ids[i] in bow]
        ends = self.longest_matches(ids, starts).tolist()
        spans: list[tuple[int, int]] = []
        last_end = 0
        for start, end in zip(starts, ends):
            if end <= last_end:  # cutting and backing off only shorten a span
                continue
            for pos in range(start, end - 1):
                if ids[pos] in delims:
                    end = pos + 1
                    break
            while end > start and end < n and ids[end] not in bow:
                end -= 1
            if end - start >= self.config.min_span_tokens and end > last_end:
                spans.append((start, end))
                last_end = end
        return spans

    # -- whole pipeline -------------------------------------------------------------------------

    def trace_one(self, text: str, key: str = "", continuation: str | None = None) -> TraceResult:
        """Trace one generation (already stripped of its prompt)."""
        cfg = self.config
        ids = self.index.encode(text) if text else []
        result = TraceResult(key=key, text=text, n_tokens=len(ids), degenerate=is_degenerate(text),
                             extracted=None if continuation is None else continuation_reproduced(text, continuation))
        if not ids:
            return result
        if len(ids) > cfg.max_tokens:
            # K = ceil(L/20) spans x 10 documents would make one generation cost minutes: say so instead
            raise ValueError(f"generation has {len(ids):,} index tokens, more than max_tokens={cfg.max_tokens:,}; "
                             "raise it (--max-tokens, metadata trace_max_tokens) to trace it")
        whole = None
        if cfg.mode == "mixed":
            occ = self.locate(ids, [(0, len(ids))])[0]
            if occ.count > 0:
                whole = occ
        if whole is not None:
            bounds, found = [(0, len(ids))], [whole]  # (0, L) contains every other span
        else:
            bounds = self.maximal_spans(ids)
            found = self.locate(ids, bounds)
        lp = self._logprob
        spans = [Span(start=s, end=e, count=f.count, rarity=math.fsum(lp[ids[s:e]].tolist()),
                      text=self._decode(ids[s:e])) for (s, e), f in zip(bounds, found)]
        result.spans = spans
        if not spans:
            return result
        order = sorted(range(len(spans)), key=lambda i: (spans[i].rarity, i))
        kept = sorted(order[: cfg.k(len(ids))])
        for i in kept:
            spans[i].kept = True
        result.documents = self._documents(result, ids, [(i, found[i]) for i in kept], key,
                                           whole_is_full=whole is not None)
        result.segments = _merge_segments(spans, kept, result.documents, self._decode, ids)
        return result

    def trace(self, texts: Sequence[str], keys: Sequence[str] | None = None,
              continuations: Sequence[str | None] | None = None, workers: int = 1,
              progress: bool = False) -> list[TraceResult]:
        """Trace a batch; results are in input order and identical for any number of workers.

        A generation whose tracing fails is returned with `error` set (see `safe_trace_one`).
        `progress` shows a bar with generations per second on stderr.
        """
        keys = list(keys) if keys is not None else [str(i) for i in range(len(texts))]
        conts = list(continuations) if continuations is not None else [None] * len(texts)
        if len(keys) != len(texts) or len(conts) != len(texts):
            raise ValueError("texts, keys and continuations must have the same length")
        jobs = list(zip(texts, keys, conts))
        from .progress import progress_bar, rate

        results: list[TraceResult] = []
        started = time.time()
        with _Runner(self, jobs, workers) as runner:  # forks (if at all) before the progress thread starts
            with progress_bar(progress) as bar:
                task = bar.add_task("tracing", total=len(jobs), rate="")
                for res in runner:
                    results.append(res)
                    bar.update(task, advance=1, rate=rate(len(results), time.time() - started, "gen"))
        return results

    def safe_trace_one(self, text: str, key: str = "", continuation: str | None = None) -> TraceResult:
        """`trace_one` that records a failure in `error` instead of raising (one bad generation never loses a run)."""
        try:
            return self.trace_one(text, key, continuation)
        except Exception as exc:  # deliberately broad: the failure is kept and reported, not hidden
            return TraceResult(key=key, text=text, n_tokens=0, degenerate=is_degenerate(text),
                               extracted=None if continuation is None else continuation_reproduced(text, continuation),
                               error=f"{type(exc).__name__}: {exc}")

    # -- step 3 ---------------------------------------------------------------------------------

    def _documents(self, result: TraceResult, ids: list[int], kept: list[tuple[int, Occurrences]], key: str,
                   whole_is_full: bool) -> list[TracedDocument]:
        cfg = self.config
        ctx = int(round(cfg.context_factor * len(ids)))
        picked: list[tuple[DocWindow, int]] = []
        seen: set[tuple[int, int]] = set()
        for span_i, occ in kept:
            span = result.spans[span_i]
            ranks = _sample_ranks(occ.segment_by_shard, cfg.docs_per_span, _seed(cfg.seed, key, span.start, span.end))
            by_shard: dict[int, list[int]] = {}
            for s, rank in ranks:
                by_shard.setdefault(s, []).append(rank)
            fetched = {s: iter(self._windows(s, rs, span.length, ctx)) for s, rs in by_shard.items()}
            for s, _rank in ranks:  # sample order (shard, rank), as sampled
                win = next(fetched[s])
                if (win.shard, win.doc_ix) in seen:
                    continue
                seen.add((win.shard, win.doc_ix))
                picked.append((win, span_i))
        if not picked:
            return []
        stripped = result.text.strip()
        norm_gen = normalize_text(stripped)
        # normalize_text only changes white space once NFKC is applied, so a normalized match needs
        # the generation's non-space characters in the window's: a cheap exact pre-check
        gen_core = "".join(unicodedata.normalize("NFKC", stripped).split())
        windows, docs = [], []
        for (win, span_i), (window, lo) in zip(picked, self._decode_windows(picked, result.spans)):
            span = result.spans[span_i]
            hi = lo + len(span.text)
            windows.append(window)
            if whole_is_full or stripped in window:
                match = "full_raw"
            elif norm_gen and gen_core in _nfkc_core(window) and norm_gen in normalize_text(window):
                match = "full_normalized"
            else:
                match = "partial"
            meta = win.metadata.strip()
            try:
                metadata = json.loads(meta) if meta else {}
            except ValueError:
                metadata = {"raw": meta}
            if not isinstance(metadata, dict):
                metadata = {"value": metadata}
            a = max(0, lo - cfg.snippet_chars)
            docs.append(TracedDocument(
                shard=win.shard, doc_ix=win.doc_ix, source_id=metadata.get("id"), metadata=metadata, span=span_i,
                match=match, nv_recall=0.0, snippet=window[a:hi + cfg.snippet_chars], snippet_span=(lo - a, hi - a)))
        for doc, score in zip(docs, nv_recall_many(result.text, windows)):
            doc.nv_recall = round(float(score), 6)
        return docs


def _nfkc_core(text: str) -> str:
    """NFKC text without any white space."""
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return "".join(text.split())


def _seed(seed: int, key: str, start: int, end: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}|{key}|{start}|{end}".encode()).digest()[:8], "little")


def _sample_ranks(segments: Sequence[tuple[int, int]], k: int, seed: int) -> list[tuple[int, int]]:
    """Up to k (engine shard, rank) occurrences: all if few, else a seeded uniform sample (in rank order)."""
    sizes = [hi - lo for lo, hi in segments]
    total = sum(sizes)
    if total <= k:
        return [(s, r) for s, (lo, hi) in enumerate(segments) for r in range(lo, hi)]
    picks = np.sort(np.random.default_rng(seed).choice(total, size=k, replace=False))
    out, bounds = [], np.cumsum([0] + sizes)
    for p in picks:
        s = int(np.searchsorted(bounds, p, side="right") - 1)
        out.append((s, int(segments[s][0] + p - bounds[s])))
    return out


def _merge_segments(spans: list[Span], kept: list[int], docs: list[TracedDocument], decode,
                    ids: list[int]) -> list[Segment]:
    """Step 4: kept spans that overlap (start < current end) merge; touching spans stay apart."""
    segments: list[Segment] = []
    for i in sorted(kept, key=lambda i: (spans[i].start, spans[i].end)):
        sp = spans[i]
        if segments and sp.start < segments[-1].end:
            seg = segments[-1]
            seg.end = max(seg.end, sp.end)
            seg.spans.append(i)
        else:
            segments.append(Segment(start=sp.start, end=sp.end, text="", spans=[i], documents=[]))
    for seg in segments:
        seg.text = decode(ids[seg.start:seg.end])
        seg.documents = [j for j, d in enumerate(docs) if d.span in seg.spans]
    return segments


# -- parallel execution ---------------------------------------------------------------------------

_WORKER: Tracer | None = None


def _init_worker() -> None:
    import os

    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def _work(job: tuple[str, str, str | None]) -> TraceResult:
    assert _WORKER is not None
    return _WORKER.safe_trace_one(*job)


class _Runner:
    """Iterates the results of `jobs` in input order, in this process or in forked workers.

    Workers inherit the opened tracer (memory maps are shared, nothing is reopened); each result
    depends on its own input only, so any number of workers gives the same results."""

    def __init__(self, tracer: Tracer, jobs: list[tuple[str, str, str | None]], workers: int):
        self.tracer, self.jobs, self.pool = tracer, jobs, None
        if workers > 1 and len(jobs) > 1:
            import multiprocessing as mp

            global _WORKER
            _WORKER = tracer
            self.pool = mp.get_context("fork").Pool(min(workers, len(jobs)), initializer=_init_worker)
            self.chunksize = max(1, min(8, len(jobs) // (8 * workers)))

    def __enter__(self) -> "_Runner":
        return self

    def __iter__(self):
        if self.pool is None:
            return (self.tracer.safe_trace_one(*job) for job in self.jobs)
        return self.pool.imap(_work, self.jobs, chunksize=self.chunksize)

    def __exit__(self, *exc) -> None:
        global _WORKER
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            _WORKER = None
