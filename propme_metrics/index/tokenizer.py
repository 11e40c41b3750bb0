"""Loading the index tokenizer and deriving what SimpleTrace needs from its vocabulary.

Word starts (for whole-word spans) depend on the tokenizer family: SentencePiece pieces begin
with '▁', byte-level BPE pieces with 'Ġ' (space) or 'Ċ' (newline), WordPiece continuations
begin with '##'. Sentence delimiters are pieces made only of '.', '!', '?', newlines and spaces.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.memory import is_out_of_memory, out_of_memory

#: Default index tokenizer: an ungated copy of the 32,000-entry Llama-2 tokenizer (docs/configuration.md, the index tokenizer).
DEFAULT_TOKENIZER = "hf-internal-testing/llama-tokenizer"

DELIMITER_CHARS = frozenset(".!?\n")
_SPACE_CHARS = frozenset(" \t\r")
_DELIMITER_OR_SPACE = DELIMITER_CHARS | _SPACE_CHARS


def load_tokenizer(name_or_path: str, revision: str | None = None, *, require_fast: bool = True, **kwargs):
    """Load an HF tokenizer (hub id or local folder) or fail with a clear message.

    `kwargs` go to `AutoTokenizer.from_pretrained` (e.g. the model loader's `trust_remote_code`,
    `subfolder`, `add_bos_token`); the index needs a fast tokenizer, a model's may be slow.
    """
    import transformers

    transformers.utils.logging.set_verbosity_error()
    if name_or_path.startswith((".", "/", "~")) and not Path(name_or_path).expanduser().is_dir():
        raise ConfigError(f"no tokenizer folder at {name_or_path}",
                          "give a folder holding tokenizer.json (e.g. saved with save_pretrained) or a hub id")
    kwargs.setdefault("use_fast", True)
    options = tuple(sorted(kwargs.items()))
    try:
        hash(options)
    except TypeError:  # an option value that cannot name a loaded tokenizer (a dict, a list): loaded anew
        tok = _from_pretrained(name_or_path, revision, options)
    else:
        tok = _loaded(name_or_path, revision, options, _folder_digest(name_or_path, kwargs.get("subfolder")))
    if require_fast and not getattr(tok, "is_fast", False):
        raise ConfigError(f"tokenizer {name_or_path!r} has no fast (Rust) implementation",
                          "PropMe needs a fast tokenizer (tokenizer.json)")
    return tok


@lru_cache(maxsize=8)
def _loaded(name_or_path: str, revision: str | None, options: tuple, folder_digest: str):
    """The tokenizers this process loaded, by what they were loaded from (the last few; a failure is
    not kept): an index is opened many times in one process (each lm-eval subtask, report input,
    build), and each shares the tokenizer loaded first, which PropMe never changes. `folder_digest`
    (`_folder_digest`) makes a folder saved anew a new key."""
    return _from_pretrained(name_or_path, revision, options)


def _from_pretrained(name_or_path: str, revision: str | None, options: tuple):
    """`AutoTokenizer.from_pretrained` with these (name, value) options, its failures one message."""
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(name_or_path, revision=revision, **dict(options))
    except Exception as exc:  # the hub client raises many types; all mean "cannot load it"
        if is_out_of_memory(exc):
            raise out_of_memory(f"loading the tokenizer {name_or_path!r}") from None
        raise ConfigError(
            f"cannot load tokenizer {name_or_path!r}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            "give a Hugging Face tokenizer id reachable from this machine or a local folder "
            "that holds tokenizer.json / tokenizer_config.json",
        ) from None


#: a folder's files up to this size are identified by their bytes, larger ones (a model's weights
#: beside its tokenizer) by size and modification time
_HASHED_FILE_BYTES = 64 << 20


def _folder_digest(name_or_path: str, subfolder: str | None = None) -> str:
    """What a local tokenizer folder holds (its files' bytes, see `_HASHED_FILE_BYTES`), so a folder
    saved anew is loaded anew; '' for a hub id (one process keeps what it loaded)."""
    folder = Path(name_or_path).expanduser()
    if not folder.is_dir():
        return ""
    h = hashlib.sha256()
    for where in (folder, folder / subfolder) if subfolder else (folder,):
        try:
            entries = sorted((e for e in os.scandir(where) if e.is_file()), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            st = e.stat()
            h.update(f"{where.name}/{e.name}\0{st.st_size}\0".encode("utf-8", "surrogateescape"))
            if st.st_size <= _HASHED_FILE_BYTES:
                try:
                    h.update(Path(e.path).read_bytes())
                except OSError:
                    h.update(b"unreadable")
            else:
                h.update(str(st.st_mtime_ns).encode())
    return h.hexdigest()


#: texts of the corpus (or of the generations) that the tokenizer check encodes
ENCODE_CHECK_TEXTS = 64
#: more non-space characters per id than any tokenizer averages (about 4 for GPT-2 and Llama, 6 for
#: word-level): a tokenizer above it drops text it cannot encode instead of encoding it
MAX_CHARS_PER_ID = 32


def check_encodes(encode: Callable[[list[str]], list[list[int]]], texts: Sequence[str], what: str, hint: str) -> None:
    """Refuse `what` (a tokenizer) when it encodes a sample of real text to no ids, or to far fewer
    than the text's characters: an index of it would hold no tokens and every trace would find nothing."""
    from propme_metrics.core.errors import ConfigError

    sample = [t for t in texts if t.strip()][:ENCODE_CHECK_TEXTS]
    chars = sum(len("".join(t.split())) for t in sample)
    if not chars:
        return
    ids = sum(len(x) for x in encode(sample))
    if ids * MAX_CHARS_PER_ID < chars:
        found = "no token ids" if not ids else f"only {ids:,} token ids"
        raise ConfigError(f"{what} encodes {len(sample)} sample text(s) ({chars:,} non-space characters) to {found}: "
                          f"it cannot encode this text (more than {MAX_CHARS_PER_ID} characters per id)", hint)


def encode_batch(tok, texts: list[str]) -> list[list[int]]:
    """Token ids of each text as the index holds them: the HF tokenizer, no special tokens."""
    return tok(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]


def load_backend(folder: str | Path):
    """The Rust tokenizer of a saved folder (its tokenizer.json), without importing transformers:
    milliseconds instead of seconds. It encodes and decodes exactly as the fast HF tokenizer does."""

    path = Path(folder) / "tokenizer.json"
    try:
        return _backend_of(path.read_bytes())
    except Exception as exc:  # the Rust side raises plain Exception for unreadable or invalid files
        raise ConfigError(f"cannot load tokenizer file {path}: {exc}",
                          "the folder must hold a tokenizer.json written by save_pretrained") from None


@lru_cache(maxsize=8)
def _backend_of(text: bytes):
    """The Rust tokenizer of a tokenizer.json's bytes, once per content in a process (the last few;
    shared, never changed by PropMe)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(text.decode("utf-8"))


#: the files of a saved tokenizer folder whose bytes `files_sha256` covers
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def files_sha256(folder: str | Path) -> str:
    """sha256 over the bytes of a saved tokenizer folder's files (cheap: no parsing); '' if unreadable."""
    h = hashlib.sha256()
    try:
        for name in TOKENIZER_FILES:
            h.update(name.encode() + b"\0" + (Path(folder) / name).read_bytes() + b"\0")
    except OSError:
        return ""
    return h.hexdigest()


def max_token_id(tok) -> int:
    """Largest id the tokenizer can emit (added tokens included)."""
    return max(tok.get_vocab().values())


def _content_key(tok) -> tuple[str, str, dict[str, str]]:
    """(digest, serialized form, special tokens) of a tokenizer: the digest names its content in this
    process's caches (milliseconds; what is cached under it parses the whole vocabulary)."""
    serialized = tok.backend_tokenizer.to_str()
    special = {k: str(v) for k, v in tok.special_tokens_map.items()}
    return hashlib.sha256(f"{serialized}\0{sorted(special.items())}".encode()).hexdigest(), serialized, special


def tokenizer_hash(tok) -> str:
    """Content hash of the tokenizer's vocabulary, merges and special tokens (not of its path)."""
    key, serialized, special = _content_key(tok)
    if key not in _HASHES:  # the canonical form parses the whole vocabulary: once per tokenizer
        _HASHES[key] = _hash_payload(json.loads(serialized), special)
    return _HASHES[key]


#: by the content digest of a tokenizer (`_content_key`; a builder or reader in one process sees few):
#: its canonical hash, and its vocabulary's analysis
_HASHES: dict[str, str] = {}
_VOCABS: dict[str, VocabInfo] = {}


def _hash_payload(model: dict, special: dict[str, str]) -> str:
    model.pop("truncation", None)
    model.pop("padding", None)
    payload = json.dumps({"tokenizer": model, "special": dict(sorted(special.items()))},
                         sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class VocabInfo:
    """What the tracer needs from the vocabulary: family, word-start ids and delimiter ids."""

    family: str
    word_start_ids: list[int]
    delimiter_ids: list[int]


def analyze_vocab(tok) -> VocabInfo:
    """Classify the tokenizer family and list word-start and sentence-delimiter ids (once per
    tokenizer content in a process: it decodes every id; a copy each call)."""
    key = _content_key(tok)[0]
    if key not in _VOCABS:
        _VOCABS[key] = _analyze_vocab(tok)
    info = _VOCABS[key]
    return VocabInfo(info.family, list(info.word_start_ids), list(info.delimiter_ids))


def _analyze_vocab(tok) -> VocabInfo:
    """`analyze_vocab` itself."""
    vocab = tok.get_vocab()
    pieces = {i: p for p, i in vocab.items()}
    if any(p.startswith("▁") for p in vocab):
        family = "sentencepiece"
        is_start = lambda p: p.startswith("▁") or p in ("<0x0A>", "<0x0D>")  # noqa: E731
    elif any(p.startswith("Ġ") for p in vocab):
        family = "byte-level"
        is_start = lambda p: p[:1] in ("Ġ", "Ċ")  # noqa: E731
    elif any(p.startswith("##") for p in vocab):
        family = "wordpiece"
        is_start = lambda p: not p.startswith("##")  # noqa: E731
    else:
        family = "unknown"
        is_start = lambda p: True  # noqa: E731
    special = set(tok.all_special_ids)
    ids = sorted(i for i in pieces if i not in special)
    word_starts = [i for i in ids if is_start(pieces[i])]
    decoded = tok.backend_tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
    delimiters = [i for i, text in zip(ids, decoded)
                  if not DELIMITER_CHARS.isdisjoint(text) and _DELIMITER_OR_SPACE.issuperset(text)]
    return VocabInfo(family=family, word_start_ids=word_starts, delimiter_ids=delimiters)
