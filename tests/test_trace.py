"""SimpleTrace against an independent brute-force oracle, the SPEC's test vectors, determinism, and
the `propme trace` command.

The oracle tokenizes every corpus document itself (tokenizers' own GPT-2 files, not the index) and
finds, for every start of a query, the longest prefix occurring inside one document by scanning all
positions; the span rules of SPEC section 4 are then applied here, written out again. Only the sets of
word-start and delimiter ids are taken from the index (they are defined by the vocabulary).
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_index, write_jsonl
from propme_metrics.cli import main
from propme_metrics.errors import IndexFormatError
from propme_metrics.generations import read_generations
from propme_metrics.trace import (Span, TraceConfig, TracedDocument, Tracer, TraceResult,
                                  _merge_segments)

HYPO = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


# -- the oracle ---------------------------------------------------------------------------------

class Oracle:
    """Brute force over the documents' own tokenizations: matches never cross a document boundary."""

    def __init__(self, docs: list[list[int]], bow: frozenset[int], delims: frozenset[int], pad: int = 512):
        parts = []
        for d in docs:
            parts += d + [-1]
        self.flat = np.asarray(parts + [-1] * pad, dtype=np.int64)
        self.size = len(parts)
        self.bow, self.delims = bow, delims

    def _positions(self, q: list[int]) -> np.ndarray:
        cand = np.arange(self.size)
        for k, t in enumerate(q):
            cand = cand[self.flat[cand + k] == t]
        return cand

    def longest(self, q: list[int], i: int) -> int:
        cand, k = np.arange(self.size), 0
        while i + k < len(q):
            keep = self.flat[cand + k] == q[i + k]
            if not keep.any():
                break
            cand, k = cand[keep], k + 1
        return k

    def count(self, q: list[int]) -> int:
        return len(self._positions(q))

    def spans(self, q: list[int]) -> list[tuple[int, int]]:
        n, out, last = len(q), [], 0
        for i in range(n):
            if i > 0 and q[i] not in self.bow:  # spans start at word starts, or at the first token
                continue
            end = i + self.longest(q, i)
            for p in range(i, end):  # cut after the first delimiter inside the span
                if q[p] in self.delims:
                    end = p + 1
                    break
            while end > i and end < n and q[end] not in self.bow:  # back off to whole words
                end -= 1
            if end > i and end > last:  # keep maximal spans only
                out.append((i, end))
                last = end
        return out


@pytest.fixture(scope="module")
def raw_tokenizer(gpt2_dir):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(gpt2_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def tracer(synthetic_index) -> Tracer:
    return Tracer(synthetic_index)


@pytest.fixture(scope="module")
def corpus_ids(raw_tokenizer, synthetic_records) -> list[list[int]]:
    return [raw_tokenizer.encode(r["text"]).ids for r in synthetic_records]


@pytest.fixture(scope="module")
def oracle(tracer, corpus_ids) -> Oracle:
    return Oracle(corpus_ids, tracer.index.word_start_ids, frozenset(tracer.index.manifest.delimiter_ids))


TINY_DOCS = [
    "The council repaired the old house although the baker lost a red boat. Nothing else happened.",
    "Yesterday the nurse painted the church tower although it rained. The end.",
    "A neighbour described the forest on Friday. The doctor examined a long report.",
]


def build_tiny(root: Path, gpt2_dir: Path, raw_tokenizer, width: int):
    corpus = write_jsonl(root / "c.jsonl", [{"id": f"t{i}", "text": t} for i, t in enumerate(TINY_DOCS)])
    # cpus=1: with more, rust_indexing's concat step fails on a shard this small (a build.py issue)
    make_index(corpus, root / "index", gpt2_dir, cpus=1, token_width=width)
    tr = Tracer(root / "index")
    docs = [raw_tokenizer.encode(t).ids for t in TINY_DOCS]
    return tr, Oracle(docs, tr.index.word_start_ids, frozenset(tr.index.manifest.delimiter_ids)), root / "index"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, gpt2_dir, raw_tokenizer):
    """A 3-document, one-shard, 16-bit index."""
    return build_tiny(tmp_path_factory.mktemp("tiny"), gpt2_dir, raw_tokenizer, 2)


