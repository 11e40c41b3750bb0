"""What tracing produces: its configuration and the traced spans and documents of a generation.

Plain dataclasses with one serialization (`to_dict` / `from_dict`), importable without the
searcher, so reading results (metrics, report) never loads the index code.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from typing import Any

import orjson

from propme_metrics.core.jsonl import json_line
from propme_metrics.core.names import StrEnum

MATCH_CLASSES = ("full_raw", "full_normalized", "partial")


class TraceMode(StrEnum):
    """How a generation is matched (`TraceConfig.mode`); the first is the default."""

    MIXED = "mixed"   #: whole-generation lookup, no sentence rules (the published final runs)
    TEXT = "text"     #: sentence rules, no whole-generation lookup


class RarityKind(StrEnum):
    """How a span's rarity is scored (`TraceConfig.rarity`); the first is the default."""

    LOG = "log"           #: sum of log-probabilities
    PRODUCT = "product"   #: the published product of probabilities (underflows on long spans)


#: tracing modes (`TraceConfig.mode`) and rarity scores (`TraceConfig.rarity`), the first of each the default
TRACE_MODES = tuple(TraceMode)
RARITY_KINDS = tuple(RarityKind)


def _positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, not {value!r}")


@dataclass(frozen=True)
class TraceConfig:
    """Tracing parameters; the defaults are those of the published final runs (mixed mode).

    Every field can be set from the command line (`propme trace`), from lm-eval task metadata
    (`trace_<field>`) or in Python; `to_dict()` is recorded with every result summary.
    """

    mode: TraceMode = TraceMode.MIXED  #: 'mixed' (whole-generation lookup, no sentence rules) or 'text'
    span_divisor: int = 20      #: keep K = ceil(L / span_divisor) rarest spans (at least 1)
    docs_per_span: int = 10     #: documents retrieved per final span (a seeded sample beyond that)
    window_factor: int = 5      #: a document window is window_factor x L tokens around the occurrence
    max_anchors: int = 8        #: mixed mode: anchor spans tried for full matches when g does not occur as tokenized
    seed: int = 42              #: document samples: random.Random(f"{seed}:{g}") per generation
    rarity: RarityKind = RarityKind.LOG  #: 'log' (sum of log-probabilities) or 'product' (the published product, underflows)
    snippet_chars: int = 300    #: characters of window kept on each side of the span in each document's snippet
    max_tokens: int = 4096      #: longer generations are not traced: recorded as failed, with the reason

    def __post_init__(self) -> None:
        for name, kind in (("mode", TraceMode), ("rarity", RarityKind)):  # a given string becomes its member, once
            value = getattr(self, name)
            if value not in tuple(kind):
                raise ValueError(f"{name} must be one of {', '.join(kind)}, not {value!r}")
            object.__setattr__(self, name, kind(value))
        for name in ("span_divisor", "docs_per_span", "window_factor", "max_anchors", "max_tokens"):
            _positive_int(name, getattr(self, name))
        for name in ("seed", "snippet_chars"):
            _positive_int(name, getattr(self, name), minimum=0)

    def k(self, n_tokens: int) -> int:
        """Spans kept by the rarity filter for a generation of `n_tokens` tokens."""
        return max(1, math.ceil(n_tokens / self.span_divisor))

    def to_dict(self) -> dict[str, Any]:
        """The fields in order as plain JSON values (the modes as their strings): recorded with every summary."""
        return {**asdict(self), "mode": self.mode.value, "rarity": self.rarity.value}


class _PickledByFields:
    """Slotted results (no per-object dict: orjson and pickling read the fields, and none is
    made as a side effect), pickled as (class, field values in order): loaded faster than the
    default pickling; with parallel workers the parent loads every result it gets."""

    __slots__ = ()

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return type(self), _field_layout(type(self))[1](self)


def _field_layout(cls: type) -> tuple[tuple[str, ...], attrgetter]:
    """A result class's field names in order, and a getter of their values (made once per class)."""
    layout = _FIELD_LAYOUT.get(cls)
    if layout is None:
        names = tuple(f.name for f in fields(cls))
        layout = _FIELD_LAYOUT[cls] = (names, attrgetter(*names))
    return layout


def _fields_dict(obj: _PickledByFields) -> dict[str, Any]:
    """The fields of a result object as a new dict, in their order."""
    names, values = _field_layout(type(obj))
    return dict(zip(names, values(obj)))


_FIELD_LAYOUT: dict[type, tuple[tuple[str, ...], attrgetter]] = {}


@dataclass(slots=True)
class Span(_PickledByFields):
    """A maximal clean span [start, end) of the generation's index tokens (steps 1-2)."""

    start: int
    end: int
    count: int
    rarity: float          #: rarity score (lower = rarer): sum of log-probabilities, or their product
    text: str = ""
    kept: bool = False     #: among the K rarest

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class TracedDocument(_PickledByFields):
    """One document entry of a final span: where it is, what it is, how closely g matches its window."""

    shard: int
    doc_ix: int
    source_id: Any
    metadata: dict[str, Any]
    match: str                     #: 'full_raw', 'full_normalized' or 'partial'
    nv_recall: float
    nv_matched_words: int          #: generation words matched near-verbatim in the window
    nv_reference_words: int        #: words of the generation
    nv_candidate_words: int        #: words of the window
    snippet: str                   #: the window around the occurrence
    snippet_span: tuple[int, int]  #: character offsets of the occurrence inside the snippet


