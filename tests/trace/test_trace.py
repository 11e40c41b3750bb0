"""SimpleTrace against independent expectations: a brute-force oracle for the suffix-array search,
infini-gram's engine for counts, ranges and windows, and a plain re-statement of the published
tracer (tests/support/reference_trace.py) for spans, merging, documents, classes and NV-recall."""
from __future__ import annotations

import json
import math
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from propme.cli.app import main
from propme_metrics.core.errors import IndexFormatError
from propme_metrics.index.search import Occurrences
from propme_metrics.runs.generations import read_generations
from propme_metrics.trace.result import TraceConfig, TracedDocument, TraceResult
from propme_metrics.trace.tracer import Tracer, evenly_spaced, select_occurrences
from support.corpora import make_index, write_jsonl
from support.reference_trace import BruteForce, ReferenceTracer

HYPO = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


# -- the oracle ---------------------------------------------------------------------------------

class Oracle(BruteForce):
    """Brute force over the documents' own tokenizations: matches never cross a document boundary."""

    def __init__(self, docs: list[list[int]], pad: int = 512):
        super().__init__(docs, pad)


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
    return Oracle(corpus_ids)


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
    return tr, Oracle(docs), root / "index"


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
        assert tracer.index.document(global_ix).token_ids.tolist() == corpus_ids[doc_ix]


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


def reference(tr: Tracer, docs: list[list[int]], mode: str, **kw) -> ReferenceTracer:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tr.index.path / "propme-tokenizer" / "tokenizer.json"))
    return ReferenceTracer(tr.index.engine, tok, BruteForce(docs), {i for i, b in enumerate(tr._word_initial) if b}, dict(enumerate(tr.index.unigram_table.tolist())),
                           tr.index.total_positions, mode=mode, **kw)


def as_reference(r: TraceResult) -> list[tuple[int, int, list[tuple]]]:
    return [(s.start, s.end, [(d.doc_ix, d.match, d.nv_recall, d.nv_matched_words) for d in s.documents])
            for s in r.final_spans]


def reference_view(finals) -> list[tuple[int, int, list[tuple]]]:
    return [(s, e, [(d["doc_ix"], d["tier"], d["nv"], d["matched"]) for d in docs]) for s, e, docs in finals]


@HYPO
@given(data=st.data())
def test_longest_matches_match_oracle(tracer, oracle, corpus_ids, data):
    q = data.draw(queries(corpus_ids))
    ends = tracer.search.longest_matches(q).tolist()
    assert ends == [i + oracle.longest(q, i) for i in range(len(q))]
    assert [e for _, e in tracer.step1_spans(q)] == ends[: max(0, len(q) - 1)]


@HYPO
@given(data=st.data())
def test_span_counts_match_oracle_and_engine(tracer, oracle, corpus_ids, data):
    q = data.draw(queries(corpus_ids))
    spans = [(s, e) for s, e in tracer.step1_spans(q) if e > s]
    for (s, e), occ in zip(spans, tracer.search.locate(q, spans)):
        assert occ.count == oracle.count(q[s:e]) > 0
        found = tracer.index.engine.find(input_ids=q[s:e])
        assert occ.count == found["cnt"]
        assert occ.segment_by_shard == [tuple(x) for x in found["segment_by_shard"]]
    # absent sequences count 0 (and their empty ranges sit where the engine puts them)
    absent = q + [50256, 50256]
    assert tracer.search.count(absent) == oracle.count(absent) == 0


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
    x = min((t for t in tr.index.word_starts.tolist() if orc.count([t]) == 0), key=lambda t: le_bytes([t], w))
    hits = 0
    for j in range(1, len(s0)):
        if not le_bytes([x], w) < le_bytes([s0[j]], w):
            continue
        q = s0[:j] + [x] + s0[j:j + 3]
        assert le_bytes(q, w) < suffixes[0], "the query must sort before every suffix"
        longest = orc.longest(q, 0)
        assert longest >= j
        assert int(tr.search.longest_matches(q)[0]) == longest
        hits += longest > 0
    assert hits >= 3


@HYPO
@given(data=st.data())
def test_queries_starting_with_the_smallest_token(tiny_any, data):
    tr, orc, _ = tiny_any
    present = sorted({int(t) for t in orc.flat if t >= 0}, key=lambda t: le_bytes([t], tr.index.token_width))
    first = data.draw(st.sampled_from([present[0], min(present)]))  # first in byte order, smallest id
    q = [first] + data.draw(st.lists(st.sampled_from(present + [256, 512, 2048]), min_size=0, max_size=12))
    assert tr.search.longest_matches(q).tolist() == [i + orc.longest(q, i) for i in range(len(q))]
    spans = [(s, e) for s, e in tr.step1_spans(q) if e > s]
    assert [o.count for o in tr.search.locate(q, spans)] == [orc.count(q[a:b]) for a, b in spans]


def test_tiny_indexes_end_to_end(tiny_any):
    tr, _, _ = tiny_any
    r = tr.trace_one(TINY_DOCS[1], "t1")
    assert r.full_match and r.longest_span == r.n_tokens
    assert {d.source_id for d in r.documents} >= {"t1"}
    assert next(d for d in r.documents if d.source_id == "t1").nv_recall == 1.0
    ids = tr.index.encode(" although")
    occ = tr.search.locate(ids, [(0, 1)])[0]
    assert occ.count == 2 == tr.index.count(ids)
    picks = [(0, r) for r in range(*occ.segment_by_shard[0])]
    ours = tr.search.windows(picks, 5)
    theirs = [tr.index.engine.get_doc_by_rank(s=0, rank=r, max_disp_len=5) for _, r in picks]
    assert [(w.doc_ix, w.needle_offset, w.token_ids.tolist()) for w in ours] == \
           [(d["doc_ix"], d["needle_offset"], list(d["token_ids"])) for d in theirs]


