"""`propme report`: PM with intervals, leaderboard files, plots and report.html from lm-eval runs,
with a contamination section when the runs hold other benchmark tasks."""
from __future__ import annotations

import argparse
from pathlib import Path

from propme.cli.arguments import (
    add_interval_options,
    add_pairing_option,
    add_pm_metrics_option,
    counts,
    natural,
    positive,
)
from propme.cli.contamination import add_rule_options, report_contamination, rule_from
from propme_metrics.core.errors import ExitCode


def cmd_report(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.report.assemble import build_report, report_lock
    from propme_metrics.report.console import print_summary
    from propme_metrics.report.contents import IncompleteReportError

    rule = rule_from(args)
    check_outputs({"--out": args.out}, {f"RUN {r}": r for r in args.runs} | {f"--retraced {r}": r for r in args.retraced},
                  output_folders=("--out",))
    try:
        with report_lock(args.out):  # held for the contamination section too: one writer of --out
            contamination = report_contamination(args, rule, Path(args.out) / "contamination")
            report = build_report(args.runs, args.out, bootstrap=args.bootstrap, seed=args.seed,
                                  pm_metrics=args.pm_metrics, separate=args.separate, html=not args.no_html,
                                  html_docs_per_span=args.html_docs, html_snippet_chars=args.html_snippet_chars,
                                  retraced=args.retraced, show_pii=args.show_pii,
                                  discoverable_n=args.discoverable_n, discoverable_p=args.discoverable_p,
                                  retraced_other_settings=args.retraced_other_settings,
                                  rare_max_count=args.rare_max_count, pairing=args.pairing,
                                  contamination=contamination)
    except IncompleteReportError as exc:  # written, but with undefined parts: show it, then exit 2
        if exc.report is not None:
            print_summary(exc.report)
        raise
    print_summary(report)
    return ExitCode.OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme report`."""
    from propme_metrics.metrics.leaks import RARE_MAX_COUNT
    from propme_metrics.metrics.likelihood import DISCOVERABLE_N, DISCOVERABLE_P
    from propme_metrics.metrics.pm import CONFIDENCE
    from propme_metrics.report.defaults import HTML_DOCS_PER_SPAN, HTML_SNIPPET_CHARS

    r = sub.add_parser("report", help="PM scores with intervals, leaderboard tables, plots and an HTML trace explorer",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Read lm-eval runs of PropMe's tasks (made with --log_samples), compute the base "
                                   "metrics per setting and PM (each propensity setting vs prefix) with "
                                   f"{CONFIDENCE:.0%} bootstrap intervals over prompts, and write leaderboard.csv/.json/.md, PNG plots and a "
                                   "self-contained report.html into --out.")
    r.add_argument("runs", nargs="+", metavar="RUN", help="lm-eval --output_path folder (searched recursively for "
                   "results_*.json) or a results_*.json file")
    r.add_argument("--out", required=True, help="report folder to write")
    add_interval_options(r, "the prompts")
    add_pm_metrics_option(r, "compute")
    r.add_argument("--separate", action="store_true", help="report runs of different index versions or prompt "
                   "sets of one corpus apart (as <corpus>_set1, <corpus>_set2, ...) instead of refusing them")
    r.add_argument("--retraced", action="append", default=[], metavar="SUMMARY.json",
                   help="a `propme trace` summary made from one of the runs' samples files: its results replace "
                        "that file's traces (how failed traces are redone); repeat for several files")
    r.add_argument("--retraced-other-settings", action="store_true",
                   help="accept --retraced summaries traced with other settings (--mode, spans, ...) than the "
                        "runs; PM then mixes the two (refused otherwise)")
    r.add_argument("--no-html", action="store_true", help="skip report.html")
    r.add_argument("--html-docs", type=natural, default=HTML_DOCS_PER_SPAN, help="source documents shown per final "
                   "span in report.html (the best matches; more make a bigger page)")
    r.add_argument("--html-snippet-chars", type=natural, default=HTML_SNIPPET_CHARS, help="characters of document "
                   "context shown on each side of a span in report.html")
    r.add_argument("--show-pii", action="store_true", help="show leaked personal data unmasked in report.html "
                   "(default: masked, e.g. j***@e***.dk; the leaderboard never holds values)")
    r.add_argument("--discoverable-n", type=counts(1), metavar="N,N,...", default=None,
                   help="sample counts n of the likelihood subtasks' (n, p) curve (default: each run's "
                        f"discoverable_n metadata, else {','.join(map(str, DISCOVERABLE_N))})")
    r.add_argument("--discoverable-p", metavar="P", default=None,
                   help="probability p of (n, p)-discoverability, between 0 and 1 (default: each run's "
                        f"discoverable_p metadata, else {DISCOVERABLE_P})")
    r.add_argument("--rare-max-count", type=positive, default=None, metavar="N",
                   help="fmr_rare counts a full match whose text occurs at most N times in the corpus (default: "
                        f"the runs' rare_max_count metadata, else {RARE_MAX_COUNT})")
    add_pairing_option(r)
    c = r.add_argument_group("contamination section", "when the runs also hold other benchmark tasks: their "
                             "items checked against the index by the rule of `propme contamination`")
    c.add_argument("--index", default=None, help="index for the contamination section of the runs' other "
                   "benchmark tasks (default: the index PropMe's tasks traced against)")
    c.add_argument("--include-path", default=None, help="folder of local lm-eval task YAML the runs' benchmark "
                   "tasks come from (lm-eval's --include_path)")
    add_rule_options(c)
    r.set_defaults(func=cmd_report)
