"""Every item of a task against the corpus, and the rule applied to it.

Searching is done once per text; the rule (k, coverage threshold, field, boilerplate) is applied
afterwards from the stored match lengths, so the curve across thresholds costs no search.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from propme_metrics.contamination.coverage import Coverage, boilerplate_keys, coverage
from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.match import CorpusMatcher, TextMatch
from propme_metrics.contamination.rule import FIELDS, ContaminationRule


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
                            [[m.offsets[a][0], m.offsets[b - 1][1]] for a, b in cov.spans()]}
        return {"task": self.item.task, "doc_id": self.item.doc_id, "contaminated": self.contaminated,
                "field": rule.field, "coverage": self.coverage[rule.field].value,
                "longest_match": main.longest, "longest_text": main.longest_text, "count": main.count,
                "source_doc_ix": main.doc_ix, "source_id": main.source_id, "source": main.source,
                "source_context": main.context, "metrics": self.item.metrics, "fields": fields}


@dataclass
class TaskCheck:
    """A task's items against the corpus under one rule."""

    task: str
    rule: ContaminationRule
    items: list[ItemResult]
    boilerplate_kgrams: int = 0   #: k-grams of the rule's field found to be boilerplate

    @property
    def contaminated(self) -> int:
        return sum(r.contaminated for r in self.items)


def match_items(items: Sequence[BenchmarkItem], matcher: CorpusMatcher,
                progress: Callable[[int], None] | None = None) -> list[ItemResult]:
    """Match the three texts of every item. The joined text is searched; the question and the
    answer reuse its match lengths when their tokens are its first or last tokens (a prefix of
    a text occurs wherever the text does), and are searched on their own otherwise."""
    joined = matcher.encode([it.joined for it in items])
    questions = matcher.encode([it.question for it in items])
    answers = matcher.encode([it.answer for it in items])
    joined_lengths = matcher.match_lengths([ids for _, ids, _ in joined], progress)
    parts: dict[str, list[np.ndarray | None]] = {"question": [], "answer": []}
    for (_, j_ids, _), lj, (_, q_ids, _), (_, a_ids, _) in zip(joined, joined_lengths, questions, answers):
        nq, na = len(q_ids), len(a_ids)
        parts["question"].append(np.minimum(lj[:nq], nq - np.arange(nq)) if np.array_equal(j_ids[:nq], q_ids) else None)
        tail = j_ids[len(j_ids) - na:]
        parts["answer"].append(lj[len(j_ids) - na:].copy() if na <= len(j_ids) and np.array_equal(tail, a_ids) else None)
    for name, encoded in (("question", questions), ("answer", answers)):
        todo = [i for i, lens in enumerate(parts[name]) if lens is None]
        for i, lens in zip(todo, matcher.match_lengths([encoded[i][1] for i in todo])):
            parts[name][i] = lens
    results = []
    for i, item in enumerate(items):
        matches = {"joined": TextMatch(*joined[i], joined_lengths[i]),
                   "question": TextMatch(*questions[i], parts["question"][i]),
                   "answer": TextMatch(*answers[i], parts["answer"][i])}
        results.append(ItemResult(item, matches))
    matcher.describe_longest([m for r in results for m in r.matches.values()])
    return results


def apply_rule(task: str, results: Sequence[ItemResult], rule: ContaminationRule) -> TaskCheck:
    """Coverage of every field and the verdict of every item under `rule` (results updated in place)."""
    boiler_count = 0
    for name in FIELDS:
        texts = [r.matches[name].ids for r in results]
        shared = boilerplate_keys(texts, rule.k, rule.boilerplate_items(len(results)))
        if name == rule.field:
            boiler_count = len(shared)
        for r in results:
            m = r.matches[name]
            r.coverage[name] = coverage(m.ids, m.lengths, rule.k, shared)
    for r in results:
        value = r.coverage[rule.field].value
        r.contaminated = value is not None and value >= rule.min_coverage
    return TaskCheck(task, rule, list(results), boiler_count)


def verdicts(results: Sequence[ItemResult], rule: ContaminationRule) -> np.ndarray:
    """Contaminated or not, per item, under another rule (the curve), leaving `results` unchanged."""
    texts = [r.matches[rule.field] for r in results]
    shared = boilerplate_keys([m.ids for m in texts], rule.k, rule.boilerplate_items(len(texts)))
    values = [coverage(m.ids, m.lengths, rule.k, shared).value for m in texts]
    return np.array([v is not None and v >= rule.min_coverage for v in values], dtype=bool)
