"""SimpleTrace: trace a generation back to training documents (SPEC section 4).

1. maximal spans: for every start, the longest prefix of the suffix that occurs in the corpus,
   cut after the first sentence delimiter and backed off to whole words ('text' mode);
2. rarity filter: keep the K = ceil(L/20) spans with the lowest unigram log-probability;
3. documents: up to 10 documents per kept span (seeded sample), classified full_raw /
   full_normalized / partial, each scored with NV-recall on its context window;
4. merging: overlapping kept spans become segments.

Step 1 uses the engine's `creativity` call (longest match at every start, C++ threads) and
applies the delimiter and whole-word rules here. The engine's `attribute` would do both, but it
converts every occurrence of every span into a pointer, which is slow for frequent spans; we
need only counts and a sample of ten. The engine never compares a query that sorts before every
suffix of a shard with that shard's first suffix, so that neighbour is checked here.
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
from typing import Any, Iterable, Sequence

import numpy as np

from .index import Index, open_index
from .manifest import shard_file
from .nvrecall import nv_recall_many

MATCH_CLASSES = ("full_raw", "full_normalized", "partial")


@dataclass(frozen=True)
class TraceConfig:
    """Tracing parameters; the defaults are those of the published study (SPEC sections 4-5)."""

    mode: str = "text"                 #: 'text' (sentence and word rules) or 'mixed' (whole-generation lookup first)
    span_divisor: int = 20             #: keep K = ceil(L / span_divisor) rarest spans (at least 1)
    docs_per_span: int = 10            #: documents retrieved per kept span (seeded sample beyond that)
    context_factor: float = 2.5        #: context window of context_factor * L tokens on each side
    min_span_tokens: int = 1           #: shorter maximal spans are ignored
    seed: int = 0                      #: fixed seed; each generation's sample seed also uses its key
    snippet_chars: int = 300           #: characters of document context kept on each side of a span

    def __post_init__(self) -> None:
        if self.mode not in ("text", "mixed"):
            raise ValueError(f"mode must be 'text' or 'mixed', not {self.mode!r}")
        if self.span_divisor < 1 or self.docs_per_span < 1 or self.context_factor < 0 or self.min_span_tokens < 1:
            raise ValueError("span_divisor, docs_per_span and min_span_tokens must be >= 1, context_factor >= 0")

    def k(self, n_tokens: int) -> int:
        return max(1, math.ceil(n_tokens / self.span_divisor))


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
    """SimpleTrace over one index, opened once (memory-mapped) and reused for many generations."""

    def __init__(self, index: Index | str | Path, config: TraceConfig | None = None):
        self.index = index if isinstance(index, Index) else open_index(index)
        self.config = config or TraceConfig()
        manifest = self.index.manifest
        self._delims = frozenset(manifest.delimiter_ids)
        self._log_total = math.log(self.index.total_positions)

    @cached_property
    def _logprob(self) -> dict[int, float]:
        return {t: math.log(c) - self._log_total for t, c in self.index.unigram_counts.items() if c > 0}

    @cached_property
    def _first_suffixes(self) -> list[np.ndarray]:
        """The suffix at rank 0 of each shard (engine order), up to 4096 tokens: the neighbour the engine skips."""
        out = []
        width = self.index.token_width
        dtype = np.uint16 if width == 2 else np.uint32
        for sid in self.index.engine_shards:
            info = next(s for s in self.index.manifest.shards if s.id == sid)
            ptr_size = max(1, math.ceil(math.log2(info.ds_bytes) / 8))
            with open(shard_file(self.index.path, "table", sid), "rb") as fh:
                ptr = int.from_bytes(fh.read(ptr_size), "little")
            with open(shard_file(self.index.path, "tokenized", sid), "rb") as fh:
                fh.seek(ptr)
                out.append(np.frombuffer(fh.read(4096 * width), dtype=dtype))
        return out

    # -- step 1 ---------------------------------------------------------------------------------

    def maximal_spans(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """Step 1: maximal (start, end) spans under the mode's sentence and whole-word rules."""
        n = len(ids)
        if n == 0:
            return []
        reach = self.index.engine.creativity(input_ids=list(ids))
        if "error" in reach:
            raise ValueError(reach["error"])
        ends = np.asarray(reach["rs"], dtype=np.int64)
        arr = np.asarray(ids, dtype=np.int64)
        for first in self._first_suffixes:
            ends = np.maximum(ends, [start + _common_prefix(arr[start:], first) for start in range(n)])
        bow = self.index.word_start_ids
        spans: list[tuple[int, int]] = []
        last_end = 0
        for start in range(n):
            if start > 0 and ids[start] not in bow:  # the generation's first token starts a word
                continue
            end = int(ends[start])
            for pos in range(start, end - 1):
                if ids[pos] in self._delims:
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
        engine = self.index.engine
        found: list[tuple[int, int, dict]] = []
        whole = None
        if cfg.mode == "mixed":
            whole_find = engine.find(input_ids=list(ids))
            if whole_find["cnt"] > 0:
                whole = (0, len(ids), whole_find)
        for start, end in self.maximal_spans(ids):
            if whole is not None:
                break  # (0, L) contains every other span
            found.append((start, end, engine.find(input_ids=list(ids[start:end]))))
        if whole is not None:
            found = [whole]
        spans = [Span(start=s, end=e, count=f["cnt"], rarity=self._rarity(ids[s:e]), text=self.index.decode(ids[s:e]))
                 for s, e, f in found]
        result.spans = spans
        if not spans:
            return result
        order = sorted(range(len(spans)), key=lambda i: (spans[i].rarity, i))
        kept = sorted(order[: cfg.k(len(ids))])
        if whole is not None:
            kept = [0]
        for i in kept:
            spans[i].kept = True
        result.documents = self._documents(result, ids, [(i, found[i][2]) for i in kept], key,
                                           whole_is_full=whole is not None)
        result.segments = _merge_segments(spans, kept, result.documents, self.index.decode, ids)
        return result

    def trace(self, texts: Sequence[str], keys: Sequence[str] | None = None,
              continuations: Sequence[str | None] | None = None, workers: int = 1,
              progress: bool = False) -> list[TraceResult]:
        """Trace a batch; results are in input order and identical for any number of workers."""
        keys = list(keys) if keys is not None else [str(i) for i in range(len(texts))]
        conts = list(continuations) if continuations is not None else [None] * len(texts)
        jobs = list(zip(texts, keys, conts))
        from .progress import progress_bar, rate

        results: list[TraceResult] = []
        started = time.time()
        with progress_bar(progress) as bar:
            task = bar.add_task("tracing", total=len(jobs), rate="")
            for res in _run_jobs(self, jobs, workers):
                results.append(res)
                bar.update(task, advance=1, rate=rate(len(results), time.time() - started, "gen"))
        return results

    def safe_trace_one(self, text: str, key: str = "", continuation: str | None = None) -> TraceResult:
        """`trace_one` that records a failure in `error` instead of raising (one bad generation never loses a run)."""
        try:
            return self.trace_one(text, key, continuation)
        except Exception as exc:  # deliberately broad: the failure is kept and reported, not hidden
            return TraceResult(key=key, text=text, n_tokens=0, degenerate=False,
                               error=f"{type(exc).__name__}: {exc}")

    # -- steps 2-3 helpers ----------------------------------------------------------------------

    def _rarity(self, ids: Sequence[int]) -> float:
        return float(sum(self._logprob.get(t, -self._log_total) for t in ids))

    def _documents(self, result: TraceResult, ids: list[int], kept: list[tuple[int, dict]], key: str,
                   whole_is_full: bool) -> list[TracedDocument]:
        cfg = self.config
        ctx = int(round(cfg.context_factor * len(ids)))
        requests, owners = [], []
        for span_i, find in kept:
            span = result.spans[span_i]
            ranks = _sample_ranks(find["segment_by_shard"], cfg.docs_per_span,
                                  _seed(cfg.seed, key, span.start, span.end))
            for s, rank in ranks:
                requests.append((s, rank, span.length, ctx))
                owners.append(span_i)
        if not requests:
            return []
        raw = self.index.engine.get_docs_by_ranks_2(requests=requests)
        if isinstance(raw, dict):
            raise ValueError(raw["error"])
        seen: set[tuple[int, int]] = set()
        picked = []
        for res, span_i, (s, *_r) in zip(raw, owners, requests):
            shard = self.index.engine_shards[s]
            if (shard, res["doc_ix"]) in seen:
                continue
            seen.add((shard, res["doc_ix"]))
            picked.append((res, span_i, shard))
        stripped = result.text.strip()
        norm_gen = normalize_text(stripped)
        windows, docs = [], []
        for res, span_i, shard in picked:
            toks = list(res["token_ids"])
            off = res["needle_offset"]
            length = result.spans[span_i].length
            before = self.index.decode(toks[:off])
            needle = self.index.decode(toks[off:off + length])
            after = self.index.decode(toks[off + length:])
            window = before + needle + after
            windows.append(window)
            if whole_is_full or stripped in window:
                match = "full_raw"
            elif norm_gen and norm_gen in normalize_text(window):
                match = "full_normalized"
            else:
                match = "partial"
            pre = before[-cfg.snippet_chars:]
            meta = res["metadata"].strip()
            metadata = json.loads(meta) if meta else {}
            docs.append(TracedDocument(
                shard=shard, doc_ix=res["doc_ix"], source_id=metadata.get("id"), metadata=metadata, span=span_i,
                match=match, nv_recall=0.0, snippet=pre + needle + after[:cfg.snippet_chars],
                snippet_span=(len(pre), len(pre) + len(needle))))
        for doc, score in zip(docs, nv_recall_many(result.text, windows)):
            doc.nv_recall = round(float(score), 6)
        return docs


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    m = min(len(a), len(b))
    if m == 0:
        return 0
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if len(diff) else m


def _seed(seed: int, key: str, start: int, end: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}|{key}|{start}|{end}".encode()).digest()[:8], "little")


def _sample_ranks(segments: list[tuple[int, int]], k: int, seed: int) -> list[tuple[int, int]]:
    """Up to k (engine shard, rank) occurrences: all if few, else a seeded uniform sample."""
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


def _init_worker(index_path: str, config: TraceConfig) -> None:
    global _WORKER
    import os

    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER = Tracer(index_path, config)


def _work(job: tuple[str, str, str | None]) -> TraceResult:
    assert _WORKER is not None
    return _WORKER.safe_trace_one(*job)


def _run_jobs(tracer: Tracer, jobs: list[tuple[str, str, str | None]], workers: int) -> Iterable[TraceResult]:
    if workers <= 1 or len(jobs) < 2:
        for job in jobs:
            yield tracer.safe_trace_one(*job)
        return
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    with ctx.Pool(workers, initializer=_init_worker, initargs=(str(tracer.index.path), tracer.config)) as pool:
        yield from pool.imap(_work, jobs, chunksize=max(1, min(16, len(jobs) // (4 * workers))))
