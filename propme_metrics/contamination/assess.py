"""The contamination check computed: every task's items matched against the index, the rule
applied, the per-task figures, and the sources of the flagged items' spans. `report/` lays the
result out and writes it (`report.contamination_views`)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from propme_metrics.contamination.check import KgramCounts, TaskCheck, apply_rule, match_items
from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.match import CorpusMatcher
from propme_metrics.contamination.rule import ContaminationRule
from propme_metrics.contamination.runs import BenchmarkRun
from propme_metrics.contamination.sources import SHOWN_ITEMS, FlaggedItem, locate_flagged
from propme_metrics.contamination.summary import TaskSummary, task_summary
from propme_metrics.index.reader import Index
from propme_metrics.index.search import IndexSearch
from propme_metrics.metrics.pm import DEFAULT_INTERVALS, IntervalSpec


@dataclass
class ContaminationResult:
    """The check of one or more benchmark tasks against one index under one rule."""

    index_path: str
    index_identity: str
    rule: ContaminationRule
    intervals: IntervalSpec                  #: how every figure's interval was made
    checks: list[TaskCheck]
    summaries: dict[str, TaskSummary]
    flagged: dict[str, list[FlaggedItem]]   #: per task, its first flagged items with their spans' sources
    seconds: float = 0.0                     #: time spent matching
    #: task -> model label -> the model's run of it, when the items come from runs
    runs: dict[str, dict[str, BenchmarkRun]] = field(default_factory=dict)

    @property
    def items(self) -> int:
        return sum(len(c.items) for c in self.checks)


def check_tasks(index: Index, per_task: Sequence[tuple[str, Sequence[BenchmarkItem]]], rule: ContaminationRule,
                workers: int = 1, intervals: IntervalSpec = DEFAULT_INTERVALS, quiet: bool = True,
                runs: dict[str, dict[str, BenchmarkRun]] | None = None, shown_items: int = SHOWN_ITEMS,
                search: IndexSearch | None = None) -> ContaminationResult:
    """Match every task's items (`workers` processes), apply `rule`, summarize each task (every
    interval by `intervals`) and locate the spans of its first `shown_items` flagged
    items. `runs`: the models' runs of each task, when the items come from runs. `search`:
    another search path than the index's own (its shards on Ray: `CorpusMatcher`)."""
    from propme_metrics.core.progress import progress_bar, rate

    matcher = CorpusMatcher(index, workers=workers, search=search)
    counts = KgramCounts(matcher)
    total = sum(len(items) for _, items in per_task)
    started = time.time()
    checks = []
    with progress_bar(not quiet) as bar:
        job = bar.add_task("matching items", total=total, rate="")

        def advance(n: int) -> None:
            bar.update(job, advance=n, rate=rate(bar.tasks[job].completed + n, time.time() - started, "items"))

        for name, items in per_task:
            checks.append(apply_rule(name, match_items(items, matcher, advance), rule, counts))
    seconds = time.time() - started
    return ContaminationResult(
        str(index.path), index.manifest.identity, rule, intervals, checks,
        {c.task: task_summary(c, intervals) for c in checks},
        {c.task: locate_flagged(matcher, c, shown_items) for c in checks}, seconds, dict(runs or {}))
