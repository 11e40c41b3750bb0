"""One progress-bar style for every long PropMe step (rich, on stderr, off when not wanted)."""
from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def terminal(**kwargs) -> Console:
    """A console for PropMe's output that never turns `:name:` codes into emoji (`file.jsonl:100:`
    stays a line number). User text (paths, ids, model names) is passed as `rich.text.Text`, so
    that markup in it (`[/x]`, `[link=...]`) is printed as written, never applied."""
    return Console(emoji=False, **kwargs)


stderr_console = terminal(stderr=True)


def progress_bar(enabled: bool = True) -> Progress:
    """A progress display whose tasks may carry a `rate` field (e.g. '12,345 tok/s')."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=stderr_console,
        disable=not enabled,
        transient=False,
    )


def rate(count: float, seconds: float, unit: str) -> str:
    """Format a throughput such as '12,345 docs/s'."""
    return f"{count / seconds:,.0f} {unit}/s" if seconds > 0 else ""
