"""The index manifest: what an index holds and how it was built, stored beside the shards
(file names: `index/format.py`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import IndexFormatError
from propme_metrics.core.files import cache_dir, write_atomic
from propme_metrics.index.format import MANIFEST_NAME, old_dir

INDEX_FORMAT = "propme-index/1"


_COUNT = {"type": "integer", "minimum": 0}
_POSITIVE = {"type": "integer", "minimum": 1}
_ID = {"type": ["integer", "null"], "minimum": 0}
#: what a manifest must hold (JSON Schema, checked with `jsonschema` whenever an index is opened), so
#: that a damaged or hand-edited manifest is one message (exit 3), never a crash deep inside a command
MANIFEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["source", "tokenizer", "token_width", "delimiter_ids", "num_shards", "shard_ids", "shards",
                 "build", "versions", "created", "format"],
    "properties": {
        "format": {"const": INDEX_FORMAT},
        "source": {"type": "object"},
        "tokenizer": {
            "type": "object",
            "required": ["name", "revision", "cls", "vocab_size", "max_id", "eos_token_id", "bos_token_id",
                         "family", "sha256"],
            "properties": {"name": {"type": "string"}, "revision": {"type": ["string", "null"]},
                           "cls": {"type": "string"}, "vocab_size": _POSITIVE, "max_id": _COUNT,
                           "eos_token_id": _ID, "bos_token_id": _ID, "family": {"type": "string"},
                           "sha256": {"type": "string"}, "files_sha256": {"type": ["string", "null"]}}},
        "token_width": {"enum": [2, 4]},
        "delimiter_ids": {"type": "array", "items": _COUNT},
        "num_shards": _POSITIVE,
        "shard_ids": {"type": "array", "items": _COUNT, "minItems": 1, "uniqueItems": True},
        "shards": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["id", "documents", "tokens", "ds_bytes", "sa_bytes"],
            "properties": {"id": _COUNT, "documents": _POSITIVE, "tokens": _COUNT, "ds_bytes": _POSITIVE,
                           "sa_bytes": _POSITIVE}}},
        "build": {"type": "object"},
        "versions": {"type": "object"},
        "created": {"type": "string"},
        "files": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["bytes", "xxh3_128", "sample"],
            "properties": {"bytes": _COUNT, "xxh3_128": {"type": ["string", "null"]}, "sample": {"type": "string"}}}},
        "adopted": {"type": ["object", "null"], "required": ["from", "referred", "computed", "checks"],
                    "properties": {"from": {"type": "array", "items": {"type": "string"}, "minItems": 1}, "referred": {"type": "array", "items": {"type": "string"}},
                                   "computed": {"type": "array", "items": {"type": "string"}},
                                   "checks": {"type": "array", "items": {"type": "object"}}}},
    },
}


def _valid_mark(raw: bytes) -> Path:
    """Where `schema_problem` marks that the manifest text `raw` met MANIFEST_SCHEMA (keyed by both)."""
    key = hashlib.sha256(json.dumps(MANIFEST_SCHEMA, sort_keys=True).encode() + b"\0" + raw).hexdigest()
    return cache_dir() / "valid-manifests" / key


def schema_problem(data: Any, raw: bytes | None = None) -> str | None:
    """Where `data` breaks MANIFEST_SCHEMA (None: nowhere). `raw`, the text `data` was read from: a
    text that met this schema before is not checked again (a mark in PropMe's cache folder; loading
    `jsonschema` and checking cost about 80 ms, a third of a small `propme trace`)."""
    mark = _valid_mark(raw) if raw is not None else None
    if mark is not None and mark.exists():
        return None
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(MANIFEST_SCHEMA).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        return f"{where}: {error.message}"
    if mark is not None:
        try:
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.touch()
        except OSError:  # a read-only cache folder: checked again next time
            pass
    return None


def manifest_problem(data: Any, raw: bytes | None = None) -> str | None:
    """What is wrong with a manifest's JSON (None when nothing): the schema first (`schema_problem`;
    `raw`: the text it was read from), then what a schema cannot say (the shard list matches
    `shard_ids`, every id lies below `num_shards`, each shard's token file holds its tokens and one
    separator per document)."""
    problem = schema_problem(data, raw)
    if problem is not None:
        return problem
    ids = [s["id"] for s in data["shards"]]
    if sorted(ids) != sorted(data["shard_ids"]):
        return f"shards lists ids {ids}, shard_ids says {data['shard_ids']}"
    if max(ids) >= data["num_shards"]:
        return f"shard {max(ids)} lies outside num_shards {data['num_shards']}"
    for s in data["shards"]:
        expected = data["token_width"] * (s["tokens"] + s["documents"])
        if s["ds_bytes"] != expected:
            return (f"shard {s['id']}: {s['tokens']:,} tokens and {s['documents']:,} documents take {expected:,} "
                    f"bytes at {data['token_width']} bytes a token, but ds_bytes says {s['ds_bytes']:,}")
    return None


@dataclass
class ShardInfo:
    """Counts of one shard: documents, real tokens (separators excluded) and file sizes."""

    id: int
    documents: int
    tokens: int
    ds_bytes: int
    sa_bytes: int


@dataclass
class TokenizerInfo:
    """Identity of the index tokenizer; `sha256` covers its vocabulary, merges and specials."""

    name: str
    revision: str | None
    cls: str
    vocab_size: int
    max_id: int
    eos_token_id: int | None
    bos_token_id: int | None
    family: str
    sha256: str
    files_sha256: str | None = None  #: bytes of the saved tokenizer files (a fast check when opening)


@dataclass
class IndexManifest:
    """Everything needed to open, verify and reproduce an index."""

    source: dict[str, Any]
    tokenizer: TokenizerInfo
    token_width: int
    delimiter_ids: list[int]
    num_shards: int
    shard_ids: list[int]
    shards: list[ShardInfo]
    build: dict[str, Any]
    versions: dict[str, str]
    created: str
    format: str = INDEX_FORMAT
    #: relative path -> {bytes, xxh3_128, sample}: content checksums of every file (empty for old indexes;
    #: xxh3_128 None for an adopted infini-gram file, which adoption never reads in full)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: source -> {documents, tokens}, sources named by source["source_field"] (None: built before it was recorded)
    source_counts: dict[str, dict[str, int]] | None = None
    #: for an index adopted from infini-gram folders (`index/adopt.py`): {from: those folders, referred:
    #: its files the index links to, computed: shard files PropMe computed, checks: [{name, detail}]}
    adopted: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return sorted(self.shard_ids) == list(range(self.num_shards))

    @property
    def total_documents(self) -> int:
        return sum(s.documents for s in self.shards)

    @property
    def total_tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def identity(self) -> str:
        """Short hash that names this index's content (source, tokenizer, counts), not its path."""
        payload = json.dumps(
            {"params": self.build.get("params_hash"), "shards": [asdict(s) for s in self.shards]},
            sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["identity"] = self.identity
        data["total_documents"] = self.total_documents
        data["total_tokens"] = self.total_tokens
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexManifest:
        known = {f.name for f in fields(cls)}  # derived keys (identity, totals) and unknown ones are skipped
        data = {k: v for k, v in data.items() if k in known}
        data["tokenizer"] = TokenizerInfo(**data["tokenizer"])
        data["shards"] = [ShardInfo(**s) for s in data["shards"]]
        return cls(**data)

    def write(self, folder: str | Path) -> None:
        """Write atomically (temp file, then rename), so a half-written manifest never exists."""
        write_atomic(Path(folder) / MANIFEST_NAME, json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def read(cls, folder: str | Path) -> IndexManifest:
        path = Path(folder) / MANIFEST_NAME
        if not Path(folder).is_dir():
            aside = old_dir(Path(folder))
            raise IndexFormatError(f"index folder {folder} does not exist",
                                   "a build was interrupted while it replaced this index (the old one waits in "
                                   f"{aside}): re-run that `propme index build` to finish it" if aside.is_dir() else
                                   "build one with `propme index build SOURCE --out DIR`")
        if not path.is_file():
            if any(Path(folder).glob("tokenized.*")):  # shard files without a manifest: infini-gram's own indexer
                raise IndexFormatError(
                    f"{folder} is an index written by infini-gram's indexer, not a PropMe index (no {MANIFEST_NAME})",
                    f"adopt it (nothing in it is changed): `propme index adopt {folder} --tokenizer TOKENIZER "
                    "--out NEW_FOLDER`, with the tokenizer the index was built with; then pass --index NEW_FOLDER")
            raise IndexFormatError(f"{folder} is not a PropMe index (no {MANIFEST_NAME})",
                                   "an index is complete only once its build has finished; "
                                   "(re)run `propme index build` for it")
        try:
            raw = path.read_bytes()
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise IndexFormatError(f"{path} is corrupt (not JSON: {exc})",
                                   "rebuild the index with `propme index build`") from None
        if isinstance(data, dict) and "format" in data and data["format"] != INDEX_FORMAT:
            raise IndexFormatError(f"{path}: unknown index format {data.get('format')!r} (expected {INDEX_FORMAT})",
                                   "rebuild the index with this version of PropMe")
        problem = manifest_problem(data, raw)
        if problem is not None:
            raise IndexFormatError(f"{path} is damaged: {problem}",
                                   "restore the manifest from a copy of the index or rebuild the index with "
                                   "`propme index build`")
        return cls.from_dict(data)
