"""`propme contamination`: are a run's benchmark items in the training corpus, and does the model
score higher on those? (docs/cli.md, docs/method.md Contamination)"""
from __future__ import annotations

import argparse
from pathlib import Path

from propme.cli.arguments import add_interval_options, add_ray_option, csv, positive, share
from propme_metrics.core.errors import ExitCode


def add_rule_options(parser) -> None:
    """The contamination rule's options (`propme contamination` and `propme report`), defined once."""
    from propme_metrics.contamination.rule import (
        DEFAULT_BOILERPLATE_MIN_COUNT,
        DEFAULT_BOILERPLATE_SHARE,
        DEFAULT_K,
        DEFAULT_MIN_COVERAGE,
        FIELDS,
    )

    parser.add_argument("--k", type=positive, default=DEFAULT_K, help="minimum tokens of a corpus span that counts")
    parser.add_argument("--min-coverage", type=share, default=DEFAULT_MIN_COVERAGE,
                        help="an item is contaminated when at least this share of its tokens lie in such spans")
    parser.add_argument("--field", choices=FIELDS, default="joined", help="the item text the rule reads")
    parser.add_argument("--boilerplate-share", type=share, default=DEFAULT_BOILERPLATE_SHARE,
                        help="k-grams found in more than this share of a task's items (and in two or more) are "
                             "shared; shared k-grams that mark a template are boilerplate: they cover nothing and "
                             "are left out of the share (1: none)")
    parser.add_argument("--boilerplate-count", type=positive, default=DEFAULT_BOILERPLATE_MIN_COUNT,
                        help="a shared k-gram found at least this often in the corpus is boilerplate; one the corpus "
                             "lacks is boilerplate at a fixed position in every item; fewer copies count as "
                             "contamination (a passage several items copy)")


def rule_from(args: argparse.Namespace):
    """The ContaminationRule of the options `add_rule_options` added; ConfigError when they do not make one."""
    from propme_metrics.contamination.rule import ContaminationRule
    from propme_metrics.core.errors import ConfigError

    try:
        return ContaminationRule(k=args.k, min_coverage=args.min_coverage, field=args.field,
                                 boilerplate_share=args.boilerplate_share, boilerplate_min_count=args.boilerplate_count)
    except ValueError as exc:
        raise ConfigError(f"bad contamination rule: {exc}", f"see `propme {args.command} --help`") from None


def _items(args: argparse.Namespace) -> tuple[list, dict]:
    """(task, items) of every task and the models' runs of each: from the runs' samples (the tasks
    rebuilt from the configs the runs recorded, or from --include-path), or from lm-eval's
    documents (no model, no runs)."""
    from propme_metrics.contamination.runs import read_runs
    from propme_metrics.core.errors import ConfigError

    try:
        from propme_tasks.benchmark_docs import load_tasks, logged_items, task_items
    except ImportError:
        raise ConfigError("`propme contamination` reads tasks through lm-eval, which is not installed",
                          'pip install "propme[lmeval]"') from None
    if args.runs:
        logged = read_runs(args.runs, args.tasks)
        return logged_items(logged, args.include_path, args.limit), {t.task: t.runs for t in logged}
    if not args.tasks:
        raise ConfigError("name the benchmark: RUN folders of an lm-eval run, or --tasks", "e.g. "
                          "`propme contamination --tasks arc_easy --index IDX --out DIR`")
    tasks = load_tasks(list(args.tasks), args.include_path)
    return [(name, task_items(name, task, args.limit)) for name, task in tasks.items()], {}


def cmd_contamination(args: argparse.Namespace) -> int:
    from rich.text import Text

    from propme_metrics.contamination.assess import check_tasks
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.core.progress import terminal
    from propme_metrics.index.reader import open_index
    from propme_metrics.metrics.pm import IntervalSpec
    from propme_metrics.report.contamination_views import contamination_lines, write_outputs

    rule = rule_from(args)
    check_outputs({"--out": args.out}, {f"RUN {r}": r for r in args.runs}, {"--index": args.index},
                  output_folders=("--out",))
    index = open_index(args.index)
    per_task, runs = _items(args)
    search = None
    if args.ray is not None:
        from propme_metrics.trace.ray_search import ray_search

        search = ray_search(index, address=args.ray or None, actors=args.actors)
    try:
        result = check_tasks(index, per_task, rule, args.workers, IntervalSpec(args.bootstrap, args.seed), args.quiet,
                             runs=runs, search=search)
    finally:
        if search is not None:
            search.close()
    written = write_outputs(Path(args.out), result)
    console = terminal()
    for line in contamination_lines(result):
        console.print(Text(line), highlight=False)
    total = sum(len(items) for _, items in per_task)
    console.print(Text(f"{total:,} items matched in {result.seconds:.1f} s; wrote {', '.join(p.name for p in written)} "
                       f"into {args.out}"), highlight=False)
    return ExitCode.OK