def widen_to_32_bit(src: Path, dest: Path) -> Path:
    """The same index with 32-bit token ids, its suffix array sorted here in Python.

    (`build_index(token_width=4)` cannot be used: rust_indexing's make-part asks for 32 GiB with
    --token-width 4, whatever the corpus size.)"""
    shutil.copytree(src, dest)
    ds16 = np.frombuffer((src / "tokenized.0").read_bytes(), dtype="<u2").astype(np.int64)
    ds32 = np.where(ds16 == 0xFFFF, 0xFFFFFFFF, ds16).astype("<u4")
    raw = ds32.tobytes()
    ptr_size = math.ceil(math.log2(len(raw)) / 8)
    order = sorted(range(len(ds32)), key=lambda p: raw[4 * p:])
    (dest / "tokenized.0").write_bytes(raw)
    (dest / "table.0").write_bytes(b"".join((4 * p).to_bytes(ptr_size, "little") for p in order))
    offsets = np.frombuffer((src / "offset.0").read_bytes(), dtype="<u8") * 2
    (dest / "offset.0").write_bytes(offsets.astype("<u8").tobytes())
    lines = (src / "unigram.0").read_text().replace("65535 ", "4294967295 ")
    (dest / "unigram.0").write_text(lines)
    manifest = json.loads((src / "propme-manifest.json").read_text())
    manifest["token_width"] = 4
    manifest["shards"][0].update(ds_bytes=len(raw), sa_bytes=len(order) * ptr_size)
    manifest.pop("files", None)  # files made here, not by a build: no build checksums to check
    (dest / "propme-manifest.json").write_text(json.dumps(manifest))
    return dest


@pytest.fixture(scope="module", params=[2, 4], ids=["16-bit", "32-bit"])
def tiny_any(request, tiny, tmp_path_factory):
    """The tiny index, and the same corpus as a 32-bit index (another byte order of the suffixes)."""
    if request.param == 2:
        return tiny
    tr, orc, index_dir = tiny
    wide = widen_to_32_bit(index_dir, tmp_path_factory.mktemp("tiny32") / "index")
    return Tracer(wide), orc, wide


def le_bytes(ids: list[int], width: int = 2) -> bytes:
    return b"".join(int(t).to_bytes(width, "little") for t in ids)


# -- step 1 against the oracle ----------------------------------------------------------------------

def test_oracle_tokenization_is_the_index(tracer, corpus_ids):
    for doc_ix in (0, 1, 57, 119):  # document i went to shard i % 2; engine order: shard 0 then shard 1
        global_ix = doc_ix // 2 + (0 if doc_ix % 2 == 0 else 60)
        assert tracer.index.document(global_ix).token_ids == corpus_ids[doc_ix]


@st.composite
def queries(draw, corpus_ids):
    vocab = sorted({t for d in corpus_ids for t in d})
    token = st.one_of(st.sampled_from(vocab), st.integers(0, 50256))

    def planted():
        d = corpus_ids[draw(st.integers(0, len(corpus_ids) - 1))]
        a = draw(st.integers(0, len(d) - 1))
        piece = list(d[a:a + draw(st.integers(1, 40))])
        for _ in range(draw(st.integers(0, 2))):  # a few mutations
            piece[draw(st.integers(0, len(piece) - 1))] = draw(token)
        return piece

    kind = draw(st.sampled_from(["random", "planted", "mixed"]))
    if kind == "random":
        return draw(st.lists(token, min_size=1, max_size=40))
    if kind == "planted":
        return planted()
    q: list[int] = []
    for _ in range(draw(st.integers(2, 4))):
        q += planted() if draw(st.booleans()) else draw(st.lists(token, min_size=1, max_size=8))
    return q


@HYPO
@given(data=st.data())
def test_maximal_spans_match_oracle(tracer, oracle, corpus_ids, data):
    q = data.draw(queries(corpus_ids))
    assert tracer.maximal_spans(q) == oracle.spans(q)
    ends = tracer.longest_matches(q).tolist()
    assert ends == [i + oracle.longest(q, i) for i in range(len(q))]


@HYPO
@given(data=st.data())
def test_span_counts_match_oracle_and_engine(tracer, oracle, corpus_ids, data):
    q = data.draw(queries(corpus_ids))
    spans = tracer.maximal_spans(q)
    for (s, e), occ in zip(spans, tracer.locate(q, spans)):
        assert occ.count == oracle.count(q[s:e]) > 0
        found = tracer.index.engine.find(input_ids=q[s:e])
        assert occ.count == found["cnt"]
        assert occ.segment_by_shard == [tuple(x) for x in found["segment_by_shard"]]
    # absent sequences count 0 (and their empty ranges sit where the engine puts them)
    absent = q + [50256, 50256]
    assert tracer.count(absent) == oracle.count(absent) == 0


