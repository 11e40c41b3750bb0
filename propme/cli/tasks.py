"""`propme tasks-new` and `propme tasks-path`: lm-eval task YAML for your own index, and where
PropMe's own task YAML lives."""
from __future__ import annotations

import argparse

from propme_metrics.core.errors import ExitCode


def cmd_tasks_new(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_tasks.custom import write_corpus_tasks

    check_outputs({"--out": args.out}, folders={"--index": args.index}, output_folders=("--out",))
    for path in write_corpus_tasks(args.name, args.index, args.language, args.out):
        print(path)
    print(f"run it with: lm_eval --include_path {args.out} --tasks propme_{args.name} ...")
    return ExitCode.OK


def cmd_tasks_path(args: argparse.Namespace) -> int:
    from propme_tasks.discovery import tasks_path

    print(tasks_path())
    return ExitCode.OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme tasks-new` and `propme tasks-path`."""
    tn = sub.add_parser("tasks-new", help="write lm-eval task YAML propme_<name> for your own corpus index",
                        description="Write a task group propme_<name> (generic, specific, prefix, unconditional, minimal_cue) that traces "
                                    "against your index; pass the folder to lm_eval --include_path.")
    tn.add_argument("name", help="corpus name: the tasks are called propme_<name>_<setting>")
    tn.add_argument("--index", required=True, help="index folder built with `propme index build`")
    tn.add_argument("--language", required=True, help="language of the built-in generic/specific prompts (da, en)")
    tn.add_argument("--out", required=True, help="folder for the YAML files")
    tn.set_defaults(func=cmd_tasks_new)
    tp = sub.add_parser("tasks-path", help="print the folder of PropMe's lm-eval task YAML (for --include_path)")
    tp.set_defaults(func=cmd_tasks_path)
