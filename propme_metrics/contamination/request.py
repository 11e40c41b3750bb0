"""What `propme contamination` is asked to do (`ContaminationRequest`): the runs or tasks whose items
are checked, the index, the rule, the intervals and the search, each field with its help and
bounds (`core.requests`); `propme_tasks.contamination_run` carries it out (lm-eval rebuilds the
tasks' items)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from pathlib import Path

from propme_metrics.contamination.rule import ContaminationRule
from propme_metrics.core.limits import MAX_SEED
from propme_metrics.core.requests import Request, option
from propme_metrics.metrics.pm import DEFAULT_BOOTSTRAP


@dataclass(frozen=True)
class ContaminationRequest(Request):
    """Check the benchmark items of `runs` (or of `tasks`, through lm-eval) against `index`; files into `out`."""

    index: Path = option(help="index folder of the model's training corpus")
    out: Path = option(help="folder to write")
    runs: tuple[str | Path, ...] = option((), help="lm-eval --output_path folder or results_*.json file")
    tasks: tuple[str, ...] = option((), help="comma-separated tasks (with RUN: only these of the runs' tasks; "
                                    "without: the tasks whose documents lm-eval loads, groups and tags expanded)")
    include_path: str | None = option(None, help="folder of local lm-eval task YAML (lm-eval's --include_path)")
    limit: int | None = option(None, minimum=1, help="the first N documents of each task (with RUN: of those the "
                               "runs logged, by doc_id)")
    rule: ContaminationRule = field(default_factory=ContaminationRule)   #: when an item is contaminated
    bootstrap: int = option(DEFAULT_BOOTSTRAP, minimum=0, help="bootstrap resamples of the non-0/1 metrics' "
                            "intervals and of the differences (0: no bootstrap intervals)")
    seed: int = option(0, minimum=0, maximum=MAX_SEED, help="bootstrap seed (same inputs and seed, same intervals)")
    workers: int = option(1, minimum=1, help="processes matching items in parallel (the same results for any number)")
    ray: str | None = option(None, help="search the shards on a Ray cluster: the address (host:port; '' for "
                             "RAY_ADDRESS, else a local one); None: no Ray")
    actors: int | None = option(None, minimum=1, help="with --ray: actors holding the shards (default: one per free "
                                "CPU of the cluster, at most one per shard); --workers then counts driver threads")
    quiet: bool = option(False, help="no progress bar")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "runs", tuple(self.runs))
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "out", Path(self.out))

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> ContaminationRequest:
        """The request of `propme contamination`'s arguments (the rule options make `rule`)."""
        return replace(super().from_cli(args), rule=ContaminationRule.from_cli(args))