def test_rank0_neighbour_is_checked(tiny_any):
    """A query that sorts before every suffix of the shard still matches the first suffix (rank 0).

    The engine (2.6.0) skips that neighbour; the rank-0 suffix is found here by sorting all suffixes
    of the shard's bytes in Python, independently of the suffix-array file."""
    tr, orc, index_dir = tiny_any
    w = tr.index.token_width
    ds = (index_dir / "tokenized.0").read_bytes()
    suffixes = sorted(ds[p:] for p in range(0, len(ds), w))
    first = suffixes[0]
    s0 = [int.from_bytes(first[k:k + w], "little") for k in range(0, len(first), w)]
    sep = (1 << (8 * w)) - 1
    s0 = s0[:s0.index(sep)] if sep in s0 else s0
    # the word-start token absent from the corpus that sorts first (as little-endian bytes)
    x = min((t for t in tr.index.word_start_ids if orc.count([t]) == 0), key=lambda t: le_bytes([t], w))
    hits = 0
    for j in range(1, len(s0)):
        if not le_bytes([x], w) < le_bytes([s0[j]], w):
            continue
        q = s0[:j] + [x] + s0[j:j + 3]
        assert le_bytes(q, w) < suffixes[0], "the query must sort before every suffix"
        longest = orc.longest(q, 0)
        assert longest >= j
        assert int(tr.longest_matches(q)[0]) == longest
        assert tr.maximal_spans(q) == orc.spans(q)
        hits += longest > 0
    assert hits >= 3


@HYPO
@given(data=st.data())
def test_queries_starting_with_the_smallest_token(tiny_any, data):
    tr, orc, _ = tiny_any
    present = sorted({int(t) for t in orc.flat if t >= 0}, key=lambda t: le_bytes([t], tr.index.token_width))
    first = data.draw(st.sampled_from([present[0], min(present)]))  # first in byte order, smallest id
    q = [first] + data.draw(st.lists(st.sampled_from(present + [256, 512, 2048]), min_size=0, max_size=12))
    spans = tr.maximal_spans(q)
    assert spans == orc.spans(q)
    assert tr.longest_matches(q).tolist() == [i + orc.longest(q, i) for i in range(len(q))]
    assert [o.count for o in tr.locate(q, spans)] == [orc.count(q[a:b]) for a, b in spans]


def test_tiny_indexes_end_to_end(tiny_any):
    tr, _, _ = tiny_any
    r = tr.trace_one(TINY_DOCS[1], "t1")
    assert r.full_match and r.longest_span == r.spans[0].length > 5
    assert {d.source_id for d in r.documents} >= {"t1"}
    assert next(d for d in r.documents if d.source_id == "t1").nv_recall == 1.0
    ids = tr.index.encode(" although")
    occ = tr.locate(ids, [(0, 1)])[0]
    assert occ.count == 2 == tr.index.count(ids)
    ours = tr._windows(0, list(range(*occ.segment_by_shard[0])), 1, 3)
    theirs = tr.index.engine.get_docs_by_ranks_2(requests=[(0, r, 1, 3) for r in range(*occ.segment_by_shard[0])])
    assert [(w.doc_ix, w.needle_offset, w.token_ids.tolist()) for w in ours] == \
           [(d["doc_ix"], d["needle_offset"], list(d["token_ids"])) for d in theirs]


def test_windows_are_the_engines(tracer):
    ids = tracer.index.encode("The council decided on the new bridge")
    occ = tracer.locate(ids, [(0, len(ids))])[0]
    for s, (lo, hi) in enumerate(occ.segment_by_shard):
        ranks = list(range(lo, min(hi, lo + 5)))
        ours = tracer._windows(s, ranks, len(ids), 7)
        theirs = tracer.index.engine.get_docs_by_ranks_2(requests=[(s, r, len(ids), 7) for r in ranks])
        for a, b in zip(ours, theirs):
            assert (a.doc_ix, a.doc_len, a.needle_offset, a.token_ids.tolist(), a.metadata) == \
                   (b["doc_ix"], b["doc_len"], b["needle_offset"], list(b["token_ids"]), b["metadata"])
            assert a.shard == tracer.index.engine_shards[s]


# -- generations against documents ---------------------------------------------------------------