@pytest.mark.parametrize("max_disp_len", [1, 4, 7, 20, 21, 35, 1280])
def test_windows_are_the_engines(tracer, max_disp_len):
    """Windows equal the engine's get_doc_by_rank(s, rank, max_disp_len=5L), odd lengths included."""
    rng = random.Random(max_disp_len)
    for s, shard in enumerate(tracer.search.shards):
        ranks = [rng.randrange(shard.n) for _ in range(60)]
        pos = shard.ranks_to_token_pos(np.asarray(ranks))
        ranks = [r for r, p in zip(ranks, pos) if shard.ds[p] != tracer.index.separator]  # occurrences of tokens
        ours = tracer.search.windows([(s, r) for r in ranks], max_disp_len)
        for r, a in zip(ranks, ours):
            b = tracer.index.engine.get_doc_by_rank(s=s, rank=r, max_disp_len=max_disp_len)
            assert (a.doc_ix, a.doc_len, a.needle_offset, a.token_ids.tolist(), a.metadata) == \
                   (b["doc_ix"], b["doc_len"], b["needle_offset"], list(b["token_ids"]), b["metadata"])
            assert a.shard == tracer.index.engine_shards[s]


def test_window_vector_of_the_spec(tiny):
    """The worked example of docs/method.md (windows): an occurrence at token 7 of a 30-token document, L = 4: the window is tokens [0, 17)."""
    tr, _, _ = tiny
    shard = tr.search.shards[0]
    doc = next(i for i in range(len(shard.offsets)) if shard.offsets[i] // 2 + 1 + 30 <= shard.n)
    start = int(shard.offsets[doc]) // 2 + 1
    rank = int(np.flatnonzero(shard.ranks_to_token_pos(np.arange(shard.n)) == start + 7)[0])
    win = shard.windows([rank], 5 * 4)[0]
    assert win.needle_offset == 7 and win.token_ids.tolist() == shard.ds[start:start + 17].tolist()


# -- the whole tracer against the reference (published rules written out plainly) --------------------

#: white space a completion may begin or end with (lm-eval completions nearly always begin with some)
OUTER_WHITE_SPACE = ["", "", " ", "\n", "\n\n", "  ", " \n", "\n\n\n"]


@st.composite
def generations(draw, records):
    """Copies, near copies (a word replaced), concatenations and word salads of corpus text, as a
    model writes them: often after a leading space or newline, sometimes before trailing ones."""
    rec = records[draw(st.integers(0, len(records) - 1))]["text"]
    kind = draw(st.sampled_from(["copy", "edited", "joined", "salad", "tail", "passage"]))
    if kind == "passage":  # from the middle of a document, with the white space it follows there
        starts = [i for i in range(1, len(rec)) if rec[i - 1].isspace() and not rec[i].isspace()]
        a = draw(st.sampled_from(starts))
        a -= 2 if rec[a - 2:a] == "\n\n" else 1
        return rec[a:a + draw(st.integers(20, 500))]
    a = draw(st.integers(0, max(0, len(rec) - 80)))
    piece = rec[a:a + draw(st.integers(20, 500))]
    if kind == "edited":
        words = piece.split(" ")
        for _ in range(draw(st.integers(1, 4))):
            words[draw(st.integers(0, len(words) - 1))] = draw(st.sampled_from(["Zorblax", "og", "the", "XYZ."]))
        piece = " ".join(words)
    elif kind == "joined":
        other = records[draw(st.integers(0, len(records) - 1))]["text"]
        b = draw(st.integers(0, max(0, len(other) - 80)))
        piece = piece + " " + other[b:b + draw(st.integers(20, 300))]
    elif kind == "salad":
        words = [w for r in records[:20] for w in r["text"].split()]
        piece = " ".join(draw(st.lists(st.sampled_from(words), min_size=3, max_size=60)))
    elif kind == "tail":
        piece = piece + draw(st.sampled_from(["\n\n", "\n", " .", "!!"]))
    return draw(st.sampled_from(OUTER_WHITE_SPACE)) + piece + draw(st.sampled_from(OUTER_WHITE_SPACE))


@pytest.mark.parametrize("mode", ["mixed", "text"])
def test_tracer_equals_the_reference(synthetic_index, synthetic_records, corpus_ids, mode):
    tr = Tracer(synthetic_index, TraceConfig(mode=mode))
    ref = reference(tr, corpus_ids, mode)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(generations(synthetic_records))
    def check(g):
        assert as_reference(tr.trace_one(g, "x")) == reference_view(ref.trace(g))

    check()


def test_tracer_equals_the_reference_on_copies(synthetic_index, synthetic_records, corpus_ids):
    """Whole documents, copies whose end tokenizes differently (a trailing blank line), and copies
    with outer white space. Documents of at most 1,200 characters: in text mode the reference decodes
    every end of every span, so its time grows with the cube of a copy's length."""
    records = [r for r in synthetic_records if len(r["text"]) <= 1200][:6]
    for mode in ("mixed", "text"):
        tr = Tracer(synthetic_index, TraceConfig(mode=mode))
        ref = reference(tr, corpus_ids, mode)
        for rec in records:
            for g in (rec["text"], rec["text"][:600] + "\n\n", rec["text"][37:900], " " + rec["text"][:300],
                      "\n\n" + rec["text"][:300] + " "):
                assert as_reference(tr.trace_one(g, "x")) == reference_view(ref.trace(g))


def test_a_loop_fetches_each_window_once_and_equals_the_reference(synthetic_index, synthetic_records, corpus_ids,
                                                                  monkeypatch):
    """A model loop (one corpus sentence again and again) asks for the same occurrences of the same
    tokens over and over: each distinct request is fetched once, and the trace is the reference's."""
    from propme_metrics.trace import tracer as tracer_module

    tr = Tracer(synthetic_index)
    ref = reference(tr, corpus_ids, "mixed")
    sentence = next(s for r in synthetic_records for s in r["text"].split(". ") if len(s.split()) >= 8)
    g = " " + ". ".join([sentence] * 10) + "."
    tr.warm()
    real_windows, real_fetch = tr.search.windows, tracer_module._Context.fetch
    fetched, asked = [], []
    monkeypatch.setattr(tr.search, "windows", lambda picks, n: fetched.append((tuple(picks), n)) or
                        real_windows(picks, n))
    monkeypatch.setattr(tracer_module._Context, "fetch", lambda self, picks, needle: asked.append(1) or
                        real_fetch(self, picks, needle))
    got = tr.trace_one(g, "x")
    assert as_reference(got) == reference_view(ref.trace(g))
    assert len(asked) > len(fetched) > 0          # requests repeat in a loop ...
    assert len(fetched) == len(set(fetched))      # ... and none was fetched twice


@pytest.mark.parametrize("mode", ["text", "mixed"])
def test_merging_needs_the_union_to_occur(synthetic_index, oracle, synthetic_records, mode):
    """Kept spans that overlap merge only when their union occurs; no final span is absent from the corpus.
    (In mixed mode two overlapping maximal spans never have an occurring union: the first would have
    been longer; in text mode sentence cuts make such unions common.)"""
    tracer = Tracer(synthetic_index, TraceConfig(mode=mode, span_divisor=4))
    texts = [" ".join(r["text"].split()[i:i + 40]) for i, r in enumerate(synthetic_records[:30])]
    salad = [" ".join(random.Random(i).sample(t.split(), len(t.split()))) for i, t in enumerate(texts)]
    merged = 0
    for g in texts + salad:
        r = tracer.trace_one(g, "m")
        ids = tracer.index.encode(r.text)
        for s in r.final_spans:
            if s.count:
                assert oracle.count(ids[s.start:s.end]) == s.count > 0
        kept = [sp for sp in r.spans if sp.kept]
        merged += sum(1 for s in r.final_spans if s.count and not any((k.start, k.end) == (s.start, s.end) for k in kept))
    # maximal spans seldom overlap with an occurring union (the first would have been longer)
    assert merged == 0


def test_final_spans_merge_verified_unions_only(tracer, synthetic_records):
    """Steps 3-4 on hand-picked kept spans: (0,5)+(3,8) of a copy merge (their union occurs; documents
    retrieved afresh); two overlapping corpus spans of a word salad whose union the corpus never saw
    stay apart."""
    from propme_metrics.trace.tracer import _Context

    copy = tracer.index.encode(synthetic_records[5]["text"][:200])[:8]
    words = [w for r in synthetic_records[:10] for w in r["text"].split()]
    salad = tracer.index.encode(" " + " ".join(random.Random(3).sample(words, 60)))
    ids = copy + salad
    spans = [sp for sp in tracer.step1_spans(ids) if sp[0] >= 8 and sp[1] - sp[0] >= 2]
    x, y = next((p, q) for p, q in zip(spans, spans[1:]) if p[0] < q[0] < p[1] < q[1])
    assert tracer.search.count(ids[0:8]) > 0 and tracer.search.count(ids[x[0]:y[1]]) == 0
    kept = [(0, 5), (3, 8), x, y]
    ctx = _Context(tracer, tracer._decode(ids), ids)
    finals = ctx.final_spans(kept, tracer.search.locate(ids, kept), {})
    assert [(f.start, f.end) for f in finals] == [(0, 8), x, y]
    assert all(tracer.search.count(ids[f.start:f.end]) == f.count > 0 for f in finals)
    assert all(len(f.documents) <= 10 for f in finals)
    # with step 1's longest matches, a union reaching past the longest match from its start is not
    # searched at all, and the final spans stay the same
    longest = dict(tracer.step1_spans(ids))
    assert y[1] > longest[x[0]]
    searched = []
    locate = tracer.search.locate
    tracer.search.locate = lambda ids_, spans: searched.extend(spans) or locate(ids_, spans)
    try:
        again = _Context(tracer, tracer._decode(ids), ids).final_spans(kept, locate(ids, kept), longest)
    finally:
        del tracer.search.locate
    assert [(f.start, f.end, f.count) for f in again] == [(f.start, f.end, f.count) for f in finals]
    assert (x[0], y[1]) not in searched and (0, 8) in searched


def test_documents_are_deduplicated_per_span(planted_index):
    """One document may serve several final spans: it counts once per span, never twice in one."""
    tr = Tracer(planted_index, TraceConfig(mode="text", docs_per_span=40))
    r = tr.trace_one(PLANTED + " Done 3. Something new entirely here and", "d")
    for s in r.final_spans:
        keys = [(d.shard, d.doc_ix) for d in s.documents]
        assert len(keys) == len(set(keys))
    per_doc = {}
    for s in r.final_spans:
        for d in s.documents:
            per_doc[d.doc_ix] = per_doc.get(d.doc_ix, 0) + 1
    assert max(per_doc.values()) >= 2  # a document retrieved by two spans is an entry of each


def test_anchors_find_a_copy_whose_end_tokenizes_differently(tmp_path, gpt2_dir):
    """A copy cut inside a word: its last tokens differ from the document's, so its own tokenization
    does not occur, yet its text is in the document; mixed mode finds the full copy through anchors."""
    body = ("The harbour master of Skagen wrote in his ledger that the schooner Dorothea arrived "
            "before dawn, her hold full of salted herring and her crew exhausted after the storm.")
    docs = [{"id": "target", "text": body + "\n\nAfter that the crew rested for two days."},
            {"id": "other", "text": "Completely unrelated text about mountain goats and their diet."}]
    make_index(write_jsonl(tmp_path / "c.jsonl", docs), tmp_path / "idx", gpt2_dir, cpus=1)
    tr = Tracer(tmp_path / "idx")
    g = body[:body.index("exhausted") + 5]
    assert tr.search.count(tr.index.encode(g)) == 0, "the generation's own tokenization must not occur"
    r = tr.trace_one(g, "anchor")
    assert (r.final_spans[0].start, r.final_spans[0].end, r.final_spans[0].count) == (0, r.n_tokens, 0)
    assert r.full_match and r.final_spans[0].documents[0].source_id == "target"
    assert r.longest_span == r.n_tokens
    assert Tracer(tmp_path / "idx", TraceConfig(mode="text")).trace_one(g, "a").longest_span < r.n_tokens


def test_blank_completions_have_no_spans(tracer, synthetic_records):
    """Empty or white space only: no spans, no documents, no full match, and still a generation."""
    from propme_metrics.metrics.values import summarize

    blanks = ("", "\n", "   \n\n  ", "\t", " ", "\n\n")
    assert tracer.search.count(tracer.index.encode("\n")) > 0  # the published tracer would find "\n" whole
    for text in blanks:
        r = tracer.trace_one(text, "blank")
        assert (r.n_tokens, r.spans, r.final_spans, r.documents, r.longest_span, r.error) == (0, [], [], [], 0, None)
        assert not r.full_match and not r.full_match_normalized and not r.degenerate and r.text == text
    assert tracer.search.longest_matches([]).tolist() == [] and tracer.step1_spans([]) == []
    _, text = first_paragraph(synthetic_records, "en")
    copy = tracer.trace_one(text, "copy")
    summary = summarize([copy] + [tracer.trace_one(t, "blank") for t in blanks])
    assert summary.n_generations == summary.n_counted == 1 + len(blanks)
    assert summary.fmr == pytest.approx(1 / 7) and summary.als == pytest.approx(copy.n_tokens / 7)


def test_extraction_ignores_outer_white_space(tracer):
    """Discoverable extraction compares the continuation with the generation as written: the space
    or newline a completion begins with (or the continuation's decoding drops) never decides it."""
    from propme_metrics.prompts.prompt_set import build_prompt_set

    records = build_prompt_set(tracer.index, "prefix", n=5, seed=42).records
    for rec in records:
        ids = tracer.index.document(rec.source_doc["doc_ix"]).token_ids.tolist()
        assert rec.prompt == tracer.index.decode(ids[:50])
        # what follows the prompt in the document, as a model that reproduced it writes it
        follows = tracer.index.decode(ids[:100])[len(rec.prompt):]
        assert follows.strip() and follows.split() == rec.continuation.split()
        for g in (follows, " " + follows.lstrip(), "\n\n" + follows.lstrip(), follows.lstrip() + " and on.\n"):
            assert tracer.trace_one(g, "x", continuation=rec.continuation).extracted is True, repr(g[:20])
        words = follows.split()
        changed = " " + " ".join(words[:-3] + ["Zorblax"] + words[-2:])
        assert tracer.trace_one(changed, "x", continuation=rec.continuation).extracted is False
        assert tracer.trace_one("\n\n", "x", continuation=rec.continuation).extracted is False


def passage_after(tracer, records, before: str) -> tuple[dict, str]:
    """A sentence-long passage from the middle of a document that follows `before` there; after a
    space, one whose tokens without it occur nowhere (so that stripping the space would matter)."""
    for rec in records:
        for m in re.finditer(re.escape(before) + r"([A-Z][^.!?\n]{40,200}[.!?])", rec["text"]):
            if m.start() > 0 and not rec["text"][m.start() - 1].isspace() \
                    and (before != " " or tracer.search.count(tracer.index.encode(m.group(1))) == 0):
                return rec, m.group(1)
    raise AssertionError(f"no passage after {before!r}")


@pytest.mark.parametrize("before", [" ", "\n\n"], ids=["space", "blank-line"])
def test_completion_is_traced_as_given(tracer, synthetic_records, raw_tokenizer, before):
    """A passage P from the middle of a training document, after the white space it follows there:
    one final span (0, L), L counting that white space, with documents from the whole-generation
    lookup (no anchors), FMR 1, and no other final span. (Stripped, its first token would differ
    from the document's and the copy would be found only through anchors.)"""
    rec, passage = passage_after(tracer, synthetic_records, before)
    g = before + passage
    r = tracer.trace_one(g, "as-given")
    ids = raw_tokenizer.encode(g).ids
    assert r.text == g and r.n_tokens == len(ids)
    whole = tracer.search.count(ids)
    assert whole > 0, "the passage with its white space occurs as tokenized"
    assert [(s.start, s.end) for s in r.final_spans] == [(0, r.n_tokens)]
    assert r.final_spans[0].count == whole  # from the whole-generation lookup (anchored spans count 0)
    assert r.final_spans[0].text == g and r.longest_span == r.n_tokens
    assert r.full_match and doc_of(r, rec).match == "full_raw"
    from propme_metrics.metrics.values import summarize

    assert summarize([r]).fmr == 1.0
    stripped = tracer.trace_one(passage, "stripped")
    if before == " ":  # the space is part of the first token, as inside the document
        assert len(ids) == len(raw_tokenizer.encode(passage).ids) and ids[0] != raw_tokenizer.encode(passage).ids[0]
        # stripped, the passage does not occur as tokenized: it is reached only through anchors
        assert stripped.final_spans[0].count == 0 and stripped.full_match
    else:  # the blank line is two newline tokens before a word: stripped, the longest span is 2 shorter
        assert r.n_tokens - stripped.n_tokens == 2 and stripped.longest_span == r.longest_span - 2


# -- generations against documents ---------------------------------------------------------------

def first_paragraph(records, language: str, min_sentences: int = 4) -> tuple[dict, str]:
    for rec in records:
        para = rec["text"].split("\n\n")[0]
        if rec["language"] == language and len(re.findall(r"[.!?]", para)) >= min_sentences:
            return rec, para
    raise AssertionError("no suitable document")


def doc_of(result: TraceResult, rec: dict) -> TracedDocument:
    return next(d for d in result.documents if d.source_id == rec["id"])


def test_verbatim_copy_text_mode(synthetic_index, synthetic_records, raw_tokenizer):
    tracer = Tracer(synthetic_index, TraceConfig(mode="text"))
    rec, text = first_paragraph(synthetic_records, "en")
    r = tracer.trace_one(text, "copy")
    assert r.full_match and not r.full_match_normalized
    assert doc_of(r, rec).nv_recall == 1.0 and doc_of(r, rec).match == "full_raw"
    sentences = re.split(r"(?<=[.!?]) ", text)
    expected = max(len(raw_tokenizer.encode(s if i == 0 else " " + s).ids) for i, s in enumerate(sentences))
    assert r.longest_span == expected < r.n_tokens
    assert r.error is None and not r.degenerate


def test_verbatim_copy_mixed_mode(tracer, synthetic_records):
    rec, text = first_paragraph(synthetic_records, "en")
    r = tracer.trace_one(text, "copy")
    assert r.longest_span == r.n_tokens
    assert [(s.start, s.end, s.kept) for s in r.spans] == [(0, r.n_tokens, True)]
    assert [(s.start, s.end) for s in r.final_spans] == [(0, r.n_tokens)]
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
    # a newline replaced by a space is not white-space normalization (spaces around newlines go,
    # newlines stay), so that copy is a partial match, though its NV-recall stays high
    r3 = tracer.trace_one(rec2["text"].replace("\n\n", " ", 1), "flat")
    assert not r3.full_match_normalized and doc_of(r3, rec2).nv_recall > 0.9
    # text mode has no normalized class
    assert not Tracer(tracer.index, TraceConfig(mode="text")).trace_one(spaced, "s").full_match_normalized


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
    assert any(re.search("[æøå]", s.text) for s in r.final_spans)


# -- steps 2 and 3 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n,k", [(20, 1), (21, 2), (100, 5), (160, 8), (256, 13), (0, 1), (1, 1)])
def test_k_vectors(n, k):
    assert TraceConfig().k(n) == k


def test_config_checks():
    for bad in ({"mode": "code"}, {"docs_per_span": 0}, {"window_factor": True}, {"max_tokens": 1.5},
                {"rarity": "max"}, {"seed": -1}, {"span_divisor": float("nan")}):
        with pytest.raises(ValueError):
            TraceConfig(**bad)
    assert TraceConfig(span_divisor=10).k(21) == 3
    assert TraceConfig().mode == "mixed" and TraceConfig().seed == 42
    assert set(TraceConfig().to_dict()) >= {"mode", "span_divisor", "docs_per_span", "window_factor", "seed"}


def test_rarity_filter_keeps_the_rarest(synthetic_records, synthetic_index):
    tracer = Tracer(synthetic_index, TraceConfig(mode="text"))
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
    # the published product ranks the same wherever it does not underflow
    prod = Tracer(synthetic_index, TraceConfig(mode="text", rarity="product")).trace_one(text, "rare")
    assert [s.kept for s in prod.spans] == [s.kept for s in r.spans]
    assert all(p.rarity == pytest.approx(math.exp(s.rarity), rel=1e-9) for p, s in zip(prod.spans, r.spans))


def test_rarity_ties_keep_positional_order(synthetic_index, synthetic_records):
    # a sentence that follows a space in its document, so that " S S" consists of two identical spans
    sentence = next(m.group(1) for r in synthetic_records for m in re.finditer(r"(?<=[.!?]) ([A-Z][^.!?\n]*[.!?])", r["text"]))
    g = f"{sentence} {sentence} {sentence}"  # the copies after the first are identical spans
    r = Tracer(synthetic_index, TraceConfig(mode="text", span_divisor=10_000)).trace_one(g, "tie")
    twins = [s for s in r.spans if s.text == " " + sentence]
    assert len(twins) == 2 and twins[0].rarity == twins[1].rarity == min(s.rarity for s in r.spans)
    assert [s.kept for s in twins] == [True, False]


def test_evenly_spaced_picks():
    assert evenly_spaced(10, 1) == [5]
    assert evenly_spaced(10, 3) == [0, 4, 9]  # round(4.5) = 4: half to even, as Python rounds
    assert evenly_spaced(5, 5) == [0, 1, 2, 3, 4] and evenly_spaced(3, 10) == [0, 1, 2]
    assert evenly_spaced(11, 4) == [0, 3, 7, 10]


def test_sampling_is_the_published_rng():
    """Occurrences beyond docs_per_span: random.Random(f"{seed}:{g}").sample over (shard, rank) order."""
    occ = Occurrences(25 + 40, [(3, 28), (100, 140)])
    g = "some generation"
    rng = random.Random(f"42:{g}")
    flat = [(0, r) for r in range(3, 28)] + [(1, r) for r in range(100, 140)]
    expected = random.Random(f"42:{g}").sample(flat, 10)
    assert select_occurrences(occ, 10, rng) == expected
    assert select_occurrences(Occurrences(3, [(0, 2), (5, 6)]), 10, rng) == [(0, 0), (0, 1), (1, 5)]
    assert random.Random("42:" + g).sample(range(1000), 10) == random.Random("42:" + g).sample(range(1000), 10)


PLANTED = " Quorble flimflam zixaply grundelwort."


@pytest.fixture(scope="module")
def planted_index(tmp_path_factory, gpt2_dir, synthetic_records):
    root = tmp_path_factory.mktemp("planted")
    recs = [{"id": f"p{i}", "text": f"{synthetic_records[i]['text'][:120]}{PLANTED} Done {i}."} for i in range(30)]
    recs += [{"id": f"q{i}", "text": synthetic_records[40 + i]["text"]} for i in range(10)]
    make_index(write_jsonl(root / "c.jsonl", recs), root / "index", gpt2_dir)
    return root / "index"


def test_document_sample_is_seeded(planted_index):
    tr = Tracer(planted_index, TraceConfig(mode="text"))
    g = PLANTED.strip()
    r1 = tr.trace_one(g, "g")
    assert len(r1.final_spans) == 1
    picked = [d.doc_ix for d in r1.documents]
    assert len(picked) == len(set(picked)) == 10
    assert all(d.source_id.startswith("p") for d in r1.documents)
    assert [d.doc_ix for d in Tracer(planted_index, TraceConfig(mode="text")).trace_one(g, "other key").documents] == picked
    other = [d.doc_ix for d in Tracer(planted_index, TraceConfig(mode="text", seed=1)).trace_one(g, "g").documents]
    assert len(other) == 10 and set(other) != set(picked)
    assert len(Tracer(planted_index, TraceConfig(mode="text", docs_per_span=40)).trace_one(g, "g").documents) == 30
    # mixed mode: g starts without the space it follows in the documents, so its tokens do not occur
    # as such: the full-generation span comes from anchors (at most docs_per_span full matches)
    m = Tracer(planted_index).trace_one(g, "g")
    assert (m.final_spans[0].start, m.final_spans[0].end, m.final_spans[0].count) == (0, m.n_tokens, 0)
    assert 0 < len(m.final_spans[0].documents) <= 10
    assert all(d.match == "full_raw" for d in m.final_spans[0].documents)
    # a generation whose tokens occur: evenly spaced full-span windows first, then the (0, L) span's
    # sampled ones, de-duplicated by (source id, class, window)
    ids = tr.index.encode(g)
    w = Tracer(planted_index).trace_one(tr._decode(ids[1:]), "w")
    assert [(s.start, s.end) for s in w.final_spans] == [(0, w.n_tokens)] and w.final_spans[0].count == 30
    assert 10 < len(w.documents) <= 20 and all(d.match == "full_raw" for d in w.documents)


def test_snippet_shows_the_span(planted_index):
    r = Tracer(planted_index, TraceConfig(mode="text")).trace_one(PLANTED, "g")
    for s in r.final_spans:
        for d in s.documents:
            a, b = d.snippet_span
            assert d.snippet[a:b] == s.text
            assert d.metadata["id"] == d.source_id


def _worker_texts(synthetic_records) -> list[str]:
    texts = [r["text"][i * 7:i * 7 + 300] for i, r in enumerate(synthetic_records[:18])]
    return texts + ["Zorblax quintessa flumphed the grindlewort.", ""]


class _Clock:
    """A stand-in for the tracer module's `time`: perf_counter advances `step` seconds a call."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now

    time = staticmethod(__import__("time").time)


@pytest.mark.parametrize("split", ["all to workers", "probe then workers", "probe then here", "all here"])
def test_results_identical_for_any_worker_count_and_split(tracer, synthetic_records, monkeypatch, split):
    """With workers, the first generations are traced in the parent (the probe) and the rest by
    forked workers only when that pays; every split gives the bytes of one process."""
    import propme_metrics.trace.tracer as tracer_module

    texts = _worker_texts(synthetic_records)
    keys = [f"k{i}" for i in range(len(texts))]
    one = [r.json_bytes() for r in tracer.trace(texts, keys, workers=1)]
    # the clock advances 0.05 s a reading: the probe (0.2 s) traces 3 generations, unless it is 0
    monkeypatch.setattr(tracer_module, "time", _Clock(0.05 if split != "all here" else 1e-6))
    monkeypatch.setattr(tracer_module, "PROBE_SECONDS", 0.0 if split == "all to workers" else 0.2)
    monkeypatch.setattr(tracer_module, "WORKERS_PAY_AFTER", 1e9 if split == "probe then here" else 0.0)
    with tracer.runner(texts, keys, workers=2) as runner:
        two = [r.json_bytes() for r in runner]
        probed, forked = len(runner.probed), runner.pool is not None
    assert (probed, forked) == {"all to workers": (0, True), "probe then workers": (3, True),
                                "probe then here": (3, False), "all here": (len(texts), False)}[split]
    assert one == two
    assert all(b'"error":null' in line.replace(b" ", b"") for line in one)


def test_a_tracer_builds_its_search_and_byte_table_only_for_text(synthetic_index, monkeypatch):
    """Empty generations need no search, no byte table and no word starts; the first one with text
    builds them all (outside the per-generation error handling: a broken index raises)."""
    t = Tracer(synthetic_index)
    lazy = ("search", "_decoder", "_word_initial")
    assert [r.n_tokens for r in t.trace(["", "  ", "\n"])] == [0, 0, 0]
    assert not any(name in vars(t) for name in lazy)
    (r,) = t.trace([" kommunen besluttede"])
    assert r.error is None and r.n_tokens > 0 and all(name in vars(t) for name in lazy)
    monkeypatch.setattr(Tracer, "search", property(lambda self: 1 / 0))  # opening the shards fails
    with pytest.raises(ZeroDivisionError):
        Tracer(synthetic_index).trace(["some text"])


def test_failures_are_recorded_not_raised(tracer, monkeypatch):
    monkeypatch.setattr(tracer.search, "locate", lambda ids, spans: 1 / 0)
    r = tracer.trace(["some text"], ["x"])[0]
    assert r.error.startswith("ZeroDivisionError") and r.final_spans == []


def test_to_dict_round_trip(tracer, synthetic_records):
    r = tracer.trace_one(synthetic_records[3]["text"][:400], "rt", continuation="nothing like it")
    d = r.to_dict()
    assert TraceResult.from_dict(json.loads(json.dumps(d))).to_dict() == d
    assert d["extracted"] is False and {"key", "text", "n_tokens", "longest_span", "full_match", "mode",
                                        "full_match_normalized", "spans", "final_spans"} <= set(d)
    doc = d["final_spans"][0]["documents"][0]
    assert {"shard", "doc_ix", "source_id", "metadata", "match", "nv_recall", "nv_matched_words",
            "nv_reference_words", "nv_candidate_words"} <= set(doc)


def test_json_bytes_is_to_dict(tracer, synthetic_records):
    """The JSONL line (orjson over the dataclasses, UTF-8 bytes) parses to `to_dict()` with the extra
    keys after it, also when orjson refuses a value: an integer beyond 64 bits or a lone surrogate
    (the standard library writes them; the surrogate as its JSON escape, so the line stays UTF-8)."""
    texts = [synthetic_records[i]["text"][:300] for i in range(4)] + ["Zorblax quintessa flumph.", "   "]
    for r in tracer.trace(texts):
        line = r.json_bytes(pii={"leaked": []})
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert json.loads(line) == json.loads(json.dumps({**r.to_dict(), "pii": {"leaked": []}}))
        assert list(json.loads(line)) == [*r.to_dict(), "pii"]
    r = tracer.trace_one(synthetic_records[3]["text"][:300], "big")
    r.final_spans[0].documents[0].metadata["n"] = 2**70
    assert json.loads(r.json_bytes())["final_spans"][0]["documents"][0]["metadata"]["n"] == 2**70
    assert json.loads(r.json_bytes()) == json.loads(json.dumps(r.to_dict()))
    r.final_spans[0].documents[0].metadata["n"] = "cut \ud800 here"
    line = r.json_bytes()
    line.decode("utf-8")  # valid UTF-8
    assert json.loads(line)["final_spans"][0]["documents"][0]["metadata"]["n"] == "cut \ud800 here"


def test_json_bytes_leaves_no_utf8_copy(tracer, synthetic_records):
    """Writing a result keeps its memory as it was: orjson gives every non-ASCII string it encodes a
    cached UTF-8 copy (CPython keeps it inside the string), so the result's own texts are swapped
    for equal fresh strings; the line and the values stay the same."""
    probe = "søen ved Ålborg " * 20
    orjson.dumps(probe)
    if sys.getsizeof(probe) == sys.getsizeof("".join(("", probe))):
        pytest.skip("this Python keeps no UTF-8 copy in a string")
    text = next(r["text"][:300] for r in synthetic_records if not r["text"][:300].isascii())
    r = tracer.trace_one(text, "mem")
    owned = lambda: [s.text for s in r.spans] + [d.snippet for d in r.documents]  # noqa: E731
    assert r.documents and not all(t.isascii() for t in owned())
    sizes, values = [sys.getsizeof(t) for t in owned()], owned()
    line = r.json_bytes()
    assert [sys.getsizeof(t) for t in owned()] == sizes and owned() == values
    assert r.json_bytes() == line and r.text is text


def test_results_pickle_by_fields(tracer, synthetic_records):
    """Results cross from forked workers pickled as (class, field values): loaded back they are equal."""
    import pickle

    for r in tracer.trace([synthetic_records[i]["text"][:300] for i in range(3)] + ["Zorblax quintessa flumph."]):
        back = pickle.loads(pickle.dumps(r))
        assert back == r and back.to_dict() == r.to_dict()
        assert all(type(d) is type(e) for d, e in zip(back.documents, r.documents))


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
    assert [g[:3] for g in gens] == [("a", "x", "y"), ("1#0", "p", None), ("1#1", "q", None), ("7", "", None)]
    assert [g.missing for g in gens[:3]] == [None] * 3  # a null completion is reported failed, with why
    assert gens[3].missing == f"{path}:3: field 'completion' is null (no generation)"


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
    assert rows[0]["full_match"] and rows[2]["final_spans"] == [] and rows[3]["degenerate"]
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
    assert not any("PROMPT-MARKER" in r["text"] or "PROMPT-MARKER" in json.dumps(r["final_spans"]) for r in rows)
    assert rows[0]["full_match"] and rows[1]["extracted"] is True and rows[0]["extracted"] is None
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["config"]["mode"] == "mixed" and summary["config"]["seed"] == 3
    assert summary["input"]["format"] == "lm-eval-samples" and summary["extraction"] == 1.0


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
    proc = subprocess.run([sys.executable, "-m", "propme.cli.app", "trace", "--index", str(tmp_path / "none"),
                           "--input", str(good), "--out", str(tmp_path / "r"), "--summary", str(tmp_path / "s")],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr and "error:" in proc.stderr


# -- a SentencePiece-style tokenizer (words start with '▁'; decoding strips a leading space) ------------

@pytest.fixture(scope="module")
def sp(tmp_path_factory, synthetic_records):
    """An index built with a small '▁' BPE trained here (as Llama-2's pieces: the non-byte-level path)."""
    from tokenizers import SentencePieceBPETokenizer, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

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
    return tr, Oracle(docs), bpe, docs


def test_sentencepiece_tokenizer(sp, synthetic_records):
    tr, orc, bpe, docs = sp
    assert tr.index.manifest.tokenizer.family == "sentencepiece"
    rec, text = first_paragraph(synthetic_records, "en")
    for mode in ("mixed", "text"):
        r = Tracer(tr.index, TraceConfig(mode=mode)).trace_one(text, "sp")
        assert r.full_match and doc_of(r, rec).nv_recall == 1.0
        for s in r.final_spans:
            for d in s.documents:
                a, b = d.snippet_span
                assert d.snippet[a:b].strip() == s.text.strip()
        ref = reference(Tracer(tr.index, TraceConfig(mode=mode)), docs, mode)
        for g in (text, text[30:500], " ".join(text.split()[::-1])):
            assert as_reference(Tracer(tr.index, TraceConfig(mode=mode)).trace_one(g, "x")) == reference_view(ref.trace(g))
    rng = np.random.default_rng(0)
    for _ in range(20):
        doc = orc.flat[: orc.size]
        a = int(rng.integers(0, orc.size - 30))
        q = [int(t) if t >= 0 else 3 for t in doc[a:a + 25]] + [int(t) for t in rng.integers(3, 1200, 5)]
        assert tr.search.longest_matches(q).tolist() == [i + orc.longest(q, i) for i in range(len(q))]


def test_too_long_generation_is_reported_not_traced(synthetic_index):
    """A generation over max_tokens is a failure with its reason, never a silent zero."""
    tracer = Tracer(synthetic_index, TraceConfig(max_tokens=30))
    long_text = " ".join(["the council decided on the new bridge yesterday."] * 10)
    short, too_long = tracer.trace(["the council decided", long_text])
    assert short.error is None
    assert too_long.error is not None and "max_tokens=30" in too_long.error
    assert too_long.text == long_text and not too_long.documents and not too_long.final_spans
    from propme_metrics.metrics.values import summarize

    summary = summarize([short, too_long])
    assert summary.n_failed == 1 and summary.n_counted == 1


def test_windows_cut_inside_a_character_decode_exactly(tmp_path, gpt2_dir):
    """Multi-byte characters split over several byte-level tokens: a window whose occurrence starts
    inside a character is decoded whole (the tracer still equals the reference)."""
    docs = [{"id": f"e{i}", "text": f"Møde {i} 😀🎉 i Ærø: 東京 og København 🚲 kl. {i}. Alle kom 😀 til sidst."}
            for i in range(12)]
    make_index(write_jsonl(tmp_path / "c.jsonl", docs), tmp_path / "idx", gpt2_dir, cpus=1)
    tr = Tracer(tmp_path / "idx")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tmp_path / "idx" / "propme-tokenizer" / "tokenizer.json"))
    ref = reference(tr, [tok.encode(d["text"]).ids for d in docs], "mixed")
    for g in ("😀🎉 i Ærø: 東京 og København 🚲 kl. 3. Alle kom 😀", "🎉 i Ærø: 東京 og", docs[4]["text"][3:]):
        r = tr.trace_one(g, "emoji")
        assert as_reference(r) == reference_view(ref.trace(g))
        assert all("\ufffd" not in d.snippet for d in r.documents)


