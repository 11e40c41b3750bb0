"""What every PNG of a report shares: user text drawn as written, model labels, and an atomic,
reproducible PNG write (no version string in the file: same inputs, same bytes)."""
from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure

from propme_metrics.core.files import atomic_output
from propme_metrics.metrics.results import CorpusResult

_PNG_META = {"Software": None}


def plain(text: str) -> str:
    """User text (a model name, a revision, a corpus or source name) as matplotlib must draw it: as
    written, never as a formula (`$...$` is mathtext to matplotlib; an escaped dollar is a dollar)."""
    return text.replace("$", r"\$")


def model_label(model: str, revision: str) -> str:
    """A model (the end of a long name) and its revision, for legends and titles, drawn as written."""
    name = model if len(model) <= 40 else "..." + model[-37:]
    return plain(name + (f" @ {revision}" if revision else ""))


def row_label(r: CorpusResult) -> str:
    """A result's model and revision as `model_label` draws them."""
    return model_label(r.model, r.revision)


def error_bar(value: float | None, low: float | None, high: float | None,
              positive: bool = False) -> tuple[float, float]:
    """The lengths (below, above) of the error bar drawn at `value` from its interval's ends: 0 for an
    end that is absent (undefined, or no interval made: `--bootstrap 0`) or, with `positive` (a log
    axis), for a lower end that is not above 0. Every plot draws its error bars through it."""
    def given(v: float | None) -> bool:
        return v is not None and not math.isnan(v)

    if not given(value):
        return 0.0, 0.0
    below = value - low if given(low) and (low > 0 or not positive) else 0.0
    above = high - value if given(high) else 0.0
    return max(0.0, below), max(0.0, above)


def save(fig: Figure, path: Path) -> None:
    """Write the PNG atomically (a killed report never leaves a truncated image)."""
    with atomic_output(path, "wb") as fh:
        fig.savefig(fh, format="png", metadata=_PNG_META)
