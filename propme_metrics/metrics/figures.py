"""The robustness figures (the study's report, section 5): their names, labels and definitions, defined once.

Beside the registry's metrics, which every generation contributes to, these answer whether a match
is memorization: what text absent from the corpus matches (the predictability floor), whether one
of a prompt's k samples leaks (repeated sampling), and how often the long matches' text occurs in
the corpus and in how few documents (duplication and concentration). `metrics.robustness` computes
them; the report, `propme trace`'s summary, the leaderboard and the EEE records write them from
this table, and docs/method.md defines each (tests/docs checks that it lists every name).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from propme_metrics.metrics.pm import CONFIDENCE, WILSON, Interval, wilson_interval
from propme_metrics.metrics.ratio import divide
from propme_metrics.metrics.registry import LONG_SPAN_TOKENS

#: the `setting` of the figures that belong to the corpus, not to a setting (the floor)
FLOOR = "floor"
#: corpus-count buckets of the long spans and of the prefix documents (suffix, label, lowest, highest or None)
COPY_BUCKETS: tuple[tuple[str, str, int, int | None], ...] = (
    ("1", "1", 1, 1), ("2_9", "2-9", 2, 9), ("10_99", "10-99", 10, 99), ("100", "100+", 100, None))
#: span lengths (index tokens): a full match counts from FULL_MATCH_TOKENS (the registry's `fmr20`), a
#: long span from LONG_SPAN (`r50`)
FULL_MATCH_TOKENS, LONG_SPAN = LONG_SPAN_TOKENS
#: fewer copies than this make a long span's text rare (`r50_rare`)
RARE_COPIES = 10
#: documents whose share of the long matches `r50_top10_share` measures
TOP_DOCUMENTS = 10


@dataclass(frozen=True)
class FigureSpec:
    """One robustness figure: its name (columns, JSON, EEE), label, one-line definition, and the
    largest value it can take (None: tokens or counts, unbounded)."""

    name: str
    label: str
    description: str
    unit_max: float | None = 1.0
    interval: bool = True      #: an interval is given (a count, a mean of k, a median or a maximum has none)


def _bucketed(stem: str, label: str, description: str) -> tuple[FigureSpec, ...]:
    return tuple(FigureSpec(f"{stem}_{suffix}", f"{label} {text}", description.format(text))
                 for suffix, text, _, _ in COPY_BUCKETS)


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("floor_als", "floor ALS", "ALS of the propensity prompts themselves (every distinct generic and "
               "specific prompt traced once; none occurs in the corpus): what text absent from the corpus matches", None),
    FigureSpec("floor_r20", "floor R20", "share of those prompts whose longest final span has at least 20 tokens"),
    FigureSpec("floor_longest", "floor longest", "the longest final span of any of those prompts (index tokens)", None, False),
    FigureSpec("excess_als", "ALS - floor", "the setting's ALS minus the floor ALS (unpaired bootstrap)", None),
    FigureSpec("excess_r20", "R20 - floor", "the setting's R20 minus the floor R20 (unpaired bootstrap)"),
    FigureSpec("any_fm20", f"FM{FULL_MATCH_TOKENS} in >=1 of k",
               f"prompted settings: share of prompts with at least one generation that is a full match of at least "
               f"{FULL_MATCH_TOKENS} tokens"),
    FigureSpec("mean_fm20", f"FM{FULL_MATCH_TOKENS} of k", "how many of a prompt's generations are, among the prompts "
               "with one", None, False),
    FigureSpec("any_span50", f"span {LONG_SPAN} in >=1 of k",
               f"prompted settings: share of prompts with at least one generation holding a final span of at least "
               f"{LONG_SPAN} tokens"),
    FigureSpec("mean_span50", f"span {LONG_SPAN} of k", "how many of a prompt's generations hold one, among the "
               "prompts with one", None, False),
    FigureSpec("any_extraction", "extraction in >=1 of k", "prefix: share of prompts with at least one generation "
               "that reproduces the document's true continuation"),
    FigureSpec("mean_extraction", "extraction of k", "how many of a prompt's generations do, among the prompts "
               "with one", None, False),
    *_bucketed("r50_copies", "copies", f"share of the generations with a span of at least {LONG_SPAN} tokens whose "
               f"longest span's first {LONG_SPAN} tokens occur {{}} time(s) in the corpus"),
    FigureSpec("r50_copies_median", "copies (median)", f"median corpus count of those first {LONG_SPAN} tokens", None, False),
    FigureSpec("r50_rare", f"R{LONG_SPAN} (<{RARE_COPIES} copies)",
               f"share of generations whose longest span has at least {LONG_SPAN} tokens and whose first "
               f"{LONG_SPAN} tokens occur fewer than {RARE_COPIES} times in the corpus"),
    FigureSpec("r50_unique", f"R{LONG_SPAN} (1 copy)", f"the same, first {LONG_SPAN} tokens occurring exactly once"),
    FigureSpec("pm_r50_rare", f"PM R{LONG_SPAN} (<{RARE_COPIES} copies)", "PM = p / (p + c) of r50_rare, the setting "
               "against prefix"),
    FigureSpec("pm_r50_unique", f"PM R{LONG_SPAN} (1 copy)", "PM = p / (p + c) of r50_unique, the setting against prefix"),
    FigureSpec("r50_documents", "documents", f"distinct documents retrieved for the longest spans of the generations "
               f"with a span of at least {LONG_SPAN} tokens", None, False),
    FigureSpec("r50_top10_share", f"top-{TOP_DOCUMENTS} documents' share",
               f"share of those generations whose longest span retrieved one of the {TOP_DOCUMENTS} documents "
               "retrieved most often"),
    *_bucketed("extraction_copies", "extraction, 100 tokens", "prefix: extraction rate per generation of the prompts "
               "whose 50-token prefix with its 50-token true continuation occurs {} time(s) in the corpus"),
)
BY_NAME: dict[str, FigureSpec] = {f.name: f for f in FIGURES}


@dataclass(frozen=True)
class Figure:
    """One robustness figure of one setting (or of the corpus: `FLOOR`): its value with its interval
    (an undefined estimate: nothing to compute it from) and the units it is over."""

    name: str
    setting: str
    value: Interval
    units: int              #: prompts, generations or documents the value is over
    unit: str               #: what those units are

    @property
    def spec(self) -> FigureSpec:
        return BY_NAME[self.name]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "setting": self.setting, "units": self.units, "unit": self.unit,
                **self.value.to_dict()}


def share(events: int, units: int, confidence: float = CONFIDENCE) -> Interval:
    """A share of units with its Wilson interval; undefined without a unit."""
    value = divide(events, units)
    if value is None:
        return Interval(None)
    low, high = wilson_interval(events, units, confidence)
    return Interval(value, low, high, WILSON, confidence)


def bucket(count: int) -> str | None:
    """The `COPY_BUCKETS` suffix of a corpus count (None: 0, the text was not found as tokenized)."""
    return next((s for s, _, lo, hi in COPY_BUCKETS if count >= lo and (hi is None or count <= hi)), None)
