"""Which data leaks: one generation's leaks split by corpus source and by how often the text occurs.

Two questions follow "how much leaks": from which part of the corpus, and is it unique text or
boilerplate copied across many documents. Both are read off the trace: every document entry
carries its metadata (hence its source, `index.source_counts.source_of`), every final span its
corpus count. `report/leaks.py` pools these per setting, with intervals.

- A full-match generation counts once, shared equally by the distinct sources of its `full_raw`
  entries; its duplication is the count of its final span `(0, L)` (the whole generation).
- NV-recall mass: every document entry's NV-recall goes to its document's source and to the
  count bucket of the final span it belongs to.
- A count of 0 means the span was found only through anchors (the whole generation does not occur
  as tokenized), so its true count is unknown: such leaks fall in the bucket `unknown`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from propme_metrics.index.source_counts import DEFAULT_SOURCE_FIELD, source_of
from propme_metrics.trace.result import TraceResult

#: `fmr_rare`: a full match is "rare" when its whole text occurs at most this many times in the corpus
RARE_MAX_COUNT = 10
#: count buckets (label, lowest count, highest count or None): unique, a few copies, many, boilerplate
BUCKETS: tuple[tuple[str, int, int | None], ...] = (("1", 1, 1), ("2-10", 2, 10), ("11-100", 11, 100),
                                                     (">100", 101, None))
#: the bucket of a leak whose corpus count is unknown (matched through anchors only)
UNKNOWN_BUCKET = "unknown"
BUCKET_LABELS = (*(b[0] for b in BUCKETS), UNKNOWN_BUCKET)


def bucket_of(count: int | None) -> str:
    """The count bucket of a corpus count (`unknown` for None or 0)."""
    if not count or count < 1:
        return UNKNOWN_BUCKET
    return next(label for label, lo, hi in BUCKETS if count >= lo and (hi is None or count <= hi))


def whole_count(trace: TraceResult) -> int | None:
    """Corpus count of the generation's final span (0, L), the whole text; None when unknown or absent."""
    for s in trace.final_spans:
        if s.start == 0 and s.end == trace.n_tokens:
            return s.count or None
    return None


def is_rare_full_match(trace: TraceResult, max_count: int = RARE_MAX_COUNT) -> bool:
    """A full match (a `full_raw` entry) whose whole text occurs at most `max_count` times (`fmr_rare`)."""
    count = whole_count(trace)
    return trace.full_match and count is not None and count <= max_count


@dataclass
class GenerationLeaks:
    """One generation's leaks by source and by count bucket."""

    full_match: bool
    full_by_source: dict[str, float] = field(default_factory=dict)   #: shares of this full match (sum 1)
    full_bucket: str | None = None                                   #: bucket of the whole text (full matches)
    nv_by_source: dict[str, float] = field(default_factory=dict)     #: NV-recall mass per source
    nv_by_bucket: dict[str, float] = field(default_factory=dict)     #: NV-recall mass per span count bucket

    @property
    def nv_mass(self) -> float:
        return sum(self.nv_by_source.values())


def generation_leaks(trace: TraceResult, source_field: str = DEFAULT_SOURCE_FIELD) -> GenerationLeaks:
    """Split one counted generation's full match and NV-recall mass by source and by count bucket."""
    src: Callable[[dict], str] = lambda meta: source_of(meta, source_field)  # noqa: E731
    out = GenerationLeaks(trace.full_match)
    if trace.full_match:
        sources = sorted({src(d.metadata) for d in trace.documents if d.match == "full_raw"})
        out.full_by_source = {s: 1.0 / len(sources) for s in sources}
        out.full_bucket = bucket_of(whole_count(trace))
    for span in trace.final_spans:
        bucket = bucket_of(span.count)
        for d in span.documents:
            if d.nv_recall > 0:
                s = src(d.metadata)
                out.nv_by_source[s] = out.nv_by_source.get(s, 0.0) + d.nv_recall
                out.nv_by_bucket[bucket] = out.nv_by_bucket.get(bucket, 0.0) + d.nv_recall
    return out
