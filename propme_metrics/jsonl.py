"""Reading JSONL line by line with errors that name the file and line (one implementation)."""
from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

from .errors import ConfigError


def json_objects(lines: Iterable[str], where: str, hint: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object) for each non-blank line; a bad line is a ConfigError."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}:{lineno}: not valid JSON ({exc.msg})", hint) from None
        if not isinstance(record, dict):
            raise ConfigError(f"{where}:{lineno}: a JSON {type(record).__name__}, not an object", hint)
        yield lineno, record
