"""Every item of a task against the corpus, and the rule applied to it.

Searching is done once per text; the rule (k, coverage threshold, field, boilerplate) is applied
afterwards from the stored match lengths, so the curve across thresholds costs no search but the
corpus counts of the k-grams many items share (`KgramCounts`, each counted once).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from propme_metrics.contamination.coverage import Coverage, Discounted, field_coverages
from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.match import CorpusMatcher, TextMatch
from propme_metrics.contamination.rule import FIELDS, ContaminationRule
from propme_metrics.trace.text_rules import normalize_text


@dataclass
class ItemResult:
    """One item: its texts against the corpus, their coverage under the rule, and the verdict."""

    item: BenchmarkItem
    matches: dict[str, TextMatch]
    coverage: dict[str, Coverage] = field(default_factory=dict)
    contaminated: bool = False

    def to_dict(self, rule: ContaminationRule) -> dict[str, Any]:
        """A row of `contamination_items.jsonl`: the rule's field up front, every field in `fields`."""
        main = self.matches[rule.field]
        fields = {}
        for name in FIELDS:
            m, cov = self.matches[name], self.coverage.get(name)
            fields[name] = {"text": m.text, **m.to_dict(), "coverage": None if cov is None else cov.value,
                            "covered_spans": [] if cov is None else
                            [[m.offsets[a][0], m.offsets[b - 1][1]] for a, b in cov.spans()],
                            "discounted_spans": [] if cov is None else [_discounted(m, d) for d in cov.discounted]}
        return {"task": self.item.task, "doc_id": self.item.doc_id, "contaminated": self.contaminated,
                "field": rule.field, "coverage": self.coverage[rule.field].value,
                "longest_match": main.longest, "longest_text": main.longest_text, "count": main.count,
                "source_doc_ix": main.doc_ix, "source_id": main.source_id, "source": main.source,
                "source_context": main.context, "metrics": self.item.metrics, "fields": fields}


def _discounted(m: TextMatch, d: Discounted) -> dict[str, Any]:
    """A boilerplate run of a text as `contamination_items.jsonl` shows it: its characters and why."""
    return {"chars": [m.offsets[d.start][0], m.offsets[d.end - 1][1]], "text": m.char_range(d.start, d.end),
            "reason": d.reason, "items": d.items, "corpus_count": d.corpus_count}


class KgramCounts:
    """Corpus counts of k-grams through a matcher's search, each k-gram counted once (the rule and
    the curve ask for the same ones)."""

    def __init__(self, matcher: CorpusMatcher):
        self.matcher = matcher
        self.known: dict[bytes, int] = {}

    def __call__(self, grams: list[np.ndarray]) -> list[int]:
        keys = [np.asarray(g, dtype=np.int64).tobytes() for g in grams]
        asked = {key: g for key, g in zip(keys, grams) if key not in self.known}
        if asked:
            self.known.update(zip(asked, self.matcher.counts(list(asked.values()))))
        return [self.known[key] for key in keys]


@dataclass
class TaskCheck:
    """A task's items against the corpus under one rule."""

    task: str
    rule: ContaminationRule
    items: list[ItemResult]
    boilerplate_kgrams: int = 0   #: k-grams of the rule's field found to be boilerplate
    counts: KgramCounts | None = field(default=None, repr=False)   #: the corpus counts the rule read

    @property
    def contaminated(self) -> int:
        return sum(r.contaminated for r in self.items)


def _split(item: BenchmarkItem, text: str, ids: np.ndarray, offsets: list[tuple[int, int]],
           lengths: np.ndarray) -> dict[str, TextMatch] | None:
    """The question and answer as parts of the joined text's tokens: the tokens that end inside
    the (normalized) question, and the rest (the delimiter and the answer, as the task joins them).
    A prefix of a text occurs wherever the text does, so the question's match lengths are the
    joined text's, cut at the question's end. None when the normalized joined text does not start
    with the normalized question."""
    question = normalize_text(item.question)
    if not text.startswith(question):
        return None
    ends = np.asarray([e for _, e in offsets], dtype=np.int64)
    nq = int(np.searchsorted(ends, len(question), side="right"))
    start = offsets[nq][0] if nq < len(offsets) else len(text)
    return {"joined": TextMatch(text, ids, offsets, lengths),
            "question": TextMatch(text[:len(question)], ids[:nq], offsets[:nq],
                                  np.minimum(lengths[:nq], nq - np.arange(nq))),
            "answer": TextMatch(text[start:], ids[nq:], [(a - start, b - start) for a, b in offsets[nq:]],
                                lengths[nq:].copy())}


def match_items(items: Sequence[BenchmarkItem], matcher: CorpusMatcher,
                progress: Callable[[int], None] | None = None) -> list[ItemResult]:
    """Match the three texts of every item: the joined text is searched, the question and the
    answer are its parts (`_split`); an item whose joined text does not start with its question
    (a task joining them in another order) has both searched on their own."""
    joined = matcher.encode_and_match([it.joined for it in items], progress)
    parts = [_split(it, *row) for it, row in zip(items, joined)]
    apart = [i for i, p in enumerate(parts) if p is None]
    if apart:
        texts = [t for i in apart for t in (items[i].question, items[i].answer)]
        for i, (q, a) in zip(apart, zip(*[iter(matcher.match(texts, describe=False))] * 2)):
            parts[i] = {"joined": TextMatch(*joined[i]), "question": q, "answer": a}
    results = [ItemResult(item, matches) for item, matches in zip(items, parts)]
    matcher.describe_longest([m for r in results for m in r.matches.values()])
    return results


def field_coverages_of(results: Sequence[ItemResult], name: str, rule: ContaminationRule,
                       counts: KgramCounts) -> tuple[list[Coverage], int]:
    """Coverage of one field of every item under `rule` (boilerplate found among these items)."""
    texts = [r.matches[name] for r in results]
    return field_coverages([m.ids for m in texts], [m.lengths for m in texts], rule.k,
                           rule.boilerplate_items(len(texts)), rule.boilerplate_min_count, counts)


def apply_rule(task: str, results: Sequence[ItemResult], rule: ContaminationRule, counts: KgramCounts) -> TaskCheck:
    """Coverage of every field and the verdict of every item under `rule` (results updated in place)."""
    boiler_count = 0
    for name in FIELDS:
        coverages, shared = field_coverages_of(results, name, rule, counts)
        if name == rule.field:
            boiler_count = shared
        for r, cov in zip(results, coverages):
            r.coverage[name] = cov
    for r in results:
        value = r.coverage[rule.field].value
        r.contaminated = value is not None and value >= rule.min_coverage
    return TaskCheck(task, rule, list(results), boiler_count, counts)


def coverage_values(results: Sequence[ItemResult], rule: ContaminationRule, counts: KgramCounts) -> np.ndarray:
    """The rule's field's coverage per item under another rule (NaN: undefined), `results` unchanged."""
    coverages, _ = field_coverages_of(results, rule.field, rule, counts)
    return np.array([np.nan if c.value is None else c.value for c in coverages], dtype=float)