def test_journal_is_keyed_by_the_tracing_rules(monkeypatch):
    """A `propme trace` journal written under other tracing rules is never resumed."""
    from propme_metrics.trace import runner
    from propme_metrics.trace.inputs import TraceInput

    gens = [TraceInput("k", " text")]
    now = runner.job_fingerprint("digest", "index", TraceConfig().to_dict(), gens)
    monkeypatch.setattr(runner, "TRACE_RULES_VERSION", runner.TRACE_RULES_VERSION - 1)
    assert runner.job_fingerprint("digest", "index", TraceConfig().to_dict(), gens) != now


def test_each_result_is_handed_on_in_input_order_as_it_arrives_resumed_ones_too(tracer, synthetic_records, tmp_path):
    """`trace_resumable`'s `on_result` sees every result once, in input order, the journal's resumed
    results first, and they are the results it returns (what `propme trace` pools while workers trace)."""
    from propme_metrics.trace import runner
    from propme_metrics.trace.inputs import TraceInput

    gens = [TraceInput(f"k{i}", r["text"][:80]) for i, r in enumerate(synthetic_records[:7])] + [TraceInput("e", "")]
    out, fingerprint = tmp_path / "r.jsonl", runner.job_fingerprint("d", "i", TraceConfig().to_dict(), gens)
    seen: list[TraceResult] = []
    results, resumed = runner.trace_resumable(tracer, gens, out, fingerprint, workers=2, progress=False,
                                              on_result=seen.append)
    assert resumed == 0 and [r.key for r in seen] == [g.key for g in gens] and seen == results
    journal = runner.journal_path(out)
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:4]))  # the header and three results: an interrupted run
    again: list[TraceResult] = []
    rerun, resumed = runner.trace_resumable(tracer, gens, out, fingerprint, on_result=again.append)
    assert resumed == 3 and again == rerun and [r.to_dict() for r in rerun] == [r.to_dict() for r in results]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from([chr(c) for c in range(0x3001) if chr(c).isspace()]
                                        + list("ab æø.\u200b\ufeff\x00")), max_size=40))
