"""Loop spans: final spans that only repeat one short unit of text (the study's report, section 5.2).

A model that repeats a line of boilerplate ("I'm sorry. I'm sorry. ...", `| | |`) matches repetitive
training text over many tokens without reproducing any document. A final span of at least
`LOOP_MIN_TOKENS` index tokens is a loop when its text, white space collapsed, is a unit of at most
`LOOP_MAX_UNIT` characters repeated at least `LOOP_MIN_REPEATS` times, with at least `LOOP_AGREEMENT`
of its characters equal to the character one period later. Code or prose whose repeated parts vary
(names, numbers) is not periodic. The metrics read a generation without its loop spans
(`without_loops`), and the loops are counted apart (the `loops` metric, the `loops` count).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from propme_metrics.trace.result import FinalSpan, TraceResult

#: shorter spans are never loops (no long-span metric reads them)
LOOP_MIN_TOKENS = 20
#: the longest repeated unit, in characters
LOOP_MAX_UNIT = 200
#: the unit repeats at least this many times
LOOP_MIN_REPEATS = 3
#: share of characters equal to the one a period later
LOOP_AGREEMENT = 0.9


@lru_cache(maxsize=4096)  # a span's text is read by every metric pass over a trace (summary, leak tables, figures)
def is_periodic(text: str) -> bool:
    """Whether `text`, white space collapsed, repeats one unit of at most LOOP_MAX_UNIT characters at
    least LOOP_MIN_REPEATS times with LOOP_AGREEMENT of its characters equal one period later."""
    folded = " ".join(text.split())
    codes = np.frombuffer(folded.encode("utf-32-le"), dtype=np.uint32)
    n = len(codes)
    top = min(LOOP_MAX_UNIT, n // LOOP_MIN_REPEATS)
    if top < 1:
        return False
    # every period at once: row i holds codes[i .. i + top]; the pad (values no character has, all
    # different) makes a comparison past the end false, so column p - 1 counts exactly the n - p pairs
    pad = np.arange(0x110000, 0x110000 + top, dtype=np.uint32)
    rows = np.lib.stride_tricks.sliding_window_view(np.concatenate([codes, pad]), top + 1)[:n]
    equal = np.count_nonzero(rows[:, 1:] == rows[:, :1], axis=0)
    periods = np.arange(1, top + 1)
    return bool(np.any(equal >= LOOP_AGREEMENT * (n - periods)))


def is_loop(span: FinalSpan) -> bool:
    """A final span of at least LOOP_MIN_TOKENS tokens whose text is periodic (`is_periodic`)."""
    return span.length >= LOOP_MIN_TOKENS and is_periodic(span.text)


@dataclass(frozen=True)
class LoopFree:
    """A trace as the metrics read it: `trace` without its loop spans, and how many were removed."""

    trace: TraceResult
    loops: int


def without_loops(trace: TraceResult) -> LoopFree:
    """The trace without its loop spans (the same object when it has none)."""
    kept = [s for s in trace.final_spans if not is_loop(s)]
    if len(kept) == len(trace.final_spans):
        return LoopFree(trace, 0)
    return LoopFree(replace(trace, final_spans=kept), len(trace.final_spans) - len(kept))