def first_paragraph(records, language: str, min_sentences: int = 4) -> tuple[dict, str]:
    for rec in records:
        para = rec["text"].split("\n\n")[0]
        if rec["language"] == language and len(re.findall(r"[.!?]", para)) >= min_sentences:
            return rec, para
    raise AssertionError("no suitable document")


def doc_of(result: TraceResult, rec: dict) -> TracedDocument:
    return next(d for d in result.documents if d.source_id == rec["id"])


def test_verbatim_copy_text_mode(tracer, synthetic_records, raw_tokenizer):
    rec, text = first_paragraph(synthetic_records, "en")
    r = tracer.trace_one(text, "copy")
    assert r.full_match and r.full_match_normalized
    assert doc_of(r, rec).nv_recall == 1.0 and doc_of(r, rec).match == "full_raw"
    sentences = re.split(r"(?<=[.!?]) ", text)
    expected = max(len(raw_tokenizer.encode(s if i == 0 else " " + s).ids) for i, s in enumerate(sentences))
    assert r.longest_span == expected < r.n_tokens
    assert r.error is None and not r.degenerate


def test_verbatim_copy_mixed_mode(synthetic_index, synthetic_records):
    rec, text = first_paragraph(synthetic_records, "en")
    r = Tracer(synthetic_index, TraceConfig(mode="mixed")).trace_one(text, "copy")
    assert r.longest_span == r.n_tokens == r.longest_segment
    assert [(s.start, s.end, s.kept) for s in r.spans] == [(0, r.n_tokens, True)]
    assert r.full_match and doc_of(r, rec).nv_recall == 1.0


def test_changed_white_space_is_a_normalized_match(tracer, synthetic_records):
    rec, text = first_paragraph(synthetic_records, "en")
    words = text.split(" ")
    spaced = " ".join(words[:3]) + "  " + " ".join(words[3:8]) + " \t " + " ".join(words[8:])
    r = tracer.trace_one(spaced, "spaced")
    assert r.full_match_normalized and not r.full_match
    assert doc_of(r, rec).match == "full_normalized"
    # paragraphs: spaces around a newline and a third newline vanish in normalization
    rec2 = next(x for x in synthetic_records if x["text"].count("\n\n") >= 1 and len(x["text"]) < 1500)
    r2 = tracer.trace_one(rec2["text"].replace("\n\n", " \n\n\n  ", 1), "para")
    assert r2.full_match_normalized and not r2.full_match
    # a newline replaced by a space is not white-space normalization (SPEC: spaces around newlines go,
    # newlines stay), so that copy is a partial match, though its NV-recall stays high
    r3 = tracer.trace_one(rec2["text"].replace("\n\n", " ", 1), "flat")
    assert not r3.full_match_normalized and doc_of(r3, rec2).nv_recall > 0.9


def test_unrelated_text(tracer):
    text = "Zorblax quintessa flumphed the grindlewort, vexing a sporklish mimbleton near Quaxxor."
    r = tracer.trace_one(text, "new")
    assert not r.full_match and not r.full_match_normalized
    assert all(d.nv_recall == 0.0 and d.match == "partial" for d in r.documents)
    assert r.longest_span < 5


def test_danish_copy(tracer, synthetic_records):
    rec, text = first_paragraph(synthetic_records, "da", min_sentences=3)
    assert re.search("[æøåÆØÅ]", text)
    r = tracer.trace_one(text, "da")
    assert r.full_match and doc_of(r, rec).nv_recall == 1.0
    assert any(re.search("[æøå]", s.text) for s in r.spans)


def test_empty_generation(tracer):
    r = tracer.trace_one("", "empty")
    assert (r.n_tokens, r.spans, r.segments, r.documents, r.longest_span, r.error) == (0, [], [], [], 0, None)
    assert not r.full_match and not r.degenerate
    assert tracer.maximal_spans([]) == [] and tracer.longest_matches([]).tolist() == []


# -- steps 2 and 4 -------------------------------------------------------------------------------

@pytest.mark.parametrize("n,k", [(20, 1), (21, 2), (100, 5), (160, 8), (256, 13), (0, 1), (1, 1)])
def test_k_vectors(n, k):
    assert TraceConfig().k(n) == k


def test_config_checks():
    with pytest.raises(ValueError):
        TraceConfig(mode="code")
    with pytest.raises(ValueError):
        TraceConfig(docs_per_span=0)
    assert TraceConfig(span_divisor=10).k(21) == 3
    assert set(TraceConfig().to_dict()) >= {"mode", "span_divisor", "docs_per_span", "context_factor", "seed"}


