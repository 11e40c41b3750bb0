"""A suffix array damaged outside the blocks its sampled checksum reads opens as usual; the search
or the bytes it leads to then contradict it, and tracing stops with the shard and file named
(exit 3) instead of giving a wrong number (issue 44, item 3)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from propme.demo.synthetic import generate_corpus
from propme_metrics.core.errors import IndexFormatError
from propme_metrics.index.format import pointers, shard_file
from propme_metrics.index.reader import open_index
from propme_metrics.index.search import ShardSearcher
from support.corpora import make_index, write_jsonl

QUERY_TOKENS = 12
SAMPLE_BLOCK, SAMPLE_BLOCKS = 1 << 14, 4  #: core/checksums.py's sampled blocks (16 KiB, four of them)


@pytest.fixture(scope="module")
def intact(tmp_path_factory, gpt2_dir):
    """A one-shard index whose table.0 is much larger than the blocks its sampled checksum reads."""
    root = tmp_path_factory.mktemp("damage")
    make_index(write_jsonl(root / "c.jsonl", list(generate_corpus(500, seed=21))), root / "index", gpt2_dir)
    table = shard_file(root / "index", "table", 0)
    assert table.stat().st_size > 4 * SAMPLE_BLOCK * SAMPLE_BLOCKS
    return root / "index"


def unchecked_rank(folder, near: float) -> int:
    """A rank about `near` of the way into table.0 whose pointer lies outside every sampled block
    and whose suffix's first QUERY_TOKENS tokens occur once, inside one document."""
    s = ShardSearcher(folder, 0, 2, 0)
    size = s.table_path.stat().st_size
    span = size - SAMPLE_BLOCK
    blocks = [(k * span // (SAMPLE_BLOCKS - 1), k * span // (SAMPLE_BLOCKS - 1) + SAMPLE_BLOCK)
              for k in range(SAMPLE_BLOCKS)]
    for r in range(int(near * s.n), s.n):
        byte = r * s.ptr_size
        if any(a - 4000 <= byte < b + 4000 for a, b in blocks):
            continue
        pos = int(s.ranks_to_token_pos(np.asarray([r]))[0])
        q = np.asarray(s.ds[pos:pos + QUERY_TOKENS], dtype=np.int64)
        if len(q) < QUERY_TOKENS or (q == 0xFFFF).any():
            continue
        one = np.asarray([0]), np.asarray([QUERY_TOKENS])
        lo = s.search(s.keys(q), *one, np.asarray([False]))[1][0]
        hi = s.search(s.keys(q), *one, np.asarray([True]))[1][0]
        if (lo, hi) == (r, r + 1):
            return r
    raise AssertionError("no unique suffix found")


def damaged_copy(intact, tmp_path, edit) -> tuple:
    """A copy of the index with table.0's pointers changed by `edit(pointers)` (in place)."""
    folder = tmp_path / "index"
    shutil.copytree(intact, folder)
    s = ShardSearcher(folder, 0, 2, 0)
    ptr = pointers(np.asarray(s.sa), s.ptr_size)
    edit(ptr)
    raw = ptr.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :s.ptr_size]
    s.table_path.write_bytes(np.ascontiguousarray(raw).tobytes())
    return folder, s


def test_search_finds_neighbours_out_of_order(intact, tmp_path):
    """Two pointers swapped far apart: the native search of the suffix that stood at one of them
    reports that rank of table.0 as out of order, shard and file named."""
    r, r2 = unchecked_rank(intact, 0.2), unchecked_rank(intact, 0.5)
    query_pos = int(ShardSearcher(intact, 0, 2, 0).ranks_to_token_pos(np.asarray([r]))[0])

    def swap(ptr):
        ptr[[r, r2]] = ptr[[r2, r]]

    folder, _ = damaged_copy(intact, tmp_path, swap)
    open_index(folder)  # the sampled checksums do not see the change
    s = ShardSearcher(folder, 0, 2, 0)
    assert s.native is not None
    q = np.asarray(s.ds[query_pos:query_pos + QUERY_TOKENS], dtype=np.int64)
    with pytest.raises(IndexFormatError) as err:
        s.search(s.keys(q), np.asarray([0]), np.asarray([QUERY_TOKENS]), np.asarray([False]))
    assert "shard 0" in str(err.value) and str(s.table_path) in str(err.value)


def test_trace_of_a_damaged_table_stops_with_exit_3(intact, tmp_path, cli_run):
    """About 2,000 bytes of table.0 changed (the order of 666 pointers reversed) where no sampled
    block looks, around the occurrence of a copied passage: `propme trace` of that passage exits 3
    naming shard 0 and table.0, where it used to exit 0 with wrong spans."""
    r = unchecked_rank(intact, 0.3)
    s = ShardSearcher(intact, 0, 2, 0)
    pos = int(s.ranks_to_token_pos(np.asarray([r]))[0])
    text = open_index(intact).decode(np.asarray(s.ds[pos:pos + 40]).tolist())

    def reverse(ptr):
        ptr[r - 333:r + 333] = ptr[r - 333:r + 333][::-1].copy()

    folder, damaged = damaged_copy(intact, tmp_path, reverse)
    gens = write_jsonl(tmp_path / "g.jsonl", [{"id": "copy", "completion": text}])
    out, summary = tmp_path / "r.jsonl", tmp_path / "s.json"
    code, _, err = cli_run("trace", "--index", folder, "--input", gens, "--out", out, "--summary", summary, "--quiet")
    assert code == 3, err
    assert "shard 0" in err and str(damaged.table_path) in err
    assert not summary.exists() or "copy" not in json.dumps(json.loads(summary.read_text()))
