"""Typed runs, what the statistics take: one PropMe subtask of one lm-eval run with its traced prompts
(`RunTask`), and one likelihood subtask with its scored documents (`LikelihoodTask`).

`report.load` reads them from lm-eval's output (every traced generation parsed into a `TraceResult`
once, there); `propme trace` builds one `RunTask` from a user's own generations.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from propme_metrics.metrics.likelihood import DocumentLikelihood
from propme_metrics.metrics.pm import PromptStat
from propme_metrics.metrics.provenance import RARE_MAX_COUNT
from propme_metrics.metrics.values import Contributions
from propme_metrics.prompts.settings import PROMPT_FREE_SETTINGS
from propme_metrics.prompts.start import StartToken
from propme_metrics.trace.result import TraceConfig, TraceResult
from propme_metrics.trace.text_rules import continuation_reproduced


@dataclass
class TracedPrompt:
    """One prompt of a setting with its traced generations (several when sampling)."""

    id: str
    prompt: str
    domain: str = ""
    language: str = ""
    continuation: str = ""
    source_doc: str = ""
    index_path: str = ""           #: the index folder the generations were traced against (as logged)
    generations: list[TraceResult] = field(default_factory=list)       #: as traced (and logged)
    values: list[Contributions | None] = field(default_factory=list)  #: per generation; None if not counted

    def stat(self, metric: str) -> PromptStat:
        """This prompt's (numerator, denominator) of a ratio metric over its counted generations."""
        return _stat([v for v in self.values if v is not None], metric)

    def generation_stats(self, metric: str) -> list[PromptStat]:
        """One (numerator, denominator) per counted generation (prompt-free settings resample these)."""
        return [_stat([v], metric) for v in self.values if v is not None]

    def counted(self) -> list[TraceResult]:
        """The generations that count for the metrics (those with contributions), in order."""
        return [g for g, v in zip(self.generations, self.values) if v is not None]


def _stat(counted: list[Contributions], metric: str) -> PromptStat:
    return PromptStat(float(sum(c[metric][0] for c in counted)), float(sum(c[metric][1] for c in counted)))


def stops_inside_continuation(result: TraceResult, continuation: str) -> bool:
    """Whether a prefix generation ended before the whole true continuation could be written while
    reproducing it so far (generation length, e.g. lm-eval's max_gen_toks, below the continuation's
    50 tokens): it can neither show nor rule out extraction. A short generation that already
    differs from the continuation is a real "not extracted". The tracer records such a generation as
    undefined (`continuation_reproduced` gives None); PropMe 0.2 recorded it as not extracted."""
    return (result.extracted is not True and bool(continuation)
            and continuation_reproduced(result.text, continuation) is None)


def limit_label(limit: float | None) -> str:
    """How a --limit run is marked in labels and columns: '' for a full run, 'limit8' or 'limit0.1'."""
    return "" if limit is None else f"limit{limit:g}"


@dataclass
class RunTask:
    """One PropMe subtask of one lm-eval run: a model x corpus x setting and its traced prompts."""

    task: str
    corpus: str
    setting: str
    model: str
    revision: str
    model_args: str
    metadata: dict[str, Any]
    index_identity: str | None
    results: dict[str, Any]        #: lm-eval's aggregates for the task ("<metric>,<filter>" keys)
    prompts: list[TracedPrompt]
    results_path: Path
    samples_path: Path
    date_id: str
    start_token: StartToken | None = None   #: what the logged samples' prompts started with (None: not recorded)
    limit: float | None = None     #: lm-eval's --limit of the run (None: a full run)
    rare_max_count: int = RARE_MAX_COUNT   #: `fmr_rare`'s threshold its metrics were computed with
    #: the tracing options its generations were traced with (a re-trace's when re-traced); None: not recorded
    trace_config: TraceConfig | None = None
    #: sha256 of the chat template lm-eval applied to its prompts (`--apply_chat_template`); None: plain prompts
    chat_template_sha: str | None = None

    @property
    def prompt_ids(self) -> frozenset[str]:
        return frozenset(p.id for p in self.prompts)

    @property
    def label(self) -> str:
        return f"{self.model}" + (f"@{self.revision}" if self.revision else "")

    def stats(self, metric: str) -> list[PromptStat]:
        """One PromptStat per resampling unit, in input order: the prompt, or the generation when prompt-free."""
        if self.setting in PROMPT_FREE_SETTINGS:
            return [st for p in self.prompts for st in p.generation_stats(metric)]
        return [p.stat(metric) for p in self.prompts]

    def cut_short(self) -> int:
        """How many generations stopped inside their true continuation (`stops_inside_continuation`)."""
        return sum(stops_inside_continuation(g, p.continuation) for p in self.prompts for g in p.generations)

    def counts(self) -> dict[str, int]:
        gens = [g for p in self.prompts for g in p.generations]
        failed = sum(g.error is not None for g in gens)
        degenerate = sum(g.error is None and bool(g.degenerate) for g in gens)
        counted = [v for p in self.prompts for v in p.values if v is not None]
        loops = int(sum(v["loops"][0] for v in counted if "loops" in v))
        return {"prompts": len(self.prompts), "generations": len(gens), "counted": len(counted),
                "failed": failed, "degenerate": degenerate, "loops": loops}


@dataclass
class LikelihoodTask:
    """One likelihood subtask of one lm-eval run: a model x corpus and its scored documents."""

    task: str
    corpus: str
    model: str
    revision: str
    metadata: dict[str, Any]
    documents: list[DocumentLikelihood]
    results_path: Path
    samples_path: Path
    date_id: str
    limit: float | None = None
    index_identity: str | None = None
    recorded: dict[str, Any] = field(default_factory=dict)  #: discoverable_n / _p the run used (first record)

    @property
    def family(self) -> str:
        return "_".join(x for x in (self.corpus, limit_label(self.limit)) if x)

    @property
    def label(self) -> str:
        return self.model + (f"@{self.revision}" if self.revision else "")
