"""Tracing in bulk, once per task, before lm-eval scores its documents.

lm-eval runs every request of a task, then applies the task's filters (`Task.apply_filters`), then
calls `process_results` once per document (lm-eval 0.4.13, `evaluator.evaluate`). PropMe's task
class traces every generation of the task between the two (`trace_ahead`: one `Tracer.iter_trace`
call per tracer, forked workers, results in input order and identical for any number of workers),
so `process_results` finds its prompt's traces ready (`take`) and hands lm-eval final values: plain
numbers per metric in the logged samples. A caller of `process_results` outside lm-eval (nothing
traced ahead) traces its prompt itself, with the same result. Each process of a distributed run
traces the documents it scores.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import closing

from propme_metrics.trace.result import TraceResult
from propme_metrics.trace.tracer import Tracer

#: at most this many tracing workers by default: a task of a few hundred generations gains little
#: from more, and every worker is a fork of the lm-eval process (the model's memory included)
MAX_DEFAULT_TRACE_WORKERS = 8

#: one generation to trace: (text, key, true continuation or None)
Job = tuple[str, str, "str | None"]
#: the traces made ahead, by job, until `process_results` takes them
_TRACED: dict[Job, TraceResult] = {}


def default_trace_workers() -> int:
    """The CPUs this process may use, at most MAX_DEFAULT_TRACE_WORKERS."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return max(1, min(len(usable), MAX_DEFAULT_TRACE_WORKERS))


def trace_ahead(batches: Iterable[tuple[Tracer, list[Job], int]]) -> None:
    """Trace every job of a task's (tracer, jobs, workers) batches, one bulk call per tracer with the
    most workers any of its batches asks for, and keep the traces for `take` (those of an earlier
    task are dropped)."""
    _TRACED.clear()
    queued: dict[Tracer, dict[Job, None]] = {}
    most: dict[Tracer, int] = {}
    for tracer, jobs, workers in batches:
        queued.setdefault(tracer, {}).update(dict.fromkeys(jobs))  # a job twice (another filter): traced once
        most[tracer] = max(most.get(tracer, 1), workers)
    for tracer, jobs in queued.items():
        with closing(traced(tracer, list(jobs), most[tracer])) as results:
            _TRACED.update(zip(jobs, results))


def take(jobs: list[Job]) -> list[TraceResult] | None:
    """The traces of one prompt's jobs made ahead (each taken once), or None when any is missing."""
    if not jobs or not all(job in _TRACED for job in jobs):
        return None
    return [_TRACED.pop(job) for job in jobs]


def traced(tracer: Tracer, jobs: list[Job], workers: int) -> Iterator[TraceResult]:
    """The traces of `jobs` in order, by `workers` processes; should the workers fail, the rest are
    traced in this process (said in one line on stderr), with the same results."""
    done = 0
    if jobs:
        texts, keys, continuations = (list(column) for column in zip(*jobs))
        try:
            for result in tracer.iter_trace(texts, keys, continuations, workers=workers):
                done += 1
                yield result
        except Exception as exc:  # deliberately broad: the run goes on, tracing in this process
            print(f"PropMe: parallel tracing failed ({type(exc).__name__}: {' '.join(str(exc).split())}); "
                  f"tracing the remaining {len(jobs) - done} generations in this process", file=sys.stderr, flush=True)
    for job in jobs[done:]:
        yield tracer.safe_trace_one(*job)
