"""`StrEnum`: vocabularies whose members are the very strings written to files, task names and
JSON, so a name is defined once and compared, formatted, shown and serialized as the plain string."""
from __future__ import annotations

import enum


class StrEnum(str, enum.Enum):
    """Members are strings: `str()`, f-strings and `repr()` give what the plain string gives (so
    messages, argparse's choices and files read as before), as does hashing and comparing."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)

    def __repr__(self) -> str:
        return str.__repr__(self)


__all__ = ["StrEnum"]
