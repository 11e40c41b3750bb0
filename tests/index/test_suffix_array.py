"""Suffix-array builders: libdivsufsort and rust_indexing give byte-identical `table.N` files, both
equal to a brute-force sort (16- and 32-bit ids), and the builder choice follows the memory."""
from __future__ import annotations

import numpy as np
import pytest

from propme_metrics.core.errors import ConfigError
from propme_metrics.index.format import pointer_size
from propme_metrics.index.suffix_array import build_suffix_array, choose_sa_builder, divsufsort_memory


def write_ds(path, docs: list[list[int]], width: int):
    dtype = "<u2" if width == 2 else "<u4"
    sep = (1 << (8 * width)) - 1
    flat = []
    for d in docs:
        flat += [sep] + d
    np.asarray(flat, dtype=dtype).tofile(path)
    return path


def brute_force_table(ds_path, width: int) -> bytes:
    raw = ds_path.read_bytes()
    ptr = pointer_size(len(raw))
    order = sorted(range(0, len(raw), width), key=lambda p: raw[p:])
    return b"".join(p.to_bytes(ptr, "little") for p in order)


def corpora(rng):
    yield "random", [list(rng.integers(0, 300, size=int(rng.integers(1, 60)))) for _ in range(40)]
    yield "few ids", [list(rng.integers(0, 3, size=int(rng.integers(1, 80)))) for _ in range(30)]
    yield "repeats", [[7] * 500, [7, 8] * 300, [7] * 499 + [6], [9] * 2 + [7] * 100]
    yield "large ids", [list(rng.integers(60000, 65535, size=50)) for _ in range(20)]


@pytest.mark.parametrize("width", [2, 4], ids=["16-bit", "32-bit"])
@pytest.mark.parametrize("builder", ["divsufsort", "rust"])
def test_builders_equal_brute_force(tmp_path, width, builder):
    rng = np.random.default_rng(width)
    for name, docs in corpora(rng):
        if width == 4 and name == "large ids":
            docs = [[t * 65536 + 5 for t in d] for d in docs]  # ids beyond 16 bits
        ds = write_ds(tmp_path / f"tokenized.{name}", docs, width)
        out = tmp_path / f"table.{name}.{builder}"
        build_suffix_array(ds, out, width, cpus=1, mem_bytes=1 << 30, tmp=tmp_path / "tmp", builder=builder)
        assert out.read_bytes() == brute_force_table(ds, width), (name, builder)


def test_builders_identical_on_generated_text(tmp_path):
    """A corpus large enough for rust_indexing to work in several parts and merge them."""
    rng = np.random.default_rng(0)
    zipf = np.minimum(rng.zipf(1.3, size=600_000), 50_000)
    cuts = np.sort(rng.choice(len(zipf), size=2000, replace=False))
    docs = [list(x) for x in np.split(zipf, cuts) if len(x)]
    ds = write_ds(tmp_path / "tokenized.0", docs, 2)
    a, b = tmp_path / "table.a", tmp_path / "table.b"
    build_suffix_array(ds, a, 2, cpus=2, mem_bytes=1 << 30, tmp=tmp_path / "tmp", builder="divsufsort")
    build_suffix_array(ds, b, 2, cpus=2, mem_bytes=1 << 30, tmp=tmp_path / "tmp", builder="rust")
    assert a.read_bytes() == b.read_bytes()


def test_builder_choice_follows_memory():
    assert divsufsort_memory(1000) == 5000
    assert divsufsort_memory(2**31) == 9 * 2**31  # 64-bit offsets from 2 GiB on
    assert choose_sa_builder(10**9, 5 * 10**9) == "divsufsort"
    assert choose_sa_builder(10**9, 5 * 10**9 - 1) == "rust"
    assert choose_sa_builder(10**9, 1, "divsufsort") == "divsufsort"
    with pytest.raises(ConfigError):
        choose_sa_builder(10, 10**9, "quicksort")
