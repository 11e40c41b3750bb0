"""The document-start token: every prompt starts the way the model's training documents started.

Models are trained on documents that begin with a start token: Llama-family tokenizers add their
BOS (`<s>`) by themselves, GPT-2 / Pythia / OLMo tokenizers add nothing and separate documents
with `<|endoftext|>`. A prompt without it puts the model one position off from its training (a
prefix attack then silently loses most of its power), so the prompt text given to the model is
`StartToken.token + prompt`:

* `auto` (default): nothing when the model's tokenizer adds a start token by itself (as called by
  lm-eval: its own default, or `add_bos_token` when the model arguments set it), else the
  tokenizer's BOS token, else its EOS token;
* `none`: nothing;
* any other string: that literal text.

lm-eval's HF and vLLM backends do not add special tokens to a prompt that already starts with the
tokenizer's BOS text, so the model sees exactly one start token either way.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.switches import parse_bool

AUTO, NONE, LITERAL = "auto", "none", "literal"
#: Model-argument keys that name the model's tokenizer, in the order lm-eval's loaders use them:
#: `tokenizer=` overrides `pretrained=`; vLLM loads the tokenizer at `tokenizer_revision`, HF at `revision`.
TOKENIZER_KEYS = ("tokenizer", "pretrained")
REVISION_KEYS = ("tokenizer_revision", "revision")


@dataclass(frozen=True)
class StartToken:
    """What every prompt of a run starts with, and why (recorded in each logged sample)."""

    choice: str                 #: auto, none or literal
    token: str                  #: the text put before every prompt ('' for nothing)
    note: str                   #: one line: why this token
    tokenizer: str | None = None      #: the model tokenizer consulted (auto), name or path
    revision: str | None = None
    added_by_tokenizer: str | None = None  #: the start token the tokenizer adds itself, if it does

    def apply(self, prompt: str) -> str:
        """The prompt text handed to the model."""
        return self.token + prompt

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModelTokenizerSpec:
    """Where lm-eval's model loader takes the tokenizer from (read from the merged task metadata)."""

    name: str
    source_key: str
    revision: str | None = None
    kwargs: tuple[tuple[str, Any], ...] = ()   #: trust_remote_code, subfolder, use_fast, add_bos_token
    add_bos_token: bool | None = None


def _as_bool(meta: dict[str, Any], key: str) -> bool | None:
    """A yes/no model argument (`core.switches.parse_bool`), None when absent."""
    value = meta.get(key)
    if value is None:
        return None
    try:
        return parse_bool(value)
    except ValueError:
        raise ConfigError(f"model argument {key} must be true or false, not {value!r}") from None


def model_tokenizer_spec(meta: dict[str, Any]) -> ModelTokenizerSpec | None:
    """The model's tokenizer as lm-eval loads it, from `--model_args` merged into the task metadata.

    `tokenizer=` wins over `pretrained=` (both backends); the revision is `tokenizer_revision=`
    (vLLM) if given, else `revision=` (HF applies it to the tokenizer too). None when neither key
    names a tokenizer by string (e.g. the Python API with a model object and no metadata).
    """
    for key in TOKENIZER_KEYS:
        value = meta.get(key)
        if isinstance(value, str) and value.strip():
            revision = next((str(meta[k]) for k in REVISION_KEYS if meta.get(k) not in (None, "")), None)
            kwargs: dict[str, Any] = {}
            if meta.get("trust_remote_code") is not None:
                kwargs["trust_remote_code"] = _as_bool(meta, "trust_remote_code")
            if meta.get("subfolder"):
                kwargs["subfolder"] = str(meta["subfolder"])
            if meta.get("use_fast_tokenizer") is not None:
                kwargs["use_fast"] = _as_bool(meta, "use_fast_tokenizer")
            add_bos = _as_bool(meta, "add_bos_token")
            if add_bos is not None:
                kwargs["add_bos_token"] = add_bos
            return ModelTokenizerSpec(value.strip(), key, revision, tuple(sorted(kwargs.items())), add_bos)
    return None


def added_start_token(tok, add_bos_token: bool | None = None) -> str | None:
    """The special token the tokenizer puts before a text by itself (as lm-eval calls it), or None."""
    call = {} if add_bos_token is None else {"add_special_tokens": add_bos_token}
    probe = "a"
    with_defaults = list(tok(probe, **call)["input_ids"])
    plain = list(tok(probe, add_special_tokens=False)["input_ids"])
    if len(with_defaults) > len(plain) and with_defaults[len(with_defaults) - len(plain):] == plain:
        first = with_defaults[0]
        if first in set(tok.all_special_ids):
            return tok.convert_ids_to_tokens(first)
    return None


def start_token_for(tok, add_bos_token: bool | None = None) -> tuple[str, str | None, str]:
    """`auto` for a loaded tokenizer: (token to prepend, token the tokenizer adds itself, note)."""
    added = added_start_token(tok, add_bos_token)
    if added is not None:
        return "", added, f"the tokenizer adds {added} by itself: nothing prepended"
    for name in ("bos_token", "eos_token"):
        token = getattr(tok, name, None)
        if isinstance(token, str) and token:
            return token, None, f"the tokenizer adds no start token: prepended its {name[:3].upper()} token {token}"
    raise ConfigError("the model's tokenizer adds no start token and has neither a BOS nor an EOS token",
                      "set start_token to the text that starts the model's training documents, or to none")


@lru_cache(maxsize=16)
def _auto(spec: ModelTokenizerSpec) -> StartToken:
    from propme_metrics.index.tokenizer import load_tokenizer

    try:
        tok = load_tokenizer(spec.name, spec.revision, require_fast=False, **dict(spec.kwargs))
    except ConfigError as exc:
        raise ConfigError(
            f"start_token auto needs the model's tokenizer ({spec.source_key}={spec.name}"
            + (f", revision {spec.revision}" if spec.revision else "") + f"): {exc.message}",
            "make the tokenizer reachable (a local folder, or the hub cache when offline), "
            "or set start_token to none or to the literal start text (e.g. '<|endoftext|>')") from None
    token, added, note = start_token_for(tok, spec.add_bos_token)
    return StartToken(AUTO, token, note, spec.name, spec.revision, added)


def resolve_start_token(choice: Any, meta: dict[str, Any]) -> StartToken:
    """The StartToken of a run: `choice` is auto (None too), none, or a literal string."""
    if choice is None or (isinstance(choice, str) and choice.strip().lower() == AUTO):
        spec = model_tokenizer_spec(meta)
        if spec is None:
            raise ConfigError(
                "start_token auto needs to know the model's tokenizer, and no 'pretrained' or 'tokenizer' "
                "model argument reached the task",
                "with the Python API pass metadata={'tokenizer': '<model id or folder>'}, "
                "or set start_token to none or to the literal start text (e.g. '<|endoftext|>')")
        return _auto(spec)
    if not isinstance(choice, str):
        raise ConfigError(f"start_token must be auto, none or a literal string, not {choice!r}")
    if choice.strip().lower() == NONE:
        return StartToken(NONE, "", "start_token none: nothing prepended")
    return StartToken(LITERAL, choice, f"start_token literal: prepended {choice!r}")
