"""`StrEnum`: vocabularies whose members are the very strings written to files, task names and
JSON, so a name is defined once and compared, formatted and serialized as the plain string."""
from __future__ import annotations

import enum

if hasattr(enum, "StrEnum"):  # Python 3.11+
    StrEnum = enum.StrEnum
else:  # pragma: no cover - Python 3.10
    class StrEnum(str, enum.Enum):  # type: ignore[no-redef]
        """Members are strings; `str()` and f-strings give the value, as Python 3.11's StrEnum."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(str.__str__(self), spec)

__all__ = ["StrEnum"]
