"""The `propme` command: the parser of every subcommand, dispatch, and the mapping of failures to
exit statuses (`core.errors.ExitCode`). Each command family lives in its own module of this
package, with its options, its body and the tables it prints."""
from __future__ import annotations

import argparse
import sys

from propme.cli import compare, contamination, demo, index, prompts, report, tasks, trace
from propme_metrics.core.errors import ExitCode, PropMeError
from propme_metrics.core.progress import stderr_console
from propme_metrics.core.switches import env_switch

#: the command families, in the order `propme --help` lists them (each module's `register` adds its parsers)
COMMANDS = (index, prompts, trace, report, compare, demo, tasks, contamination)


def exit_codes_text() -> str:
    """The exit statuses in one line, for `propme --help`."""
    return ("Exit codes: " + "; ".join(f"{code.value} {code.meaning}" for code in ExitCode)
            + ". PROPME_DEBUG=1 shows an internal error's traceback.")


def build_parser() -> argparse.ArgumentParser:
    from propme_metrics.version import __version__

    parser = argparse.ArgumentParser(
        prog="propme",
        description="PropMe: does a language model reproduce its training data under ordinary prompts "
                    "(propensity), not only under prefix attacks (capability)? Build an infini-gram index "
                    "of the training corpus, make prompt sets, trace generations with SimpleTrace, and "
                    "report PM scores.",
        epilog=exit_codes_text())
    parser.add_argument("--version", action="version", version=f"propme {__version__}")
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{index,prompts,trace,report,compare,contamination,demo,tasks-new,tasks-path}")
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a usage error (argparse printed it: BAD_INPUT), or --help / --version (OK)
        return exc.code
    try:
        return args.func(args)
    except PropMeError as exc:
        return _report_error(exc.message, exc.hint, exc.exit_code)
    except KeyboardInterrupt:
        stderr_console.print("[bold red]interrupted[/]: nothing was lost; re-run the same command to resume")
        return ExitCode.INTERRUPTED
    except Exception as exc:
        from propme_metrics.core.memory import is_out_of_memory, out_of_memory

        if not is_out_of_memory(exc):
            return _unexpected(args, exc)
        error = out_of_memory(f"running `propme {args.command}`")
        # plain writes: formatting with rich could need more memory than is left
        sys.stderr.write(f"error: {error.message}\n  hint: {error.hint}\n")
        return error.exit_code


def _unexpected(args: argparse.Namespace, exc: Exception) -> int:
    """An exception that is not PropMe's, nor running out of memory: a file that cannot be read or
    written is the environment; anything else is a bug (one paragraph, the traceback on request)."""
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return _report_error(f"cannot read or write{where}: {exc.strerror or exc}",
                             "check free disk space, permissions and the path, then re-run the same command",
                             ExitCode.BAD_INPUT)
    if env_switch("PROPME_DEBUG", default=False):
        raise exc
    return _report_error(
        f"`propme {args.command}` failed unexpectedly ({type(exc).__module__}.{type(exc).__name__}: "
        f"{str(exc)[:300] or 'no message'}). This is a bug in PropMe, not in your input.",
        "re-run with PROPME_DEBUG=1 to see the traceback, and report it with the command you ran", ExitCode.BUG)


def _report_error(message: str, hint: str | None, code: ExitCode) -> int:
    try:
        _print_error(message, hint)
    except MemoryError:  # out of memory: rich could not lay the message out; plain text needs none
        sys.stderr.write(f"error: {message}\n" + (f"  hint: {hint}\n" if hint else ""))
    return code


def _print_error(message: str, hint: str | None) -> None:
    from rich.text import Text

    stderr_console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)
    if hint:
        stderr_console.print(Text.assemble(("hint:", "yellow"), " ", hint), highlight=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
