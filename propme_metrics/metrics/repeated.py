"""Repeated sampling: does at least one of a prompt's k generations leak (the study's report, 5.5 and 5.6).

With k sampled generations per prompt (the published configuration: 10), a prompt leaks when one
of them does. Per prompted setting: the share of prompts (each with at least one counted
generation) with a generation that is a full match of at least `FULL_MATCH_TOKENS` tokens, with a
final span of at least `LONG_SPAN` tokens, and (prefix) with one that reproduces the true
continuation (each event as the registry's `fmr20`, `r50` and `extraction` count it: loop spans
left out); Wilson intervals over those prompts (a prompt, with all its generations, is the unit);
and how many of the k do, among the prompts where one does (undefined when none does).
"""
from __future__ import annotations

from propme_metrics.metrics.figures import FULL_MATCH_TOKENS, LONG_SPAN, Figure, share
from propme_metrics.metrics.pm import Interval, IntervalSpec
from propme_metrics.metrics.ratio import divide
from propme_metrics.metrics.runs import RunTask
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS

#: figure stem -> the registry metric whose per-generation event it counts (loop spans left out there)
EVENTS = {"fm20": f"fmr{FULL_MATCH_TOKENS}", "span50": f"r{LONG_SPAN}", "extraction": "extraction"}


def _any_of_k(task: RunTask, name: str, intervals: IntervalSpec) -> list[Figure]:
    """`any_<name>` and `mean_<name>` of a task, from its generations' contributions to the metric of
    `EVENTS` (a generation without a denominator, e.g. no known continuation, cannot tell: left out)."""
    metric = EVENTS[name]
    per_prompt = []
    for p in task.prompts:
        flags = [v[metric][0] > 0 for v in p.values if v is not None and v[metric][1] > 0]
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
    names = ("fm20", "span50", "extraction") if task.setting == PREFIX else ("fm20", "span50")
    return [f for n in names for f in _any_of_k(task, n, intervals)]
