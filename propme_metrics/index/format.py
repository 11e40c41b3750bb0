"""The on-disk format of an index, read in one place: the name of every file and folder, token
arrays, suffix-array pointers, unigram counts, document offsets and metadata lines
(docs/index-format.md).

The writers are `index/shard_writer.py` and `index/suffix_array.py`; everything that reads shard
files (the reader, the searcher, the top-level samples, verify) goes through these functions.
Every PropMe file in an index folder is named `propme-*` so that infini-gram's engine, which picks
up shard files by substring ('tokenized', 'table', ...), never mistakes it for part of a shard.
"""
from __future__ import annotations

import ast
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from propme_metrics.core.names import StrEnum
from propme_metrics.core.outputs import MANIFEST_NAME  # noqa: F401 (the file that marks an index folder, named here too)

# --- file names ------------------------------------------------------------------------------------

WORD_STARTS_NAME = "propme-word-starts.txt"
TOKENIZER_DIRNAME = "propme-tokenizer"
#: a build's progress (finished steps), inside its staging folder until the manifest is written
STATE_NAME = "propme-build-state.json"
#: per-source counts computed for an index built before its manifest recorded them (`source_counts.py`)
SOURCE_COUNTS_NAME = "propme-source-counts.json"
#: the suffix-array builders' temporary files in the staging folder (`table.N.partial`, `tmp-N/`)
SA_TEMP_SUFFIX = ".partial"


class ShardFile(StrEnum):
    """The infini-gram files of one shard, `KIND.N` (docs/index-format.md)."""

    TOKENIZED = "tokenized"   #: token ids, each document after a separator
    TABLE = "table"           #: the suffix array: one pointer per token
    OFFSET = "offset"         #: byte offset of each document in `tokenized`
    METADATA = "metadata"     #: one metadata line per document
    METAOFF = "metaoff"       #: byte offset of each document's line in `metadata`
    UNIGRAM = "unigram"       #: (token id, count) rows


SHARD_FILES = tuple(ShardFile)


def shard_file(folder: str | Path, kind: ShardFile, shard_id: int) -> Path:
    """Path of one infini-gram shard file, e.g. `tokenized.0`."""
    return Path(folder) / f"{kind}.{shard_id}"


def toplevel_path(folder: str | Path, sid: int) -> Path:
    """The search accelerator's samples of shard `sid` (`toplevel.py`)."""
    return Path(folder) / f"propme-toplevel.{sid}.npz"


def sa_temp_dir(folder: str | Path, sid: int) -> Path:
    """Scratch folder of shard `sid`'s suffix-array build (a fixed name: a rerun clears a killed run's)."""
    return Path(folder) / f"tmp-{sid}"


def is_build_temp(name: str) -> bool:
    """Whether a staging-folder entry is a suffix-array build's temporary file or folder."""
    return name.startswith("tmp-") or name.endswith(SA_TEMP_SUFFIX)


def index_file_names(shard_ids: Iterable[int]) -> list[str]:
    """Every file (or folder) a finished index holds besides its manifest."""
    shard_ids = list(shard_ids)
    return ([TOKENIZER_DIRNAME, WORD_STARTS_NAME] + [shard_file("", kind, sid).name
                                                     for sid in shard_ids for kind in SHARD_FILES]
            + [toplevel_path("", sid).name for sid in shard_ids])


def _beside(out: Path, suffix: str) -> Path:
    out = Path(out).absolute()
    return out.parent / f".{out.name}.propme-{suffix}"


def staging_dir(out: Path) -> Path:
    """Where the unfinished build of the index `out` is assembled before it is moved into place."""
    return _beside(out, "partial")


def old_dir(out: Path) -> Path:
    """Where a replaced index waits, during the final move, until the new one is in place."""
    return _beside(out, "old")


def lock_path(out: Path) -> Path:
    """The lock file a build of `out` holds beside it."""
    return _beside(out, "lock")


def ray_parts_dir(out: Path) -> Path:
    """Where the shards of a Ray build of `out` are built before they are joined."""
    return _beside(out, "ray-parts")


# --- contents --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenLayout:
    """How `width`-byte token ids are stored in `tokenized.N`."""

    width: int
    dtype: np.dtype      #: little-endian unsigned integers of `width` bytes
    separator: int       #: the id that starts every document (all bits set)
    engine_dtype: str    #: the same dtype as infini-gram's engine names it

    @property
    def max_id(self) -> int:
        """The largest token id that fits (one below the separator)."""
        return self.separator - 1


