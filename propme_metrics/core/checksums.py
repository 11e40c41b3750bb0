"""Content checksums of files (xxh3-128): a full digest, and a cheap sampled one for quick checks.

The full digest reads the whole file; the sampled digest reads a few fixed blocks (the whole file
when it is small), so opening an index or re-checking a large corpus file costs almost nothing.
"""
from __future__ import annotations

import os
from pathlib import Path

import xxhash

ALGORITHM = "xxh3_128"
_CHUNK = 1 << 22
_SAMPLE_BLOCK = 1 << 14
_SAMPLE_BLOCKS = 4


def file_digest(path: str | Path) -> str:
    """xxh3-128 of the whole file, as hex."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sampled_digest(path: str | Path) -> str:
    """xxh3-128 of the size and a few evenly spaced blocks, the first and the last included (the whole
    file when it is small)."""
    return _sampled(path, last_at_end=True)


def sample_matches(path: str | Path, recorded: object) -> bool:
    """Whether `path` has the sampled checksum `recorded`. A checksum recorded by PropMe 0.2.0 or
    older (whose last block could stop up to two bytes short of the end) is accepted as well, so
    older indexes still open; it never matches a file whose checksum was recorded the new way."""
    return recorded == sampled_digest(path) or recorded == _sampled(path, last_at_end=False)


def _sampled(path: str | Path, last_at_end: bool) -> str:
    size = os.path.getsize(path)
    h = xxhash.xxh3_128(str(size).encode())
    with open(path, "rb") as fh:
        if size <= _SAMPLE_BLOCK * _SAMPLE_BLOCKS:
            h.update(fh.read())
        else:
            span = size - _SAMPLE_BLOCK
            for k in range(_SAMPLE_BLOCKS):
                fh.seek(k * span // (_SAMPLE_BLOCKS - 1) if last_at_end else k * (span // (_SAMPLE_BLOCKS - 1)))
                h.update(fh.read(_SAMPLE_BLOCK))
    return h.hexdigest()


def folder_files(folder: Path, names: list[str]) -> list[Path]:
    """The files named that exist (a name may be a sub-folder: its files, recursively), sorted by path."""
    out: list[Path] = []
    for name in names:
        p = folder / name
        out.extend(sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p] if p.is_file() else [])
    return out


def checksum_files(folder: Path, names: list[str]) -> dict[str, dict[str, object]]:
    """{relative path: {bytes, xxh3_128, sample}} for the files named inside `folder`."""
    return {str(p.relative_to(folder)): {"bytes": p.stat().st_size, ALGORITHM: file_digest(p),
                                         "sample": sampled_digest(p)}
            for p in folder_files(folder, names)}
