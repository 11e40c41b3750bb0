"""The rows of lm-eval samples files (`--log_samples`): the one reader of them.

Every reader of a run takes its rows from here: the report the traces PropMe's hooks logged,
`propme contamination` the documents and per-sample metric values of other benchmarks, `propme
trace` the model's responses (`runs.generations`). A row's PropMe document is read by
`TaskDocument.from_row` alone, its start token comes back as a `StartToken`, and every
generation of a row is keyed the same way (`SampleRow.key`), so a re-trace finds its row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import json_objects
from propme_metrics.prompts.start import StartToken
from propme_metrics.trace.inputs import sample_key
from propme_metrics.trace.task_document import TaskDocument

#: the fields every lm-eval samples row has
LM_EVAL_SAMPLE_FIELDS = ("doc", "arguments", "resps", "filtered_resps")
#: what to do about a samples file that is missing or damaged
SAMPLES_HINT = "run lm-eval with --log_samples (and keep the samples files beside the results)"
DAMAGED_HINT = "the samples file is damaged: re-run lm-eval for this task (with --log_samples)"


def sample_value(value: Any) -> float | None:
    """A per-sample metric value as a number that averages (a bool or a finite number); None for
    anything else (corpus-level items such as BLEU's (reference, prediction) pairs). The one
    decoder of the values a samples row holds per metric."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


@dataclass
class SampleRow:
    """One row of an lm-eval samples file, with what every reader needs of it."""

    lineno: int
    n: int                    #: position among the file's rows
    row: dict[str, Any]
    filter: str
    several_filters: bool     #: the file holds rows of more than one filter
    source: str = ""          #: the file it was read from (for messages)

    @property
    def doc(self) -> dict[str, Any]:
        """The logged document as lm-eval wrote it ({} when the row has none)."""
        return self.row["doc"] if isinstance(self.row.get("doc"), dict) else {}

    @cached_property
    def document(self) -> TaskDocument:
        """The logged document read as a PropMe task's (`TaskDocument.from_row`); ConfigError, naming
        the line, when its recorded tracing options are not this release's."""
        try:
            return TaskDocument.from_row(self.doc)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.source}, line {self.lineno}: the logged document's tracing options "
                              f"(trace_config) cannot be read ({exc})",
                              "re-trace the file with `propme trace --input`, or re-run lm-eval for this task") from None

    @property
    def start_token(self) -> StartToken | None:
        """The start token the hook recorded (None: a run made before PropMe recorded start tokens)."""
        d = self.document
        if d.start_token_choice is None:
            return None
        return StartToken(choice=str(d.start_token_choice or ""), token=str(d.start_token or ""),
                          note=str(d.start_token_note or ""))

    @property
    def prompt(self) -> str:
        """The prompt: the document's, else the text lm-eval gave the model (`arguments`)."""
        if "prompt" in self.doc:
            return str(self.document.prompt)
        try:
            return str(self.row["arguments"]["gen_args_0"]["arg_0"])
        except (KeyError, TypeError):
            return ""

    @property
    def prompt_id(self) -> Any:
        """The prompt the row is a sample of: the document's id, else lm-eval's doc_id."""
        return self.document.id if "id" in self.doc else self.row.get("doc_id")

    def metric_values(self) -> dict[str, float]:
        """The row's per-sample metric values that average (`sample_value`), by metric name."""
        names = self.row.get("metrics")
        values = {}
        for name in names if isinstance(names, list) else []:
            value = sample_value(self.row.get(name)) if isinstance(name, str) else None
            if value is not None:
                values[name] = value
        return values

    def key(self, j: int, n_gens: int) -> str:
        """The key of generation j (of n_gens): the hook's key, with "@FILTER" when several filters."""
        return sample_key(self.row, self.n, j, n_gens) + (f"@{self.filter}" if self.several_filters else "")


def read_samples(rows: list[tuple[int, dict[str, Any]]], source: str = "") -> list[SampleRow]:
    """The rows of a samples file (as `json_objects` gives them), each with its filter."""
    filters = {row.get("filter", "none") for _, row in rows}
    return [SampleRow(lineno, n, row, row.get("filter", "none"), len(filters) > 1, source)
            for n, (lineno, row) in enumerate(rows)]


def read_samples_file(path: Path) -> list[SampleRow]:
    """Every row of a samples file; ConfigError naming the file when it cannot be read or a line is no JSON object."""
    try:
        with open(path, encoding="utf-8") as fh:
            return read_samples(list(json_objects(fh, str(path), DAMAGED_HINT)), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the samples file {path}: {exc}", SAMPLES_HINT) from None


def is_samples_row(row: dict[str, Any]) -> bool:
    """An lm-eval --log_samples row (doc, arguments, resps, filtered_resps)."""
    return all(f in row for f in LM_EVAL_SAMPLE_FIELDS)