def test_rarity_filter_keeps_the_rarest(tracer, synthetic_records, synthetic_index):
    text = " ".join(r["text"].split("\n\n")[0] for r in synthetic_records[10:14])
    r = tracer.trace_one(text, "rare")
    k = TraceConfig().k(r.n_tokens)
    assert len(r.spans) > k
    assert sum(s.kept for s in r.spans) == k
    # rarity = sum of the tokens' unigram log-probabilities, counts read from the unigram files here
    counts: dict[int, int] = {}
    for f in synthetic_index.glob("unigram.*"):
        for line in f.read_text().split("\n"):
            if line:
                t, c = map(int, line.split())
                counts[t] = counts.get(t, 0) + c
    total = sum(counts.values())
    ids = tracer.index.encode(text)
    for s in r.spans:
        assert s.rarity == pytest.approx(math.fsum(math.log(counts[t] / total) for t in ids[s.start:s.end]), abs=1e-9)
    ranked = sorted(range(len(r.spans)), key=lambda i: (r.spans[i].rarity, r.spans[i].start))
    assert sorted(ranked[:k]) == [i for i, s in enumerate(r.spans) if s.kept]


def test_rarity_ties_keep_positional_order(synthetic_index, synthetic_records):
    # a sentence that follows a space in its document, so that " S S" consists of two identical spans
    sentence = next(m.group(1) for r in synthetic_records for m in re.finditer(r"(?<=[.!?]) ([A-Z][^.!?\n]*[.!?])", r["text"]))
    r = Tracer(synthetic_index, TraceConfig(span_divisor=10_000)).trace_one(f" {sentence} {sentence}", "tie")
    assert len(r.spans) == 2 and r.spans[0].rarity == r.spans[1].rarity
    assert [s.kept for s in r.spans] == [True, False]


def test_merge_segments():
    spans = [Span(0, 5, 1, -9.0), Span(3, 8, 1, -9.0), Span(8, 10, 1, -9.0), Span(9, 11, 1, -1.0),
             Span(12, 15, 1, -9.0)]
    kept = [0, 1, 2, 4]  # span 3 (9-11) is not kept: it neither merges nor bridges
    docs = [TracedDocument(0, i, None, {}, span=i, match="partial", nv_recall=0.0, snippet="", snippet_span=(0, 0))
            for i in (0, 1, 2, 4)]
    segs = _merge_segments(spans, kept, docs, lambda ids: " ".join(map(str, ids)), list(range(20)))
    assert [(s.start, s.end, s.spans, s.documents) for s in segs] == [(0, 8, [0, 1], [0, 1]), (8, 10, [2], [2]),
                                                                      (12, 15, [4], [3])]
    assert segs[0].text == "0 1 2 3 4 5 6 7" and segs[0].length == 8


# -- step 3 sampling and determinism ---------------------------------------------------------------

PLANTED = " Quorble flimflam zixaply grundelwort."


@pytest.fixture(scope="module")
def planted_index(tmp_path_factory, gpt2_dir, synthetic_records):
    root = tmp_path_factory.mktemp("planted")
    recs = [{"id": f"p{i}", "text": f"{synthetic_records[i]['text'][:120]}{PLANTED} Done {i}."} for i in range(30)]
    recs += [{"id": f"q{i}", "text": synthetic_records[40 + i]["text"]} for i in range(10)]
    make_index(write_jsonl(root / "c.jsonl", recs), root / "index", gpt2_dir)
    return root / "index"


def test_document_sample_is_seeded(planted_index):
    tr = Tracer(planted_index)
    r1 = tr.trace_one(PLANTED, "g")
    assert [(s.start, s.end, s.count, s.kept) for s in r1.spans] == [(0, r1.n_tokens, 30, True)]
    picked = [d.doc_ix for d in r1.documents]
    assert len(picked) == len(set(picked)) == 10
    assert all(d.source_id.startswith("p") and d.match == "full_raw" for d in r1.documents)
    assert [d.doc_ix for d in Tracer(planted_index).trace_one(PLANTED, "g").documents] == picked
    other = [d.doc_ix for d in Tracer(planted_index, TraceConfig(seed=1)).trace_one(PLANTED, "g").documents]
    assert len(other) == 10 and set(other) != set(picked)
    assert [d.doc_ix for d in tr.trace_one(PLANTED, "another key").documents] != picked
    assert len(Tracer(planted_index, TraceConfig(docs_per_span=40)).trace_one(PLANTED, "g").documents) == 30


