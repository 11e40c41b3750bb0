"""`propme contamination`: are a run's benchmark items in the training corpus, and does the model
score higher on those? (docs/cli.md, docs/method.md Contamination)"""
from __future__ import annotations

import argparse
from pathlib import Path

from propme.cli.arguments import add_ray_option, add_request_option, csv
from propme_metrics.core.errors import ExitCode


def add_rule_options(parser) -> None:
    """The contamination rule's options (`propme contamination` and `propme report`): the fields of
    `contamination.rule.ContaminationRule`, which define their help, bounds and defaults."""
    from dataclasses import fields

    from propme_metrics.contamination.rule import ContaminationRule

    for f in fields(ContaminationRule):
        add_request_option(parser, ContaminationRule, f.name)


def cmd_contamination(args: argparse.Namespace) -> int:
    from rich.text import Text

    from propme_metrics.contamination.request import ContaminationRequest
    from propme_metrics.core.progress import terminal
    from propme_metrics.report.contamination_views import contamination_lines, write_outputs
    from propme_tasks.contamination_run import check_contamination

    request = ContaminationRequest.from_cli(args)
    result, total = check_contamination(request)
    written = write_outputs(request.out, result)
    console = terminal()
    for line in contamination_lines(result):
        console.print(Text(line), highlight=False)
    console.print(Text(f"{total:,} items matched in {result.seconds:.1f} s; wrote {', '.join(p.name for p in written)} "
                       f"into {args.out}"), highlight=False)
    return ExitCode.OK


def report_contamination(args: argparse.Namespace, rule, out: Path):
    """`propme report`'s contamination section (`propme_tasks.contamination_run.report_section`); the
    line saying why there is none, when the runs hold benchmarks but no section could be made."""
    from rich.text import Text

    from propme_metrics.core.progress import stderr_console
    from propme_tasks.contamination_run import report_section

    section = report_section(args.runs, rule, out, index=args.index, include_path=args.include_path,
                             bootstrap=args.bootstrap, seed=args.seed)
    if section.why_none is not None:
        stderr_console.print(Text(f"no contamination section: {section.why_none}"), highlight=False)
    return section.result


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme contamination`."""
    from propme_metrics.contamination.request import ContaminationRequest as R

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
    from propme_metrics.core.requests import option_spec

    c.add_argument("runs", nargs="*", metavar="RUN", help=option_spec(R, "runs").help)
    add_request_option(c, R, "index", required=True)
    add_request_option(c, R, "out", required=True)
    add_request_option(c, R, "tasks", type=csv)
    add_request_option(c, R, "include_path")
    add_request_option(c, R, "limit")
    add_rule_options(c)
    add_request_option(c, R, "bootstrap")
    add_request_option(c, R, "seed")
    add_request_option(c, R, "workers")
    add_ray_option(c, "search the shards")
    add_request_option(c, R, "actors")
    add_request_option(c, R, "quiet")
    c.set_defaults(func=cmd_contamination)
