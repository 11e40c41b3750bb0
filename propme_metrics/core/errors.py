"""Errors that PropMe reports to users as one clear message (never a traceback), and the exit
statuses of the `propme` command, defined once in `ExitCode`."""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The `propme` command's exit statuses: the error classes below carry theirs, the CLI maps the
    rest, and `propme --help` and docs/cli.md ("Exit codes") list them from here."""

    OK = 0
    CHECK_FAILED = 1
    BAD_INPUT = 2
    BAD_INDEX = 3
    EXTERNAL = 4
    BUG = 70  #: EX_SOFTWARE of sysexits.h
    INTERRUPTED = 130

    @property
    def meaning(self) -> str:
        """What the status says, in a few words (the start of its row in docs/cli.md)."""
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.OK: "success",
    ExitCode.CHECK_FAILED: "a check failed",
    ExitCode.BAD_INPUT: "bad input or configuration",
    ExitCode.BAD_INDEX: "a missing, corrupt or mismatched index",
    ExitCode.EXTERNAL: "an external step failed, or the command ran out of memory",
    ExitCode.BUG: "an internal error: a bug in PropMe",
    ExitCode.INTERRUPTED: "interrupted",
}


class PropMeError(Exception):
    """A user-facing failure: `message` says what went wrong, `hint` what to do about it, and
    `exit_code` is the CLI's exit status (an `ExitCode`)."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"

    def __reduce__(self):
        """Pickled with its hint (an error raised in a worker process reaches the parent whole)."""
        return type(self), (self.message, self.hint)


class ConfigError(PropMeError):
    """Bad arguments, missing files or fields, unknown tokenizer, empty input."""


class IndexFormatError(PropMeError):
    """An index folder that is missing, incomplete, corrupt or built for something else."""

    exit_code = ExitCode.BAD_INDEX


class BuildError(PropMeError):
    """An external build step (the suffix-array binary) failed."""

    exit_code = ExitCode.EXTERNAL


class OutOfMemoryError(PropMeError):
    """The process ran out of memory (RAM, or a limit such as `ulimit -v` / prlimit --as)."""

    exit_code = ExitCode.EXTERNAL


class TraceWorkerError(PropMeError):
    """A tracing worker process stopped without a result (killed, or out of memory)."""

    exit_code = ExitCode.EXTERNAL
