"""Tracing deferred to lm-eval's aggregation: every prompt of a task traced in one bulk call.

lm-eval calls `process_results` once per document and keeps the items it returns twice, by
reference: in the logged sample and in the lists it later hands each metric's aggregation
function; it writes the samples only after aggregating (lm-eval 0.4.13, `evaluator.evaluate`).
So `process_results` may return placeholder items (`Item`) that point at their prompt's `Pending`
record, shared by all of the prompt's metrics. The first aggregation of a task traces every
pending prompt among its items in one `Tracer.iter_trace` call (forked workers, results in input
order and identical for any number of workers) and fills each prompt's items in place: the logged
samples and every aggregation then hold exactly what tracing in `process_results` gives. An item
read before that (a caller of `process_results` outside lm-eval) traces its own prompt first.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from propme_metrics.trace.result import TraceResult
from propme_metrics.trace.tracer import Tracer

#: at most this many tracing workers by default: a task of a few hundred generations gains little
#: from more, and every worker is a fork of the lm-eval process (the model's memory included)
MAX_DEFAULT_TRACE_WORKERS = 8
#: the variables that give the number of processes of a distributed run (those accelerate reads)
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")

#: what a pending item holds until it is filled: never empty, so `json.dumps` (which writes an empty
#: dict without asking it for its items) makes it trace its prompt, and an unfilled item is visible
PENDING_MARK = {"pending": "traced by the task's first aggregation"}
#: one generation to trace: (text, key, true continuation or None)
Job = tuple[str, str, "str | None"]


def default_trace_workers() -> int:
    """The CPUs this process may use, at most MAX_DEFAULT_TRACE_WORKERS."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return max(1, min(len(usable), MAX_DEFAULT_TRACE_WORKERS))


def distributed() -> bool:
    """Several processes run lm-eval together (accelerate, torchrun, MPI). Each traces its own
    documents then: lm-eval sends rank 0 the logged samples and the metric items by pickling them
    separately, so items filled later on rank 0 would never reach the logged samples."""
    for name in WORLD_SIZE_VARIABLES:
        try:
            if int(os.environ.get(name) or 1) > 1:
                return True
        except ValueError:
            continue
    return False


@dataclass(eq=False)
class Pending:
    """One prompt's generations, not traced yet, and the items lm-eval holds for it."""

    tracer: Tracer
    jobs: list[Job]
    #: the items' final contents (metric name -> dict) from the generations' traces, in job order
    build: Callable[[list[TraceResult]], dict[str, dict[str, Any]]]
    workers: int
    items: dict[str, Item] = field(default_factory=dict)

    def fill(self, traces: list[TraceResult]) -> None:
        """Put the traced values into the items, in place; they stop pointing here."""
        values = self.build(traces)
        for name, item in self.items.items():
            item.pending = None
            dict.clear(item)
            dict.update(item, values[name])
        self.items = {}

    def resolve(self) -> None:
        """Trace this prompt alone, in this process (an item was read before any aggregation)."""
        with closing(traced(self.tracer, self.jobs, 1)) as results:
            self.fill(list(results))


class Item(dict):
    """A metric item of one prompt: PENDING_MARK while its prompt is pending, then the value, filled
    in place. `json.dumps` and `pickle` see only its keys; any read traces a pending prompt first."""

    def __init__(self, pending: Pending | None = None):
        super().__init__(PENDING_MARK)
        self.pending = pending

    def __reduce__(self):  # copies and pickles are plain dicts of the final value
        return dict, (dict(self.items()),)


def _reading(name: str):
    plain = getattr(dict, name)

    def read(self: Item, *args: Any, **kwargs: Any) -> Any:
        if self.pending is not None:
            self.pending.resolve()
        return plain(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = name
    return read


def _comparing(name: str):
    plain = getattr(dict, name)

    def compare(self: Item, other: Any) -> Any:
        for side in (self, other):  # dict's comparison reads the other side's storage directly
            if getattr(side, "pending", None) is not None:
                side.pending.resolve()
        return plain(self, other)

    compare.__name__ = compare.__qualname__ = name
    return compare


# every way to read a dict, so that a reader never sees a pending item empty
for _name in ("__getitem__", "__contains__", "__iter__", "__len__", "__reversed__", "__repr__", "__or__",
              "__ror__", "get", "keys", "values", "items", "copy"):
    setattr(Item, _name, _reading(_name))
for _name in ("__eq__", "__ne__"):
    setattr(Item, _name, _comparing(_name))


def pending_items(tracer: Tracer, jobs: list[Job], build: Callable[[list[TraceResult]], dict[str, dict[str, Any]]],
                  names: Iterable[str], workers: int) -> dict[str, Item]:
    """`process_results`' answer for a prompt traced later: one empty item per metric name."""
    pending = Pending(tracer, jobs, build, workers)
    pending.items = {name: Item(pending) for name in names}
    return dict(pending.items)


def trace_pending(items: Iterable[Any]) -> None:
    """Trace every prompt still pending among one aggregation's items, one bulk call per tracer,
    and fill their items (nothing to do once the task's first aggregation has run)."""
    pending = list(dict.fromkeys(p for i in items if (p := getattr(i, "pending", None)) is not None))
    by_tracer: dict[Tracer, list[Pending]] = {}
    for p in pending:
        by_tracer.setdefault(p.tracer, []).append(p)
    for tracer, group in by_tracer.items():
        jobs = [job for p in group for job in p.jobs]
        with closing(traced(tracer, jobs, max(p.workers for p in group))) as results:
            for p in group:
                p.fill([next(results) for _ in p.jobs])


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
