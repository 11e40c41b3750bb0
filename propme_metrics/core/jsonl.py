"""Reading JSONL line by line with errors that name the file and line (one implementation)."""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from propme_metrics.core.errors import ConfigError

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
REPLACEMENT = "\ufffd"


def json_line(value: Any) -> str:
    """One JSONL line (newline included) of a JSON-able value, UTF-8 characters as they are: orjson
    (several times faster on trace results), or the standard library for what orjson refuses
    (integers beyond 64 bits, lone surrogates). Parsed back, both give the same value."""
    try:
        return orjson.dumps(value).decode("utf-8") + "\n"
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, ensure_ascii=False) + "\n"


def scrub_surrogates(value: Any) -> tuple[Any, int]:
    """`value` with every lone surrogate (not encodable as UTF-8) in its strings replaced by U+FFFD,
    and how many strings changed. JSON's "\\ud800" escapes are the usual source."""
    if isinstance(value, str):
        return (_SURROGATE.sub(REPLACEMENT, value), 1) if _SURROGATE.search(value) else (value, 0)
    if isinstance(value, dict):
        n, out = 0, {}
        for k, v in value.items():
            (k2, a), (v2, b) = scrub_surrogates(k), scrub_surrogates(v)
            out[k2], n = v2, n + a + b
        return out, n
    if isinstance(value, list):
        items = [scrub_surrogates(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    return value, 0


def first_non_finite(value: Any, where: str = "") -> str | None:
    """The path (e.g. `generations[0].documents[2].nv_recall`) of the first NaN or infinity in
    `value`, or None. Python's json reads NaN and Infinity, which standard JSON does not have."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "the value"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = first_non_finite(v, f"{where}[{k}]" if isinstance(k, int) else f"{where}.{k}" if where else str(k))
        if found:
            return found
    return None


def json_objects(lines: Iterable[str], where: str, hint: str | None = None,
                 on_scrub: Callable[[int], None] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object) for each non-blank line; a bad line is a ConfigError.

    Lone surrogates (a "\\ud800" escape without its pair) are replaced by U+FFFD: such a string
    cannot be written as UTF-8 anywhere downstream; `on_scrub(lineno)` is told of each such line.
    """
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}:{lineno}: not valid JSON ({exc.msg})", hint) from None
        except RecursionError:
            raise ConfigError(f"{where}:{lineno}: JSON nested too deeply", hint) from None
        if _SURROGATE_ESCAPE.search(line):
            record, n = scrub_surrogates(record)
            if n and on_scrub is not None:
                on_scrub(lineno)
        if not isinstance(record, dict):
            raise ConfigError(f"{where}:{lineno}: a JSON {type(record).__name__}, not an object", hint)
        yield lineno, record