def test_snippet_shows_the_span(planted_index):
    r = Tracer(planted_index).trace_one(PLANTED, "g")
    for d in r.documents:
        a, b = d.snippet_span
        assert d.snippet[a:b] == r.spans[d.span].text == PLANTED
        assert d.metadata["id"] == d.source_id


def test_results_identical_for_any_worker_count(tracer, synthetic_records):
    texts = [r["text"][i * 7:i * 7 + 300] for i, r in enumerate(synthetic_records[:18])]
    texts += ["Zorblax quintessa flumphed the grindlewort.", ""]
    keys = [f"k{i}" for i in range(len(texts))]
    one = [json.dumps(r.to_dict(), ensure_ascii=False) for r in tracer.trace(texts, keys, workers=1)]
    two = [json.dumps(r.to_dict(), ensure_ascii=False) for r in tracer.trace(texts, keys, workers=2)]
    again = [json.dumps(r.to_dict(), ensure_ascii=False) for r in tracer.trace(texts, keys, workers=1)]
    assert one == two == again
    assert all('"error": null' in line for line in one)


def test_failures_are_recorded_not_raised(tracer, monkeypatch):
    monkeypatch.setattr(tracer, "maximal_spans", lambda ids: 1 / 0)
    r = tracer.trace(["some text"], ["x"])[0]
    assert r.error.startswith("ZeroDivisionError") and r.spans == []


def test_to_dict_round_trip(tracer, synthetic_records):
    r = tracer.trace_one(synthetic_records[3]["text"][:400], "rt", continuation="nothing like it")
    d = r.to_dict()
    assert TraceResult.from_dict(json.loads(json.dumps(d))).to_dict() == d
    assert d["extracted"] is False and {"key", "text", "n_tokens", "longest_span", "full_match",
                                        "full_match_normalized", "spans", "segments", "documents"} <= set(d)
    assert {"shard", "doc_ix", "source_id", "metadata", "match", "nv_recall"} <= set(d["documents"][0])


def altered_copy(index_dir: Path, dest: Path) -> Path:
    shutil.copytree(index_dir, dest)
    tok_file = dest / "propme-tokenizer" / "tokenizer.json"
    data = json.loads(tok_file.read_text())
    vocab = data["model"]["vocab"]
    a, b = (next(k for k, v in vocab.items() if v == i) for i in (1000, 1001))
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two ids swapped: loads fine, tokenizes differently
    tok_file.write_text(json.dumps(data))
    return dest


def test_altered_tokenizer_copy_is_refused(tiny, tmp_path):
    _, _, index_dir = tiny
    with pytest.raises(IndexFormatError, match="not the one the index was built with"):
        Tracer(altered_copy(index_dir, tmp_path / "altered"))


# -- reading generations and the command line ---------------------------------------------------------

def samples_rows(text: str) -> list[dict]:
    def row(doc_id, doc, resps, filtered):
        return {"doc_id": doc_id, "doc": doc, "target": "",
                "arguments": {"gen_args_0": {"arg_0": "PROMPT-MARKER " + doc.get("prompt", ""), "arg_1": {}}},
                "resps": resps, "filtered_resps": filtered, "filter": "none", "metrics": ["als", "nvr"],
                "doc_hash": "h", "prompt_hash": "p", "target_hash": "t"}

    return [
        row(0, {"id": "p0", "prompt": "Write"}, [[text]], [text]),
        row(1, {"id": "p1", "prompt": "Say", "continuation": text[:40]}, [[text + " more"]], [text + " more"]),
        row(2, {"id": "p2"}, [["one gen", "two gen"]], ["one gen"]),
        row(3, {"id": "p3"}, [["a", "b"]], [["first", "second"]]),
        {**row(4, {"id": "p4"}, [[""]], [""]), "trace": {"error": "old failure"}},
    ]


def test_read_lm_eval_samples(tmp_path):
    path = write_jsonl(tmp_path / "samples_propme.jsonl", samples_rows("GEN"))
    gens, fmt = read_generations(path)
    assert fmt == "lm-eval-samples"
    assert [(g.key, g.text) for g in gens] == [("0", "GEN"), ("1", "GEN more"), ("2#0", "one gen"),
                                               ("2#1", "two gen"), ("3#0", "first"), ("3#1", "second"), ("4", "")]
    assert gens[1].continuation == "GEN" and gens[0].continuation is None
    assert not any("PROMPT-MARKER" in g.text for g in gens)


