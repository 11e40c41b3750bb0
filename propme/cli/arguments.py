"""Argument types and options that several `propme` subcommands share (one definition each)."""
from __future__ import annotations

import argparse
import functools
import sys

from propme_metrics.core.limits import MAX_SEED, MAX_SIZE


def csv(value: str) -> tuple[str, ...]:
    """A comma-separated list, blanks dropped."""
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _integer(value: str, minimum: int, maximum: int) -> int:
    """`value` as an integer in [minimum, maximum], or ArgumentTypeError (argparse: exit 2) saying why."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if number < minimum:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value!r}")
    if number > maximum:
        raise argparse.ArgumentTypeError(f"expected an integer <= {maximum:,}, got {value!r}")
    return number


def count(minimum: int, maximum: int = MAX_SIZE):
    """An argparse type: an integer of at least `minimum` and at most `maximum` (every integer option
    is bounded: `core.limits`), refused before any work otherwise; one function per bounds, so two
    options with the same bounds have the same type."""
    return _count(minimum, maximum)


@functools.cache
def _count(minimum: int, maximum: int):
    """`count`'s parser of integers in [minimum, maximum], made once per bounds."""
    def parse(value: str) -> int:
        return _integer(value, minimum, maximum)

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive, natural, seed = count(1), count(0), count(0, MAX_SEED)


def counts(minimum: int, maximum: int = MAX_SIZE):
    """An argparse type: comma-separated integers, each bounded as `count`'s."""
    def parse(value: str) -> list[int]:
        numbers = [_integer(v, minimum, maximum) for v in csv(value)]
        if not numbers:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}")
        return numbers

    parse.__name__ = f"integers >= {minimum}"
    return parse


ints = counts(0)


def share(value: str) -> float:
    """A number in (0, 1]."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value!r}") from None
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value!r}")
    return x


def add_ray_option(parser: argparse.ArgumentParser, what: str) -> None:
    """`--ray [ADDRESS]` of `index build` and `trace`: `what` says what runs on the cluster."""
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help=f"{what} on a Ray cluster: ADDRESS (host:port) or RAY_ADDRESS, else a local one "
                             '(needs `pip install "propme[ray]"`; the index folder must be on a file system '
                             "every node sees)")


def add_interval_options(parser: argparse.ArgumentParser, of: str, zero: str = "no bootstrap intervals") -> None:
    """`--bootstrap` and `--seed` of the commands that bootstrap intervals: `of` says what is resampled,
    `zero` what 0 resamples mean."""
    from propme_metrics.metrics.pm import DEFAULT_BOOTSTRAP

    parser.add_argument("--bootstrap", type=natural, default=DEFAULT_BOOTSTRAP,
                        help=f"bootstrap resamples of {of} (0: {zero})")
    parser.add_argument("--seed", type=seed, default=0, help="bootstrap seed (same inputs and seed, same intervals)")


def add_pairing_option(parser: argparse.ArgumentParser) -> None:
    """`--pairing` of `report` and `compare`: which models the paired comparisons compare."""
    from propme_metrics.metrics.compare import PAIRINGS

    parser.add_argument("--pairing", choices=PAIRINGS, default="all",
                        help="which models the paired comparisons compare: every pair, or consecutive revisions "
                             "of each model (input order)")


def add_pm_metrics_option(parser: argparse.ArgumentParser, verb: str) -> None:
    """`--pm-metrics` of `report` and `compare` (`verb`: what the command does with PM)."""
    from propme_metrics.metrics import registry

    parser.add_argument("--pm-metrics", type=csv, default=",".join(registry.DEFAULT_PM_METRICS),
                        help=f"comma-separated metrics to {verb} PM for ({', '.join(registry.PM_METRICS)})")


def add_request_option(parser, request: type, name: str, **overrides) -> None:
    """The option of field `name` of a request class (`core.requests`): its flag, default, help and
    bounds from the field (an integer's parsed by `count`, a number in (0, 1] by `share`, a yes/no
    field a switch); `overrides` for what the field cannot say (metavar, nargs, an action)."""
    from dataclasses import MISSING

    from propme_metrics.core.requests import option_default, option_spec

    spec, default = option_spec(request, name), option_default(request, name)
    kwargs: dict = {"help": spec.help, "dest": name}
    if default is not MISSING:
        kwargs["default"] = default
    if spec.choices:
        kwargs["choices"] = spec.choices
    elif isinstance(default, bool) and default:  # --no-<thing>: absent, the field keeps its default (on)
        kwargs.update(action="store_false", default=argparse.SUPPRESS, help=f"{spec.help} (default: False)")
    elif isinstance(default, bool):
        kwargs["action"] = "store_true"
    elif spec.above_minimum and spec.minimum == 0 and spec.maximum == 1:
        kwargs["type"] = share
    elif isinstance(spec.minimum, int):
        kwargs["type"] = count(spec.minimum, int(spec.maximum if spec.maximum is not None else MAX_SIZE))
    if spec.flag and "action" not in kwargs and "choices" not in kwargs:
        kwargs["metavar"] = spec.flag.lstrip("-").replace("-", "_").upper()  # as argparse names the flag's value
    aliases = overrides.pop("aliases", ())
    kwargs.update(overrides)
    parser.add_argument(spec.option, *aliases, **kwargs)


def add_deprecated_switch(parser, old: str, new: str) -> None:
    """`old`, a switch renamed to `new`: kept working (it sets `new`'s field), hidden from --help, and
    a warning on stderr names the new flag."""
    dest = new.lstrip("-").replace("-", "_")

    class Deprecated(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"propme: warning: {old} is deprecated, use {new}", file=sys.stderr)
            setattr(namespace, dest, True)

    parser.add_argument(old, nargs=0, action=Deprecated, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
