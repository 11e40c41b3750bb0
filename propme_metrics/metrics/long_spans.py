"""Duplication and concentration of the long matches (the study's report, 5.4 and 5.7).

For every counted generation whose longest final span has at least `LONG_SPAN` tokens (an R50
generation): how often that span's first `LONG_SPAN` tokens occur in the corpus (exact counts from
the index, in the `COPY_BUCKETS` 1 / 2-9 / 10-99 / 100+, and their median), R50 restricted to
text with fewer than `RARE_COPIES` copies and with exactly one, with PM against prefix, and how
concentrated the documents retrieved for these spans are (distinct documents; the share of R50
generations whose span retrieved one of the `TOP_DOCUMENTS` documents retrieved most often). For
the prefix setting, the extraction rate per generation by the corpus count of the prompt with its
true continuation (100 tokens). Shares: Wilson intervals over generations; PM: percentile bootstrap
over the settings' units (`pm.pm_interval`). Counts need the index: without it those figures are
undefined (the concentration is read off the traces).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from statistics import median

from propme_metrics.metrics.figures import COPY_BUCKETS, LONG_SPAN, RARE_COPIES, TOP_DOCUMENTS, Figure, bucket, share
from propme_metrics.metrics.loops import without_loops
from propme_metrics.metrics.pm import Interval, IntervalSpec, pm_interval
from propme_metrics.metrics.ratio import Ratio
from propme_metrics.metrics.runs import RunTask
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS
from propme_metrics.trace.result import FinalSpan, TraceResult


def longest_final_span(t: TraceResult) -> FinalSpan | None:
    """The generation's longest final span that is no loop (`metrics.loops`; the first of equal ones), None
    without one."""
    return max(without_loops(t).trace.final_spans, key=lambda s: s.length, default=None)


def head_count(t: TraceResult, span: FinalSpan, index) -> int:
    """Corpus count of the span's first `LONG_SPAN` tokens (the generation's own tokens, as traced)."""
    return index.count(index.encode(t.text)[span.start:span.start + LONG_SPAN])


def _units(task: RunTask) -> list[list[TraceResult]]:
    """Counted generations by resampling unit: a prompt's, or one generation in the prompt-free settings."""
    units = [p.counted() for p in task.prompts]
    return [[t] for u in units for t in u] if task.setting in PROMPT_FREE_SETTINGS else units


class SpanCounts:
    """The R50 generations of one task by unit, each with its longest span and (with an index) its head count."""

    def __init__(self, task: RunTask, index):
        self.task, self.units = task, _units(task)
        self.long = [[(t, s) for t in u if (s := longest_final_span(t)) is not None and s.length >= LONG_SPAN]
                     for u in self.units]
        self.counts = None if index is None else [[head_count(t, s, index) for t, s in u] for u in self.long]

    def restricted(self, keep) -> list[Ratio]:
        """Per unit: (its R50 generations whose head count passes `keep`, its counted generations)."""
        return [Ratio(sum(1 for c in cs if keep(c)), len(u)) for cs, u in zip(self.counts, self.units)]


RESTRICTIONS = {"r50_rare": lambda c: 0 < c < RARE_COPIES, "r50_unique": lambda c: c == 1}


def duplication_figures(sc: SpanCounts, intervals: IntervalSpec) -> list[Figure]:
    """Buckets, median and the restricted R50 of one task (undefined without counts)."""
    setting = sc.task.setting
    generations = sum(len(u) for u in sc.units)
    if sc.counts is None:
        names = [f"r50_copies_{b[0]}" for b in COPY_BUCKETS] + ["r50_copies_median", *RESTRICTIONS]
        return [Figure(n, setting, Interval(None), 0, "generations") for n in names]
    known = [c for cs in sc.counts for c in cs if c > 0]
    tally = Counter(bucket(c) for c in known)
    out = [Figure(f"r50_copies_{b[0]}", setting, share(tally[b[0]], len(known), intervals.confidence), len(known),
                  "R50 generations") for b in COPY_BUCKETS]
    out.append(Figure("r50_copies_median", setting, Interval(float(median(known)) if known else None), len(known),
                      "R50 generations"))
    for name, keep in RESTRICTIONS.items():
        k = sum(r.numerator for r in sc.restricted(keep))
        out.append(Figure(name, setting, share(int(k), generations, intervals.confidence), generations, "generations"))
    return out


def pm_figures(counts: Mapping[str, SpanCounts], intervals: IntervalSpec) -> list[Figure]:
    """PM of the restricted R50 of every propensity setting against prefix (none without prefix or counts)."""
    prefix = counts.get(PREFIX)
    if prefix is None:
        return []
    out = []
    for setting, sc in counts.items():
        if setting == PREFIX:
            continue
        for name, keep in RESTRICTIONS.items():
            if sc.counts is None or prefix.counts is None:
                iv = Interval(None)
            else:
                p, c = sc.restricted(keep), prefix.restricted(keep)
                iv = pm_interval(p, c, intervals, (_pooled_share(p, intervals), _pooled_share(c, intervals)))
            out.append(Figure(f"pm_{name}", setting, iv, len(sc.units), "units"))
    return out


def _pooled_share(stats: list[Ratio], intervals: IntervalSpec) -> Interval:
    return share(int(sum(s.numerator for s in stats)), int(sum(s.denominator for s in stats)), intervals.confidence)


def concentration_figures(sc: SpanCounts, intervals: IntervalSpec) -> list[Figure]:
    """Distinct documents of the R50 generations' longest spans and the top documents' share."""
    spans = [s for u in sc.long for _, s in u]
    hits = [{(d.shard, d.doc_ix) for d in s.documents} for s in spans]
    often = Counter(doc for h in hits for doc in h)
    top = {doc for doc, _ in sorted(often.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_DOCUMENTS]}
    setting = sc.task.setting
    return [Figure("r50_documents", setting, Interval(float(len(often)) if spans else None), len(spans),
                   "R50 generations"),
            Figure("r50_top10_share", setting, share(sum(bool(h & top) for h in hits), len(spans), intervals.confidence),
                   len(spans), "R50 generations")]


def extraction_by_copies(task: RunTask, index, intervals: IntervalSpec) -> list[Figure]:
    """Prefix: extraction rate per generation by the corpus count of prompt + true continuation."""
    if task.setting != PREFIX:
        return []
    tally = {b[0]: [0, 0] for b in COPY_BUCKETS}
    if index is not None:
        for p in task.prompts:
            gens = [t for t in p.counted() if t.extracted is not None]
            where = bucket(index.count(index.encode(p.prompt + p.continuation))) if gens and p.continuation else None
            if where is not None:
                tally[where][0] += len(gens)
                tally[where][1] += sum(bool(t.extracted) for t in gens)
    return [Figure(f"extraction_copies_{b}", PREFIX, share(k, n, intervals.confidence) if index is not None
                   else Interval(None), n, "generations") for b, (n, k) in tally.items()]
