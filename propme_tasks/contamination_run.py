"""`propme contamination` as a library call, and the report's contamination section: a
`ContaminationRequest` in, a `ContaminationResult` out (`check_contamination`; its files written
by `report.contamination_views.write_outputs`). Here, on the lm-eval side, because the benchmark
items are rebuilt through lm-eval's tasks (`propme_tasks.benchmark_docs`)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from propme_metrics.contamination.assess import ContaminationResult, check_tasks
from propme_metrics.contamination.request import ContaminationRequest
from propme_metrics.contamination.rule import ContaminationRule
from propme_metrics.core.errors import ConfigError, PropMeError
from propme_metrics.metrics.pm import IntervalSpec


def _items(request: ContaminationRequest) -> tuple[list, dict]:
    """(task, items) of every task and the models' runs of each: from the runs' samples (the tasks
    rebuilt from the configs the runs recorded, or from the include path), or from lm-eval's
    documents (no model, no runs)."""
    from propme_metrics.contamination.runs import read_runs

    try:
        from propme_tasks.benchmark_docs import load_tasks, logged_items, task_items
    except ImportError:
        raise ConfigError("`propme contamination` reads tasks through lm-eval, which is not installed",
                          'pip install "propme[lmeval]"') from None
    if request.runs:
        logged = read_runs(list(request.runs), request.tasks)
        return logged_items(logged, request.include_path, request.limit), {t.task: t.runs for t in logged}
    if not request.tasks:
        raise ConfigError("name the benchmark: RUN folders of an lm-eval run, or --tasks", "e.g. "
                          "`propme contamination --tasks arc_easy --index IDX --out DIR`")
    tasks = load_tasks(list(request.tasks), request.include_path)
    return [(name, task_items(name, task, request.limit)) for name, task in tasks.items()], {}


def check_contamination(request: ContaminationRequest) -> tuple[ContaminationResult, int]:
    """The check the request asks for, and how many items it matched (nothing is written)."""
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.reader import open_index

    check_outputs({"--out": request.out}, {f"RUN {r}": r for r in request.runs}, {"--index": request.index},
                  output_folders=("--out",))
    index = open_index(request.index)
    per_task, runs = _items(request)
    search = None
    if request.ray is not None:
        from propme_metrics.trace.ray_search import ray_search

        search = ray_search(index, address=request.ray or None, actors=request.actors)
    try:
        result = check_tasks(index, per_task, request.rule, request.workers,
                             IntervalSpec(request.bootstrap, request.seed), request.quiet, runs=runs, search=search)
    finally:
        if search is not None:
            search.close()
    return result, sum(len(items) for _, items in per_task)


@dataclass(frozen=True)
class Section:
    """The report's contamination section: the check (None: no section) and, when there is none
    although the runs hold benchmarks, the one line saying why."""

    result: ContaminationResult | None = None
    why_none: str | None = None


def report_section(runs: Sequence[str | Path], rule: ContaminationRule, out: Path, *, index: str | Path | None = None,
                   include_path: str | None = None, bootstrap: int = 0, seed: int = 0) -> Section:
    """`propme report`'s contamination section: the runs' benchmark tasks besides PropMe's checked by
    `rule` against `index` (default: the index PropMe's tasks logged), its files written into `out`.
    No section when the runs hold no benchmark; none, with the reason, when one cannot be made (the
    report itself never depends on it)."""
    from propme_metrics.contamination.runs import NoBenchmarkError, logged_index_path, read_runs
    from propme_metrics.index.reader import open_index
    from propme_metrics.report.contamination_views import write_outputs

    try:
        logged = read_runs(list(runs))
        path = index or logged_index_path(list(runs))
    except NoBenchmarkError:
        return Section()
    except PropMeError as exc:
        return Section(why_none=exc.message + (f" ({exc.hint})" if exc.hint else ""))
    if path is None:
        return Section(why_none="the runs hold benchmark tasks but no index is known (pass --index)")
    try:
        from propme_tasks.benchmark_docs import logged_items

        per_task: Any = logged_items(logged, include_path)
        opened = open_index(path)
    except (ImportError, PropMeError) as exc:
        return Section(why_none=f"{getattr(exc, 'message', exc)} (run `propme contamination` for the details)")
    result = check_tasks(opened, per_task, rule, 1, IntervalSpec(bootstrap, seed), runs={t.task: t.runs for t in logged})
    write_outputs(out, result)
    return Section(result)
