"""The suffix-array searches against each other and against brute force: native (`native_ext.c`),
numpy accelerated (in-memory top level, read-ahead hints) and plain numpy; and the top level's file:
built from the shard files, rebuilt when it does not fit the shard."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from propme.demo.synthetic import generate_corpus
from propme_metrics.index import native_search
from propme_metrics.index.format import pointers, shard_file
from propme_metrics.index.reader import open_index
from propme_metrics.index.search import IndexSearch, ShardSearcher
from propme_metrics.index.toplevel import build_toplevel, load_toplevel, toplevel_path
from support.corpora import make_index, write_jsonl

HYPO = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=[2, 4], ids=["16-bit", "32-bit"])
def index_dir(request, tmp_path_factory, gpt2_dir):
    """A one-shard index of generated documents with many repeats, 16- and 32-bit ids."""
    root = tmp_path_factory.mktemp(f"search{request.param}")
    records = list(generate_corpus(60, seed=3))
    records.append({"id": "rep", "source": "x", "text": "word " * 400})  # a long repeat
    corpus = write_jsonl(root / "c.jsonl", records)
    make_index(corpus, root / "index", gpt2_dir, token_width=request.param)
    return root / "index", request.param


def searchers(folder, width, stride, tokens):
    """The plain numpy search, the accelerated one with these samples, and the native one."""
    plain = ShardSearcher(folder, 0, width, 0, accelerate=False)
    fast = ShardSearcher(folder, 0, width, 0, native=False)
    fast.use_toplevel(build_toplevel(folder, 0, width, stride=stride, tokens=tokens))
    native = ShardSearcher(folder, 0, width, 0)
    assert plain.native is None and fast.native is None and native.native is not None
    return plain, fast, native


def assert_same_bounds(a, b):
    """Equal bounds and longest matches (each search's two lcps need only have the same maximum)."""
    for x, y in zip(a[:2], b[:2]):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(np.maximum(a[2], a[3]), np.maximum(b[2], b[3]))


def random_queries(rng, ds: np.ndarray, n: int, sep: int, max_len: int = 40):
    """Rows of one query array: copies of corpus stretches, some altered, some random, some short."""
    rows = []
    for _ in range(n):
        kind = rng.integers(4)
        length = int(rng.integers(1, max_len))
        if kind < 3:
            start = int(rng.integers(0, len(ds) - length))
            q = ds[start:start + length].astype(np.int64)
            q = q[q != sep] if (q == sep).any() else q
            if kind == 1 and len(q) > 2:
                q[int(rng.integers(len(q)))] = int(rng.integers(0, 50257))
        else:
            q = rng.integers(0, 50257, size=length)
        rows.append(q if len(q) else np.asarray([int(rng.integers(0, 50257))]))
    return rows


@pytest.mark.parametrize("stride,tokens", [(1, 1), (3, 2), (7, 5), (64, 8), (1024, 8)])
def test_accelerated_search_equals_plain(index_dir, stride, tokens):
    folder, width = index_dir
    plain, fast, native = searchers(folder, width, stride, tokens)
    rng = np.random.default_rng(stride * 10 + tokens)
    sep = (1 << (8 * width)) - 1
    for _ in range(12):
        rows = random_queries(rng, np.asarray(plain.ds), 30, sep)
        arr = np.concatenate(rows)
        lengths = np.asarray([len(r) for r in rows])
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        # every start of the concatenation, to its end (step 1), and each row alone (spans)
        for qstart, qend in ((np.arange(len(arr)), np.full(len(arr), len(arr))), (starts, starts + lengths)):
            for upper in (False, True):
                up = np.full(len(qstart), upper)
                a = plain.search(plain.keys(arr), qstart, qend, up)
                b = fast.search(fast.keys(arr), qstart, qend, up)
                for x, y in zip(a, b):
                    np.testing.assert_array_equal(x, y)
                assert_same_bounds(a, native.search(native.keys(arr), qstart, qend, up))


@HYPO
@given(data=st.data())
def test_accelerated_search_equals_plain_hypothesis(index_dir, data):
    folder, width = index_dir
    stride = data.draw(st.integers(1, 40))
    tokens = data.draw(st.integers(1, 9))
    plain, fast, native = searchers(folder, width, stride, tokens)
    ds = np.asarray(plain.ds).astype(np.int64)
    start = data.draw(st.integers(0, len(ds) - 2))
    q = list(ds[start:start + data.draw(st.integers(1, 30))])
    q = [t if t != (1 << (8 * width)) - 1 else 11 for t in q]
    edits = data.draw(st.lists(st.tuples(st.integers(0, 29), st.integers(0, 50256)), max_size=3))
    for i, t in edits:
        if i < len(q):
            q[i] = t
    arr = np.asarray(q, dtype=np.int64)
    n = len(arr)
    qstart = np.concatenate((np.arange(n), np.arange(n)))
    qend = np.concatenate((np.full(n, n), np.minimum(np.arange(n) + data.draw(st.integers(1, 10)), n)))
    up = np.asarray(data.draw(st.lists(st.booleans(), min_size=2 * n, max_size=2 * n)))
    a = plain.search(plain.keys(arr), qstart, qend, up)
    b = fast.search(fast.keys(arr), qstart, qend, up)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert_same_bounds(a, native.search(native.keys(arr), qstart, qend, up))


def test_toplevel_samples_are_the_suffixes(index_dir):
    folder, width = index_dir
    s = ShardSearcher(folder, 0, width, 0, accelerate=False)
    top = build_toplevel(folder, 0, width, stride=5, tokens=4)
    assert len(top.keys) == -(-s.n // 5)
    pos = s.ranks_to_token_pos(np.arange(0, s.n, 5))
    for i, p in enumerate(pos.tolist()):
        real = s.keys(s.ds[p:p + 4]).tolist()
        assert top.lengths[i] == len(real)
        assert top.keys[i, :len(real)].tolist() == real


def test_toplevel_file_written_by_build_and_rebuilt_when_stale(index_dir, tmp_path):
    folder, width = index_dir
    assert toplevel_path(folder, 0).is_file()  # written by build_index
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    s = ShardSearcher(copy, 0, width, 0, accelerate=False)
    good = load_toplevel(copy, 0, width, s.n, s._toplevel_ok)
    # a file of the right size but from other data is detected by the spot check and replaced
    np.savez(toplevel_path(copy, 0), keys=good.keys[::-1].copy(), lengths=good.lengths[::-1].copy(),
             params=np.asarray([good.stride, s.n, width]))
    assert not s._toplevel_ok(load_toplevel.__globals__["TopLevel"](good.stride, good.keys[::-1].copy(),
                                                                      good.lengths[::-1].copy()))
    again = load_toplevel(copy, 0, width, s.n, s._toplevel_ok)
    np.testing.assert_array_equal(again.keys, good.keys)
    # garbage and a missing file: rebuilt (and rewritten)
    toplevel_path(copy, 0).write_bytes(b"not a zip")
    np.testing.assert_array_equal(load_toplevel(copy, 0, width, s.n, s._toplevel_ok).keys, good.keys)
    toplevel_path(copy, 0).unlink()
    np.testing.assert_array_equal(load_toplevel(copy, 0, width, s.n, s._toplevel_ok).keys, good.keys)
    assert toplevel_path(copy, 0).is_file()


def test_toplevel_is_small(index_dir):
    folder, width = index_dir
    top = build_toplevel(folder, 0, width)
    sizes = sum(shard_file(folder, k, 0).stat().st_size for k in ("tokenized", "table"))
    assert top.nbytes <= max(0.01 * sizes, 64)


@pytest.mark.parametrize("route", ["native", "numpy"])
def test_search_equals_brute_force(index_dir, route):
    """Bounds and longest matches of the native and the (k-ary) numpy search against every suffix
    of the shard, sorted in Python; the pointer gather against the pointers' bytes."""
    folder, width = index_dir
    s = ShardSearcher(folder, 0, width, 0, native=route == "native")
    assert (s.native is not None) == (route == "native")
    all_pos = pointers(np.asarray(s.sa), s.ptr_size) // width
    np.testing.assert_array_equal(s.ranks_to_token_pos(np.arange(s.n)), all_pos)
    keys = s.keys(s.ds).tolist()
    rng = np.random.default_rng(5)
    sep = (1 << (8 * width)) - 1
    rows = random_queries(rng, np.asarray(s.ds), 25, sep, max_len=12)
    for q in rows:
        qk = s.keys(q).tolist()
        m = len(qk)
        # the suffix array's order: key tuples, a suffix shorter than the query compared as it is
        prefixes = [tuple(keys[p:p + m]) for p in all_pos.tolist()]
        assert prefixes == sorted(prefixes)
        lower = sum(p < tuple(qk) for p in prefixes)
        upper = lower + sum(p == tuple(qk) for p in prefixes)
        common = [next((i for i, (a, b) in enumerate(zip(p, qk)) if a != b), min(len(p), m)) for p in prefixes]
        arr = np.asarray(q, dtype=np.int64)
        for up, want in ((False, lower), (True, upper)):
            lo, hi, llo, lhi = s.search(s.keys(arr), np.asarray([0]), np.asarray([m]), np.asarray([up]))
            assert hi[0] == want
            assert max(llo[0], lhi[0]) == max(common)
            if route == "native":  # both neighbours' common prefixes exactly (0 past either end)
                assert (llo[0], lhi[0]) == (common[want - 1] if want else 0, common[want] if want < s.n else 0)


@pytest.mark.parametrize("disk_route", [False, True], ids=["memory", "disk"])
@pytest.mark.parametrize("ptr_size", [3, 4, 5, 8])
def test_native_reads_pointers_of_every_width(index_dir, ptr_size, disk_route, monkeypatch):
    """A suffix array of 3-, 4-, 5- (shards above 4 GiB of tokens) or 8-byte pointers is searched as
    it lies: the shard's pointers rewritten in that layout give the numpy search's bounds, on the
    memory route (binary steps) and on the disk route (page requests, three probes a step)."""
    folder, width = index_dir
    monkeypatch.setattr(native_search, "DISK_ROUTE", disk_route)
    s = ShardSearcher(folder, 0, width, 0, native=False)
    raw = pointers(np.asarray(s.sa), s.ptr_size).astype("<u8").view(np.uint8).reshape(-1, 8)[:, :ptr_size]
    table = np.ascontiguousarray(raw).reshape(-1)
    top = build_toplevel(folder, 0, width)
    wide = native_search.native_shard(s.ds, table, width, ptr_size, s.blocks, top, 0, s.table_path)
    rng = np.random.default_rng(8)
    rows = [np.asarray(q, dtype=np.int64) for q in random_queries(rng, np.asarray(s.ds), 60, (1 << (8 * width)) - 1)]
    arr = np.concatenate(rows)
    qend = np.cumsum([len(q) for q in rows])
    qstart = qend - [len(q) for q in rows]
    for up in (False, True):
        u = np.full(len(rows), up)
        want = s.search(s.keys(arr), qstart, qend, u)
        got = native_search.native_search((wide,), s.keys(arr), qstart, qend, u)
        np.testing.assert_array_equal(got.hi[0], want[1])
        np.testing.assert_array_equal(np.maximum(got.lcp_lo[0], got.lcp_hi[0]), np.maximum(want[2], want[3]))


def test_native_falls_back_to_numpy(index_dir, monkeypatch):
    """No native search for an empty shard, nor where the extension did not load: those shards get
    the accelerated numpy search, with the same results."""
    folder, width = index_dir
    s = ShardSearcher(folder, 0, width, 0)
    assert s.native is not None
    assert native_search.native_shard(s.ds[:0], s.sa[:0], width, s.ptr_size, None, None, 0, s.table_path) is None
    arr = np.asarray(s.ds[5:25], dtype=np.int64)
    arr[arr == (1 << (8 * width)) - 1] = 11
    n = len(arr)
    qs, qe, up = np.arange(n), np.full(n, n), np.zeros(n, bool)
    want = s.search(s.keys(arr), qs, qe, up)
    monkeypatch.setattr(native_search, "native_ext", None)
    assert not native_search.available()
    fallback = ShardSearcher(folder, 0, width, 0)
    assert fallback.native is None and fallback.samples is not None  # the accelerated numpy search
    assert_same_bounds(want, fallback.search(fallback.keys(arr), qs, qe, up))


@pytest.fixture(scope="module")
def sharded_index(tmp_path_factory, gpt2_dir):
    """The same kind of corpus in five shards."""
    root = tmp_path_factory.mktemp("sharded")
    records = list(generate_corpus(80, seed=11))
    records.append({"id": "rep", "source": "x", "text": "word " * 300})
    make_index(write_jsonl(root / "c.jsonl", records), root / "index", gpt2_dir, num_shards=5)
    return open_index(root / "index")


@pytest.mark.parametrize("disk_route", [None, True], ids=["auto", "disk"])
def test_one_native_call_searches_every_shard(sharded_index, monkeypatch, disk_route):
    """All shards in one native call, on one thread or several, give each shard's numpy bounds; the
    index-wide longest matches and occurrences equal the numpy route's."""
    index = sharded_index
    monkeypatch.setattr(native_search, "DISK_ROUTE", disk_route)
    native = IndexSearch(index)
    numpy_route = IndexSearch(index)
    numpy_route.shards = [ShardSearcher(index.path, s.id, s.width, s.doc_base, native=False) for s in native.shards]
    assert all(s.native is not None for s in native.shards) and len(native.shards) == 5
    rng = np.random.default_rng(4)
    ds = np.concatenate([np.asarray(s.ds) for s in native.shards])
    rows = [np.asarray(q, dtype=np.int64) for q in random_queries(rng, ds, 80, 0xFFFF)]
    arr = np.concatenate(rows)
    qend = np.cumsum([len(q) for q in rows])
    qstart = qend - [len(q) for q in rows]
    for up in (False, True):
        u = np.full(len(rows), up)
        want = numpy_route.search_shards(arr, qstart, qend, u)
        for threads in (1, 3):
            monkeypatch.setattr(native_search, "THREADS", threads)
            got = native.search_shards(arr, qstart, qend, u)
            np.testing.assert_array_equal(got.hi, want.hi)
            np.testing.assert_array_equal(got.lo, want.lo)
            np.testing.assert_array_equal(got.longest(), want.longest())
    ids = arr[:200].tolist()
    assert native.longest_matches(ids).tolist() == numpy_route.longest_matches(ids).tolist()
    spans = [(int(a), int(b)) for a, b in zip(qstart, qend)]
    assert native.locate(arr, spans) == numpy_route.locate(arr, spans)
