"""Index build, open, verify, info and join (docs/index-format.md), checked against independent expectations.

Counts are compared with a brute-force count over token lists that these tests produce themselves
(the same tokenizer, add_special_tokens=False), counting occurrences inside documents only.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import propme_metrics.index.build as build_module
from propme.cli import app as cli
from propme.demo.synthetic import generate_corpus
from propme_metrics.core.checksums import checksum_files
from propme_metrics.core.errors import ConfigError, IndexFormatError
from propme_metrics.index.build import build_index, choose_token_width
from propme_metrics.index.format import (
    MANIFEST_NAME,
    SHARD_FILES,
    WORD_STARTS_NAME,
    pointer_size,
    shard_file,
    staging_dir,
)
from propme_metrics.index.join import join_indexes
from propme_metrics.index.manifest import IndexManifest
from propme_metrics.index.reader import open_index, verify_index
from propme_metrics.index.sources import CorpusSource
from support.corpora import make_index, word_level_tokenizer, write_jsonl

GPT2_VOCAB = 50257
MAX_N = 8
DANISH = [
    {"id": "dk-1", "source": "da_test", "text": "Blåbærgrød med fløde på Ærø og i Ålborg. Øl, æbler og åer."},
    {"id": "dk-2", "source": "da_test", "text": "ÆØÅ æøå – «citat» og “anførselstegn”… 1½ kop kaffe ☕ i Københavns havn."},
    {"id": "dk-3", "source": "da_test", "text": "Sønderjylland\n\nRødgrød med fløde.\tTab og linjeskift\r\nslut."},
    {"id": "dk-4", "source": "da_test", "text": "  mellemrum før og efter  "},
]
#: DANISH plus generated documents: enough tokens (> ~550 per shard) for rust_indexing with 2 threads
DANISH_CORPUS = DANISH + [{"id": "dk-empty", "source": "da_test", "text": ""}] + [
    dict(r, source="da_test") for r in generate_corpus(8, seed=41, languages=("da",))]


# ---------------------------------------------------------------------------------------------
# helpers


def load_tok(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def tokenize_texts(tok, texts: list[str]) -> list[list[int]]:
    return tok(texts, add_special_tokens=False)["input_ids"]


class BruteForce:
    """n-gram counts over separate token lists (never across two lists)."""

    def __init__(self, docs: list[list[int]], max_n: int = MAX_N):
        self.docs = docs
        self.grams = {n: Counter() for n in range(1, max_n + 1)}
        for d in docs:
            for n in range(1, max_n + 1):
                self.grams[n].update(tuple(d[i:i + n]) for i in range(len(d) - n + 1))

    def count(self, query: list[int]) -> int:
        q = tuple(query)
        if len(q) in self.grams:
            return self.grams[len(q)][q]
        return sum(1 for d in self.docs for i in range(len(d) - len(q) + 1) if tuple(d[i:i + len(q)]) == q)

    @property
    def total_tokens(self) -> int:
        return sum(len(d) for d in self.docs)


def write_corpus(path: Path, records: list[dict], fmt: str) -> Path:
    """Write `records` as JSONL, gzipped JSONL, zstd JSONL (two frames) or parquet (several row groups)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [(json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in records]
    if fmt == "jsonl":
        path.write_bytes(b"".join(lines))
    elif fmt == "jsonl.gz":
        with gzip.open(path, "wb") as fh:
            fh.write(b"".join(lines))
    elif fmt == "jsonl.zst":
        import zstandard

        half = len(lines) // 2
        comp = zstandard.ZstdCompressor(level=3)
        path.write_bytes(comp.compress(b"".join(lines[:half])) + comp.compress(b"".join(lines[half:])))
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path, row_group_size=max(1, len(records) // 3))
    else:
        raise ValueError(fmt)
    return path


def assert_counts_match(index, bf: BruteForce, queries) -> None:
    for q in queries:
        assert index.count(list(q)) == bf.count(list(q)), f"count of {list(q)}"


def all_short_ngrams(bf: BruteForce, max_n: int = 2):
    for n in range(1, max_n + 1):
        yield from bf.grams[n]


def assert_not_an_index(out: Path) -> None:
    """Nothing at `out` opens: it is missing or open_index refuses it."""
    with pytest.raises(IndexFormatError):
        open_index(out)


def read_pointers(path: Path, ptr_size: int) -> np.ndarray:
    raw = np.fromfile(path, dtype=np.uint8).reshape(-1, ptr_size)
    ptrs = np.zeros(len(raw), dtype=np.uint64)
    for k in range(ptr_size):
        ptrs |= raw[:, k].astype(np.uint64) << np.uint64(8 * k)
    return ptrs


def counting(fn, calls: list):
    def wrapper(*args, **kwargs):
        calls.append(args)
        return fn(*args, **kwargs)

    return wrapper


def refuse(name: str):
    def wrapper(*args, **kwargs):
        raise AssertionError(f"{name} must not run")

    return wrapper


# ---------------------------------------------------------------------------------------------
# module fixtures


@pytest.fixture(scope="module")
def gpt2_tok(gpt2_dir):
    return load_tok(gpt2_dir)


@pytest.fixture(scope="module")
def synthetic_tokens(gpt2_tok, synthetic_records) -> list[list[int]]:
    return tokenize_texts(gpt2_tok, [r["text"] for r in synthetic_records])


@pytest.fixture(scope="module")
def synthetic_bf(synthetic_tokens) -> BruteForce:
    return BruteForce(synthetic_tokens)


@pytest.fixture(scope="module")
def synthetic_corpus(synthetic_index) -> Path:
    """The JSONL file the session's synthetic index was built from."""
    return synthetic_index.parent / "corpus.jsonl"


@pytest.fixture(scope="module")
def synthetic_opened(synthetic_index):
    return open_index(synthetic_index)


FORMATS = ["jsonl", "jsonl.gz", "jsonl.zst", "parquet"]


@pytest.fixture(scope="module", params=FORMATS)
def format_index(request, tmp_path_factory, gpt2_dir, synthetic_records, synthetic_index):
    """(format, index path, opened index) of the synthetic corpus written in each corpus format."""
    fmt = request.param
    if fmt == "jsonl":
        path = synthetic_index
    else:
        root = tmp_path_factory.mktemp("fmt-" + fmt.replace(".", "-"))
        corpus = write_corpus(root / f"corpus.{fmt}", synthetic_records, fmt)
        path = root / "index"
        make_index(corpus, path, gpt2_dir, num_shards=2)
    return fmt, path, open_index(path)


@pytest.fixture(scope="module")
def wide_tokenizer(tmp_path_factory) -> Path:
    """A word-level tokenizer with 70,002 ids (w0..w69999, [UNK]=70000, </s>=70001): needs 32-bit ids."""
    return word_level_tokenizer(tmp_path_factory.mktemp("wide-tokenizer"), 70_000)


@pytest.fixture(scope="module")
def small_tokenizer(tmp_path_factory) -> Path:
    """A 102-id word-level tokenizer: loads and analyses in milliseconds (for cases that fail early)."""
    return word_level_tokenizer(tmp_path_factory.mktemp("small-tokenizer"), 100)


@pytest.fixture(scope="module")
def wide_records() -> list[dict]:
    """Documents over ids around the 16-bit separator (65535) and around byte-order boundaries."""
    rng = random.Random(3)
    special = [0, 1, 2, 255, 256, 65279, 65534, 65535, 65536, 65791, 69999]
    records = []
    for i in range(30):
        words = [f"w{rng.choice(special) if rng.random() < 0.7 else rng.randrange(70_000)}"
                 for _ in range(rng.randint(2, 40))]
        records.append({"id": f"wide-{i}", "source": "wide", "text": " ".join(words)})
    return records


# ---------------------------------------------------------------------------------------------
# building from every corpus format; counts against brute force


def test_formats_give_identical_shards(format_index, synthetic_index, synthetic_bf, synthetic_records):
    fmt, path, index = format_index
    m = index.manifest
    assert m.complete and m.num_shards == 2 and m.token_width == 2
    assert m.total_documents == len(synthetic_records)
    assert m.total_tokens == synthetic_bf.total_tokens
    assert m.source["files"][0]["path"].endswith(fmt)
    for sid in (0, 1):
        for kind in SHARD_FILES:
            assert shard_file(path, kind, sid).read_bytes() == shard_file(synthetic_index, kind, sid).read_bytes(), \
                f"{fmt}: {kind}.{sid} differs from the JSONL build"


def test_tokenized_layout_is_infini_gram_v4(synthetic_index, synthetic_tokens):
    """tokenized.N = for each document of shard N (i mod 2 == N): \\xff\\xff + little-endian uint16 ids."""
    for sid in (0, 1):
        docs = synthetic_tokens[sid::2]
        expected = b"".join(b"\xff\xff" + np.asarray(d, dtype="<u2").tobytes() for d in docs)
        assert shard_file(synthetic_index, "tokenized", sid).read_bytes() == expected
        offsets = np.fromfile(shard_file(synthetic_index, "offset", sid), dtype="<u8")
        assert offsets.tolist() == np.concatenate(([0], np.cumsum([2 * (len(d) + 1) for d in docs])[:-1])).tolist()
        ds_bytes = len(expected)
        ptrs = read_pointers(shard_file(synthetic_index, "table", sid), math.ceil(math.log2(ds_bytes) / 8))
        assert sorted(ptrs.tolist()) == list(range(0, ds_bytes, 2))
        unigram = dict(map(int, line.split()) for line in shard_file(synthetic_index, "unigram", sid).read_text().splitlines())
        assert sum(unigram.values()) == ds_bytes // 2
        assert unigram[0xFFFF] == len(docs)
        assert unigram == {**Counter(t for d in docs for t in d), 0xFFFF: len(docs)}


def test_every_unigram_and_bigram_count(synthetic_opened, synthetic_bf):
    assert_counts_match(synthetic_opened, synthetic_bf, all_short_ngrams(synthetic_bf, 2))
    # edges: smallest and largest ids, ids absent from the vocabulary, a query longer than any match
    assert_counts_match(synthetic_opened, synthetic_bf, [[0], [0, 0], [GPT2_VOCAB - 1], [65534], [65533, 65534]])


def test_unigram_table_and_word_starts_arrays(synthetic_opened, synthetic_tokens):
    """The arrays tracing reads: token counts by id (brute force over the documents, no separator)
    and the build's word starts, sorted, as the frozenset gives them."""
    table = synthetic_opened.unigram_table
    expected = Counter(t for d in synthetic_tokens for t in d)
    assert {i: int(c) for i, c in enumerate(table.tolist()) if c} == dict(expected)
    assert len(table) == max(expected) + 1
    starts = synthetic_opened.word_starts
    listed = {int(x) for x in (synthetic_opened.path / WORD_STARTS_NAME).read_text().split()}
    assert starts.tolist() == sorted(listed) and len(starts) > 1000


def draw_ngram(data, docs: list[list[int]], num_shards: int) -> list[int]:
    kind = data.draw(st.sampled_from(["present", "present", "random", "mutated", "straddling"]), label="kind")
    n = data.draw(st.integers(1, MAX_N), label="n")
    if kind == "random":
        return data.draw(st.lists(st.integers(0, GPT2_VOCAB - 1), min_size=n, max_size=n), label="ids")
    d = data.draw(st.integers(0, len(docs) - 1), label="doc")
    doc = docs[d]
    if kind == "straddling" and d + num_shards < len(docs):
        # end of one document + start of the next one in the same shard: only the separator lies between
        nxt = docs[d + num_shards]
        k = data.draw(st.integers(1, max(1, min(n - 1, len(doc)))), label="tail")
        return doc[len(doc) - k:] + nxt[:max(1, n - k)]
    n = min(n, len(doc))
    start = data.draw(st.integers(0, len(doc) - n), label="start")
    gram = doc[start:start + n]
    if kind == "mutated":
        pos = data.draw(st.integers(0, n - 1), label="pos")
        gram[pos] = data.draw(st.integers(0, GPT2_VOCAB - 1), label="new id")
    return gram


@settings(max_examples=100, deadline=None, database=None)
@given(data=st.data())
def test_random_ngram_counts_match_brute_force(format_index, synthetic_tokens, synthetic_bf, data):
    fmt, _, index = format_index
    gram = draw_ngram(data, synthetic_tokens, 2)
    assert index.count(gram) == synthetic_bf.count(gram), f"{fmt}: {gram}"


# ---------------------------------------------------------------------------------------------
# documents: metadata, text, order


def test_every_document_round_trips(synthetic_opened, synthetic_records, synthetic_tokens):
    index = synthetic_opened
    assert any(c in r["text"] for r in synthetic_records for c in "æøåÆØÅ")  # the corpus exercises Danish letters
    position = {r["id"]: i for i, r in enumerate(synthetic_records)}
    seen = []
    for doc_ix in range(index.manifest.total_documents):
        doc = index.document(doc_ix)
        i = position[doc.meta["id"]]
        record = synthetic_records[i]
        assert doc.meta == {"id": record["id"], "source": record["source"]}
        assert doc.token_ids.tolist() == synthetic_tokens[i]
        assert index.decode(doc.token_ids) == record["text"]
        assert doc.shard == i % 2  # round-robin assignment
        seen.append(record["id"])
    assert sorted(seen) == sorted(position)


# ---------------------------------------------------------------------------------------------
# token width


def test_token_width_boundaries():
    assert choose_token_width(65534, None) == 2  # largest id that is not the 16-bit separator
    assert choose_token_width(65535, None) == 4  # 65535 would collide with the separator
    assert choose_token_width(100, 4) == 4
    with pytest.raises(ConfigError, match="16-bit"):
        choose_token_width(65535, 2)
    with pytest.raises(ConfigError):
        choose_token_width(100, 3)


def test_forced_16bit_with_wide_vocabulary_fails(tmp_path, wide_tokenizer, wide_records):
    corpus = write_jsonl(tmp_path / "wide.jsonl", wide_records)
    out = tmp_path / "idx"
    with pytest.raises(ConfigError, match="16-bit"):
        make_index(corpus, out, wide_tokenizer, token_width=2)
    assert not out.exists() and not staging_dir(out).exists()


def check_wide_index(out: Path, wide_tokenizer: Path, wide_records: list[dict]) -> None:
    m = IndexManifest.read(out)
    assert m.token_width == 4
    assert m.tokenizer.max_id == 70_001
    docs = tokenize_texts(load_tok(wide_tokenizer), [r["text"] for r in wide_records])
    assert max(t for d in docs for t in d) > 65535
    expected = b"".join(b"\xff\xff\xff\xff" + np.asarray(d, dtype="<u4").tobytes() for d in docs)
    assert shard_file(out, "tokenized", 0).read_bytes() == expected
    index = open_index(out)
    bf = BruteForce(docs)
    assert_counts_match(index, bf, all_short_ngrams(bf, 3))
    assert_counts_match(index, bf, [[65535], [65535, 65535], [65536], [255], [256], [0, 65535, 1], [70_001], [69_998]])
    for doc_ix in range(len(wide_records)):
        doc = index.document(doc_ix)
        assert index.decode(doc.token_ids) == wide_records[doc_ix]["text"]
        assert doc.meta["id"] == wide_records[doc_ix]["id"]
    assert verify_index(out).ok


def test_wide_vocabulary_gets_32bit_index(tmp_path, wide_tokenizer, wide_records):
    corpus = write_jsonl(tmp_path / "wide.jsonl", wide_records)
    make_index(corpus, tmp_path / "idx", wide_tokenizer)
    check_wide_index(tmp_path / "idx", wide_tokenizer, wide_records)


# ---------------------------------------------------------------------------------------------
# interrupted builds


def test_interrupted_suffix_array_resumes_missing_shard_only(tmp_path, monkeypatch, gpt2_dir, gpt2_tok):
    records = list(generate_corpus(30, seed=11))
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    out = tmp_path / "idx"
    real_sa, real_tok = build_module.build_suffix_array, build_module.tokenize_corpus
    attempts = []

    def dies_on_second_shard(ds_path, sa_path, *args, **kwargs):
        attempts.append(sa_path.name)
        if len(attempts) == 2:
            raise KeyboardInterrupt
        return real_sa(ds_path, sa_path, *args, **kwargs)

    monkeypatch.setattr(build_module, "build_suffix_array", dies_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        make_index(corpus, out, gpt2_dir, num_shards=2)
    assert attempts == ["table.0", "table.1"]
    assert_not_an_index(out)

    sa_calls, tok_calls = [], []
    monkeypatch.setattr(build_module, "build_suffix_array", counting(real_sa, sa_calls))
    monkeypatch.setattr(build_module, "tokenize_corpus", counting(real_tok, tok_calls))
    manifest = make_index(corpus, out, gpt2_dir, num_shards=2)
    assert [Path(c[1]).name for c in sa_calls] == ["table.1"]
    assert tok_calls == []
    assert not staging_dir(out).exists()
    index = open_index(out)
    bf = BruteForce(tokenize_texts(gpt2_tok, [r["text"] for r in records]))
    assert manifest.total_documents == 30 and manifest.total_tokens == bf.total_tokens
    assert_counts_match(index, bf, all_short_ngrams(bf, 2))
    assert verify_index(out).ok


def test_interrupted_tokenization_restarts_cleanly(tmp_path, gpt2_dir, gpt2_tok):
    records = list(generate_corpus(30, seed=12))
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    out = tmp_path / "idx"

    class DiesMidway(CorpusSource):
        passes = 0

        def __iter__(self):  # the first pass is the tokenizer check's sample, the second tokenizes
            DiesMidway.passes += 1
            for i, doc in enumerate(super().__iter__()):
                if i == 17 and DiesMidway.passes == 2:
                    raise KeyboardInterrupt
                yield doc

    with pytest.raises(KeyboardInterrupt):
        build_index(DiesMidway(str(corpus)), out, tokenizer=str(gpt2_dir), num_shards=2, batch_size=4,
                    progress=False, check_space=False)
    assert shard_file(staging_dir(out), "tokenized", 0).stat().st_size > 0  # it did stop half-way
    assert_not_an_index(out)
    manifest = build_index(CorpusSource(str(corpus)), out, tokenizer=str(gpt2_dir), num_shards=2, batch_size=4,
                           progress=False, check_space=False)
    bf = BruteForce(tokenize_texts(gpt2_tok, [r["text"] for r in records]))
    assert manifest.total_documents == 30 and manifest.total_tokens == bf.total_tokens
    index = open_index(out)
    assert_counts_match(index, bf, all_short_ngrams(bf, 2))
    assert [index.document(i).meta["id"] for i in range(30)] == [r["id"] for r in records[0::2] + records[1::2]]


@pytest.mark.slow  # a fresh `propme` process (imports torch) killed from outside mid-build
def test_sigkill_mid_build_leaves_no_index_and_rerun_finishes(tmp_path, gpt2_dir, cli_run):
    corpus = write_jsonl(tmp_path / "big.jsonl", generate_corpus(2000, seed=5))  # about 0.6M tokens
    out = tmp_path / "idx"
    argv = ["index", "build", str(corpus), "--out", str(out), "--tokenizer", str(gpt2_dir), "--shards", "2",
            "--batch-size", "256", "--quiet", "--skip-space-check"]
    proc = subprocess.Popen([sys.executable, "-m", "propme.cli.app", *argv], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tokenized = shard_file(staging_dir(out), "tokenized", 0)
    deadline = time.time() + 120
    try:
        while not (tokenized.is_file() and tokenized.stat().st_size > 0):
            assert proc.poll() is None, "the build ended before it could be killed: " + proc.stderr.read().decode()
            assert time.time() < deadline, "the build never started tokenizing"
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: rust_indexing children too
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert_not_an_index(out)
    code, _, err = cli_run("index", "info", out)
    assert code == 3 and "does not exist" in err

    code, out_text, err = cli_run(*argv)
    assert code == 0, err
    assert "2,000 documents" in out_text
    code, out_text, _ = cli_run("index", "verify", out)
    assert code == 0 and "index verified" in out_text
    assert not staging_dir(out).exists()


# ---------------------------------------------------------------------------------------------
# errors: one message, the right exit code, no traceback


def _corpus_cases(tmp: Path, small_tokenizer: Path, wide_tokenizer: Path, good: Path):
    """name -> (argv after `index build`, exit code, substrings of stderr)."""
    import zstandard

    empty = tmp / "empty.jsonl"
    empty.write_bytes(b"")
    notgz = tmp / "notgz.jsonl.gz"
    notgz.write_bytes(b'{"text": "plain text, not gzip"}\n')
    badjson = tmp / "badjson.jsonl"
    badjson.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": broken}\n', encoding="utf-8")
    notobj = tmp / "array.jsonl"
    notobj.write_text('["a", "b"]\n', encoding="utf-8")
    badzst = tmp / "bad.jsonl.zst"
    badzst.write_bytes(bytes(range(256)) * 4)
    badparquet = tmp / "bad.parquet"
    badparquet.write_bytes(b"PAR1 this is not parquet PAR1")
    cutdir = tmp / "cutzst"
    # a good file big enough for the suffix-array builder, so that only the cut file can fail the build
    write_jsonl(cutdir / "a-good.jsonl", [{"id": "g", "text": " ".join(f"w{i % 100}" for i in range(1500))}])
    data = b"".join(json.dumps({"id": str(i), "text": f"lost document {i}"}).encode() + b"\n" for i in range(2000))
    (cutdir / "b-cut.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data)[:40])
    out = str(tmp / "out")
    tok = ["--tokenizer", str(small_tokenizer)]
    return {
        "empty corpus": ([str(empty), "--out", out, *tok], 2, [str(empty), "no documents"]),
        "missing corpus": ([str(tmp / "nowhere.jsonl"), "--out", out, *tok], 2, ["nowhere.jsonl", "does not exist"]),
        "missing text field": ([str(good), "--out", out, *tok, "--text-field", "body"], 2,
                               [f"{good}:1", "no field 'body'", "--text-field"]),
        "not gzip": ([str(notgz), "--out", out, *tok], 2, [str(notgz), "cannot read"]),
        "line not JSON": ([str(badjson), "--out", out, *tok], 2, [f"{badjson}:2", "not valid JSON"]),
        "line not an object": ([str(notobj), "--out", out, *tok], 2, [f"{notobj}:1", "not an object"]),
        "corrupt zstd": ([str(badzst), "--out", out, *tok], 2, [str(badzst), "cannot read"]),
        "truncated zstd in a folder": ([str(cutdir), "--out", out, *tok], 2, ["b-cut.jsonl.zst"]),
        "corrupt parquet": ([str(badparquet), "--out", out, *tok], 2, [str(badparquet), "cannot read"]),
        "unknown tokenizer": ([str(good), "--out", out, "--tokenizer", str(tmp / "no-such-tokenizer")], 2,
                              ["no tokenizer folder", "no-such-tokenizer"]),
        "vocabulary too large for 16-bit": ([str(good), "--out", out, "--tokenizer", str(wide_tokenizer),
                                             "--token-width", "2"], 2, ["70001", "16-bit", "--token-width"]),
        "every source excluded": ([str(good), "--out", out, *tok, "--exclude-sources", "da_test"], 2,
                                  ["no documents", "--exclude-sources"]),
    }


ERROR_CASES = ["empty corpus", "missing corpus", "missing text field", "not gzip", "line not JSON",
               "line not an object", "corrupt parquet", "unknown tokenizer", "vocabulary too large for 16-bit",
               "every source excluded",
               "corrupt zstd", "truncated zstd in a folder"]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_build_errors_are_one_message(case, tmp_path, small_tokenizer, wide_tokenizer, cli_run):
    good = write_jsonl(tmp_path / "good.jsonl", DANISH)
    argv, expected_code, fragments = _corpus_cases(tmp_path, small_tokenizer, wide_tokenizer, good)[case]
    try:
        code, out, err = cli_run("index", "build", *argv, "--quiet", "--skip-space-check")
    except Exception as exc:  # an uncaught exception is exactly the failure this test is about
        pytest.fail(f"{case}: uncaught {type(exc).__name__}: {exc}")
    assert code == expected_code, err
    assert err.startswith("error: ")
    for fragment in fragments:
        assert fragment in err, f"{case}: {fragment!r} not in {err!r}"
    assert_not_an_index(tmp_path / "out")


def test_console_script_errors_without_traceback(tmp_path):
    """The installed `propme` command itself: exit codes 2 and 3, one message each, no traceback."""
    script = Path(sys.executable).with_name("propme")
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "propme.cli.app"]
    env = {**os.environ, "COLUMNS": "1000"}
    missing = tmp_path / "missing.jsonl"
    for args, code, fragment in [
        (["index", "build", str(missing), "--out", str(tmp_path / "out")], 2, f"corpus '{missing}' does not exist"),
        (["index", "info", str(tmp_path / "out")], 3, "does not exist"),
        (["index", "verify", str(tmp_path)], 3, "not a PropMe index"),
    ]:
        result = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == code, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith("error: ") and fragment in result.stderr


def test_out_holding_another_index_is_refused(tmp_path, synthetic_index, synthetic_opened, gpt2_dir, cli_run):
    out = tmp_path / "idx"
    shutil.copytree(synthetic_index, out)
    other = write_jsonl(tmp_path / "other.jsonl", DANISH)
    code, _, err = cli_run("index", "build", other, "--out", out, "--tokenizer", gpt2_dir, "--quiet")
    assert code == 2 and "already holds a different index" in err and "--force" in err
    assert open_index(out).manifest.to_dict() == synthetic_opened.manifest.to_dict()  # untouched

    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    code, _, err = cli_run("index", "build", other, "--out", junk, "--tokenizer", gpt2_dir, "--quiet")
    assert code == 2 and "not empty" in err
    assert (junk / "notes.txt").read_text() == "mine"


def test_same_build_twice_is_a_noop(tmp_path, monkeypatch, synthetic_index, synthetic_corpus, synthetic_opened, gpt2_dir):
    out = tmp_path / "idx"
    shutil.copytree(synthetic_index, out)
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    monkeypatch.setattr(build_module, "tokenize_corpus", refuse("tokenization"))
    monkeypatch.setattr(build_module, "build_suffix_array", refuse("the suffix-array build"))
    manifest = make_index(synthetic_corpus, out, gpt2_dir, num_shards=2)
    assert manifest.to_dict() == synthetic_opened.manifest.to_dict()
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes


def test_force_replaces_an_index(tmp_path, gpt2_dir, gpt2_tok, cli_run):
    first = write_jsonl(tmp_path / "first.jsonl", generate_corpus(10, seed=21))
    second = write_jsonl(tmp_path / "second.jsonl", DANISH_CORPUS)
    out = tmp_path / "idx"
    assert cli_run("index", "build", first, "--out", out, "--tokenizer", gpt2_dir, "--quiet")[0] == 0
    code, _, err = cli_run("index", "build", second, "--out", out, "--tokenizer", gpt2_dir, "--quiet")
    assert code == 2 and "different index" in err
    code, out_text, err = cli_run("index", "build", second, "--out", out, "--tokenizer", gpt2_dir, "--quiet", "--force")
    assert code == 0, err
    index = open_index(out)
    assert index.manifest.total_documents == len(DANISH_CORPUS)
    assert index.manifest.source["location"] == str(second.resolve())
    assert sorted(index.document(i).meta["id"] for i in range(len(DANISH_CORPUS))) == \
        sorted(r["id"] for r in DANISH_CORPUS)
    bf = BruteForce(tokenize_texts(gpt2_tok, [r["text"] for r in DANISH_CORPUS]))
    assert_counts_match(index, bf, all_short_ngrams(bf, 2))


# ---------------------------------------------------------------------------------------------
# info and verify


def test_info_json(synthetic_index, synthetic_records, cli_run):
    code, out, _ = cli_run("index", "info", synthetic_index, "--json")
    assert code == 0
    info = json.loads(out)
    manifest = json.loads((synthetic_index / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert info["manifest"] == manifest
    assert info["manifest"]["total_documents"] == len(synthetic_records)
    assert info["manifest"]["token_width"] == 2 and info["manifest"]["num_shards"] == 2
    sample = info["sample_document"]
    record = next(r for r in synthetic_records if r["id"] == sample["metadata"]["id"])
    assert sample["metadata"] == {"id": record["id"], "source": record["source"]}
    assert sample["text_start"] and record["text"].startswith(sample["text_start"].rstrip("\ufffd"))
    assert info["files"]["tokenized.0"] == manifest["shards"][0]["ds_bytes"]

    code, out, _ = cli_run("index", "info", synthetic_index)
    assert code == 0 and manifest["identity"] in out


def test_verify_good_index(synthetic_index, cli_run):
    code, out, _ = cli_run("index", "verify", synthetic_index)
    assert code == 0 and "index verified" in out and "FAIL" not in out


def test_verify_detects_two_swapped_pointers(tmp_path, synthetic_index, cli_run):
    out = tmp_path / "idx"
    shutil.copytree(synthetic_index, out)
    table = shard_file(out, "table", 0)
    size = table.stat().st_size
    ptr = pointer_size(shard_file(out, "tokenized", 0).stat().st_size)
    raw = np.fromfile(table, dtype=np.uint8).reshape(-1, ptr).copy()
    i, j = len(raw) // 3, 2 * len(raw) // 3
    assert raw[i].tobytes() != raw[j].tobytes()
    raw[[i, j]] = raw[[j, i]]
    raw.tofile(table)
    assert table.stat().st_size == size
    code, _, err = cli_run("index", "verify", out)
    assert code == 3 and "table.0 does not match its sampled checksum" in err  # caught on open already
    # as if the build itself had written the swapped table: checksums agree, only the order check can see it
    m = json.loads((out / MANIFEST_NAME).read_text())
    m["files"] = checksum_files(out, list(m["files"]))
    (out / MANIFEST_NAME).write_text(json.dumps(m))
    # `--samples` above the table length: every adjacent pair should be looked at
    code, out_text, _ = cli_run("index", "verify", out, "--samples", 10**6)
    assert code == 1
    assert "FAIL suffix array sorted" in out_text and "index verification FAILED" in out_text


def test_truncated_table_is_reported(tmp_path, synthetic_index, cli_run):
    out = tmp_path / "idx"
    shutil.copytree(synthetic_index, out)
    table = shard_file(out, "table", 1)
    with open(table, "r+b") as fh:
        fh.truncate(table.stat().st_size - 3)
    for command in ("info", "verify"):
        code, _, err = cli_run("index", command, out)
        assert code == 3 and "table.1" in err and "truncated" in err
    with pytest.raises(IndexFormatError, match="table.1"):
        open_index(out)


def test_info_on_missing_and_non_index_folders(tmp_path, cli_run):
    code, _, err = cli_run("index", "info", tmp_path / "nothing")
    assert code == 3 and "does not exist" in err
    (tmp_path / "plain").mkdir()
    code, _, err = cli_run("index", "info", tmp_path / "plain")
    assert code == 3 and "not a PropMe index" in err


# ---------------------------------------------------------------------------------------------
# source selection and metadata


def test_exclude_sources_and_keep_fields(tmp_path, gpt2_dir, gpt2_tok, cli_run):
    records = list(generate_corpus(40, seed=31))
    excluded = {"da_bøger", "en_news"}
    kept = [r for r in records if r["source"] not in excluded]
    assert 0 < len(kept) < len(records)
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    out = tmp_path / "idx"
    code, _, err = cli_run("index", "build", corpus, "--out", out, "--tokenizer", gpt2_dir, "--quiet",
                           "--exclude-sources", ",".join(sorted(excluded)), "--keep-fields", "id")
    assert code == 0, err
    index = open_index(out)
    assert index.manifest.total_documents == len(kept)
    assert index.manifest.source["exclude_sources"] == sorted(excluded)
    metas = [index.document(i).meta for i in range(len(kept))]
    assert all(set(m) == {"id"} for m in metas)
    assert sorted(m["id"] for m in metas) == sorted(r["id"] for r in kept)
    bf = BruteForce(tokenize_texts(gpt2_tok, [r["text"] for r in kept]))
    assert index.manifest.total_tokens == bf.total_tokens
    assert_counts_match(index, bf, all_short_ngrams(bf, 2))


def _corpus_source_counts(records, tok) -> dict[str, dict[str, int]]:
    """Documents and tokens per source counted straight from the input records (the oracle)."""
    counts: dict[str, dict[str, int]] = {}
    for r, ids in zip(records, tokenize_texts(tok, [r["text"] for r in records])):
        name = r["source"] if r.get("source") else "unknown"
        entry = counts.setdefault(name, {"documents": 0, "tokens": 0})
        entry["documents"] += 1
        entry["tokens"] += len(ids)
    return counts


def test_source_counts_are_counted_while_writing_and_add_up_over_a_join(tmp_path, monkeypatch, gpt2_dir, gpt2_tok,
                                                                      cli_run):
    """The shard writer's per-source counts equal the corpus' (a document without a source is
    'unknown'), the on-demand count of the finished files, a build resumed from a tokenization
    that did not count them, and a join of the shards built apart: the sum of its parts."""
    from propme_metrics.core.errors import BuildError
    from propme_metrics.index.format import STATE_NAME
    from propme_metrics.index.source_counts import count_sources

    records = list(generate_corpus(45, seed=41))
    for i, r in enumerate(records):
        if i % 9 == 0:
            del r["source"]
        elif i % 9 == 4:
            r["source"] = ""
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    expected = _corpus_source_counts(records, gpt2_tok)
    assert "unknown" in expected and len(expected) >= 3

    whole = make_index(corpus, tmp_path / "whole", gpt2_dir, num_shards=3)
    assert whole.source_counts == expected and list(whole.source_counts) == sorted(expected)
    assert count_sources(tmp_path / "whole", range(3), whole.token_width, "source") == expected

    parts = [tmp_path / f"part{sid}" for sid in range(3)]
    part_counts = [make_index(corpus, part, gpt2_dir, num_shards=3, shard_ids=[sid]).source_counts
                   for sid, part in enumerate(parts)]
    for sid, counts in enumerate(part_counts):  # document i goes to shard i mod 3
        assert counts == _corpus_source_counts(records[sid::3], gpt2_tok)
    summed: dict[str, dict[str, int]] = {}
    for counts in part_counts:
        for name, c in counts.items():
            entry = summed.setdefault(name, {"documents": 0, "tokens": 0})
            entry["documents"] += c["documents"]
            entry["tokens"] += c["tokens"]
    code, _, err = cli_run("index", "join", *parts, "--out", tmp_path / "joined")
    assert code == 0, err
    assert IndexManifest.read(tmp_path / "joined").source_counts == summed == expected

    # a build resumed from a tokenization that did not record the counts counts the written files
    def dies(*args, **kwargs):
        raise BuildError("stopped after tokenizing")

    monkeypatch.setattr(build_module, "build_suffix_array", dies)
    with pytest.raises(BuildError):
        make_index(corpus, tmp_path / "resumed", gpt2_dir, num_shards=3)
    state_path = staging_dir(tmp_path / "resumed") / STATE_NAME
    state = json.loads(state_path.read_text())
    assert state.pop("source_counts") == expected
    state_path.write_text(json.dumps(state))
    monkeypatch.undo()
    assert make_index(corpus, tmp_path / "resumed", gpt2_dir, num_shards=3).source_counts == expected


# ---------------------------------------------------------------------------------------------
# shards built separately and joined


def test_shards_built_apart_and_joined(tmp_path, synthetic_corpus, synthetic_index, synthetic_opened, synthetic_bf,
                                       gpt2_dir, cli_run):
    parts = [tmp_path / "part0", tmp_path / "part1"]
    for sid, part in enumerate(parts):
        m = make_index(synthetic_corpus, part, gpt2_dir, num_shards=2, shard_ids=[sid])
        assert m.shard_ids == [sid] and not m.complete
        with pytest.raises(IndexFormatError, match="join"):
            open_index(part)
    code, _, err = cli_run("index", "info", parts[0])
    assert code == 3 and "join" in err

    with pytest.raises(ConfigError, match="missing"):
        join_indexes([parts[0]], tmp_path / "nope")
    with pytest.raises(ConfigError, match="overlap"):
        join_indexes([parts[0], parts[0], parts[1]], tmp_path / "nope")
    assert not (tmp_path / "nope").exists()

    joined = tmp_path / "joined"
    code, out_text, err = cli_run("index", "join", *parts, "--out", joined)
    assert code == 0, err
    index = open_index(joined)
    assert index.manifest.complete
    assert index.manifest.build["params_hash"] == synthetic_opened.manifest.build["params_hash"]
    for sid in (0, 1):
        for kind in SHARD_FILES:
            assert shard_file(joined, kind, sid).read_bytes() == shard_file(synthetic_index, kind, sid).read_bytes()
    rng = random.Random(1)
    queries = [list(q) for q in rng.sample(sorted(synthetic_bf.grams[3]), 200)]
    queries += [[rng.randrange(GPT2_VOCAB) for _ in range(rng.randint(1, 4))] for _ in range(100)]
    for q in queries:
        assert index.count(q) == synthetic_opened.count(q) == synthetic_bf.count(q)
    assert index.document(7).meta == synthetic_opened.document(7).meta
    assert verify_index(joined).ok

    code, _, err = cli_run("index", "join", *parts, "--out", joined)
    assert code == 2 and "not empty" in err
    # the same full build aimed at the joined folder finds it finished
    assert make_index(synthetic_corpus, joined, gpt2_dir, num_shards=2).created == index.manifest.created


# ---------------------------------------------------------------------------------------------
# paths that contain the engine's file-kind words


def test_index_under_path_with_engine_words(tmp_path, gpt2_dir, gpt2_tok):
    out = tmp_path / "metadata_test" / "idx"
    corpus = write_jsonl(tmp_path / "table_corpus" / "danish.jsonl", DANISH_CORPUS)
    make_index(corpus, out, gpt2_dir)
    docs = tokenize_texts(gpt2_tok, [r["text"] for r in DANISH_CORPUS])
    bf = BruteForce(docs)
    moved = tmp_path / "offset.table" / "unigram_idx"
    moved.parent.mkdir()
    shutil.copytree(out, moved)
    for path in (out, moved):
        index = open_index(path)
        assert_counts_match(index, bf, all_short_ngrams(bf, 3))
        assert_counts_match(index, bf, [docs[1][:8], docs[0][-5:] + docs[1][:3]])
        for doc_ix, record in enumerate(DANISH_CORPUS):
            doc = index.document(doc_ix)
            assert doc.meta == {"id": record["id"], "source": record["source"]}
            assert index.decode(doc.token_ids) == record["text"]


def test_tiny_shard_builds(tmp_path, gpt2_dir, gpt2_tok):
    corpus = write_jsonl(tmp_path / "tiny.jsonl", DANISH)
    manifest = make_index(corpus, tmp_path / "idx", gpt2_dir, cpus=2)
    docs = tokenize_texts(gpt2_tok, [r["text"] for r in DANISH])
    assert manifest.total_tokens == sum(map(len, docs)) < 500
    bf = BruteForce(docs)
    assert_counts_match(open_index(tmp_path / "idx"), bf, all_short_ngrams(bf, 2))


def test_unreachable_hub_dataset_is_one_message(tmp_path, gpt2_dir, capsys):
    """A Hugging Face dataset id is streamed with datasets.load_dataset; offline it fails cleanly."""
    code = cli.main(["index", "build", "no-such-org/no-such-dataset", "--tokenizer", str(gpt2_dir),
                     "--out", str(tmp_path / "idx"), "--quiet", "--skip-space-check"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot open Hugging Face dataset 'no-such-org/no-such-dataset'" in err and "Traceback" not in err
    assert not (tmp_path / "idx").exists() and not staging_dir(tmp_path / "idx").exists()


def test_manifest_from_a_newer_version_still_reads(synthetic_index, tmp_path):
    """Keys a later PropMe adds to the manifest are ignored, not a 'corrupt manifest' error."""
    data = json.loads((synthetic_index / MANIFEST_NAME).read_text())
    data["added_by_a_later_version"] = {"anything": 1}
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / MANIFEST_NAME).write_text(json.dumps(data))
    manifest = IndexManifest.read(folder)
    assert manifest.identity == IndexManifest.read(synthetic_index).identity


def test_engine_wrapper_has_word_starts_and_unigrams(synthetic_index, synthetic_records):
    """Index.engine gets the manifest's word-start ids and real unigram log-probabilities, so the
    engine's own `attribute(..., enforce_bow=True)` works (docs/index-format.md, using the index with infini-gram's engine)."""
    index = open_index(synthetic_index)
    ids = index.encode(synthetic_records[0]["text"])[:60]
    result = index.engine.attribute(input_ids=ids, delim_ids=sorted(index.manifest.delimiter_ids), min_len=1,
                                    max_cnt=10**9, enforce_bow=True)
    assert result["spans"], "enforce_bow=True found nothing: the word-start ids did not reach the engine"
    assert all(s["unigram_logprob_sum"] > -10000 for s in result["spans"])
