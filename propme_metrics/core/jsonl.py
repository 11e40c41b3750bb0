"""JSON Lines, read and written in one place (with `jsonlines`), with errors that name the file and line."""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import orjson

from propme_metrics.core.errors import ConfigError

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: a number orjson might read beyond 64 bits: it gives a float for such an integer, silently
_LONG_DIGITS = re.compile(r"\d{19}")
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


class _TooDeep(ValueError):
    """A line nested deeper than the standard library's parser recurses."""


class _Numbered:
    """The lines of a file, counting them (blank ones included): the 1-based number of the last line
    handed out is `lineno`, so a reader that skips blank lines still names the right one."""

    def __init__(self, lines: Iterable[str]):
        self._lines, self.lineno = iter(lines), 0

    def __iter__(self) -> _Numbered:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.lineno += 1
        return line


def json_objects(lines: Iterable[str], where: str, hint: str | None = None,
                 on_scrub: Callable[[int], None] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object) for each non-blank line; a bad line is a ConfigError.

    Lines are read by `jsonlines` with orjson; what orjson refuses or misreads (NaN and Infinity,
    which the report then names; lone surrogates; integers beyond 64 bits, which orjson turns into
    floats: any line with 19 digits in a row) and every invalid line go through the standard
    library, whose messages name the fault. Lone surrogates (a "\\ud800" escape without
    its pair) are replaced by U+FFFD: such a string cannot be written as UTF-8 anywhere downstream;
    `on_scrub(lineno)` is told of each such line.
    """
    import jsonlines  # with attrs, about 50 ms: loaded by the first file read, not by importing PropMe

    source, scrubbed = _Numbered(lines), []

    def loads(line: str) -> Any:
        if not _LONG_DIGITS.search(line):
            try:
                return orjson.loads(line)
            except orjson.JSONDecodeError:
                pass
        try:
            value = json.loads(line)
        except RecursionError:
            raise _TooDeep from None
        if _SURROGATE_ESCAPE.search(line):
            value, n = scrub_surrogates(value)
            scrubbed.append(n)
        return value

    try:
        for record in jsonlines.Reader(source, loads=loads).iter(allow_none=True, skip_empty=True):
            lineno = source.lineno
            if scrubbed and scrubbed.pop() and on_scrub is not None:
                on_scrub(lineno)
            if not isinstance(record, dict):
                raise ConfigError(f"{where}:{lineno}: a JSON {type(record).__name__}, not an object", hint)
            yield lineno, record
    except jsonlines.InvalidLineError as exc:
        cause = exc.__cause__
        if isinstance(cause, _TooDeep):
            raise ConfigError(f"{where}:{exc.lineno}: JSON nested too deeply", hint) from None
        raise ConfigError(f"{where}:{exc.lineno}: not valid JSON ({getattr(cause, 'msg', cause)})", hint) from None


def write_json_lines(fh: IO, values: Iterable[Any], dumps: Callable[[Any], str] = json_line) -> None:
    """Write `values` to the open file `fh` (text or binary), one JSON line each, through `jsonlines`;
    `dumps` makes a line's text (default `json_line`: orjson, UTF-8 characters as they are)."""
    import jsonlines

    with jsonlines.Writer(fh, dumps=lambda v: dumps(v).rstrip("\n")) as writer:
        writer.write_all(values)
