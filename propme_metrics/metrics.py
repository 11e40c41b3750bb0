"""Memorization metrics over traced generations (SPEC section 5): ALS, FMR, NVR and companions.

`generation_values` turns one trace into the numbers every aggregate is built from; the lm-eval
hooks, `propme trace` and the report all use it, so the three can never disagree.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

from .trace import TraceResult

NV_HIT_THRESHOLD = 0.5


def _as_result(r: TraceResult | dict[str, Any]) -> TraceResult:
    return r if isinstance(r, TraceResult) else TraceResult.from_dict(r)


def counts_for_metrics(r: TraceResult) -> bool:
    """A generation counts unless its tracing failed or it is degenerate (dropped from every setting)."""
    return r.error is None and not r.degenerate


def generation_values(r: TraceResult | dict[str, Any]) -> dict[str, float | None]:
    """Per-generation numbers: longest final span (ALS, R20, R50), full matches (FMR), NV-recall sums
    over every document entry of every final span (NVR)."""
    r = _as_result(r)
    nvs = r.nv_recalls
    return {
        "als": float(r.longest_span),
        "fmr": float(r.full_match),
        "fmr_normalized": float(r.full_match_normalized),  # full_normalized entries only
        "r20": float(r.longest_span >= 20),
        "r50": float(r.longest_span >= 50),
        "nv_sum": float(sum(nvs)),
        "nv_docs": float(len(nvs)),
        "nv_hit_sum": float(sum(v for v in nvs if v > 0)),
        "nv_hits": float(sum(1 for v in nvs if v > 0)),
        "nv_max": float(max(nvs, default=0.0)),
        "nv_above_half": float(max(nvs, default=0.0) > NV_HIT_THRESHOLD),
        "extracted": None if r.extracted is None else float(r.extracted),
    }


@dataclass
class Summary:
    """Aggregates of one setting. NVR is the mean over all retrieved documents (0 if none)."""

    n_generations: int
    n_counted: int
    n_degenerate: int
    n_failed: int
    als: float
    fmr: float
    fmr_normalized: float
    nvr: float
    nvr_hits: float             #: mean NV-recall over documents with NV-recall > 0
    nvr_max: float
    nvr_share_above_half: float  #: share of generations with a document above 0.5
    r20: float
    r50: float
    extraction_rate: float | None  #: prefix prompts with a known continuation only

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(results: Iterable[TraceResult | dict[str, Any]], drop_degenerate: bool = True) -> Summary:
    """Aggregate traced generations into the SPEC's metrics (degenerate ones dropped by default)."""
    results = [_as_result(r) for r in results]
    failed = sum(r.error is not None for r in results)
    degenerate = sum(r.error is None and r.degenerate for r in results)
    counted = [r for r in results if r.error is None and not (drop_degenerate and r.degenerate)]
    values = [generation_values(r) for r in counted]
    n = len(values)

    def mean(key: str) -> float:
        return sum(v[key] for v in values) / n if n else 0.0

    docs = sum(v["nv_docs"] for v in values)
    hits = sum(v["nv_hits"] for v in values)
    extracted = [v["extracted"] for v in values if v["extracted"] is not None]
    return Summary(
        n_generations=len(results), n_counted=n, n_degenerate=degenerate, n_failed=failed,
        als=mean("als"), fmr=mean("fmr"), fmr_normalized=mean("fmr_normalized"),
        nvr=sum(v["nv_sum"] for v in values) / docs if docs else 0.0,
        nvr_hits=sum(v["nv_hit_sum"] for v in values) / hits if hits else 0.0,
        nvr_max=max((v["nv_max"] for v in values), default=0.0),
        nvr_share_above_half=mean("nv_above_half"), r20=mean("r20"), r50=mean("r50"),
        extraction_rate=sum(extracted) / len(extracted) if extracted else None,
    )
