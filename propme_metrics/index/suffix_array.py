"""Suffix arrays of one shard's `tokenized.N`, and the memory each builder needs.

libdivsufsort (`pydivsufsort`) sorts the shard in memory when it fits; otherwise the
`rust_indexing` binary shipped in the infini-gram wheel builds it in parts and merges them.
`index/sizing.py` plans builds with the memory model here.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from propme_metrics.core.errors import BuildError, ConfigError
from propme_metrics.index.format import SA_TEMP_SUFFIX, pointer_bytes, pointer_size, pointers

OVERLAP_BYTES = 100_000  # how far suffix-array parts overlap (the binary's hack size)


SA_BUILDERS = ("auto", "divsufsort", "rust")


def divsufsort_memory(ds_bytes: int) -> int:
    """Bytes of memory libdivsufsort needs for one `tokenized.N`: the file itself plus a 32-bit
    (64-bit from 2 GiB on) entry for every byte offset, odd ones included."""
    return ds_bytes * (1 + (4 if ds_bytes < 2**31 else 8))


def choose_sa_builder(ds_bytes: int, mem_bytes: int, requested: str = "auto") -> str:
    """'divsufsort' when asked for, or on 'auto' when it fits in `mem_bytes`; else 'rust'."""
    if requested not in SA_BUILDERS:
        raise ConfigError(f"unknown suffix-array builder {requested!r}", f"choose one of {', '.join(SA_BUILDERS)}")
    if requested == "auto":
        return "divsufsort" if divsufsort_memory(ds_bytes) <= mem_bytes else "rust"
    return requested


def build_suffix_array(ds_path: Path, sa_path: Path, width: int, cpus: int, mem_bytes: int, tmp: Path,
                       on_step=lambda step: None, builder: str = "auto") -> None:
    """Suffix array of one `tokenized.N` (engine order: byte order of the suffixes), written to `sa_path`.

    libdivsufsort sorts every byte offset in memory in O(n log n) whatever the text, so long
    repeats (tables, logs, boilerplate) cost no more than prose; the offsets that are multiples of
    the token width, in that order, are exactly the engine's suffix array. rust_indexing works in
    parts of `mem_bytes` and merges them, for shards that do not fit; it slows down on long repeats
    and orders suffixes that agree on their first 100,000 bytes arbitrarily among themselves (no
    query that short can tell them apart). 'auto' takes libdivsufsort when it fits in `mem_bytes`.
    """
    if choose_sa_builder(ds_path.stat().st_size, mem_bytes, builder) == "divsufsort":
        _divsufsort_suffix_array(ds_path, sa_path, width, on_step)
    else:
        _rust_suffix_array(ds_path, sa_path, width, cpus, mem_bytes, tmp, on_step)


def _divsufsort_suffix_array(ds_path: Path, sa_path: Path, width: int, on_step, chunk: int = 1 << 24) -> None:
    """libdivsufsort over the bytes of `tokenized.N`, keeping the offsets aligned to the token width."""
    import pydivsufsort

    ds_size = ds_path.stat().st_size
    ptr_size = pointer_size(ds_size)
    data = np.memmap(ds_path, dtype=np.uint8, mode="c")  # writable for ctypes; pages stay the file's
    on_step("read")
    order = pydivsufsort.divsufsort(data)
    del data
    on_step("divsufsort")
    tmp_sa = sa_path.with_name(sa_path.name + SA_TEMP_SUFFIX)
    with open(tmp_sa, "wb") as fh:
        for first in range(0, len(order), chunk):
            part = order[first:first + chunk]
            fh.write(pointer_bytes(part[(part & (width - 1)) == 0], ptr_size))
    del order
    _check_sa_size(tmp_sa, ds_path, width, ptr_size, "libdivsufsort")
    os.replace(tmp_sa, sa_path)
    on_step("write")


def _check_sa_size(tmp_sa: Path, ds_path: Path, width: int, ptr_size: int, who: str) -> None:
    expected = (ds_path.stat().st_size // width) * ptr_size
    if tmp_sa.stat().st_size != expected:
        raise BuildError(f"{who} wrote {tmp_sa.stat().st_size} bytes of suffix array for {ds_path.name}, "
                         f"expected {expected}", "re-run the build; if it repeats, report it with the corpus size")


def _rust_suffix_array(ds_path: Path, sa_path: Path, width: int, cpus: int, mem_bytes: int, tmp: Path,
                       on_step) -> None:
    """rust_indexing: make-part (parallel), merge, concat.

    For 32-bit tokens the binary's own 4-byte mode allocates 32 GiB up front, so the array is
    built in 2-byte mode and the pointers that are not 4-byte aligned are dropped: byte order
    among the aligned suffixes is unchanged, so the result is exact.
    """
    binary = str(rust_indexing_binary())
    ds_size = ds_path.stat().st_size
    ptr_size = pointer_size(ds_size)
    unit = 2  # the binary's unit; 4-byte tokens are filtered afterwards
    batches = 1
    while batches * (mem_bytes // 8) < ds_size:
        batches *= 2
    jobs = batches * cpus if ds_size > 4 * OVERLAP_BYTES else 1
    part = -(-(ds_size // jobs) // unit) * unit  # round up to whole units
    shutil.rmtree(tmp, ignore_errors=True)
    parts_dir, merged_dir = tmp / "parts", tmp / "merged"
    parts_dir.mkdir(parents=True)
    merged_dir.mkdir()
    common = ["--data-file", str(ds_path), "--ratio", str(ptr_size), "--token-width", str(unit)]
    ranges = [(i * part, min((i + 1) * part + OVERLAP_BYTES, ds_size)) for i in range(jobs) if i * part < ds_size]
    for first in range(0, len(ranges), cpus):
        _run_all([[binary, "make-part", *common, "--parts-dir", str(parts_dir),
                   "--start-byte", str(s), "--end-byte", str(e)] for s, e in ranges[first:first + cpus]])
    on_step("make-part")
    _run_all([[binary, "merge", *common, "--parts-dir", str(parts_dir), "--merged-dir", str(merged_dir),
               "--num-threads", str(cpus), "--hacksize", str(OVERLAP_BYTES)]])
    on_step("merge")
    shutil.rmtree(parts_dir)
    merged_files = sum(1 for p in merged_dir.iterdir() if p.is_file())  # tiny shards merge into fewer files
    tmp_sa = tmp / "table.unfiltered" if width != unit else sa_path.with_name(sa_path.name + SA_TEMP_SUFFIX)
    _run_all([[binary, "concat", *common, "--merged-dir", str(merged_dir), "--merged-file", str(tmp_sa),
               "--num-threads", str(max(1, min(cpus, merged_files)))]])
    if width != unit:
        filtered = sa_path.with_name(sa_path.name + SA_TEMP_SUFFIX)
        _keep_aligned_pointers(tmp_sa, filtered, ptr_size, width)
        tmp_sa = filtered
    _check_sa_size(tmp_sa, ds_path, width, ptr_size, "rust_indexing")
    os.replace(tmp_sa, sa_path)
    shutil.rmtree(tmp)
    on_step("concat")


def _keep_aligned_pointers(src: Path, dst: Path, ptr_size: int, width: int, chunk: int = 1 << 22) -> None:
    """Copy a suffix array, keeping only pointers that are multiples of `width` (order preserved)."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while True:
            raw = np.frombuffer(fin.read(chunk * ptr_size), dtype=np.uint8)
            if raw.size == 0:
                break
            rows = raw.reshape(-1, ptr_size)
            fout.write(rows[pointers(rows, ptr_size) % width == 0].tobytes())


def _run_all(commands: list[list[str]]) -> None:
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in commands]
    failures = []
    for cmd, proc in zip(commands, procs):
        _, err = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"`{' '.join(cmd[1:3])}` exited {proc.returncode}: {err.decode(errors='replace')[-500:]}")
    if failures:
        raise BuildError("suffix-array step failed: " + "; ".join(failures),
                         "check free disk space and memory, then re-run the same command to resume")


def rust_indexing_binary() -> Path:
    """The suffix-array builder that ships inside the infini-gram wheel."""
    import infini_gram

    binary = Path(infini_gram.__file__).parent / "rust_indexing"
    if not binary.is_file():
        raise BuildError(f"the infini-gram package has no rust_indexing binary at {binary}",
                         "reinstall infini-gram==2.6.0 from a wheel for this platform")
    return binary
