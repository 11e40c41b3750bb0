"""The tracing options, described once: for each `TraceConfig` field its help, range and choices.

`propme trace` makes its options from this table (`--<field>`), the lm-eval tasks' metadata schema
its keys (`trace_<field>`, `propme_tasks/schema.py`), and a test checks both, and the tables of
docs/cli.md and docs/configuration.md, against it. The defaults and lower bounds are
`TraceConfig`'s own (its fields and its check); the table adds the upper bounds.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from propme_metrics.core.limits import MAX_SEED, MAX_SIZE
from propme_metrics.trace.result import RARITY_KINDS, TRACE_MODES, TraceConfig

__all__ = ["MAX_SEED", "MAX_SIZE", "TRACE_OPTIONS", "TraceOption"]


@dataclass(frozen=True)
class TraceOption:
    """One tracing option: the `TraceConfig` field it sets, its help (also the docs' meaning, code
    spans there marked with backticks), its upper bound (integers) or its choices (text)."""

    name: str
    help: str
    maximum: int | None = None
    choices: tuple[str, ...] = ()

    @property
    def default(self) -> Any:
        return _DEFAULTS[self.name]

    @property
    def kind(self) -> type:
        """int or str: the type of the default."""
        return type(self.default)

    @property
    def minimum(self) -> int | None:
        """The smallest integer TraceConfig takes (its own check decides: 0 or 1); None for text."""
        if self.kind is not int:
            return None
        try:
            TraceConfig(**{self.name: 0})
            return 0
        except ValueError:
            return 1

    @property
    def flag(self) -> str:
        """The `propme trace` option."""
        return "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """The lm-eval task metadata key."""
        return f"trace_{self.name}"


_DEFAULTS = {f.name: f.default for f in fields(TraceConfig)}

#: every TraceConfig field, in its order
TRACE_OPTIONS: tuple[TraceOption, ...] = (
    TraceOption("mode", "mixed (whole-generation lookup, spans of 4+ tokens, no sentence rules; the published "
                "default) or text (sentence and whole-word rules)", choices=TRACE_MODES),
    TraceOption("span_divisor", "keep the K = max(1, ceil(L / this)) rarest spans of a generation of L tokens",
                MAX_SIZE),
    TraceOption("docs_per_span", "document entries per kept span (a seeded sample when more documents contain it)",
                MAX_SIZE),
    TraceOption("window_factor", "a document window is this times L tokens around an occurrence (the engine's "
                "max_disp_len)", MAX_SIZE),
    TraceOption("max_anchors", "mixed mode: long spans tried to find a full copy when the generation's tokens do "
                "not occur as they are", MAX_SIZE),
    TraceOption("seed", "document samples: random.Random(f'{seed}:{g}') per generation g", MAX_SEED),
    TraceOption("rarity", "rarity score: sum of log-probabilities (log) or the published product (product; "
                "underflows on long spans)", choices=RARITY_KINDS),
    TraceOption("snippet_chars", "characters of the document window kept on each side of the occurrence in each "
                "document entry's snippet", MAX_SIZE),
    TraceOption("max_tokens", "longer generations are not traced but recorded as failed, with the reason", MAX_SIZE),
)