def test_read_plain_jsonl(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"id": "a", "completion": "x", "continuation": "y"},
                                              {"completion": ["p", "q"]}, {"id": 7, "completion": None}])
    gens, fmt = read_generations(path)
    assert fmt == "jsonl"
    assert gens == [("a", "x", "y"), ("1#0", "p", None), ("1#1", "q", None), ("7", "", None)]


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["trace", "--quiet", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())  # rich wraps long messages


def test_cli_plain_jsonl(tmp_path, capsys, synthetic_index, synthetic_records):
    rec, text = first_paragraph(synthetic_records, "en")
    inp = write_jsonl(tmp_path / "gens.jsonl", [
        {"id": "copy", "completion": text}, {"id": "new", "completion": "Zorblax quintessa flumph."},
        {"id": "empty", "completion": ""}, {"id": "junk", "completion": "!!!!" * 200}])
    code, out, err = run_cli(capsys, "--index", synthetic_index, "--input", inp, "--out", tmp_path / "r.jsonl",
                             "--summary", tmp_path / "s.json", "--workers", "2")
    assert code == 0, err
    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["key"] for r in rows] == ["copy", "new", "empty", "junk"]
    assert rows[0]["full_match"] and rows[2]["spans"] == [] and rows[3]["degenerate"]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert {"n_generations", "als", "fmr", "fmr_normalized", "nvr", "r20", "r50", "config", "index"} <= set(summary)
    assert summary["n_generations"] == 4 and summary["n_degenerate"] == 1 and summary["fmr"] == pytest.approx(1 / 3)
    manifest = Tracer(synthetic_index).index.manifest
    assert summary["index"]["identity"] == manifest.identity
    assert summary["index"]["tokenizer"]["sha256"] == manifest.tokenizer.sha256
    assert summary["config"] == TraceConfig().to_dict()
    assert "ALS" in out


def test_cli_lm_eval_samples(tmp_path, capsys, synthetic_index, synthetic_records):
    _, text = first_paragraph(synthetic_records, "en")
    inp = write_jsonl(tmp_path / "samples_propme_generic.jsonl", samples_rows(text))
    code, _, err = run_cli(capsys, "--index", synthetic_index, "--input", inp, "--out", tmp_path / "r.jsonl",
                           "--summary", tmp_path / "s.json", "--mode", "mixed", "--seed", "3")
    assert code == 0, err
    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["key"] for r in rows] == ["0", "1", "2#0", "2#1", "3#0", "3#1", "4"]
    assert not any("PROMPT-MARKER" in r["text"] or "PROMPT-MARKER" in json.dumps(r["spans"]) for r in rows)
    assert rows[0]["full_match"] and rows[1]["extracted"] is True and rows[0]["extracted"] is None
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["config"]["mode"] == "mixed" and summary["config"]["seed"] == 3
    assert summary["input"]["format"] == "lm-eval-samples" and summary["extraction_rate"] == 1.0


def test_cli_errors(tmp_path, capsys, synthetic_index, tiny, gpt2_dir):
    good = write_jsonl(tmp_path / "g.jsonl", [{"completion": "The council"}])
    common = ["--out", tmp_path / "r.jsonl", "--summary", tmp_path / "s.json"]
    code, _, err = run_cli(capsys, "--index", tmp_path / "nowhere", "--input", good, *common)
    assert code == 3 and "does not exist" in err
    wrong = write_jsonl(tmp_path / "w.jsonl", [{"prompt": "a", "output": "b"}])
    code, _, err = run_cli(capsys, "--index", synthetic_index, "--input", wrong, *common)
    assert code == 2 and "'completion'" in err and "'prompt'" in err and "'output'" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    code, _, err = run_cli(capsys, "--index", synthetic_index, "--input", empty, *common)
    assert code == 2 and "empty" in err
    code, _, err = run_cli(capsys, "--index", synthetic_index, "--input", tmp_path / "missing.jsonl", *common)
    assert code == 2 and "does not exist" in err
    # a tokenizer that differs from the index's (one vocabulary entry renamed)
    other = altered_copy(tiny[2], tmp_path / "other")
    code, _, err = run_cli(capsys, "--index", synthetic_index, "--input", good, "--tokenizer",
                           other / "propme-tokenizer", *common)
    assert code == 3 and "is not the index's tokenizer" in err
    code, _, err = run_cli(capsys, "--index", synthetic_index, "--input", good, "--tokenizer", gpt2_dir, *common)
    assert code == 0, err
    code, _, err = run_cli(capsys, "--index", other, "--input", good, *common)
    assert code == 3 and "altered" in err
    code, _, err = run_cli(capsys, "--index", synthetic_index, "--input", good, "--workers", "0", *common)
    assert code == 2