@dataclass(slots=True)
class FinalSpan(_PickledByFields):
    """A final span of the generation with its document entries (what every metric counts)."""

    start: int
    end: int
    text: str
    count: int                     #: occurrences of the span's tokens in the corpus (0: matched through anchors)
    documents: list = field(default_factory=list)  #: TracedDocument entries (raw windows while tracing)

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class TraceResult(_PickledByFields):
    """Everything traced for one generation, JSON-able through `to_dict`."""

    key: str
    text: str                      #: the traced completion g, exactly as given (never stripped)
    n_tokens: int
    degenerate: bool
    mode: TraceMode = TraceMode.MIXED
    spans: list[Span] = field(default_factory=list)              #: maximal clean spans, `kept` marked
    final_spans: list[FinalSpan] = field(default_factory=list)   #: longest first
    extracted: bool | None = None   #: prefix prompts: the true continuation was reproduced
    error: str | None = None

    @property
    def documents(self) -> list[TracedDocument]:
        """Every document entry of every final span (one document may appear once per span)."""
        return [d for s in self.final_spans for d in s.documents]

    @property
    def longest_span(self) -> int:
        """Length of the longest final span: the per-generation value behind ALS, R20 and R50."""
        return max((s.length for s in self.final_spans), default=0)

    @property
    def full_match(self) -> bool:
        return any(d.match == "full_raw" for d in self.documents)

    @property
    def full_match_normalized(self) -> bool:
        """A `full_normalized` entry (the published normalized variant; raw matches do not count)."""
        return any(d.match == "full_normalized" for d in self.documents)

    @property
    def nv_recalls(self) -> list[float]:
        return [d.nv_recall for d in self.documents]

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able dicts and lists, in field order (as `dataclasses.asdict` gives it,
        built field by field: `asdict` deep-copies every value and dominated `propme trace` runs).
        Metadata dicts are copied one level deep."""
        return self._layout(copy=True)

    def json_bytes(self, **extra: Any) -> bytes:
        """`to_dict()` with `extra` keys after it, as one JSONL line of UTF-8 bytes, written to files
        as it is: orjson reads the span and document dataclasses itself (their fields in order, as
        `to_dict` lists them), so nothing is copied, decoded or encoded again."""
        try:
            line = orjson.dumps({**self._layout(copy=False), **extra}, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # what orjson refuses (an integer beyond 64 bits, a lone surrogate)
            # a lone surrogate can only sit inside a JSON string, where "\\udXXX" is its escape
            return json_line({**self.to_dict(), **extra}).encode("utf-8", "backslashreplace")
        self._shed_utf8()
        return line

    def _shed_utf8(self) -> None:
        """Swap the texts this result made (snippets, span texts) for equal fresh strings when they
        are not ASCII: orjson encodes such a string through CPython's UTF-8 cache, which then stays
        inside the string as a second copy (about 40% more memory for results kept after writing).
        The completion itself is the caller's string and stays as it is."""
        for sp in self.spans:
            sp.text = _fresh(sp.text)
        for fs in self.final_spans:
            if fs.text is not self.text:
                fs.text = _fresh(fs.text)
            for d in fs.documents:
                d.snippet = _fresh(d.snippet)

    def _layout(self, copy: bool) -> dict[str, Any]:
        """The line's dict, built once in its key order (the scalars, the per-generation values the
        metrics read, then the spans); documents are walked once for the values."""
        docs = self.documents
        matches = {d.match for d in docs}
        return {"key": self.key, "text": self.text, "n_tokens": self.n_tokens, "mode": self.mode,
                "longest_span": self.longest_span, "full_match": "full_raw" in matches,
                "full_match_normalized": "full_normalized" in matches,
                "nvr_max": max([d.nv_recall for d in docs], default=0.0),
                "degenerate": self.degenerate, "extracted": self.extracted, "error": self.error,
                "final_spans": [_final_span_dict(s) for s in self.final_spans] if copy else self.final_spans,
                "spans": [_fields_dict(s) for s in self.spans] if copy else self.spans}  # fields in their order

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceResult:
        doc_keys, span_keys = _field_layout(TracedDocument)[0], _field_layout(Span)[0]
        finals = [FinalSpan(start=s["start"], end=s["end"], text=s["text"], count=s["count"],
                            documents=[TracedDocument(**{**{k: d[k] for k in doc_keys},
                                                         "snippet_span": tuple(d["snippet_span"])})
                                       for d in s["documents"]])
                  for s in data["final_spans"]]
        return cls(key=data["key"], text=data["text"], n_tokens=data["n_tokens"], degenerate=data["degenerate"],
                   mode=TraceMode(data.get("mode", TraceMode.MIXED)), spans=[Span(**{k: s[k] for k in span_keys}) for s in data["spans"]],
                   final_spans=finals, extracted=data.get("extracted"), error=data.get("error"))


def _fresh(text: str) -> str:
    """`text`, or an equal new string without a cached UTF-8 copy when it is not ASCII (an ASCII
    string's UTF-8 is its own data, never a copy)."""
    return text if text.isascii() else "".join(("", text))  # joining two parts always builds a new string


def _final_span_dict(span: FinalSpan) -> dict[str, Any]:
    """A final span's fields as a new dict, its documents as dicts too (metadata copied one level)."""
    data = _fields_dict(span)
    data["documents"] = [{**_fields_dict(d), "metadata": dict(d.metadata)} for d in span.documents]
    return data
