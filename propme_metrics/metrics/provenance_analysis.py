"""Which data leaks, per model, corpus and setting: by corpus source and by duplication.

- **By source**: each source's share of the setting's full matches and of its NV-recall mass
  (`metrics/provenance.py` splits each generation), against the source's share of the corpus tokens
  (`index/source_counts.py`, read from the index the generations were traced against). Their ratio
  is the source's **enrichment**: 1 leaks in proportion to its size, 5 leaks five times its share.
  Intervals at the `IntervalSpec`'s confidence (`pm.bootstrap_metric`: percentile bootstrap, or the zero-events bound for a
  source with no leak) resample the setting's units (prompts; generations in the
  prompt-free settings), the corpus shares being fixed (the whole corpus is counted, not sampled).
- **By duplication**: the shares of full matches (by the corpus count of the whole generation)
  and of NV-recall mass (by the count of the final span an entry belongs to) in the count buckets
  1, 2-10, 11-100 and >100 (`unknown`: found through anchors only). For the prefix setting also
  the extraction rate by how often the prompt's true continuation occurs in the corpus, with
  Wilson intervals at the same confidence: text the corpus repeats is extracted more often, the pattern the
  memorization literature reports for duplicated training data.

Without a readable index (the report made on another machine), sources are still ranked by their
share of the leaks, but enrichment and the extraction curve are left out, with a note.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from propme_metrics.core.errors import PropMeError
from propme_metrics.index.reader import open_index
from propme_metrics.index.source_counts import DEFAULT_SOURCE_FIELD, index_source_counts, manifest_source_field
from propme_metrics.metrics.loops import without_loops
from propme_metrics.metrics.pm import Interval, IntervalSpec, bootstrap_metric, wilson_interval
from propme_metrics.metrics.provenance import BUCKET_LABELS, BUCKETS, UNKNOWN_BUCKET, bucket_of, generation_leaks
from propme_metrics.metrics.ratio import Ratio, divide
from propme_metrics.metrics.runs import RunTask
from propme_metrics.metrics.values import counts_for_metrics
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS
from propme_metrics.trace.result import TraceResult

#: sources listed per setting in leaderboard.json and shown in the plot
TOP_SOURCES = 10


@dataclass
class SourceLeak:
    """One source's part of a setting's leaks, against its part of the corpus."""

    source: str
    documents: int | None          #: corpus documents of the source (None: index not readable)
    tokens: int | None             #: corpus tokens of the source
    token_share: float | None      #: its share of the corpus tokens
    full_matches: float            #: full matches attributed to it (a match shared by k sources counts 1/k)
    full_share: float | None       #: its share of the setting's full matches (None: no full match)
    nv_mass: float                 #: NV-recall of its document entries
    nv_share: float | None         #: its share of the NV-recall mass (None: no mass)
    enrichment_full: Interval | None = None   #: full_share / token_share with its bootstrap interval
    enrichment_nv: Interval | None = None     #: nv_share / token_share with its bootstrap interval

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("enrichment_full", "enrichment_nv"):
            iv = getattr(self, k)
            out[k] = None if iv is None else iv.to_dict()
        return out


@dataclass
class BucketLeak:
    """The leaks of one count bucket."""

    bucket: str
    full_matches: int
    full_share: float | None
    nv_mass: float
    nv_share: float | None


@dataclass
class ExtractionBucket:
    """Prefix prompts whose true continuation occurs this often in the corpus, and how many were extracted."""

    bucket: str
    generations: int
    extracted: int
    rate: float | None
    low: float | None              #: Wilson interval
    high: float | None


@dataclass
class SettingLeaks:
    """Leaks of one model x corpus x setting, by source and by duplication."""

    setting: str
    full_matches: int
    nv_mass: float
    sources: list[SourceLeak]      #: ranked: full-match enrichment (or share), then NV-recall enrichment (or share)
    buckets: list[BucketLeak]
    extraction: list[ExtractionBucket] = field(default_factory=list)   #: prefix only, with a readable index

    def to_dict(self, top: int = TOP_SOURCES) -> dict[str, Any]:
        return {"setting": self.setting, "full_matches": self.full_matches, "nv_mass": self.nv_mass,
                "top_sources": [s.to_dict() for s in self.sources[:top]],
                "duplication": [asdict(b) for b in self.buckets],
                "extraction_by_duplication": [asdict(e) for e in self.extraction]}


@dataclass
class CorpusLeaks:
    """Leak analysis of one model on one corpus."""

    source_field: str
    corpus_tokens: int | None      #: None when the index could not be read
    settings: dict[str, SettingLeaks]
    note: str | None = None        #: why enrichment or the extraction curve is missing


def open_traced_index(tasks: Mapping[str, RunTask]):
    """(index, None) for the index the tasks were traced against, or (None, why not)."""
    task = next(iter(tasks.values()))
    path = next((p.index_path for t in tasks.values() for p in t.prompts if p.index_path), "")
    if not path:
        return None, "the samples name no index folder"
    try:
        index = open_index(path)
    except PropMeError as exc:
        return None, f"the index {path} cannot be read here ({exc})"
    if task.index_identity is not None and index.manifest.identity != task.index_identity:
        return None, (f"the index at {path} is {index.manifest.identity}, not the {task.index_identity} "
                      "the generations were traced against")
    return index, None


def _units(task: RunTask) -> list[list[TraceResult]]:
    """The counted generations of a task without their loop spans (as FMR and NVR read them), grouped
    by resampling unit (prompt; generation when prompt-free)."""
    units = []
    for p in task.prompts:
        counted = [without_loops(t).trace for t in p.counted() if counts_for_metrics(t)]
        if task.setting in PROMPT_FREE_SETTINGS:
            units += [[t] for t in counted]
        else:
            units.append(counted)
    return units


def _enrichment(stats: list[Ratio], share: float | None, token_share: float | None,
                intervals: IntervalSpec) -> Interval | None:
    """A share of the leaks over the source's share of the corpus, with the share's interval scaled alike."""
    if share is None or not token_share:
        return None
    if not intervals.bootstrap:
        return Interval(divide(share, token_share))
    iv = bootstrap_metric(stats, intervals)

    def scaled(v: float | None) -> float | None:
        return None if v is None else divide(v, token_share)
    return Interval(scaled(share), scaled(iv.low), scaled(iv.high), iv.method, iv.confidence, iv.resamples)


def setting_leaks(task: RunTask, source_field: str, corpus, intervals: IntervalSpec, index=None) -> SettingLeaks:
    """By-source and by-duplication leaks of one task; `corpus` (SourceCounts or None) gives the shares."""
    units = [[generation_leaks(t, source_field) for t in unit] for unit in _units(task)]
    full_tot = [sum(g.full_match for g in u) for u in units]
    nv_tot = [sum(g.nv_mass for g in u) for u in units]
    n_full, nv_mass = int(sum(full_tot)), float(sum(nv_tot))
    names = sorted({s for u in units for g in u for s in (*g.full_by_source, *g.nv_by_source)})
    sources = []
    for name in names:
        full_stats = [Ratio(sum(g.full_by_source.get(name, 0.0) for g in u), float(d))
                      for u, d in zip(units, full_tot)]
        nv_stats = [Ratio(sum(g.nv_by_source.get(name, 0.0) for g in u), float(d)) for u, d in zip(units, nv_tot)]
        full = sum(s.numerator for s in full_stats)
        nv = sum(s.numerator for s in nv_stats)
        counts = corpus.sources.get(name, {"documents": 0, "tokens": 0}) if corpus is not None else None
        token_share = corpus.token_share(name) if corpus is not None else None
        full_share, nv_share = divide(full, n_full), divide(nv, nv_mass)
        sources.append(SourceLeak(
            name, None if counts is None else counts["documents"], None if counts is None else counts["tokens"],
            token_share, full, full_share, nv, nv_share,
            _enrichment(full_stats, full_share, token_share, intervals),
            _enrichment(nv_stats, nv_share, token_share, intervals)))

    def rank(s: SourceLeak) -> tuple:
        ef = s.enrichment_full.estimate if s.enrichment_full else (s.full_share or 0.0) if corpus is None else 0.0
        en = s.enrichment_nv.estimate if s.enrichment_nv else (s.nv_share or 0.0) if corpus is None else 0.0
        return (-ef, -en, s.source)

    sources.sort(key=rank)
    buckets = []
    for label in BUCKET_LABELS:
        full = sum(1 for u in units for g in u if g.full_bucket == label)
        nv = sum(g.nv_by_bucket.get(label, 0.0) for u in units for g in u)
        if label == UNKNOWN_BUCKET and not full and not nv:
            continue  # shown only when some leak's count is unknown
        buckets.append(BucketLeak(label, full, divide(full, n_full), nv, divide(nv, nv_mass)))
    extraction = (_extraction_by_duplication(task, index, intervals.confidence)
                  if task.setting == PREFIX and index is not None else [])
    return SettingLeaks(task.setting, n_full, nv_mass, sources, buckets, extraction)


def _extraction_by_duplication(task: RunTask, index, confidence: float) -> list[ExtractionBucket]:
    """Extraction rate of the prefix prompts by the corpus count of their true continuation."""
    tally = {label: [0, 0] for label, _, _ in BUCKETS}
    tally[UNKNOWN_BUCKET] = [0, 0]
    for p in task.prompts:
        gens = [t for t in p.counted() if t.extracted is not None]
        if not gens or not p.continuation:
            continue
        ids = index.encode(p.continuation)
        bucket = bucket_of(index.count(ids) if ids else 0)
        tally[bucket][0] += len(gens)
        tally[bucket][1] += sum(bool(t.extracted) for t in gens)
    out = []
    for label, (n, k) in tally.items():
        if label == UNKNOWN_BUCKET and not n:
            continue
        lo, hi = wilson_interval(k, n, confidence) if n else (None, None)
        out.append(ExtractionBucket(label, n, k, divide(k, n), lo, hi))
    return out


def corpus_leaks(tasks: Mapping[str, RunTask], intervals: IntervalSpec, opened=None) -> CorpusLeaks:
    """The leak analysis of one model on one corpus (its tasks by setting); `opened`: the result of
    `open_traced_index(tasks)` when the caller already has it."""

    index, why = open_traced_index(tasks) if opened is None else opened
    corpus, field_name = None, DEFAULT_SOURCE_FIELD
    if index is not None:
        field_name = manifest_source_field(index.manifest)
        try:
            corpus = index_source_counts(index.path)
        except PropMeError as exc:
            why = f"the per-source counts of {index.path} cannot be computed ({exc})"
    settings = {s: setting_leaks(t, field_name, corpus, intervals, index) for s, t in tasks.items()}
    note = None if why is None else (f"{why}: sources are ranked by their share of the leaks, without enrichment "
                                     "(their share of the corpus is unknown) or the extraction curve")
    return CorpusLeaks(field_name, None if corpus is None else corpus.total_tokens, settings, note)
