"""Per-generation contributions and pooled summaries of the registry's metrics.

`contributions` turns one trace into a (numerator, denominator) pair per metric; the lm-eval
hooks, `propme trace` and the report all pool these pairs, so the three can never disagree.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from propme_metrics.metrics.loops import without_loops
from propme_metrics.metrics.provenance import RARE_MAX_COUNT
from propme_metrics.metrics.registry import METRICS, Contribution, Generation, Metric
from propme_metrics.trace.pii import PIILeaks, leaks
from propme_metrics.trace.result import TraceResult

#: contributions of one generation: metric name -> (numerator, denominator)
Contributions = dict[str, Contribution]


def counts_for_metrics(r: TraceResult) -> bool:
    """A generation counts unless its tracing failed or it is degenerate (dropped from every setting)."""
    return r.error is None and not r.degenerate


def contributions(r: TraceResult, metrics: Iterable[Metric] = METRICS,
                  pii: PIILeaks | None = None, rare_max_count: int = RARE_MAX_COUNT) -> Contributions:
    """What one generation adds to each metric: its (numerator, denominator), read without its loop
    spans (`metrics.loops`). `pii`: its leaks, if known; `rare_max_count`: `fmr_rare`'s threshold.
    An empty completion (most of a study's generations) has no span, document or personal data:
    what it adds depends on its extraction alone, so the registry's values for it are made once."""
    if not r.text and not r.final_spans and metrics is METRICS and (pii is None or not pii.detected):
        return dict(_empty_contributions(r.extracted, rare_max_count))
    view = without_loops(r)
    g = Generation(view.trace, leaks(r) if pii is None else pii, rare_max_count, view.loops)
    return {m.name: m.contribution(g) for m in metrics}


@lru_cache(maxsize=16)
def _empty_contributions(extracted: bool | None, rare_max_count: int) -> Contributions:
    """The registry's contributions of an empty completion (`contributions`)."""
    empty = TraceResult(key="", text="", n_tokens=0, degenerate=False, extracted=extracted)
    return {m.name: m.contribution(Generation(empty, PIILeaks(), rare_max_count)) for m in METRICS}


def pool(metric: Metric, counted: Iterable[Contributions]) -> tuple[float, float]:
    """A metric over counted generations: their contributions pooled by the metric (`Metric.pool`)."""
    return metric.pool(c[metric.name] for c in counted)


@dataclass
class Summary:
    """Counts and pooled metrics of one set of generations (`propme trace`'s summary).

    A metric whose denominator is 0 is None: undefined, never 0 (`Metric.pooled`).
    """

    n_generations: int
    n_counted: int
    n_degenerate: int
    n_failed: int
    n_loops: int = 0   #: counted generations with a loop span (`metrics.loops`: left out of every other metric)
    metrics: dict[str, float | None] = field(default_factory=dict)
    sums: dict[str, tuple[float, float]] = field(default_factory=dict)  #: pooled (numerator, denominator)
    #: each generation's contributions, in input order (None: not counted), for whatever pools them
    #: next (the leak tables of `propme trace`) without computing them again
    per_generation: list[Contributions | None] = field(default_factory=list, repr=False, compare=False)

    def __getattr__(self, name: str) -> float | None:
        metrics = self.__dict__.get("metrics", {})
        if name in metrics:
            return metrics[name]
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"n_generations": self.n_generations, "n_counted": self.n_counted,
                "n_degenerate": self.n_degenerate, "n_failed": self.n_failed, "n_loops": self.n_loops,
                **self.metrics}


def counted_contributions(r: TraceResult, drop_degenerate: bool = True, pii: PIILeaks | None = None,
                          rare_max_count: int = RARE_MAX_COUNT) -> Contributions | None:
    """`contributions` of a generation `summarize` counts; None for one it leaves out (failed, or
    degenerate when `drop_degenerate`)."""
    if r.error is not None or (drop_degenerate and r.degenerate):
        return None
    return contributions(r, pii=pii, rare_max_count=rare_max_count)


def summarize(results: Iterable[TraceResult], drop_degenerate: bool = True,
              pii: Sequence[PIILeaks] | None = None, rare_max_count: int = RARE_MAX_COUNT,
              per_generation: Sequence[Contributions | None] | None = None) -> Summary:
    """Pool every registry metric over the counted generations (degenerate ones dropped by default).
    `pii`: the generations' leaks when already computed (one per result); `rare_max_count`: `fmr_rare`'s
    threshold; `per_generation`: each result's `counted_contributions` with the same arguments, when
    already computed (`propme trace` computes them as results arrive)."""
    results = list(results)
    pii = [None] * len(results) if pii is None else list(pii)
    failed = sum(r.error is not None for r in results)
    degenerate = sum(r.error is None and r.degenerate for r in results)
    if per_generation is None:
        per_generation = [counted_contributions(r, drop_degenerate, p, rare_max_count) for r, p in zip(results, pii)]
    elif len(per_generation) != len(results):
        raise ValueError("per_generation must hold one entry per result")
    per_generation = list(per_generation)
    counted = [c for c in per_generation if c is not None]
    values: dict[str, float | None] = {}
    sums: dict[str, tuple[float, float]] = {}
    for m in METRICS:
        sums[m.name] = pool(m, counted)
        values[m.name] = m.pooled(*sums[m.name])
    return Summary(n_generations=len(results), n_counted=len(counted), n_degenerate=degenerate,
                   n_failed=failed, n_loops=int(sums["loops"][0]), metrics=values, sums=sums,
                   per_generation=per_generation)
