"""Run a function in a forked child of the test process: a separate process that can be SIGKILLed
mid-build, without the seconds a fresh interpreter spends importing transformers and torch again."""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ChildResult:
    """How a forked child ended: `returncode` as subprocess reports it (-9 for SIGKILL), and its output."""

    returncode: int
    output: str


def run_forked(fn: Callable[[], int | None], *, timeout: float = 300) -> ChildResult:
    """Call `fn` in a forked child, its stdout and stderr in one file; the child exits with fn's return
    value (70 and a traceback if it raises) and never returns into pytest."""
    with tempfile.TemporaryFile() as log:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child
            code = 70
            try:
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                sys.stdout = sys.stderr = open(log.fileno(), "w", buffering=1, closefd=False)  # not pytest's capture
                signal.alarm(int(timeout))  # a child that hangs dies rather than the test run
                code = fn() or 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        log.seek(0)
        output = log.read().decode(errors="replace")
    return ChildResult(os.waitstatus_to_exitcode(status), output)
