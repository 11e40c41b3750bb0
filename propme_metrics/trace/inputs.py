"""Reading generations: plain JSONL, and lm-eval's `samples_*.jsonl` (written by --log_samples).

`read_samples` is the one reader of lm-eval samples files: `propme trace` takes the model's
responses from its rows, `propme report` the traces PropMe's hooks logged in them, and both key a
row's generations the same way (`SampleRow.key`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import json_objects


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


#: the input format `read_generations` reports for an lm-eval samples file
SAMPLES_FORMAT = "lm-eval-samples"
LM_EVAL_SAMPLE_FIELDS = ("doc", "arguments", "resps", "filtered_resps")


@dataclass
class SampleRow:
    """One row of an lm-eval samples file, with what every reader needs of it."""

    lineno: int
    n: int                    #: position among the file's rows
    row: dict[str, Any]
    filter: str
    several_filters: bool     #: the file holds rows of more than one filter

    @property
    def doc(self) -> dict[str, Any]:
        return self.row["doc"] if isinstance(self.row.get("doc"), dict) else {}

    @property
    def start_token(self) -> dict[str, str] | None:
        """{"token", "choice", "note"} of the start token the hook recorded (None: a run made before
        PropMe recorded start tokens)."""
        doc = self.doc
        if "start_token_choice" not in doc:
            return None
        return {k: str(doc.get(f"start_token{s}") or "") for k, s in (("token", ""), ("choice", "_choice"), ("note", "_note"))}

    def key(self, j: int, n_gens: int) -> str:
        """The key of generation j (of n_gens): the hook's key, with "@FILTER" when several filters."""
        return sample_key(self.row, self.n, j, n_gens) + (f"@{self.filter}" if self.several_filters else "")


def read_samples(rows: list[tuple[int, dict[str, Any]]]) -> list[SampleRow]:
    """The rows of a samples file (as `json_objects` gives them), each with its filter."""
    filters = {row.get("filter", "none") for _, row in rows}
    return [SampleRow(lineno, n, row, row.get("filter", "none"), len(filters) > 1)
            for n, (lineno, row) in enumerate(rows)]


def is_samples_row(row: dict[str, Any]) -> bool:
    """An lm-eval --log_samples row (doc, arguments, resps, filtered_resps)."""
    return all(f in row for f in LM_EVAL_SAMPLE_FIELDS)


def read_generations(path: str | Path, text_field: str = "completion",
                     key_field: str | None = None) -> tuple[list[TraceInput], str]:
    """Generations from a JSONL file; returns them and the format found ('jsonl' or SAMPLES_FORMAT).

    Plain JSONL: one object per line; `text_field` holds the generation (a list: several generations,
    keyed `KEY#j`); the key is `key_field`, else the first of 'key', 'id', 'doc_id' present, else the
    line's number among non-empty lines; a string field 'continuation' is the true continuation.

    lm-eval samples (`--log_samples`; rows with doc, arguments, resps, filtered_resps): the model's
    response `filtered_resps[0]` is traced, never the prompt in `arguments`; when it is a list, or when
    `resps` is [[gen1, gen2, ...]], every generation is traced, keyed f"{doc_id}#{j}", else f"{doc_id}"
    (with "@FILTER" added when the file holds several filters). A non-empty `doc['continuation']` is the
    true continuation. Any `trace` record a row already holds is ignored: everything is traced again.
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            rows = list(json_objects(fh, str(path), "the input must be JSONL: one JSON object per line"))
    except FileNotFoundError:
        raise ConfigError(f"input file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read input file {path}: {exc}") from None
    if not rows:
        raise ConfigError(f"input file {path} holds no generations (it is empty)",
                          "give a JSONL file with one generation per line or an lm-eval samples_*.jsonl")
    samples = is_samples_row(rows[0][1])
    out: list[TraceInput] = []
    if samples:
        for s in read_samples(rows):
            lineno, row = s.lineno, s.row
            missing = [f for f in LM_EVAL_SAMPLE_FIELDS if f not in row]
            if missing:
                raise ConfigError(f"{path} line {lineno} lacks {', '.join(missing)} although line {rows[0][0]} "
                                  "is an lm-eval sample", "do not mix lm-eval samples and other rows in one file")
            if _is_loglikelihood(row):
                raise ConfigError(f"{path} line {lineno} is a loglikelihood sample (log-probability and is-greedy "
                                  "pairs), not generated text: there is nothing to trace",
                                  "trace the samples of a generate_until task such as propme_<corpus>_<setting>")
            gens = _sample_generations(row)
            if gens is None:
                raise ConfigError(f"{path} line {lineno}: cannot find the model's response in filtered_resps/resps")
            cont = s.doc.get("continuation")
            cont = cont if isinstance(cont, str) and cont else None
            for j, text in enumerate(gens):
                out.append(TraceInput(s.key(j, len(gens)), text, cont))
        return out, SAMPLES_FORMAT
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
    return out, "jsonl"


def _is_loglikelihood(row: dict[str, Any]) -> bool:
    """lm-eval's loglikelihood responses are [log-probability, is-greedy] pairs, never text: as
    numbers in memory, and as strings (["-12.5", "False"]) in a samples file, which lm-eval writes
    through `sanitize_list`."""
    resps = row["resps"]
    pair = resps[0][0] if isinstance(resps, list) and resps and isinstance(resps[0], list) and resps[0] else None
    if not (isinstance(pair, list) and len(pair) == 2):
        return False
    logp, greedy = pair
    if isinstance(greedy, str) and greedy in ("True", "False") and isinstance(logp, str):
        try:
            float(logp)
            return True
        except ValueError:
            return False
    return isinstance(greedy, bool) and isinstance(logp, (int, float)) and not isinstance(logp, bool)


def _sample_generations(row: dict[str, Any]) -> list[str] | None:
    def text(x: Any) -> str:
        return "" if x is None else x if isinstance(x, str) else str(x)

    filtered, resps = row["filtered_resps"], row["resps"]
    first = filtered[0] if isinstance(filtered, list) and filtered else (filtered if isinstance(filtered, str) else None)
    if isinstance(first, list):
        return [text(x) for x in first]
    if isinstance(resps, list) and resps and isinstance(resps[0], list) and len(resps[0]) > 1:
        return [text(x) for x in resps[0]]
    if first is None:
        if isinstance(resps, list) and resps and isinstance(resps[0], list) and resps[0]:
            return [text(resps[0][0])]
        return None
    return [text(first)]
