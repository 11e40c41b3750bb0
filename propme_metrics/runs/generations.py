"""The generations `propme trace` reads: an lm-eval samples file (its rows from `runs.samples`) or
plain JSONL (`trace.inputs.read_jsonl_generations`), told apart by the first row."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import json_objects
from propme_metrics.runs.samples import LM_EVAL_SAMPLE_FIELDS, is_samples_row, read_samples
from propme_metrics.trace.inputs import JSONL_FORMAT, SAMPLES_FORMAT, TraceInput, read_jsonl_generations


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
    if not is_samples_row(rows[0][1]):
        return read_jsonl_generations(path, rows, text_field, key_field), JSONL_FORMAT
    out: list[TraceInput] = []
    for s in read_samples(rows, str(path)):
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
        cont = s.document.continuation
        cont = cont if isinstance(cont, str) and cont else None
        for j, text in enumerate(gens):
            out.append(TraceInput(s.key(j, len(gens)), text, cont))
    return out, SAMPLES_FORMAT


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
