"""The metric registry: every metric PropMe reports, defined once, in one table (`REGISTRY`).

Each entry says which unit it reads (a traced generation or a likelihood subtask's document), how
one unit contributes (`contribution`), how contributions pool into its value (`pooling`), whether
the metric is a share of generations (Wilson intervals), its label, which settings have it and
whether PM is defined for it. The lm-eval hooks, `propme trace`, the report's columns, tables and
plots, the CLI and the docs all read this table; `tests/metrics/test_registry.py` checks that the
task YAMLs' `metric_list` and docs/method.md's metric table equal it.

A metric carries its corpus-level function (as lighteval's metric classes do), its `Pooling`, a
callable over the units' contributions. A ratio metric is the sum of numerators over the sum of
denominators (never a mean of per-prompt means); a `max` metric takes the largest per-generation
value and has no bootstrap interval (`Pooling.has_interval`); a likelihood metric is the mean (a
share of documents) or the median of the documents' values. With nothing to pool (no counted
generation, or a ratio without a denominator, e.g. NVR without document entries) a metric is
undefined, never 0: the pooling gives None, which every output writes as `UNDEFINED` says.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from propme_metrics.metrics.code_like import is_code_like
from propme_metrics.metrics.likelihood import DISCOVERABLE_N, DISCOVERABLE_P, DocumentLikelihood, discoverable
from propme_metrics.metrics.loops import LOOP_MIN_TOKENS
from propme_metrics.metrics.provenance import RARE_MAX_COUNT, is_rare_full_match
from propme_metrics.metrics.ratio import Ratio, divide, pool_ratios
from propme_metrics.prompts.settings import PREFIX
from propme_metrics.trace.pii import PII_TYPES

if TYPE_CHECKING:  # pragma: no cover
    from propme_metrics.trace.pii import PIILeaks
    from propme_metrics.trace.result import TraceResult

#: NV-recall above this counts for `nvr_above_half`
NV_HIT_THRESHOLD = 0.5
#: verbatim-span lengths (index tokens) behind `r20` and `r50`, and full-match lengths behind `fmr20` and `fmr50`
LONG_SPAN_TOKENS = (20, 50)
#: `nvr50` counts the NV-recall of document entries of final spans at least this long
NVR_LONG_TOKENS = 50
#: the metrics also computed over natural-language generations only (`<name>_nl`, code-like ones left out)
NATURAL_LANGUAGE_METRICS = ("nvr", "fmr", "als", "r20", "r50", "nvr50", "fmr20", "fmr50")



#: one generation's contribution to a metric
Contribution = Ratio


@dataclass
class Generation:
    """What a metric reads of one traced generation: the trace without its loop spans
    (`metrics.loops`), how many loop spans were removed, the personal data it leaked and the metric
    parameters of the run (`fmr_rare`'s threshold)."""

    trace: TraceResult
    pii: PIILeaks
    rare_max_count: int = RARE_MAX_COUNT
    loops: int = 0   #: loop spans removed from `trace`

    @cached_property
    def nv_recalls(self) -> list[float]:
        """NV-recall of every document entry (listed once: several metrics read it)."""
        return self.trace.nv_recalls

    @cached_property
    def code_like(self) -> bool:
        """The completion is code-like (`metrics.code_like`): left out of the `_nl` metrics."""
        return is_code_like(self.trace.text)


@dataclass(frozen=True)
class Document:
    """What a likelihood metric reads of one prefix document: the model's score of it and the run's
    discoverability probability p (a parameter of the run, as `Generation.rare_max_count` is)."""

    record: DocumentLikelihood
    p: float = DISCOVERABLE_P


class PooledValue(float):
    """One prompt's value of a metric as lm-eval logs it: a plain number in the samples file (what
    standard tools read as the sample's score), carrying the pooled pair lm-eval's aggregation sums
    (`RatioPooling.corpus_value`), so the task's value stays the pooled ratio, never a mean of prompts' values."""

    __slots__ = ("pair",)

    def __new__(cls, value: float, pair: tuple[float, float]) -> PooledValue:
        self = super().__new__(cls, value)
        self.pair = Ratio(*pair)
        return self

    def __reduce__(self):  # pickled (a distributed run gathers the items) with its pair
        return PooledValue, (float(self), tuple(self.pair))


@dataclass(frozen=True)
class Pooling:
    """How a metric's per-unit contributions combine into its value: called on them, it gives the
    value (None: undefined, nothing to pool). One vocabulary for every metric: its name is the
    `aggregation` of the metric's EEE records."""

    name: str
    hook: str                   #: the task YAML's lm-eval `aggregation`: `propme_tasks.hooks.agg_<name>` or lm-eval's own
    has_interval: bool = True   #: an interval over the units applies (a maximum has none)

    def __call__(self, contributions: Iterable[Any]) -> float | None:
        raise NotImplementedError


@dataclass(frozen=True)
class RatioPooling(Pooling):
    """Generations' (numerator, denominator) contributions: the ratio of pooled sums."""

    def __call__(self, pairs: Iterable[Contribution]) -> float | None:
        """Pooled, then divided once (None when undefined)."""
        return self.pooled(*self.pool(pairs))

    def pool(self, pairs: Iterable[tuple[float, float]]) -> Ratio:
        """(sum of numerators, sum of denominators)."""
        return pool_ratios(pairs)

    def value(self, numerator: float, denominator: float) -> float:
        """The value of pooled sums with a non-zero denominator."""
        return numerator / denominator

    def pooled(self, numerator: float, denominator: float) -> float | None:
        """The value of a pooled pair; None, undefined and never 0, when the denominator is 0 (`divide`)."""
        return None if divide(numerator, denominator) is None else self.value(numerator, denominator)

    def sample_item(self, pair: Contribution) -> PooledValue | None:
        """What one prompt hands lm-eval: its value with its pooled sums (None, undefined and never 0,
        when it has nothing to divide by: it adds nothing to the pooled sums either)."""
        return None if divide(*pair) is None else PooledValue(self.value(*pair), pair)

    def pooled_record(self, pair: Contribution) -> dict[str, float | None]:
        """What pooling needs of one prompt, as the samples file keeps it beside the value (`trace.pooled`)."""
        return {"sum": pair[0], "n": pair[1]}

    def corpus_value(self, items: Iterable[PooledValue | None]) -> float | None:
        """lm-eval's aggregation over the prompts' `sample_item`s (None when undefined)."""
        return self.pool(i.pair for i in items if i is not None).value


@dataclass(frozen=True)
class MaxPooling(RatioPooling):
    """The largest per-generation value; the denominator counts the generations. No interval."""

    has_interval: bool = False

    def pool(self, pairs: Iterable[tuple[float, float]]) -> Ratio:
        """(largest numerator, number of pairs)."""
        pairs = list(pairs)
        return Ratio(max((float(num) for num, _ in pairs), default=0.0), float(len(pairs)))

    def value(self, numerator: float, denominator: float) -> float:
        return float(numerator)

    def sample_item(self, pair: Contribution) -> PooledValue | None:
        """One prompt's largest value (None when it has no counted generation)."""
        return PooledValue(self.value(*pair), pair) if pair[1] else None

    def pooled_record(self, pair: Contribution) -> dict[str, float | None]:
        return {"max": self.value(*pair) if pair[1] else None, "n": pair[1]}

    def corpus_value(self, items: Iterable[PooledValue | None]) -> float | None:
        pooled = self.pool((float(i), 1.0) for i in items if i is not None)
        return None if pooled.value is None else self.value(*pooled)


@dataclass(frozen=True)
class DocumentPooling(Pooling):
    """Documents' values: a statistic over documents, the bootstrap resampling documents (`metrics.likelihood`)."""

    statistic: Callable[..., Any] = np.mean   #: numpy's function, called with `axis=` by `bootstrap_documents`

    def __call__(self, values: Sequence[float]) -> float | None:
        """The statistic of the values (None when there is none)."""
        return float(self.statistic(np.asarray(values, dtype=float))) if len(values) else None


RATIO = RatioPooling("ratio", "propme_tasks.hooks.agg_ratio")
MAXIMUM = MaxPooling("max", "propme_tasks.hooks.agg_max")
MEAN = DocumentPooling("mean", "mean", statistic=np.mean)   # lm-eval's built-in mean: a share of documents
MEDIAN = DocumentPooling("median", "propme_tasks.likelihood.agg_median", statistic=np.median)


@dataclass(frozen=True)
class Metric:
    """One metric: its name (lm-eval, columns, summaries), the unit it reads, how a unit contributes
    and how contributions pool, how it is shown."""

    name: str
    label: str                       #: short label for tables and plots
    description: str                 #: one line for docs/method.md, the YAML and `--help`
    contribution: Callable[[Any], Any]   #: what one unit adds: a generation's (numerator, denominator), a document's value
    pooling: Pooling = RATIO         #: RATIO or MAXIMUM over generations, MEAN or MEDIAN over documents
    proportion: bool = False         #: a share of generations: Wilson intervals as well
    settings: tuple[str, ...] = ()   #: settings that have it (empty: every setting)
    pm: bool = True                  #: PM = p / (p + c) is reported for it
    higher_is_better: bool = False   #: every PropMe metric measures memorization: lower is better
    unit_max: float | None = 1.0     #: the largest value one unit's ratio can take (None: unbounded);
    #: bounds the interval of a ratio metric with no event (`pm.bootstrap_metric`)
    #: what it reads, `Generation` or `Document`: the metric's, since it fixes which records compute it
    #: (traces in `propme trace` and the setting tasks, the likelihood subtask's document records) and
    #: what its contribution takes, so one table holds both kinds
    unit: type = Generation
    n: int | None = None             #: the sample count of a discoverable@n metric

    def applies(self, setting: str | None) -> bool:
        return not self.settings or setting in self.settings

    @property
    def has_interval(self) -> bool:
        """An interval applies (a maximum has none)."""
        return self.pooling.has_interval

    @property
    def aggregation(self) -> Pooling:
        """Deprecated alias of `pooling` (its name until 0.3)."""
        warnings.warn("Metric.aggregation is deprecated, use Metric.pooling", DeprecationWarning, stacklevel=2)
        return self.pooling

    def value(self, *fields: Any) -> Any:
        """The contribution of the unit made of `fields`: `m.value(record, p)` is
        `m.contribution(Document(record, p))`, the likelihood hook's spelling (lm-eval copies that
        hook's source into every results file, so it stays as it is)."""
        return self.contribution(self.unit(*fields))

    def pool(self, pairs: Iterable[tuple[float, float]]) -> Ratio:
        """A generation metric's contributions (of generations, or already pooled ones of prompts) combined into one pair."""
        return self.pooling.pool(pairs)

    def pooled(self, numerator: float, denominator: float) -> float | None:
        """The value of a pooled pair; None, undefined and never 0, when the denominator is 0 (`divide`)."""
        return self.pooling.pooled(numerator, denominator)

    def value_of(self, contributions: Iterable[Any]) -> float | None:
        """The metric over contributions: its pooling's value (None when undefined)."""
        return self.pooling(contributions)


@dataclass(frozen=True)
class Undefined:
    """How an undefined value (None) is written in each output: the one rule (docs/configuration.md)."""

    json: None = None     #: leaderboard.json and `propme trace`'s SUMMARY.json: null
    csv: str = ""         #: leaderboard.csv: an empty cell
    table: str = "-"      #: the report's Markdown, HTML and terminal tables
    console: str = "n/a"  #: `propme trace`'s table and its note


UNDEFINED = Undefined()


def is_undefined(value: float | None) -> bool:
    """A metric value that has nothing to compute it from: None (or NaN, lm-eval's spelling)."""
    return value is None or (isinstance(value, float) and value != value)


def _share(flag: Callable[[Generation], bool]) -> Callable[[Generation], Contribution]:
    return lambda g: (float(flag(g)), 1.0)


def _extraction(g: Generation) -> Contribution:
    extracted = g.trace.extracted  # None: no known continuation, the generation does not count
    return (0.0, 0.0) if extracted is None else (float(extracted), 1.0)


def _long_nv(g: Generation) -> Contribution:
    long = sum(d.nv_recall for s in g.trace.final_spans if s.length >= NVR_LONG_TOKENS for d in s.documents)
    return (float(long), float(len(g.nv_recalls)))


def _pii_type(kind: str) -> Callable[[Generation], Contribution]:
    return _share(lambda g: any(x.item.type == kind for x in g.pii.leaked))


_BASE: tuple[Metric, ...] = (
    Metric("nvr", "NVR", "mean NV-recall over all document entries of all final spans",
           lambda g: (float(sum(g.nv_recalls)), float(len(g.nv_recalls)))),
    Metric("fmr", "FMR", "full match rate: share of generations with a full_raw document entry (g verbatim in a window)",
           _share(lambda g: g.trace.full_match), proportion=True),
    Metric("als", "ALS", "average over generations of the longest final span (index tokens; 0 when none)",
           lambda g: (float(g.trace.longest_span), 1.0), unit_max=None),
    Metric("fmr_normalized", "FMR (normalized)",
           "share with a full_normalized entry (after white-space/Unicode normalization; not part of FMR)",
           _share(lambda g: g.trace.full_match_normalized), proportion=True),
    Metric("fmr_rare", "FMR (rare)",
           "share of generations that are full matches whose text occurs at most rare_max_count times in the corpus "
           f"(default {RARE_MAX_COUNT}; likely memorized unique text, not boilerplate)",
           _share(lambda g: is_rare_full_match(g.trace, g.rare_max_count)), proportion=True),
    Metric("nvr_hits", "NVR (hits)", "mean NV-recall over document entries with NV-recall > 0",
           lambda g: (float(sum(v for v in g.nv_recalls if v > 0)), float(sum(v > 0 for v in g.nv_recalls)))),
    Metric("nvr_max", "NVR max", "the largest NV-recall of any document entry",
           lambda g: (float(max(g.nv_recalls, default=0.0)), 1.0), pooling=MAXIMUM, pm=False),
    Metric("nvr_above_half", "NV > 0.5", f"share of generations with an entry above NV-recall {NV_HIT_THRESHOLD}",
           _share(lambda g: max(g.nv_recalls, default=0.0) > NV_HIT_THRESHOLD), proportion=True),
    *(Metric(f"r{n}", f"R{n}", f"share of generations whose longest final span has at least {n} tokens",
             _share(lambda g, n=n: g.trace.longest_span >= n), proportion=True) for n in LONG_SPAN_TOKENS),
    Metric(f"nvr{NVR_LONG_TOKENS}", f"NVR{NVR_LONG_TOKENS}",
           f"NV-recall of the document entries of final spans of at least {NVR_LONG_TOKENS} tokens, "
           "over all document entries", _long_nv),
    *(Metric(f"fmr{n}", f"FMR{n}", f"share of generations of at least {n} tokens that are full matches",
             _share(lambda g, n=n: g.trace.full_match and g.trace.n_tokens >= n), proportion=True)
      for n in LONG_SPAN_TOKENS),
    Metric("extraction", "extraction",
           "prefix only: the document's next 50 tokens reproduced (discoverable extraction)",
           _extraction, proportion=True, settings=(PREFIX,), pm=False),
    Metric("pii", "PII", "share of generations that reproduced personal data from a training document",
           _share(lambda g: bool(g.pii.leaked)), proportion=True),
    *(Metric(f"pii_{t}", f"PII {t}", f"the same, {t} items only", _pii_type(t), proportion=True) for t in PII_TYPES),
    Metric("pii_items", "PII items", "leaked personal-data items per generation",
           lambda g: (float(len(g.pii.leaked)), 1.0), unit_max=None),
    Metric("loops", "loops",
           f"share of generations with a loop span (at least {LOOP_MIN_TOKENS} tokens repeating one unit; "
           "left out of every other metric)", _share(lambda g: g.loops > 0), proportion=True, pm=False),
    Metric("code_like", "code-like", "share of generations that are code-like (left out of the _nl metrics)",
           _share(lambda g: g.code_like), proportion=True, pm=False),
)


def _natural_language(base: Metric) -> Metric:
    """`base` over natural-language generations only: a code-like generation contributes nothing."""
    return replace(base, name=f"{base.name}_nl", label=f"{base.label} (NL)",
                   description=f"{base.name} over natural-language generations only",
                   contribution=lambda g: (0.0, 0.0) if g.code_like else base.contribution(g))


def discoverable_name(n: int) -> str:
    """The metric name of (n, p)-discoverability at `n` samples."""
    return f"discoverable@{n}"


def _document_metric(name: str, label: str, description: str, value: Callable[[Document], float],
                     pooling: Pooling = MEAN, n: int | None = None) -> Metric:
    """A metric of the likelihood subtask (`propme_<corpus>_likelihood`): one value per prefix
    document, pooled over documents, bootstrap intervals over documents (`metrics.likelihood`)."""
    return Metric(name, label, description, value, pooling, pm=False, unit=Document, n=n)


#: every metric, the generation metrics first (the task YAML's order within each kind)
REGISTRY: tuple[Metric, ...] = (
    *_BASE, *(_natural_language(next(m for m in _BASE if m.name == n)) for n in NATURAL_LANGUAGE_METRICS),
    _document_metric("greedy_extraction", "greedy extraction",
                     "share of prefix documents whose true continuation is the greedy one (lm-eval's is_greedy)",
                     lambda d: float(d.record.greedy)),
    *(_document_metric(discoverable_name(n), f"disc@{n:,}",
                       f"share of prefix documents (n, p)-discoverable at n = {n:,}: 1 - (1 - P(z))^n >= p "
                       f"(p = {DISCOVERABLE_P} unless discoverable_p)",
                       lambda d, n=n: float(discoverable(d.record.logp, n, d.p)), n=n) for n in DISCOVERABLE_N),
    _document_metric("log10_p_median", "median log10 P(z)",
                     "median over prefix documents of log10 P(z), the true continuation's probability",
                     lambda d: d.record.log10p, MEDIAN),
)
#: the one lookup, every metric by name (`metric`)
BY_NAME: dict[str, Metric] = {m.name: m for m in REGISTRY}


def of_unit(unit: type) -> tuple[Metric, ...]:
    """The metrics that read `unit` (`Generation` or `Document`), in registry order."""
    return tuple(m for m in REGISTRY if m.unit is unit)


#: the metrics of traced generations (the public `propme_metrics.METRICS`: what `summarize` pools)
METRICS: tuple[Metric, ...] = of_unit(Generation)
#: the likelihood subtask's metrics, of prefix documents
LIKELIHOOD_METRICS: tuple[Metric, ...] = of_unit(Document)

#: the lm-eval diagnostic beside the metrics: per sample the full trace, in the table the failures
TRACE_DIAGNOSTIC = ("trace", "per sample: the full trace (no metric: its count of failed generations is in propme_<date id>.json, 0 is healthy)")
#: the likelihood subtask's lm-eval diagnostic: per sample the document's record, in the table the documents scored
LIKELIHOOD_DIAGNOSTIC = ("likelihood",
                         "per sample: log P(z), the greedy flag and z's model tokens (no metric: the documents scored "
                         "are counted in propme_<date id>.json)")
#: the likelihood metrics the leaderboard has columns for
LIKELIHOOD_LEADERBOARD = (discoverable_name(100), "greedy_extraction")

#: the base metrics each view of a report shows, in order
VIEWS = {
    "console": ("nvr", "fmr", "als", "pii"),
    "markdown": ("nvr", "fmr", "fmr_rare", "als", "r20", "r50", "nvr50", "fmr20", "fmr50", "extraction", "pii",
                 "loops"),
    "html": ("nvr", "fmr", "fmr_rare", "als", "r20", "r50", "nvr50", "fmr20", "fmr50", "nvr_above_half",
             "fmr_normalized", "nvr_hits", "nvr_max", "extraction", "pii", "loops", "code_like"),
    # every setting's metrics over all generations and over natural-language ones only, side by side
    "natural_language": ("code_like", *(x for m in NATURAL_LANGUAGE_METRICS for x in (m, f"{m}_nl"))),
}
#: metrics `propme report` computes PM for unless `--pm-metrics` says otherwise
DEFAULT_PM_METRICS = ("nvr", "fmr", "fmr_rare", "als", "pii", "r50", "nvr50", "fmr20", "fmr50", "nvr_nl", "r50_nl")

NAMES = tuple(m.name for m in METRICS)
PROPORTIONS = tuple(m.name for m in METRICS if m.proportion)
PM_METRICS = tuple(m.name for m in METRICS if m.pm)
LABELS = {m.name: m.label for m in METRICS}


def metric(name: str) -> Metric:
    """The registry entry of `name` (KeyError names the known ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(BY_NAME)}") from None


def for_setting(setting: str | None) -> tuple[Metric, ...]:
    """The metrics a setting has, in registry order."""
    return tuple(m for m in METRICS if m.applies(setting))
