"""The task metadata PropMe reads, defined once: every key's type, range and default.

lm-eval hands `load_prompts` one merged dict: the task YAML's `metadata:`, `--metadata` and the
`--model_args`. `read_options` checks every PropMe key of it once (then PROPME_<KEY> for a key
that is missing), before any prompt is built: a value of the wrong type, out of its range (upper
bounds too, so a huge integer is one message, never an OverflowError later) or a misspelt key (the
nearest known key is suggested) stops the run with one `PropMe:` message. Integers are plain
digits: `"3_0"`, `true`, `2.5` and NaN are refused. The tracing keys `trace_<field>` come from the
table of tracing options (`propme_metrics/trace/options.py`), as `propme trace`'s options do. A
key that is neither PropMe's nor close to one of PropMe's is a model argument (lm-eval merges
`--model_args` into the same dict) and is left alone.
"""
from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import DEFAULT_CACHE_DIR
from propme_metrics.core.switches import FALSE_WORDS, TRUE_WORDS, parse_bool
from propme_metrics.metrics.likelihood import DISCOVERABLE_N, DISCOVERABLE_P, N_KEY, P_KEY, check_n, check_p
from propme_metrics.metrics.provenance import RARE_MAX_COUNT, RARE_MAX_COUNT_KEY
from propme_metrics.prompts.settings import DEFAULT_N_PROMPTS, DEFAULT_PROMPT_SEED, SETTINGS
from propme_metrics.trace.options import MAX_SEED, TRACE_OPTIONS
from propme_metrics.trace.result import TraceConfig

#: the largest count any setting may hold (exact as a float and in JSON; far beyond any real run)
MAX_COUNT = 2 ** 53
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: metadata keys lm-eval itself adds to every task's metadata
LMEVAL_KEYS = frozenset({"version", "config_source", "_metadata"})
#: model arguments PropMe reads (the model's tokenizer for the start token, its context length)
MODEL_KEYS = frozenset({"pretrained", "tokenizer", "revision", "tokenizer_revision", "trust_remote_code",
                        "subfolder", "use_fast_tokenizer", "add_bos_token", "max_length", "max_model_len"})
#: key prefixes only PropMe uses: an unknown key with one of them is a mistake, never a model argument
PROPME_PREFIXES = ("trace_", "discoverable_", "prompt_", "pii_", "rare_", "n_prompt", "generations_")


class TaskConfigError(ConfigError):
    """A PropMe task's configuration cannot be used: raised while lm-eval builds the task, before
    any generation. An ordinary exception for Python callers; the `lm_eval` command prints it as one
    paragraph without a traceback (`propme_tasks.discovery.install`)."""


@dataclass(frozen=True)
class Key:
    """One metadata key: its type (int, float, bool, str, list for a list of counts, "path"), its
    default (a callable is called when the key is unset), bounds and allowed values."""

    name: str
    kind: Any
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()


def _trace_keys() -> list[Key]:
    """`trace_<field>` for every tracing option, with its type and range (text: TraceConfig checks
    the choices, so a bad one reads "bad tracing parameters")."""
    return [Key(o.key, o.kind, None, o.minimum, o.maximum) for o in TRACE_OPTIONS]


def _default_workers() -> int:
    from propme_tasks.deferred import default_trace_workers

    return default_trace_workers()