def report_contamination(args: argparse.Namespace, rule, out: Path):
    """`propme report`'s contamination section: the `ContaminationResult` by `rule` when the runs hold
    benchmark tasks besides PropMe's and an index is known (--index, else the one PropMe's tasks
    logged); the files go into `out`. None (and a line saying why) when there is nothing to check."""
    from rich.text import Text

    from propme_metrics.contamination.assess import check_tasks
    from propme_metrics.contamination.runs import NoBenchmarkError, logged_index_path, read_runs
    from propme_metrics.core.errors import PropMeError
    from propme_metrics.core.progress import stderr_console
    from propme_metrics.index.reader import open_index
    from propme_metrics.metrics.pm import IntervalSpec
    from propme_metrics.report.contamination_views import write_outputs

    try:
        logged = read_runs(args.runs)
        path = args.index or logged_index_path(args.runs)
    except NoBenchmarkError:
        return None  # no benchmark task besides PropMe's: no section
    except PropMeError as exc:  # the report itself does not depend on it
        stderr_console.print(Text(f"no contamination section: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")),
                             highlight=False)
        return None
    if path is None:
        stderr_console.print("no contamination section: the runs hold benchmark tasks but no index is known "
                             "(pass --index)", highlight=False)
        return None
    try:
        from propme_tasks.benchmark_docs import logged_items

        per_task = logged_items(logged, args.include_path)
        index = open_index(path)
    except (ImportError, PropMeError) as exc:  # the report itself does not depend on it
        stderr_console.print(Text(f"no contamination section: {getattr(exc, 'message', exc)} (run `propme "
                                  "contamination` for the details)"), highlight=False)
        return None
    result = check_tasks(index, per_task, rule, 1, IntervalSpec(args.bootstrap, args.seed),
                         runs={t.task: t.runs for t in logged})
    write_outputs(out, result)
    return result


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme contamination`."""

    c = sub.add_parser(
        "contamination", help="are the benchmark items of a run in the training corpus, and do they score higher?",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Match every item of other benchmarks (question, gold answer, and the two joined as the task "
                    "joins them) against the index: longest verbatim span with its count and source, and the "
                    "share of tokens inside corpus spans of at least --k tokens. Items are read from lm-eval "
                    "output folders (RUN, made with --log_samples: every task that is not PropMe's), with each "
                    "per-sample metric split into clean and contaminated items, or, with --tasks and no RUN, "
                    "from the tasks' documents through lm-eval (no model). Writes contamination.json, "
                    "contamination_items.jsonl, contamination.csv/.md, contamination_leaderboard.csv and "
                    "contamination_curve.png into --out.")
    c.add_argument("runs", nargs="*", metavar="RUN", help="lm-eval --output_path folder or results_*.json file")
    c.add_argument("--index", required=True, help="index folder of the model's training corpus")
    c.add_argument("--out", required=True, help="folder to write")
    c.add_argument("--tasks", type=csv, default=(),
                   help="comma-separated tasks (with RUN: only these of the runs' tasks; without: the tasks whose "
                        "documents lm-eval loads, groups and tags expanded)")
    c.add_argument("--include-path", default=None, help="folder of local lm-eval task YAML (lm-eval's --include_path)")
    c.add_argument("--limit", type=positive, default=None, help="the first N documents of each task (with RUN: of "
                   "those the runs logged, by doc_id)")
    add_rule_options(c)
    add_interval_options(c, "the non-0/1 metrics' intervals and of the differences")
    c.add_argument("--workers", type=positive, default=1, help="processes matching items in parallel (the "
                   "same results for any number)")
    add_ray_option(c, "search the shards")
    c.add_argument("--actors", type=positive, default=None, help="with --ray: actors holding the shards "
                   "(default: one per free CPU of the cluster, at most one per shard); --workers then counts "
                   "driver threads")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=cmd_contamination)
