"""What `propme trace` traces: one `TraceInput` per generation, read from plain JSONL here and
from lm-eval's `samples_*.jsonl` by `runs.generations` (which dispatches between the two), and
the keys generations go by, the same in lm-eval's hooks and in a re-trace of their samples file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from propme_metrics.core.errors import ConfigError


class TraceInput(NamedTuple):
    """One generation to trace: its key, its text (the model's output only) and, for prefix prompts,
    the true continuation (for the discoverable-extraction rate)."""

    key: str
    text: str
    continuation: str | None = None
    #: why there is no generation to trace (its field is null): it is reported as failed, never as empty
    missing: str | None = None


def generation_key(prompt_id: Any, sample_ix: int = 0, j: int = 0, n: int = 1) -> str:
    """The key of generation j (of n) of a prompt's sample: the same in lm-eval's hooks and in
    `propme trace` on their samples file, so a re-trace draws the same document samples."""
    return f"{prompt_id}#{sample_ix}" + (f".{j}" if n > 1 else "")


def sample_key(row: dict[str, Any], n: int, j: int, n_gens: int) -> str:
    """The key of generation j (of n_gens) of the n-th row of an lm-eval samples file."""
    doc = row.get("doc") if isinstance(row.get("doc"), dict) else {}
    if "id" in doc and "sample_ix" in doc:  # a PropMe task: the key its hook traced under
        return generation_key(doc["id"], doc["sample_ix"], j, n_gens)
    base = str(row.get("doc_id", n))
    return base if n_gens == 1 else f"{base}#{j}"


#: the input format `runs.generations.read_generations` reports for an lm-eval samples file
SAMPLES_FORMAT = "lm-eval-samples"
#: ... and for plain JSONL
JSONL_FORMAT = "jsonl"


def read_jsonl_generations(path: Path, rows: list[tuple[int, dict[str, Any]]], text_field: str = "completion",
                           key_field: str | None = None) -> list[TraceInput]:
    """Generations from the rows of a plain JSONL file (`runs.generations.read_generations` says how
    they are keyed)."""
    out: list[TraceInput] = []
    for n, (lineno, row) in enumerate(rows):
        if text_field not in row:
            raise ConfigError(f"{path} line {lineno} has no field {text_field!r}; fields present: "
                              f"{', '.join(map(repr, row)) or 'none'}",
                              "name the field holding the generation with --text-field")
        if key_field is not None:
            if key_field not in row:
                raise ConfigError(f"{path} line {lineno} has no key field {key_field!r}; fields present: "
                                  f"{', '.join(map(repr, row))}")
            base = str(row[key_field])
        else:
            base = next((str(row[k]) for k in ("key", "id", "doc_id") if k in row and row[k] is not None), str(n))
        value = row[text_field]
        texts = value if isinstance(value, list) else [value]
        if not all(t is None or isinstance(t, str) for t in texts):
            raise ConfigError(f"{path} line {lineno}: field {text_field!r} holds {type(value).__name__}, not text")
        cont = row.get("continuation")
        cont = cont if isinstance(cont, str) and cont else None
        for j, text in enumerate(texts):
            missing = None if text is not None else f"{path}:{lineno}: field {text_field!r} is null (no generation)"
            out.append(TraceInput(base if not isinstance(value, list) else f"{base}#{j}", text or "", cont, missing))
    return out
