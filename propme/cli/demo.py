"""`propme demo`: the whole job offline on a generated corpus and a tiny model."""
from __future__ import annotations

import argparse

from propme_metrics.core.errors import ExitCode


def cmd_demo(args: argparse.Namespace) -> int:
    from propme.demo.run import run_demo

    run_demo(args.out, small=args.small, progress=not args.quiet)
    return ExitCode.OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme demo`."""
    d = sub.add_parser("demo", help="run the whole job offline on a generated corpus and a tiny model",
                       description="Generate a bilingual corpus, index it, train a tiny GPT-2 that memorizes its "
                                   "planted documents, build the three prompt sets, run the propme_demo tasks "
                                   "through lm-eval and write the report. Finished stages are reused on a re-run.")
    d.add_argument("--out", default="propme-demo", help="folder for every artifact")
    d.add_argument("--small", action="store_true", help="CI size: fewer prompts, shorter generations")
    d.add_argument("--quiet", action="store_true", help="no progress bars")
    d.set_defaults(func=cmd_demo)
