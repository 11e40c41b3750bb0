"""`propme compare RUN_A RUN_B [...] --out DIR`: paired comparisons of models or revisions on shared prompts.

A shortcut to `propme report` without the HTML page: the runs are reported together (runs of one
corpus with different indexes or prompt sets apart, as `--separate` does, and refused for pairing
with the reason), and the comparisons (metrics/compare.py) are printed and written to
comparisons.json/.csv beside the leaderboard files.
"""
from __future__ import annotations

import argparse

from propme.cli.arguments import add_interval_options, add_pairing_option, add_pm_metrics_option
from propme_metrics.core.errors import ExitCode


def cmd_compare(args: argparse.Namespace) -> int:
    from propme_metrics.core.errors import ConfigError
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.core.progress import terminal
    from propme_metrics.report.assemble import build_report
    from propme_metrics.report.console import print_comparisons
    from propme_metrics.report.folder import IncompleteReportError, write_report
    from propme_metrics.report.request import ReportRequest

    check_outputs({"--out": args.out}, {f"RUN {r}": r for r in args.runs}, output_folders=("--out",))
    if args.bootstrap <= 0:
        raise ConfigError("propme compare needs bootstrap resamples (--bootstrap > 0) for its intervals")
    try:
        report = build_report(ReportRequest(args.runs, args.out, bootstrap=args.bootstrap, seed=args.seed,
                              pm_metrics=args.pm_metrics, separate=True, html=False, pairing=args.pairing))
        files = write_report(report)
    except IncompleteReportError as exc:  # written with undefined parts: compare what is there, then exit 2
        if exc.report is not None:
            print_comparisons(exc.report.comparisons, terminal(width=160))
        raise
    units = {(r.model, r.revision) for r in report.results}
    if report.comparisons is None or not report.comparisons.rows:
        why = "; ".join(report.comparisons.refused) if report.comparisons else f"{len(units)} model(s) found"
        raise ConfigError(f"nothing to compare on shared prompts: {why}",
                          "pass runs of two or more models or revisions made with one prompt set and one index")
    print_comparisons(report.comparisons, terminal(width=160))
    print(f"wrote {', '.join(p.name for p in files.paths)} to {files.out}")
    return ExitCode.OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme compare`."""
    c = sub.add_parser("compare", help="paired comparisons of models or revisions that ran the same prompts",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Compare models (or revisions) that ran the same prompt set against the same "
                                   "index: every metric and PM as A - B with a paired bootstrap interval, a "
                                   "significance flag and ranks; runs that cannot be paired are named with why.")
    c.add_argument("runs", nargs="+", metavar="RUN", help="lm-eval --output_path folder or results_*.json file")
    c.add_argument("--out", required=True, help="folder for comparisons.json/.csv and the leaderboard files")
    add_interval_options(c, "the paired differences", zero="refused: a comparison needs its interval")
    add_pm_metrics_option(c, "compare")
    add_pairing_option(c)
    c.set_defaults(func=cmd_compare)
