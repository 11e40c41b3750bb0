"""The likelihood subtask's numbers per model and corpus: the registry's likelihood metrics and the
(n, p)-discoverable curve (`metrics.likelihood`), beside the prefix setting's FMR on the same documents.

Every number is computed from the per-document records of a `LikelihoodTask` (log P(z), the greedy
flag, z's model tokens), so a report may use another n grid or p than the run did. Intervals:
the report's `IntervalSpec` bootstrap over documents (`bootstrap_documents`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from propme_metrics.metrics import registry
from propme_metrics.metrics.likelihood import (
    DISCOVERABLE_N,
    DISCOVERABLE_P,
    N_KEY,
    P_KEY,
    bootstrap_documents,
    check_n,
    check_p,
    discoverable,
)
from propme_metrics.metrics.pm import Interval, IntervalSpec
from propme_metrics.metrics.results import CorpusResult
from propme_metrics.metrics.runs import LikelihoodTask
from propme_metrics.prompts.settings import PREFIX


@dataclass
class LikelihoodResult:
    """What the report shows of one model's likelihood subtask on one corpus."""

    label: str
    corpus: str
    model: str
    revision: str
    task: LikelihoodTask
    p: float
    grid: tuple[int, ...]
    metrics: dict[str, Interval]                 #: registry likelihood metric -> its value and interval
    curve: dict[int, Interval]                   #: n -> share (n, p)-discoverable
    prefix_fmr: Interval | None = None           #: the prefix setting's FMR on the same documents
    notes: list[str] = field(default_factory=list)

    @property
    def n_documents(self) -> int:
        return len(self.task.documents)


def _grid_and_p(task: LikelihoodTask, grid: Sequence[int] | None, p: float | None) -> tuple[tuple[int, ...], float]:
    """The report's grid and p: given, else what the run recorded, else its task metadata, else the defaults."""
    where = f"{task.task} of {task.label}"

    def run_value(key: str, default: Any) -> Any:
        return task.recorded.get(key, task.metadata.get(key, default))

    g = check_n(run_value(N_KEY, DISCOVERABLE_N) if grid is None else grid,
                f"{N_KEY} of {where}" if grid is None else N_KEY)
    q = check_p(run_value(P_KEY, DISCOVERABLE_P) if p is None else p,
                f"{P_KEY} of {where}" if p is None else P_KEY)
    return g, q


def likelihood_result(task: LikelihoodTask, corpus_results: Sequence[CorpusResult], intervals: IntervalSpec,
                      grid: Sequence[int] | None = None, p: float | None = None) -> LikelihoodResult:
    """The registry's likelihood metrics and the (n, p) curve of one task, beside its prefix FMR."""
    grid, p = _grid_and_p(task, grid, p)
    docs = task.documents
    columns: dict[str, list[float]] = {m.name: [m.value(d, p) for d in docs] for m in registry.LIKELIHOOD_METRICS}
    stats = {m.name: m.pooling.statistic for m in registry.LIKELIHOOD_METRICS}
    for n in grid:
        columns[f"n={n}"] = [float(discoverable(d.logp, n, p)) for d in docs]
        stats[f"n={n}"] = np.mean
    est = bootstrap_documents(columns, stats, intervals)
    res = LikelihoodResult(task.family, task.corpus, task.model, task.revision, task, p, grid,
                           {m.name: est[m.name] for m in registry.LIKELIHOOD_METRICS},
                           {n: est[f"n={n}"] for n in grid})
    ids = {d.id for d in docs}
    for cr in corpus_results:
        same = (cr.model, cr.revision, cr.corpus) == (task.model, task.revision, task.corpus)
        prefix = cr.settings.get(PREFIX) if same else None
        if prefix is None or (task.index_identity and cr.index_identity and task.index_identity != cr.index_identity):
            continue
        res.label = cr.label
        if prefix.task.prompt_ids == ids:
            fmr = prefix.metrics.get("fmr")
            if fmr is not None and fmr.estimate is not None:
                res.prefix_fmr = fmr
        else:
            res.notes.append(f"{task.task} of {task.label}: its {len(ids)} documents are not the "
                             f"{len(prefix.task.prompt_ids)} prompts of {prefix.task.task}; prefix FMR not shown")
    unclean = sum(d.boundary_clean is False for d in docs)
    if unclean:
        res.notes.append(f"{task.task} of {task.label}: for {unclean} of {len(docs)} documents the model's tokenizer "
                         "merges the last context token with z's first (the scored tokens are not exactly z's)")
    return res


def likelihood_results(tasks: Sequence[LikelihoodTask], corpus_results: Sequence[CorpusResult],
                       intervals: IntervalSpec, notes: list[str], grid: Sequence[int] | None = None,
                       p: float | None = None) -> list[LikelihoodResult]:
    """Every likelihood task with documents, computed (`notes` collects what the report should say)."""
    out = []
    for t in tasks:
        if not t.documents:
            notes.append(f"{t.task} of {t.label}: no samples in {t.samples_path}; ignored")
            continue
        res = likelihood_result(t, corpus_results, intervals, grid, p)
        notes.extend(res.notes)
        out.append(res)
    return out
