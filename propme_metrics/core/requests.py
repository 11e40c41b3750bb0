"""Requests: what one job (a report, a trace, a contamination check) is asked to do, as a frozen
dataclass whose fields carry their help and bounds (`option`), in the way of lm-eval's
`EvaluatorConfig`. A request is checked once, when it is made (`check_options`, called by its
`__post_init__`), so a library call and the command line refuse the same values with the same
message; `Request.from_cli` makes one from parsed arguments (whose names are the fields'), and the
command line's options are made from the fields (`propme.cli.arguments.add_request_option`).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.limits import MAX_SIZE

R = TypeVar("R", bound="Request")


@dataclass(frozen=True)
class OptionSpec:
    """A request field's help and bounds: an integer or number between `minimum` and `maximum`
    (`above_minimum`: strictly above it), or one of `choices`; `flag` is its command-line option."""

    name: str
    help: str
    minimum: float | None = None
    maximum: float | None = None
    above_minimum: bool = False
    choices: tuple[str, ...] = ()
    flag: str = ""

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> None:
        """ConfigError naming the option when `value` (None: not given) is out of bounds or no choice."""
        if value is None:
            return
        if self.choices and value not in self.choices:
            raise ConfigError(f"{self.option} must be one of {', '.join(self.choices)}, not {value!r}")
        if self.minimum is None and self.maximum is None:
            return
        integral = isinstance(self.minimum, int) and not self.above_minimum
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not number or (integral and not isinstance(value, int)):
            raise ConfigError(f"{self.option} must be {'an integer' if integral else 'a number'}, not {value!r}")
        low = self.minimum if self.minimum is not None else -math.inf
        high = self.maximum if self.maximum is not None else math.inf
        if value < low or (self.above_minimum and value == low) or value > high:
            side = f"above {low:g}" if self.above_minimum else f"at least {low:g}"
            raise ConfigError(f"{self.option} must be {side} and at most {high:,g}, not {value!r}")


def option(default: Any = MISSING, *, help: str, minimum: float | None = None, maximum: float | None = None,
           above_minimum: bool = False, choices: tuple[str, ...] = (), flag: str = "",
           default_factory: Any = MISSING) -> Any:
    """A request field with its help and bounds (an integer field with a minimum is bounded by
    `core.limits.MAX_SIZE` unless `maximum` says otherwise)."""
    if isinstance(minimum, int) and maximum is None and not above_minimum:
        maximum = MAX_SIZE
    spec = {"spec": (help, minimum, maximum, above_minimum, tuple(choices), flag)}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=spec)
    return field(default=default, metadata=spec)


def option_spec(cls: type, name: str) -> OptionSpec:
    """The help and bounds of field `name` of a request class."""
    f = next(f for f in fields(cls) if f.name == name)
    return OptionSpec(name, *f.metadata["spec"])


def option_default(cls: type, name: str) -> Any:
    """The default of field `name` of a request class (MISSING: it has none)."""
    f = next(f for f in fields(cls) if f.name == name)
    return f.default_factory() if f.default_factory is not MISSING else f.default


class Request:
    """What every request has: its options checked once, and `from_cli`."""

    def __post_init__(self) -> None:
        check_options(self)

    @classmethod
    def from_cli(cls: type[R], args: argparse.Namespace) -> R:
        """The request the parsed arguments make (each field from the argument of its name, when given)."""
        given = vars(args)
        return cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given})  # type: ignore[call-arg]


def check_options(request: Any) -> None:
    """Check every field of `request` against its bounds and choices (`OptionSpec.check`)."""
    for f in fields(request):
        if "spec" in f.metadata:
            option_spec(type(request), f.name).check(getattr(request, f.name))