#: keys the task YAML sets (read from the metadata only, never from the environment)
TASK_KEYS: dict[str, Key] = {k.name: k for k in [
    Key("corpus", str), Key("setting", str, choices=SETTINGS), Key("language", str),
    Key("measure", str, choices=("likelihood",)),
]}
#: the options: metadata, else PROPME_<KEY>, else the default
KEYS: dict[str, Key] = {k.name: k for k in [
    # prompts and sizes
    Key("n_prompts", int, DEFAULT_N_PROMPTS, 1, 10 ** 7),
    Key("prompt_seed", int, DEFAULT_PROMPT_SEED, 0, MAX_SEED),
    Key("generations_per_prompt", int, 1, 1, 10 ** 5),
    Key("prompt_free_generations", int, DEFAULT_N_PROMPTS, 1, 10 ** 7),
    Key("max_prompt_tokens", int, 0, 0, 10 ** 7),
    Key("start_token", str),
    Key("cache_dir", "path", DEFAULT_CACHE_DIR),
    Key("pii_show", bool, False),
    Key(RARE_MAX_COUNT_KEY, int, RARE_MAX_COUNT, 1, MAX_COUNT),
    Key(P_KEY, float, DISCOVERABLE_P),
    Key(N_KEY, list, DISCOVERABLE_N, 1, MAX_COUNT),
    # tracing
    *_trace_keys(),
    Key("trace_backend", str, "local", choices=("local", "ray")),
    Key("trace_ray_address", str),
    Key("trace_ray_actors", int, 0, 0, 10 ** 5),
    Key("trace_workers", int, _default_workers, 1, 1024),
]}
#: keys named after a corpus (and a setting): `<corpus>_index`, `<corpus>_<setting>_prompts`
_PATTERN_KEYS = (re.compile(r"[a-z][a-z0-9_]*_index"),
                 re.compile(rf"[a-z][a-z0-9_]*_(?:{'|'.join(SETTINGS)})_prompts"))


def _where(key: str, from_env: bool) -> str:
    return f"environment variable PROPME_{key.upper()}" if from_env else f"metadata key {key!r}"


def _int(raw: Any) -> int:
    if isinstance(raw, bool) or raw is None:
        raise ValueError
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        if not raw.is_integer():
            raise ValueError
        return int(raw)
    if isinstance(raw, str) and _INT_TEXT.fullmatch(raw.strip()):
        return int(raw.strip())
    raise ValueError


def _float(raw: Any) -> float:
    if isinstance(raw, bool) or raw is None:
        raise ValueError
    if isinstance(raw, str):
        if not _FLOAT_TEXT.fullmatch(raw.strip()):
            raise ValueError
        raw = raw.strip()
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise ValueError from None
    if not math.isfinite(value):
        raise ValueError
    return value


def _range_text(key: Key) -> str:
    return f"between {key.minimum:,} and {key.maximum:,}"


def parse_value(key: Key, raw: Any, where: str) -> Any:
    """`raw` (a metadata value or an environment string) as `key` says, or TaskConfigError naming `where`."""
    if key.kind is int:
        try:
            value = _int(raw)
        except ValueError:
            raise TaskConfigError(f"{where} must be an integer, not {raw!r}",
                                  "write it as plain digits, e.g. 30 (no '_', no fraction)") from None
        if key.minimum is not None and value < key.minimum:
            raise TaskConfigError(f"{where} must be at least {key.minimum}, not {value}")
        if key.maximum is not None and value > key.maximum:
            raise TaskConfigError(f"{where} must be {_range_text(key)}, not {value}")
        return value
    if key.kind is float:
        if key.name == P_KEY:
            try:
                value = _float(raw)
            except ValueError:
                value = raw  # check_p gives the one message of a bad p
            try:
                return check_p(value, where)
            except ConfigError as exc:
                raise TaskConfigError(exc.message, exc.hint) from None
        try:
            return _float(raw)
        except ValueError:
            raise TaskConfigError(f"{where} must be a finite number, not {raw!r}") from None
    if key.kind is bool:
        try:
            return parse_bool(raw)
        except ValueError:
            raise TaskConfigError(f"{where} must be true or false ({', '.join(TRUE_WORDS)} / "
                                  f"{', '.join(FALSE_WORDS)}), not {raw!r}") from None
    if key.kind is list:
        items = raw.replace(",", " ").split() if isinstance(raw, str) else raw
        try:
            counts = [_int(x) for x in items] if isinstance(items, (list, tuple)) else None
        except ValueError:
            counts = None
        if counts is None or any(c > key.maximum for c in counts):
            raise TaskConfigError(f"{where} must be a list of whole numbers of samples between 1 and "
                                  f"{key.maximum:,}, not {raw!r}", f"for instance {list(DISCOVERABLE_N)} (the default)")
        try:
            return check_n(counts, where)
        except ConfigError as exc:
            raise TaskConfigError(exc.message, exc.hint) from None
    if key.kind == "path":
        if not isinstance(raw, (str, os.PathLike)) or not str(raw).strip():
            raise TaskConfigError(f"{where} must be a path (a non-empty string), not {raw!r}")
        return raw
    if not isinstance(raw, str):
        raise TaskConfigError(f"{where} must be text, not {raw!r}")
    if key.choices and raw not in key.choices:
        named = [repr(c) for c in key.choices]
        raise TaskConfigError(f"{where} must be {', '.join(named[:-1])} or {named[-1]}, not {raw!r}"
                              if len(named) > 1 else f"{where} must be {named[0]}, not {raw!r}")
    return raw


