"""Which data leaks: one generation's leaks split by corpus source and by how often the text occurs.

Two questions follow "how much leaks": from which part of the corpus, and is it unique text or
boilerplate copied across many documents. Both are read off the trace: every document entry
carries its metadata (hence its source, `index.source_counts.source_of`), every final span its
corpus count. `metrics/provenance_analysis.py` pools these per setting, with intervals.

- A full-match generation counts once, shared equally by the distinct sources of its `full_raw`
  entries; its duplication is the corpus count of its whole text (`whole_count`).
- NV-recall mass: every document entry's NV-recall goes to its document's source and to the
  count bucket of the final span it belongs to (for the span `(0, L)`, the whole text's count).
- The whole text's count is that of the final span `(0, L)`. When that span was found only through
  anchors (count 0: the generation, as tokenized on its own, differs from the corpus' tokens at an
  edge, typically its first token when it starts inside a word), the least count of the
  generation's other final spans stands in: every copy of the text holds each of them, so it is an
  upper bound, and a text called rare by it is rare. Without any counted span the count is unknown
  (bucket `unknown`, never rare).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.index.source_counts import DEFAULT_SOURCE_FIELD, source_of
from propme_metrics.trace.result import TraceResult

#: `fmr_rare`'s default threshold: a full match is "rare" when its whole text occurs at most this many
#: times in the corpus (a setting: `rare_max_count` metadata, `--rare-max-count` of trace and report)
RARE_MAX_COUNT = 10
#: the metadata key (and PROPME_RARE_MAX_COUNT) of the threshold
RARE_MAX_COUNT_KEY = "rare_max_count"
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
    """Corpus count of the whole generation: its final span (0, L)'s, else (found through anchors
    only) the least count of its other final spans, an upper bound; None when no span has a count."""
    for s in trace.final_spans:
        if s.start == 0 and s.end == trace.n_tokens and s.count > 0:
            return s.count
    return min((s.count for s in trace.final_spans if s.count > 0), default=None)


def check_rare_max_count(value: Any, where: str) -> int:
    """The rare threshold as given (`where` names it in the message): an integer of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where} must be an integer of at least 1 (a full match occurring at most that many "
                          f"times counts for fmr_rare), got {value!r}", f"the default is {RARE_MAX_COUNT}")
    return value


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
    whole = whole_count(trace)
    for span in trace.final_spans:
        # the whole-generation span found through anchors (count 0) takes the whole text's count
        bucket = bucket_of(whole if span.start == 0 and span.end == trace.n_tokens and not span.count else span.count)
        for d in span.documents:
            if d.nv_recall > 0:
                s = src(d.metadata)
                out.nv_by_source[s] = out.nv_by_source.get(s, 0.0) + d.nv_recall
                out.nv_by_bucket[bucket] = out.nv_by_bucket.get(bucket, 0.0) + d.nv_recall
    return out
