"""`propme report`: PM with intervals, leaderboard files, plots and report.html from lm-eval runs,
with a contamination section when the runs hold other benchmark tasks."""
from __future__ import annotations

import argparse
from pathlib import Path

from propme.cli.arguments import (
    add_deprecated_switch,
    add_pairing_option,
    add_pm_metrics_option,
    add_request_option,
    counts,
)
from propme.cli.contamination import add_rule_options, report_contamination
from propme_metrics.core.errors import ExitCode


def cmd_report(args: argparse.Namespace) -> int:
    """Parse, request, compute, write, print."""
    from dataclasses import replace

    from propme_metrics.contamination.rule import ContaminationRule
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.report.assemble import build_report
    from propme_metrics.report.console import print_summary
    from propme_metrics.report.folder import IncompleteReportError, report_lock, write_report
    from propme_metrics.report.request import ReportRequest

    request = ReportRequest.from_cli(args)
    rule = ContaminationRule.from_cli(args)
    check_outputs({"--out": args.out}, {f"RUN {r}": r for r in args.runs} | {f"--retraced {r}": r for r in args.retraced},
                  output_folders=("--out",))
    try:
        with report_lock(args.out):  # held from the start, for the contamination section too: one writer of --out
            contamination = report_contamination(args, rule, Path(args.out) / "contamination")
            report = build_report(replace(request, contamination=contamination))
            files = write_report(report)
    except IncompleteReportError as exc:  # written, but with undefined parts: show it, then exit 2
        if exc.report is not None:
            print_summary(exc.report, exc.files)
        raise
    print_summary(report, files)
    return ExitCode.OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme report`."""
    from propme_metrics.core.requests import option_spec
    from propme_metrics.metrics.pm import CONFIDENCE
    from propme_metrics.report.request import ReportRequest as R

    r = sub.add_parser("report", help="PM scores with intervals, leaderboard tables, plots and an HTML trace explorer",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Read lm-eval runs of PropMe's tasks (made with --log_samples), compute the base "
                                   "metrics per setting and PM (each propensity setting vs prefix) with "
                                   f"{CONFIDENCE:.0%} bootstrap intervals over prompts, and write leaderboard.csv/.json/.md, PNG plots and a "
                                   "self-contained report.html into --out.")
    r.add_argument("runs", nargs="+", metavar="RUN", help=option_spec(R, "runs").help)
    add_request_option(r, R, "out", required=True)
    add_request_option(r, R, "bootstrap")
    add_request_option(r, R, "seed")
    add_pm_metrics_option(r, "compute")
    add_request_option(r, R, "separate")
    add_request_option(r, R, "retraced", action="append", default=[], metavar="SUMMARY.json")
    add_request_option(r, R, "retraced_other_trace_options")
    add_deprecated_switch(r, "--retraced-other-settings", "--retraced-other-trace-options")
    add_request_option(r, R, "html")
    add_request_option(r, R, "html_docs_per_span")
    add_request_option(r, R, "html_snippet_chars")
    add_request_option(r, R, "show_pii")
    add_request_option(r, R, "discoverable_n", type=counts(1), metavar="N,N,...")
    add_request_option(r, R, "discoverable_p", metavar="P")
    add_request_option(r, R, "rare_max_count", metavar="N")
    add_pairing_option(r)
    c = r.add_argument_group("contamination section", "when the runs also hold other benchmark tasks: their "
                             "items checked against the index by the rule of `propme contamination`")
    c.add_argument("--index", default=None, help="index for the contamination section of the runs' other "
                   "benchmark tasks (default: the index PropMe's tasks traced against)")
    c.add_argument("--include-path", default=None, help="folder of local lm-eval task YAML the runs' benchmark "
                   "tasks come from (lm-eval's --include_path)")
    add_rule_options(c)
    r.set_defaults(func=cmd_report)