@dataclass(frozen=True)
class TaskOptions:
    """The validated metadata options of one task: typed values (defaults filled in) and where each came from."""

    values: dict[str, Any]
    sources: dict[str, str]
    trace: TraceConfig   #: the `trace_<field>` options, checked by TraceConfig itself

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def where(self, name: str) -> str:
        """"metadata key 'x'", "environment variable PROPME_X", or the bare key when it was defaulted."""
        return self.sources.get(name, name)


def _known(key: str) -> bool:
    return key in KEYS or key in TASK_KEYS or key in LMEVAL_KEYS or key in MODEL_KEYS or any(p.fullmatch(key) for p in _PATTERN_KEYS)


def check_unknown(meta: dict[str, Any]) -> None:
    """Refuse a key that looks like PropMe's but is none of them, naming the nearest known key."""
    names = sorted([*KEYS, *TASK_KEYS])
    for key in meta:
        if not isinstance(key, str) or _known(key):
            continue
        near = difflib.get_close_matches(key, names, n=1, cutoff=0.8)
        if not near and not key.startswith(PROPME_PREFIXES):
            continue  # a model argument of lm-eval's backend, not PropMe's
        hint = f"did you mean {near[0]!r}?" if near else "see docs/configuration.md for PropMe's keys"
        if key.startswith("trace_"):
            valid = ", ".join(n for n in names if n.startswith("trace_"))
            raise TaskConfigError(f"unknown tracing parameter {key!r}: {hint} Valid: {valid}")
        raise TaskConfigError(f"unknown metadata key {key!r}: {hint}",
                              "PropMe's keys are listed in docs/configuration.md (task metadata keys)")


def read_options(meta: dict[str, Any]) -> TaskOptions:
    """Every PropMe key of `meta` (else PROPME_<KEY>, else its default), checked once; TaskConfigError
    on the first bad one. Corpus-named keys (`<corpus>_index`, prompt files) are read by the loader."""
    check_unknown(meta)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in TASK_KEYS:
        if meta.get(name) not in (None, ""):
            sources[name] = _where(name, False)
            values[name] = parse_value(TASK_KEYS[name], meta.get(name), sources[name])
    for key in KEYS:
        raw, from_env = meta.get(key), False
        if raw is None or raw == "":
            raw, from_env = os.environ.get(f"PROPME_{key.upper()}") or None, True
        if raw is None:
            default = KEYS[key].default
            values[key] = default() if callable(default) else default
            continue
        sources[key] = _where(key, from_env)
        values[key] = parse_value(KEYS[key], raw, sources[key])
    for key, value in meta.items():  # the corpus-named paths given in the metadata
        if isinstance(key, str) and any(p.fullmatch(key) for p in _PATTERN_KEYS) and value not in (None, ""):
            parse_value(Key(key, "path"), value, _where(key, False))
    given = {o.name: values[o.key] for o in TRACE_OPTIONS if values[o.key] is not None}
    try:
        trace = TraceConfig(**given)
    except (TypeError, ValueError) as exc:
        raise TaskConfigError(f"bad tracing parameters: {exc}") from None
    return TaskOptions(values, sources, trace)
