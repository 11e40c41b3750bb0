"""The on-disk format of a shard, read in one place: token arrays, suffix-array pointers, unigram
counts, document offsets and metadata lines (docs/index-format.md).

The writer is `index/build.py`; everything that reads shard files (the reader, the searcher, the
top-level samples, verify) goes through these functions.
"""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

import numpy as np


def pointer_size(ds_bytes: int) -> int:
    """Bytes per suffix-array pointer for a `tokenized.N` of this size."""
    return max(1, math.ceil(math.log2(ds_bytes) / 8))


def token_dtype(width: int) -> np.dtype:
    """The little-endian dtype of a `tokenized.N` with `width`-byte token ids."""
    return np.dtype("<u2" if width == 2 else "<u4")


def separator(width: int) -> int:
    """The id that starts every document in `tokenized.N` (all bits set)."""
    return (1 << (8 * width)) - 1


def pointer_weights(ptr_size: int) -> np.ndarray:
    """Multipliers that turn a pointer's little-endian bytes into its byte offset."""
    return (256 ** np.arange(ptr_size, dtype=np.int64)).astype(np.int64)


def pointers(raw: np.ndarray, ptr_size: int) -> np.ndarray:
    """Byte offsets of the pointers in `raw` (uint8, a whole number of `ptr_size`-byte pointers)."""
    return raw.reshape(-1, ptr_size).astype(np.int64) @ pointer_weights(ptr_size)


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
    if unwrap and isinstance(parsed, dict) and isinstance(parsed.get("metadata"), dict):
        parsed = parsed["metadata"]
    return parsed if isinstance(parsed, dict) else {"value": parsed}
