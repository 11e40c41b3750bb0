"""Errors that PropMe reports to users as one clear message (never a traceback)."""
from __future__ import annotations


class PropMeError(Exception):
    """A user-facing failure: `message` says what went wrong, `hint` what to do about it.

    `exit_code` is the CLI's exit status: 2 for bad input or configuration, 3 for a corrupt or
    mismatched index, 4 for an interrupted or failed external step.
    """

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(PropMeError):
    """Bad arguments, missing files or fields, unknown tokenizer, empty input."""


class IndexFormatError(PropMeError):
    """An index folder that is missing, incomplete, corrupt or built for something else."""

    exit_code = 3


class BuildError(PropMeError):
    """An external build step (the suffix-array binary) failed."""

    exit_code = 4


class OutOfMemoryError(PropMeError):
    """The process ran out of memory (RAM, or a limit such as `ulimit -v` / prlimit --as)."""

    exit_code = 4


class TraceWorkerError(PropMeError):
    """A tracing worker process stopped without a result (killed, or out of memory)."""

    exit_code = 4
