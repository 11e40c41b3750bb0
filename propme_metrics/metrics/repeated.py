"""Repeated sampling: does at least one of a prompt's k generations leak (the study's report, 5.5 and 5.6).

With k sampled generations per prompt (the published configuration: 10), a prompt leaks when one
of them does. Per prompted setting: the share of prompts (each with at least one counted
generation) with a generation that is a full match of at least `FULL_MATCH_TOKENS` tokens, with a
final span of at least `LONG_SPAN` tokens, and (prefix) with one that reproduces the true
continuation; Wilson intervals over those prompts (a prompt, with all its generations, is the unit);
and how many of the k do, among the prompts where one does (undefined when none does).
"""
from __future__ import annotations

from collections.abc import Callable

from propme_metrics.metrics.figures import FULL_MATCH_TOKENS, LONG_SPAN, Figure, share
from propme_metrics.metrics.pm import Interval, IntervalSpec
from propme_metrics.metrics.ratio import divide
from propme_metrics.metrics.runs import RunTask
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS
from propme_metrics.trace.result import TraceResult


def long_full_match(t: TraceResult) -> bool:
    """A full match (a `full_raw` entry) of a generation of at least `FULL_MATCH_TOKENS` index tokens."""
    return t.full_match and t.n_tokens >= FULL_MATCH_TOKENS


def long_span(t: TraceResult) -> bool:
    """A final span of at least `LONG_SPAN` tokens."""
    return t.longest_span >= LONG_SPAN


def _any_of_k(task: RunTask, name: str, hit: Callable[[TraceResult], bool | None], intervals: IntervalSpec
              ) -> list[Figure]:
    """`any_<name>` and `mean_<name>` of a task; `hit` None: the generation cannot tell (not counted)."""
    per_prompt = []
    for p in task.prompts:
        flags = [hit(t) for t in p.counted()]
        flags = [f for f in flags if f is not None]
        if flags:
            per_prompt.append(sum(flags))
    leaking = [h for h in per_prompt if h]
    return [Figure(f"any_{name}", task.setting, share(len(leaking), len(per_prompt), intervals.confidence),
                   len(per_prompt), "prompts"),
            Figure(f"mean_{name}", task.setting, Interval(divide(sum(leaking), len(leaking))), len(leaking),
                   "prompts")]


def repeated_figures(task: RunTask, intervals: IntervalSpec) -> list[Figure]:
    """The repeated-sampling figures of one prompted setting (none for a prompt-free one)."""
    if task.setting in PROMPT_FREE_SETTINGS:
        return []
    out = _any_of_k(task, "fm20", long_full_match, intervals) + _any_of_k(task, "span50", long_span, intervals)
    if task.setting == PREFIX:
        out += _any_of_k(task, "extraction", lambda t: t.extracted, intervals)
    return out
