"""`propme trace` as a library call: a `TraceRequest` in, a `TraceOutcome` out (`trace_generations`:
the generations traced, resumably, the metrics pooled, and the report's leak and robustness
tables computed on them), then RESULTS.jsonl and SUMMARY.json written (`write_trace`). It sits in
`report/` because the leak tables are the report's analysis (`report.trace_provenance`).

Two seeds, never one for both: the tracing option `seed` (in `config`) draws the document samples
of every generation, and `bootstrap_seed` the leak tables' bootstrap alone, so a bootstrap seed
cannot change a trace.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.limits import MAX_SEED
from propme_metrics.core.requests import Request, option
from propme_metrics.metrics.provenance import RARE_MAX_COUNT
from propme_metrics.metrics.provenance_analysis import CorpusLeaks
from propme_metrics.metrics.robustness import Robustness
from propme_metrics.metrics.values import Contributions, Summary
from propme_metrics.trace.inputs import TraceInput
from propme_metrics.trace.pii import PIILeaks
from propme_metrics.trace.result import TraceConfig, TraceResult

#: `propme trace --bootstrap`: fewer resamples than `propme report`'s, because the leak tables come on top
#: of every trace (benchmarks/trace_provenance.py: about 0.17 of the tracing CPU time at 1,000, 0.77 at 10,000,
#: on a small index where tracing is fast)
TRACE_LEAK_BOOTSTRAP = 1000


@dataclass(frozen=True)
class TraceRequest(Request):
    """Trace the generations of `input` against the index `index`; RESULTS.jsonl to `out`, SUMMARY.json to `summary`."""

    index: Path = option(help="index folder")
    input: Path = option(help="generations: JSONL or an lm-eval samples_*.jsonl")
    out: Path = option(help="RESULTS.jsonl to write: one line per generation")
    summary: Path = option(help="SUMMARY.json to write: metrics, parameters, index identity")
    config: TraceConfig = option(default_factory=TraceConfig, help="the tracing options (`TraceConfig`)")
    text_field: str = option("completion", help="field of a JSONL row holding the generation")
    key_field: str | None = option(None, help="field naming a generation (default: key, id or doc_id if present, "
                                   "else the line number)")
    workers: int = option(1, minimum=1, help="processes tracing in parallel, forked only when the rest of the job "
                          "pays for them once its first generations are traced here (with --ray: generations "
                          "traced concurrently by driver threads)")
    ray: str | None = option(None, help="search the shards on a Ray cluster: the address (host:port; '' for "
                             "RAY_ADDRESS, else a local one); None: no Ray")
    actors: int | None = option(None, minimum=1, help="with --ray: actors holding the shards (default: one per free "
                                "CPU of the cluster, at most one per shard)")
    check_tokenizer: str | None = option(None, flag="--check-tokenizer", help="check that this tokenizer (hub id or "
                                         "folder) is the index's; error if not (--tokenizer: the older name)")
    rare_max_count: int = option(RARE_MAX_COUNT, minimum=1, help="fmr_rare counts a full match whose text occurs "
                                 "at most N times in the corpus")
    bootstrap: int = option(TRACE_LEAK_BOOTSTRAP, minimum=0, help="bootstrap resamples of the leak tables' "
                            "enrichment intervals (seeded with --bootstrap-seed; 0: none)")
    bootstrap_seed: int = option(0, minimum=0, maximum=MAX_SEED, help="seed of the leak tables' bootstrap (same "
                                 "inputs and seed, same intervals); never seeds the traces (--seed does)")
    keep_degenerate: bool = option(False, help="count degenerate generations (repetitive junk) in the metrics "
                                   "instead of dropping them")
    show_pii: bool = option(False, help="write and print leaked personal data unmasked (default: masked, e.g. "
                            "j***@e***.dk)")
    quiet: bool = option(False, help="no progress bar")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("index", "input", "out", "summary"):
            object.__setattr__(self, name, Path(getattr(self, name)))

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> TraceRequest:
        """The request of `propme trace`'s arguments (the tracing options make `config`)."""
        from propme_metrics.trace.options import TRACE_OPTIONS

        config = TraceConfig(**{o.name: getattr(args, o.name) for o in TRACE_OPTIONS})  # in range: the parser checked
        return replace(super().from_cli(args), config=config)


