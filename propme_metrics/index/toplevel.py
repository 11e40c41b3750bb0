"""The sampled top level of a suffix array: every `stride`-th suffix's first tokens, kept in memory.

A search first binary-searches these samples (no disk reads), which narrows it to at most `stride`
ranks of the on-disk suffix array unless the query shares all sampled tokens with several
samples; only the last log2(stride) steps then read the index files. With the defaults it takes
about 17 bytes per 1,024 tokens (16-bit ids), under 0.3% of the index.

The samples are written beside the shard files as `propme-toplevel.N.npz` (a name the engine's
file matching ignores) when the index is built, and checksummed in the manifest with the other
files, so opening an index refuses a missing or changed one. Only an index whose manifest records
no checksums (built by an older PropMe) has them rebuilt here from a sequential scan of the shard
files when the file is missing, stale or unreadable.
"""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from propme_metrics.index.format import ShardFile, pointer_size, pointers, shard_file, token_layout, toplevel_path

STRIDE = 1024        #: ranks between two samples
TOKENS = 8           #: tokens kept per sample
_SCAN_BYTES = 1 << 26  #: bytes read per step when the samples are built from the files


@dataclass
class TopLevel:
    """Sort keys of the first `tokens` tokens of the suffixes at ranks 0, stride, 2 x stride, ...

    `keys[i, j]` is the key of token j (a token's little-endian bytes read big-endian, which sorts
    like the engine); `lengths[i]` counts the tokens that exist (fewer only at the end of a shard)."""

    stride: int
    keys: np.ndarray      #: (samples, tokens) uint16 or uint32
    lengths: np.ndarray   #: (samples,) uint8

    @property
    def tokens(self) -> int:
        return self.keys.shape[1]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.lengths.nbytes


def build_toplevel(folder: str | Path, sid: int, width: int, stride: int = STRIDE,
                   tokens: int = TOKENS) -> TopLevel:
    """Sample shard `sid` of the index in `folder`, reading its two big files front to back once."""
    ds_path, sa_path = shard_file(folder, ShardFile.TOKENIZED, sid), shard_file(folder, ShardFile.TABLE, sid)
    ds_bytes = ds_path.stat().st_size
    n = ds_bytes // width
    ptr_size = pointer_size(ds_bytes) if ds_bytes else 1
    ranks = np.arange(0, n, stride, dtype=np.int64)
    pos = np.empty(len(ranks), dtype=np.int64)
    per_step = max(1, _SCAN_BYTES // (stride * ptr_size)) * stride  # ranks per read, a multiple of the stride
    with open(sa_path, "rb") as fh:
        for first in range(0, n, per_step):
            count = min(per_step, n - first)
            raw = np.frombuffer(fh.read(count * ptr_size), dtype=np.uint8).reshape(-1, ptr_size)
            picked = pointers(raw[::stride], ptr_size)
            pos[first // stride:first // stride + len(picked)] = picked // width
    dtype = token_layout(width).dtype
    keys = np.zeros((len(ranks), tokens), dtype=dtype)
    lengths = np.minimum(tokens, n - pos).astype(np.uint8)
    order = np.argsort(pos, kind="stable")
    sorted_pos = pos[order]
    per_read = max(tokens, _SCAN_BYTES // width)
    with open(ds_path, "rb") as fh:
        i = 0
        for first in range(0, n, per_read):
            j = int(np.searchsorted(sorted_pos, first + per_read, side="left"))
            if j > i:
                fh.seek(first * width)
                chunk = np.frombuffer(fh.read((per_read + tokens) * width), dtype=dtype)
                rows = order[i:j]
                idx = (pos[rows] - first)[:, None] + np.arange(tokens)
                keys[rows] = chunk[np.minimum(idx, len(chunk) - 1)]
            i = j
    keys = keys.byteswap()  # little-endian ids -> sort keys (same dtype, swapped bytes)
    keys[np.arange(tokens)[None, :] >= lengths[:, None]] = 0
    return TopLevel(stride=stride, keys=keys, lengths=lengths)


def write_toplevel(folder: str | Path, sid: int, width: int) -> None:
    """Build and save the samples of shard `sid`, whose suffix array has just been written."""
    n = shard_file(folder, ShardFile.TOKENIZED, sid).stat().st_size // width
    save_toplevel(build_toplevel(folder, sid, width), toplevel_path(folder, sid), n, width)


def save_toplevel(top: TopLevel, path: Path, n: int, width: int) -> None:
    """Write the samples atomically (a half-written file never replaces a good one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, keys=top.keys, lengths=top.lengths, params=np.asarray([top.stride, n, width], dtype=np.int64))
    os.replace(tmp, path)


def load_toplevel(folder: str | Path, sid: int, width: int, n: int, check) -> TopLevel:
    """The shard's samples from its file if that file fits this shard, else built now (and saved when
    the folder is writable, so that the next opening is cheap). `check(top)` spot-checks samples
    against the shard files (a file left from another build must never be used)."""
    path = toplevel_path(folder, sid)
    try:
        with np.load(path) as f:
            stride, stored_n, stored_w = (int(x) for x in f["params"])
            top = TopLevel(stride=stride, keys=f["keys"], lengths=f["lengths"])
        if (stored_n == n and stored_w == width and stride > 0 and len(top.keys) == -(-n // stride)
                and len(top.lengths) == len(top.keys) and check(top)):
            return top
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        pass
    top = build_toplevel(folder, sid, width)
    try:
        save_toplevel(top, path, n, width)
    except OSError:  # a read-only index: keep the samples in memory only
        pass
    return top