def token_layout(width: int) -> TokenLayout:
    """The dtype and document separator of `tokenized.N` with `width`-byte (2 or 4) token ids."""
    return TokenLayout(width=width, dtype=np.dtype(f"<u{width}"), separator=(1 << (8 * width)) - 1,
                       engine_dtype=f"u{8 * width}")


def pointer_size(ds_bytes: int) -> int:
    """Bytes per suffix-array pointer for a `tokenized.N` of this size."""
    return max(1, math.ceil(math.log2(ds_bytes) / 8))


def pointer_weights(ptr_size: int) -> np.ndarray:
    """Multipliers that turn a pointer's little-endian bytes into its byte offset."""
    return (256 ** np.arange(ptr_size, dtype=np.int64)).astype(np.int64)


def pointers(raw: np.ndarray, ptr_size: int) -> np.ndarray:
    """Byte offsets of the pointers in `raw` (uint8, a whole number of `ptr_size`-byte pointers):
    each pointer's bytes copied into the low bytes of a zeroed little-endian int64 (a copy, no
    arithmetic: a shard's suffix array is widened in milliseconds)."""
    rows = np.asarray(raw, dtype=np.uint8).reshape(-1, ptr_size)
    wide = np.zeros((len(rows), 8), dtype=np.uint8)
    wide[:, :ptr_size] = rows
    return wide.view("<i8").reshape(-1)


def pointer_bytes(offsets: np.ndarray, ptr_size: int) -> bytes:
    """Byte offsets as the suffix array holds them: each the low `ptr_size` bytes of its
    little-endian int64 (the inverse of `pointers`)."""
    return np.ascontiguousarray(np.asarray(offsets).astype("<u8").view(np.uint8).reshape(-1, 8)[:, :ptr_size]).tobytes()


def read_unigrams(path: Path) -> np.ndarray:
    """The rows (token id, count) of a `unigram.N` file, as an int64 array of shape (k, 2)."""
    return np.loadtxt(path, dtype=np.int64, ndmin=2).reshape(-1, 2)


def document_bounds(offsets: np.ndarray, n_tokens: int, width: int, doc: int) -> tuple[int, int]:
    """Token range [start, end) of local document `doc` (its separator excluded)."""
    start = int(offsets[doc]) // width + 1
    end = int(offsets[doc + 1]) // width if doc + 1 < len(offsets) else n_tokens
    return start, end


def document_lengths(offsets: np.ndarray, ds_bytes: int, width: int) -> np.ndarray:
    """Token count of every document of a shard (separators excluded)."""
    offsets = np.asarray(offsets).astype(np.int64)
    ends = np.append(offsets[1:], ds_bytes)
    return (ends - offsets) // width - 1


def metadata_line(metaoff: np.ndarray, meta: np.ndarray, doc: int) -> str:
    """The metadata line of local document `doc` (as stored: JSON written by the build)."""
    end = int(metaoff[doc + 1]) if doc + 1 < len(metaoff) else len(meta)
    return bytes(meta[int(metaoff[doc]):end]).decode("utf-8", "replace")


def parse_metadata(raw: str, unwrap: bool = False) -> dict[str, Any]:
    """A metadata line as a dict: JSON, else a Python literal, else {"raw": line}. With `unwrap`, a
    nested 'metadata' dict is returned instead (how the published tracer reads source ids)."""
    raw = raw.strip()
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        try:
            parsed = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return {"raw": raw}
    if unwrap:
        parsed = unwrap_metadata(parsed)
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def unwrap_metadata(metadata: Any) -> Any:
    """A nested 'metadata' dict if the record has one, else the record (how the published tracer
    reads source ids). The line infini-gram's indexer writes, `{"path", "linenum", "metadata"}`,
    names its document by file and line: its `id` is "path:linenum" unless the document has an
    `id` or `doc_id` of its own."""
    if isinstance(metadata, dict) and isinstance(metadata.get("metadata"), dict):
        inner = metadata["metadata"]
        if "path" in metadata and "linenum" in metadata and not (inner.get("id") or inner.get("doc_id")):
            return {**inner, "id": f"{metadata['path']}:{metadata['linenum']}"}
        return inner
    return metadata