def test_cli_error_is_a_message_not_a_traceback(tmp_path):
    good = write_jsonl(tmp_path / "g.jsonl", [{"completion": "x"}])
    proc = subprocess.run([sys.executable, "-m", "propme_metrics.cli", "trace", "--index", str(tmp_path / "none"),
                           "--input", str(good), "--out", str(tmp_path / "r"), "--summary", str(tmp_path / "s")],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr and "error:" in proc.stderr


# -- a SentencePiece-style tokenizer (words start with '▁'; decoding strips a leading space) ------------

@pytest.fixture(scope="module")
def sp(tmp_path_factory, synthetic_records):
    """An index built with a small '▁' BPE trained here (as Llama-2's pieces: the non-byte-level path)."""
    from tokenizers import SentencePieceBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from tokenizers import pre_tokenizers

    root = tmp_path_factory.mktemp("sentencepiece")
    bpe = SentencePieceBPETokenizer()
    # like Llama-2's SentencePiece model, keep punctuation apart from words ('joy' '?', not 'joy?'):
    # sentence delimiters are tokens made only of delimiter characters
    bpe._tokenizer.pre_tokenizer = pre_tokenizers.Sequence([bpe._tokenizer.pre_tokenizer,
                                                            pre_tokenizers.Punctuation()])
    bpe.train_from_iterator([r["text"] for r in synthetic_records], vocab_size=1200, min_frequency=2,
                            special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(root / "tok")
    make_index(write_jsonl(root / "c.jsonl", synthetic_records), root / "index", root / "tok")
    tr = Tracer(root / "index")
    docs = [bpe.encode(r["text"]).ids for r in synthetic_records]
    return tr, Oracle(docs, tr.index.word_start_ids, frozenset(tr.index.manifest.delimiter_ids)), bpe


def test_sentencepiece_tokenizer(sp, synthetic_records):
    tr, orc, bpe = sp
    assert tr.index.manifest.tokenizer.family == "sentencepiece" and not tr._split_decode
    rec, text = first_paragraph(synthetic_records, "en")
    r = tr.trace_one(text, "sp")
    assert r.full_match and doc_of(r, rec).nv_recall == 1.0
    assert r.longest_span == max(len(bpe.encode(s).ids) for s in re.split(r"(?<=[.!?]) ", text))
    for d in r.documents:
        a, b = d.snippet_span
        assert d.snippet[a:b].strip() == r.spans[d.span].text.strip()
    rng = np.random.default_rng(0)
    for _ in range(20):
        doc = orc.flat[: orc.size]
        a = int(rng.integers(0, orc.size - 30))
        q = [int(t) if t >= 0 else 3 for t in doc[a:a + 25]] + [int(t) for t in rng.integers(3, 1200, 5)]
        assert tr.maximal_spans(q) == orc.spans(q)


def test_window_decoding_paths_agree(tracer, synthetic_records):
    texts = [r["text"][50:700] for r in synthetic_records[20:26]]
    split = [r.to_dict() for r in tracer.trace(texts)]
    tracer._split_decode = False
    try:
        whole = [r.to_dict() for r in tracer.trace(texts)]
    finally:
        tracer._split_decode = True
    assert split == whole


def test_too_long_generation_is_reported_not_traced(synthetic_index):
    """A generation over max_tokens is a failure with its reason, never a silent zero."""
    tracer = Tracer(synthetic_index, TraceConfig(max_tokens=30))
    long_text = " ".join(["the council decided on the new bridge yesterday."] * 10)
    short, too_long = tracer.trace(["the council decided", long_text])
    assert short.error is None
    assert too_long.error is not None and "max_tokens=30" in too_long.error
    assert too_long.text == long_text and not too_long.documents
    from propme_metrics.metrics import summarize

    summary = summarize([short, too_long])
    assert summary.n_failed == 1 and summary.n_counted == 1
