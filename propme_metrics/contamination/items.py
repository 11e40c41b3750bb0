"""A benchmark item as the contamination check reads it: the texts the task exposes, and the
per-sample metric values each model's lm-eval run logged for it (none before a model run)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BenchmarkItem:
    """One document of a benchmark task: its question (`doc_to_text`), gold answer (`doc_to_target`,
    the gold choice's text for multiple choice) and the two joined as the task joins them (the
    target delimiter between), never the few-shot context."""

    task: str
    doc_id: int
    question: str
    answer: str
    joined: str
    #: model label -> its per-sample values ("acc", "exact_match", ...) (`runs.BenchmarkRun.label`)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)