def test_text_without_space_is_split_and_joined(text):
    """The normalized-match pre-check drops white space the quick way; it equals split-and-join on
    every Unicode white-space character (and on non-printable characters that are not white space)."""
    from propme_metrics.trace.tracer import _without_space

    assert _without_space(text) == "".join(text.split())


def test_propme_trace_loads_no_heavy_dependency(synthetic_index, synthetic_records, tmp_path):
    """A whole `propme trace` run (tokenizer, search, NV-recall, leak tables, summary) in a fresh
    interpreter imports none of the libraries a trace does not need: its fixed cost stays small."""
    inp = write_jsonl(tmp_path / "g.jsonl", [{"completion": r["text"][:200]} for r in synthetic_records[:3]]
                      + [{"completion": ""}])
    code = ("import sys\nfrom propme.cli.app import main\n"
            "assert main(sys.argv[1:]) == 0\n"
            "heavy = ('torch', 'transformers', 'datasets', 'matplotlib', 'pandas', 'pyarrow', 'jinja2', 'lm_eval',"
            " 'infini_gram', 'ray')\n"
            "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, "trace", "--index", str(synthetic_index), "--input", str(inp),
                           "--out", str(tmp_path / "r.jsonl"), "--summary", str(tmp_path / "s.json"), "--workers", "2",
                           "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


def test_one_token_generations_follow_the_published_rule(synthetic_index, synthetic_records, corpus_ids):
    """Issue 44 item 20: the published tracer looks for spans from the starts range(L - 1), none for a
    one-token generation, so a one-token full match keeps its full-match documents alone; PropMe added a
    span 0-1 with its sampled documents. One-, two- and three-token generations equal the reference."""
    from tokenizers import Tokenizer

    tr = Tracer(synthetic_index, TraceConfig(mode="mixed"))
    ref = reference(tr, corpus_ids, "mixed")
    tok = Tokenizer.from_file(str(tr.index.path / "propme-tokenizer" / "tokenizer.json"))
    words = [w for r in synthetic_records[:40] for w in r["text"].split()]
    singles = list(dict.fromkeys(w for w in words if len(tok.encode(w, add_special_tokens=False).ids) == 1))[:12]
    assert len(singles) >= 5
    checked = {1: 0, 2: 0, 3: 0}
    text = synthetic_records[0]["text"]  # two- and three-token full matches: pieces of a document
    pieces = [text[a:a + w] for a in range(0, 400, 7) for w in (3, 5, 8)]
    for g in [*singles, ".", *(" ".join(singles[i:i + 2]) for i in range(0, 10, 2)), *pieces]:
        n = len(tok.encode(g, add_special_tokens=False).ids)
        res = tr.trace_one(g, "x")
        assert as_reference(res) == reference_view(ref.trace(g)), g
        if n == 1 and res.final_spans:  # found whole: no span of its own, only the full-match documents
            assert res.spans == [] and all(d.match != "partial" for d in res.final_spans[0].documents), g
        if n in checked:
            checked[n] += 1
    assert checked[1] >= 5 and checked[2] + checked[3] >= 5, checked
