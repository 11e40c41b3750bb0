"""The texts an item exposes, read through a task's own doc_to_* methods (lm-eval's Task API)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from propme_metrics.contamination.runs import LoggedDoc
from propme_metrics.core.errors import ConfigError
from propme_tasks.benchmark_docs import item_texts, items_from_docs


class Task:
    """The part of lm-eval's ConfigurableTask that item_texts calls."""

    def __init__(self, kind, text, target, choices=None, delimiter=" ", multiple_input=0):
        self.OUTPUT_TYPE, self.multiple_input = kind, multiple_input
        self.config = SimpleNamespace(target_delimiter=delimiter)
        self._text, self._target, self._choices = text, target, choices

    def doc_to_text(self, doc):
        return self._text(doc) if callable(self._text) else self._text

    def doc_to_target(self, doc):
        return self._target

    def doc_to_choice(self, doc):
        return self._choices


@pytest.mark.parametrize("task, expected", [
    (Task("multiple_choice", "Q?", 2, ["a", "b", "c"]), ("Q?", "c", "Q? c")),
    (Task("multiple_choice", "Q?", "1", ["a", "b"]), ("Q?", "b", "Q? b")),          # a digit string indexes
    (Task("multiple_choice", "Q?", [0, 1], ["a", "b"]), ("Q?", "a", "Q? a")),       # several golds: the first
    (Task("multiple_choice", 1, "ends it", ["ctx one", "ctx two"], multiple_input=2),
     ("ctx two", "ends it", "ctx two ends it")),                                  # the gold context is the question
    (Task("generate_until", "Q:", ["42", "forty-two"], delimiter=""), ("Q:", "42", "Q:42")),
    (Task("loglikelihood_rolling", "", "a whole text"), ("", "a whole text", "a whole text")),
    (Task("generate_until", "only a question", ""), ("only a question", "", "only a question")),
])
def test_item_texts(task, expected):
    assert item_texts(task, {}) == expected


def test_a_task_that_cannot_read_a_logged_document_is_named():
    task = Task("generate_until", lambda doc: doc["question"], "x")
    with pytest.raises(ConfigError, match=r"task t: .*document 7 \(KeyError"):
        items_from_docs("t", task, [LoggedDoc(7, {"other": 1})])