@dataclass
class TraceOutcome:
    """What a trace found: every generation's result (in input order) and its personal data, the
    pooled metrics, the leak and robustness tables, and how the run went."""

    request: TraceRequest
    generations: list[TraceInput]
    input_format: str                  #: 'jsonl' or an lm-eval samples file (`trace.inputs.SAMPLES_FORMAT`)
    index_identity: str
    results: list[TraceResult]
    personal: list[PIILeaks]
    summary: Summary
    leaked_items: int                  #: personal data items leaked, over the counted generations
    leaks: CorpusLeaks
    robustness: Robustness
    record: dict[str, Any] = field(default_factory=dict)   #: SUMMARY.json
    resumed: int = 0                   #: generations an interrupted run had traced (kept)
    seconds: float = 0.0               #: tracing time of this run

    @property
    def speed(self) -> str:
        """Generations traced per second by this run, for the table."""
        return f"{(len(self.results) - self.resumed) / self.seconds:,.1f} generations/s" if self.seconds > 0 else "-"


def trace_generations(request: TraceRequest) -> TraceOutcome:
    """Trace the request's generations (resuming an interrupted run of the same job, `trace.runner`)
    and compute their metrics, leak and robustness tables; nothing but the journal is written
    (`write_trace` writes the outputs)."""
    from propme_metrics.core.checksums import file_digest
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.reader import open_index
    from propme_metrics.metrics.values import counted_contributions, summarize
    from propme_metrics.report.trace_provenance import leaks_record, trace_leaks, trace_robustness, traced_task
    from propme_metrics.runs.generations import read_generations
    from propme_metrics.trace.pii import leaks
    from propme_metrics.trace.runner import job_fingerprint, trace_resumable
    from propme_metrics.trace.summary import summary_record
    from propme_metrics.trace.tracer import Tracer

    r = request
    check_outputs({"--out": r.out, "--summary": r.summary}, {"--input": r.input}, {"--index": r.index})
    generations, fmt = read_generations(r.input, text_field=r.text_field, key_field=r.key_field)
    index = open_index(r.index)
    manifest = index.manifest
    if r.check_tokenizer:
        index.check_tokenizer(r.check_tokenizer)
    try:
        for path in (r.out, r.summary):
            path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder for the results: {exc}") from None
    if r.ray is not None:
        from propme_metrics.trace.ray_search import ray_tracer

        tracer = ray_tracer(index, r.config, address=r.ray or None, actors=r.actors)
    else:
        tracer = Tracer(index, r.config)
    fingerprint = job_fingerprint(file_digest(r.input), manifest.identity, r.config.to_dict(), generations)
    results: list[TraceResult] = []
    personal: list[PIILeaks] = []
    per_generation: list[Contributions | None] = []

    def take(x: TraceResult) -> None:
        """One result as it arrives (the workers trace on meanwhile): its input's error, personal data, contributions."""
        g = generations[len(results)]
        x = x if g.missing is None else replace(x, error=g.missing)
        results.append(x)
        personal.append(leaks(x))
        per_generation.append(counted_contributions(x, not r.keep_degenerate, personal[-1], r.rare_max_count))

    started = time.time()
    _, resumed = trace_resumable(tracer, generations, r.out, fingerprint, workers=r.workers, progress=not r.quiet,
                                 on_result=take)
    seconds = time.time() - started
    summary = summarize(results, drop_degenerate=not r.keep_degenerate, pii=personal, rare_max_count=r.rare_max_count,
                        per_generation=per_generation)
    leaked_items = int(summary.sums["pii_items"][0])  # over the counted generations
    task = traced_task(generations, results, index.path, manifest.identity, r.rare_max_count, summary.per_generation)
    leaks_found = trace_leaks(task, r.bootstrap, r.bootstrap_seed)
    robust = trace_robustness(task, index, r.bootstrap, r.bootstrap_seed)
    record = summary_record(summary.to_dict(), leaked_items, r.config, not r.keep_degenerate, r.rare_max_count,
                            index, r.input, fmt, r.text_field, r.out, leaks=leaks_record(leaks_found),
                            robustness=robust.to_dict())
    record["bootstrap_seed"] = r.bootstrap_seed  # the leak tables' (the traces' seed is config.seed)
    return TraceOutcome(r, generations, fmt, manifest.identity, results, personal, summary, leaked_items, leaks_found,
                        robust, record, resumed, seconds)


def write_trace(outcome: TraceOutcome) -> list[Path]:
    """Write RESULTS.jsonl and SUMMARY.json of a trace (`trace.summary.write_trace_outputs`, each
    atomically) and drop its journal; returns the two paths."""
    from propme_metrics.trace.runner import finish
    from propme_metrics.trace.summary import write_trace_outputs

    r = outcome.request
    write_trace_outputs(r.out, r.summary, outcome.results, outcome.personal, outcome.record, show_pii=r.show_pii)
    finish(r.out)
    return [r.out, r.summary]
