"""The one reading of a yes/no setting (task metadata, environment variables, tokenizer arguments)."""
from __future__ import annotations

from typing import Any

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def parse_bool(value: Any) -> bool:
    """`value` as a boolean: a bool as it is, else one of TRUE_WORDS / FALSE_WORDS (any case, outer
    space ignored). ValueError for anything else, which callers turn into a message naming the setting."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise ValueError(f"{value!r} is not one of {', '.join(TRUE_WORDS + FALSE_WORDS)}")


def env_switch(name: str, default: bool) -> bool:
    """An environment variable read with `parse_bool`; unset or empty is `default`. A value that is
    not a yes/no word keeps `default` and says so on stderr: switches are read where failing would
    lose more than it saves (interpreter start-up, the error path of the CLI)."""
    import os
    import sys

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return parse_bool(raw)
    except ValueError as exc:
        print(f"PropMe: {name} {exc}; using {'on' if default else 'off'}", file=sys.stderr)
        return default
