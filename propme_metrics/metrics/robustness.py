"""The robustness figures of one model on one corpus (`metrics.figures`): the predictability floor
and each setting's excess over it (`metrics.floor`), repeated sampling (`metrics.repeated`), and the
duplication and concentration of the long matches (`metrics.long_spans`).

The floor and the corpus counts need the index the generations were traced against; without it
(a report made on another machine) those figures are undefined and `note` says why.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from propme_metrics.metrics.figures import Figure
from propme_metrics.metrics.floor import excess_figures, floor_figures, floor_prompts, trace_config, trace_prompts
from propme_metrics.metrics.long_spans import (
    SpanCounts,
    concentration_figures,
    duplication_figures,
    extraction_by_copies,
    pm_figures,
)
from propme_metrics.metrics.pm import IntervalSpec
from propme_metrics.metrics.repeated import repeated_figures
from propme_metrics.metrics.runs import RunTask


@dataclass
class Robustness:
    """Every robustness figure of one model on one corpus, and why some are undefined."""

    figures: list[Figure] = field(default_factory=list)
    floor_prompts: int = 0          #: distinct generic and specific prompts traced for the floor
    note: str | None = None

    def get(self, name: str, setting: str) -> Figure | None:
        return next((f for f in self.figures if f.name == name and f.setting == setting), None)

    def to_dict(self) -> dict[str, Any]:
        return {"floor_prompts": self.floor_prompts, "note": self.note, "figures": [f.to_dict() for f in self.figures]}


def corpus_robustness(tasks: Mapping[str, RunTask], index, intervals: IntervalSpec, why: str | None = None
                      ) -> Robustness:
    """The figures of the tasks (by setting); `index`: the one they were traced against, or None (`why` not)."""
    prompts = floor_prompts(tasks)
    traces = None if index is None or not prompts else trace_prompts(prompts, index, trace_config(tasks))
    figures = floor_figures(traces, intervals) + excess_figures(tasks, traces, intervals)
    counts = {s: SpanCounts(t, index) for s, t in tasks.items()}
    for s, t in tasks.items():
        figures += repeated_figures(t, intervals)
        figures += duplication_figures(counts[s], intervals)
        figures += concentration_figures(counts[s], intervals)
        figures += extraction_by_copies(t, index, intervals)
    figures += pm_figures(counts, intervals)
    note = None
    if index is None:
        note = f"{why}: the predictability floor and the corpus counts of the long spans are undefined"
    elif not prompts:
        note = "no generic or specific prompt: the predictability floor is undefined"
    return Robustness(figures, len(prompts), note)
