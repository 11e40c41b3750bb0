"""Documents and tokens per corpus source: what a source's share of the corpus is.

A document's source is its metadata field named by the index's `source_field` (the build's
`--source-field`, `source` by default, as Dynaword and Common Pile have it), read from the stored
metadata line exactly as the tracer reads it, so the corpus side and the leaked side of an
enrichment ratio (`metrics/provenance_analysis.py`) name sources the same way; `unknown` when the field is absent
or empty. The build records the counts in the manifest (`source_counts`); for an index built before
that, `index_source_counts` computes them once and caches them in `propme-source-counts.json`
beside the manifest (a `propme-*` name, which the engine never takes for a shard file), or in the
PropMe cache folder when the index folder is read-only.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from propme_metrics.core.errors import IndexFormatError
from propme_metrics.core.files import cache_dir, write_atomic
from propme_metrics.index.format import (
    SOURCE_COUNTS_NAME,
    ShardFile,
    document_lengths,
    metadata_line,
    parse_metadata,
    shard_file,
)
from propme_metrics.index.manifest import IndexManifest
from propme_metrics.index.sources import CorpusSource

#: the metadata field that names a document's source unless the index was built with another
DEFAULT_SOURCE_FIELD: str = next(f.default for f in fields(CorpusSource) if f.name == "source_field")
#: the source of a document whose metadata lacks the field
UNKNOWN_SOURCE = "unknown"
#: the cached counts' layout; a cache written in another layout is recomputed, never misread
CACHE_FORMAT = "propme-source-counts/1"


def metadata_field(metadata: Any, field: str) -> Any:
    """The value of `field` in a document's metadata (None when absent); a dotted name that is not
    a key itself walks nested records (`meta.pile_set_name`, as the Pile has its source)."""
    if not isinstance(metadata, dict):
        return None
    if field in metadata or "." not in field:
        return metadata.get(field)
    for key in field.split("."):
        metadata = metadata.get(key) if isinstance(metadata, dict) else None
    return metadata


def source_of(metadata: Any, field: str = DEFAULT_SOURCE_FIELD) -> str:
    """The source a document's metadata names (`unknown` when the field is absent or empty)."""
    value = metadata_field(metadata, field)
    return UNKNOWN_SOURCE if value is None or str(value).strip() == "" else str(value)


@dataclass(frozen=True)
class SourceCounts:
    """Documents and real tokens (separators excluded) of every source of one index."""

    field: str
    sources: dict[str, dict[str, int]]   #: source -> {"documents": n, "tokens": n}

    @property
    def total_tokens(self) -> int:
        return sum(c["tokens"] for c in self.sources.values())

    def token_share(self, source: str) -> float:
        """The source's share of the corpus tokens (0 for a source the index does not hold)."""
        total = self.total_tokens
        return self.sources.get(source, {}).get("tokens", 0) / total if total else 0.0


def count_sources(folder: str | Path, shard_ids: Iterable[int], width: int, field: str) -> dict[str, dict[str, int]]:
    """{source: {documents, tokens}} over the shards of an index folder, read from its offset and metadata files."""
    out: dict[str, dict[str, int]] = {}
    for sid in shard_ids:
        offsets = np.fromfile(shard_file(folder, ShardFile.OFFSET, sid), dtype="<u8")
        metaoff = np.fromfile(shard_file(folder, ShardFile.METAOFF, sid), dtype="<u8")
        meta = np.fromfile(shard_file(folder, ShardFile.METADATA, sid), dtype=np.uint8)
        lengths = document_lengths(offsets, shard_file(folder, ShardFile.TOKENIZED, sid).stat().st_size, width)
        for doc, n_tokens in enumerate(lengths.tolist()):
            src = source_of(parse_metadata(metadata_line(metaoff, meta, doc), unwrap=True), field)
            entry = out.setdefault(src, {"documents": 0, "tokens": 0})
            entry["documents"] += 1
            entry["tokens"] += int(n_tokens)
    return dict(sorted(out.items()))


def joined_source_counts(parts: Iterable[dict[str, dict[str, int]] | None]) -> dict[str, dict[str, int]] | None:
    """The counts of an index joined from parts: their sums (None when a part did not record them)."""
    out: dict[str, dict[str, int]] = {}
    for part in parts:
        if part is None:
            return None
        for src, c in part.items():
            entry = out.setdefault(src, {"documents": 0, "tokens": 0})
            entry["documents"] += int(c["documents"])
            entry["tokens"] += int(c["tokens"])
    return dict(sorted(out.items()))


def manifest_source_field(manifest: IndexManifest) -> str:
    """The metadata field this index names sources by (its build's --source-field)."""
    return str((manifest.source or {}).get("source_field") or DEFAULT_SOURCE_FIELD)


def _cache_paths(folder: Path, identity: str) -> list[Path]:
    cache = cache_dir()
    return [folder / SOURCE_COUNTS_NAME, cache / "source-counts" / f"{identity}.json"]


def index_source_counts(folder: str | Path) -> SourceCounts:
    """The per-source counts of the index in `folder`: from its manifest, else from the cache, else
    computed (once) and cached. Raises IndexFormatError when the folder is not a readable index."""
    folder = Path(folder)
    manifest = IndexManifest.read(folder)
    field = manifest_source_field(manifest)
    recorded = getattr(manifest, "source_counts", None)
    if recorded:
        return SourceCounts(field, recorded)
    identity = manifest.identity
    paths = _cache_paths(folder, identity)
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if (data.get("format"), data.get("identity"), data.get("field")) == (CACHE_FORMAT, identity, field):
                return SourceCounts(field, {str(k): dict(v) for k, v in data["sources"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    try:
        counts = count_sources(folder, manifest.shard_ids, manifest.token_width, field)
    except OSError as exc:
        raise IndexFormatError(f"cannot read the documents of {folder}: {exc}",
                               "check the index with `propme index verify`") from None
    text = json.dumps({"format": CACHE_FORMAT, "identity": identity, "field": field, "sources": counts}, indent=1, ensure_ascii=False) + "\n"
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
            break
        except OSError:
            continue  # read-only: try the next place; counts are returned either way
    return SourceCounts(field, counts)
