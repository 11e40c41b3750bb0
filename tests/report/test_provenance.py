"""Which data leaks (issue 25): a planted corpus of three sources, one holding the memorized documents,
and a notice repeated in 200 documents, through the real lm_eval, `propme trace` and `propme report`."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from propme_metrics.metrics.provenance import BUCKET_LABELS, RARE_MAX_COUNT, bucket_of, is_rare_full_match, whole_count
from propme_metrics.trace.result import FinalSpan, TracedDocument, TraceResult

N_NOTICES = 200


@pytest.fixture(scope="module")
def leak_world(tmp_path_factory):
    """Sources `planted` (4 long documents, memorized), `news` (short background) and `notices`
    (200 short documents ending in BOILERPLATE, and the notice itself, memorized); the index; a tiny GPT-2
    that learnt the memorized ones; prefix prompts: the planted documents' and the notice's first sentence."""
    from propme.demo.synthetic import (
        BOILERPLATE,
        boilerplate_documents,
        document_text,
        train_memorizing_model,
        train_tokenizer,
    )
    from propme_metrics.index.reader import open_index
    from propme_metrics.prompts.prompt_set import PromptRecord, build_prompt_set, write_prompt_set
    from support.corpora import make_index, write_jsonl

    root = tmp_path_factory.mktemp("leaks")
    rng = random.Random(5)
    records = [{"id": f"planted-{i}", "source": "planted", "memorized": True,
                "text": document_text(rng, ("da", "en")[i % 2], 16)} for i in range(4)]
    records += [{"id": f"news-{i}", "source": "news", "memorized": False,
                 "text": document_text(rng, ("da", "en")[i % 2], rng.randint(1, 2))} for i in range(80)]
    records += boilerplate_documents(N_NOTICES, seed=6, source="notices")
    random.Random(0).shuffle(records)
    corpus = write_jsonl(root / "corpus.jsonl", records)
    tok = train_tokenizer([r["text"] for r in records], root / "tokenizer")
    make_index(corpus, root / "index", tok, num_shards=2)
    index = open_index(root / "index")
    eligible = int((index.document_lengths >= 100).sum())
    assert eligible == 4  # only the planted documents are long enough for prefix prompts
    prefix = build_prompt_set(index, "prefix", n=eligible, seed=42)
    head, rest = BOILERPLATE.split(" Denne tekst", 1)
    prefix.records.append(PromptRecord(id="prefix-notice", prompt=head, setting="prefix", domain="notices",
                                       continuation=" Denne tekst" + rest))
    write_prompt_set(prefix, root / "prefix.jsonl")
    train_memorizing_model([r["text"] for r in records if r["memorized"]], tok, root / "model")
    return root, records, tok


def _brute_counts(records, tok) -> dict[str, dict[str, int]]:
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(str(tok))
    out: dict[str, dict[str, int]] = {}
    for r in records:
        c = out.setdefault(r["source"], {"documents": 0, "tokens": 0})
        c["documents"] += 1
        c["tokens"] += len(t(r["text"], add_special_tokens=False)["input_ids"])
    return dict(sorted(out.items()))


def test_planted_source_and_boilerplate_through_lm_eval(leak_world, tmp_path, cli_run):
    import shutil

    from propme_metrics.core.errors import ConfigError
    from propme_metrics.index.manifest import IndexManifest
    from propme_metrics.report.request import ReportRequest
    from support.lmeval import run_lm_eval, samples_file
    from support.reports import make_report

    root, records, tok = leak_world
    # the build recorded documents and tokens per source, as a brute-force count over the corpus gives them
    assert IndexManifest.read(root / "index").source_counts == _brute_counts(records, tok)

    out = tmp_path / "runs"
    # fmr_rare's threshold as a task setting: 201 admits the notice (in 201 documents), the default 10 does not
    metadata = {"demo_index": str(root / "index"), "demo_prefix_prompts": str(root / "prefix.jsonl"),
                "rare_max_count": N_NOTICES + 1}
    proc = run_lm_eval(["--model", "hf", "--model_args", f"pretrained={root / 'model'},dtype=float32",
                        "--device", "cpu", "--batch_size", "8", "--tasks", "propme_demo_prefix",
                        "--gen_kwargs", "max_gen_toks=160", "--metadata", json.dumps(metadata),
                        "--log_samples", "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]["propme_demo_prefix"]
    samples_path = samples_file(out, "propme_demo_prefix")
    traces = {json.loads(line)["doc"]["id"]: TraceResult.from_dict(json.loads(line)["trace"]["generations"][0])
              for line in samples_path.open()}
    notice = traces.pop("prefix-notice")
    # the notice comes back whole: a full match, but of text in 201 documents, so not rare
    assert notice.full_match and whole_count(notice) == N_NOTICES + 1 and not is_rare_full_match(notice)
    # the tiny model reproduces (nearly) every planted document whole: unique text, rare
    k = sum(t.full_match for t in traces.values())
    assert k >= 3
    for t in traces.values():
        assert whole_count(t) == 1 and is_rare_full_match(t) == t.full_match
    assert results["fmr,none"] == pytest.approx((k + 1) / 5)
    # the threshold decides, as the corpus counts predict: the k unique texts are rare at any threshold,
    # the notice (201 copies) only from 201 on; lm-eval counted with the run's 201
    expected = {1: k / 5, RARE_MAX_COUNT: k / 5, N_NOTICES: k / 5, N_NOTICES + 1: (k + 1) / 5}
    assert results["fmr_rare,none"] == pytest.approx(expected[N_NOTICES + 1])

    # `propme trace` on the samples file computes the same fmr_rare, at its own threshold (default 10)
    for threshold in (None, N_NOTICES, N_NOTICES + 1):
        flag = () if threshold is None else ("--rare-max-count", threshold)
        code, _, err = cli_run("trace", "--index", root / "index", "--input", samples_path, "--out",
                               tmp_path / "r.jsonl", "--summary", tmp_path / "s.json", *flag)
        assert code == 0, err
        summary = json.loads((tmp_path / "s.json").read_text())
        assert summary["rare_max_count"] == (threshold or RARE_MAX_COUNT)
        assert summary["fmr_rare"] == pytest.approx(expected[threshold or RARE_MAX_COUNT])

    # the report takes the threshold the run logged, or recounts every run with --rare-max-count
    logged = make_report(ReportRequest([out], tmp_path / "logged", bootstrap=0, plots=False, html=False))
    assert logged.layout.rows[0]["propme_demo_prefix_fmr_rare"] == pytest.approx(expected[N_NOTICES + 1])
    assert json.loads((tmp_path / "logged" / "leaderboard.json").read_text())["rare_max_count"] == N_NOTICES + 1
    for threshold in (1, N_NOTICES):
        other = make_report(ReportRequest([out], tmp_path / f"rare{threshold}", bootstrap=0, plots=False, html=False,
                             rare_max_count=threshold))
        assert other.layout.rows[0]["propme_demo_prefix_fmr_rare"] == pytest.approx(expected[threshold])
    code, _, err = cli_run("report", out, "--out", tmp_path / "bad", "--rare-max-count", "0")
    assert code == 2 and "--rare-max-count" in err
    mixed = tmp_path / "mixed"
    shutil.copytree(out, mixed)
    mixed_samples = samples_file(mixed, "propme_demo_prefix")
    lines = mixed_samples.read_text().splitlines()
    first = json.loads(lines[0])
    first["doc"]["rare_max_count"] = 5
    mixed_samples.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(ConfigError, match="mixes fmr_rare thresholds"):
        make_report(ReportRequest([mixed], tmp_path / "mixed-report", bootstrap=0, plots=False, html=False))
    rep = make_report(ReportRequest([out], tmp_path / "report", bootstrap=500, pm_metrics=("nvr", "fmr"),
                       rare_max_count=RARE_MAX_COUNT))
    assert rep.layout.rows[0]["propme_demo_prefix_fmr_rare"] == pytest.approx(k / 5)
    doc = json.loads((tmp_path / "report" / "leaderboard.json").read_text())
    assert doc["rare_max_count"] == RARE_MAX_COUNT
    (entry,) = doc["leaks"]
    assert entry["source_field"] == "source" and entry["note"] is None and entry["rare_max_count"] == RARE_MAX_COUNT
    prefix = entry["settings"]["prefix"]
    top = prefix["top_sources"]
    # the planted source leads, far above its share of the corpus; the notices leak below theirs
    assert top[0]["source"] == "planted" and top[0]["full_share"] == pytest.approx(k / (k + 1))
    counts = _brute_counts(records, tok)
    share = counts["planted"]["tokens"] / sum(c["tokens"] for c in counts.values())
    assert top[0]["token_share"] == pytest.approx(share)
    assert top[0]["enrichment_full"]["estimate"] == pytest.approx(k / (k + 1) / share)
    enrichment = top[0]["enrichment_full"]
    assert enrichment["estimate"] > 5  # 1: in proportion
    # 5 prompts: the expanded percentile bootstrap (issue 33) takes its tails at 0.1%, where a resample
    # without the planted prompts sits, so the interval reaches down to 0 (it was [>2, ...] before)
    assert enrichment["method"] == "bootstrap-expanded-percentile"
    assert enrichment["low"] <= enrichment["estimate"] <= enrichment["high"]
    notices = next(s for s in top if s["source"] == "notices")
    assert notices["full_share"] == pytest.approx(1 / (k + 1)) and notices["enrichment_full"]["estimate"] < 1
    assert "news" not in {s["source"] for s in top}  # nothing of it leaked
    buckets = {b["bucket"]: b for b in prefix["duplication"]}
    assert [b["bucket"] for b in prefix["duplication"]] == [b for b in BUCKET_LABELS if b != "unknown"]
    assert buckets["1"]["full_matches"] == k and buckets[">100"]["full_matches"] == 1
    assert buckets["2-10"]["full_matches"] == buckets["11-100"]["full_matches"] == 0
    extraction = {e["bucket"]: e for e in prefix["extraction_by_duplication"]}
    assert (extraction["1"]["generations"], extraction["1"]["extracted"]) == (4, sum(t.extracted for t in traces.values()))
    assert (extraction[">100"]["generations"], extraction[">100"]["extracted"]) == (1, 1)
    assert extraction["1"]["low"] < extraction["1"]["rate"] <= extraction["1"]["high"]
    # the sources are no CSV columns; the tables, plots and the HTML filter show them
    assert not any("planted" in c for c in rep.layout.columns)
    md = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "## Which data leaks" in md and "| planted |" in md and "| &gt;100 | 1 |" in md
    assert f"matches occurring at most {RARE_MAX_COUNT} times" in md
    assert {p.name for p in rep.files.plots} >= {"sources_demo.png", "duplication_demo.png"}
    html = (tmp_path / "report" / "report.html").read_text()
    assert '<option value="planted">planted</option>' in html and '<option value="news">' not in html
    assert 'data-src="[&quot;planted&quot;]"' in html and 'data-src="[&quot;notices&quot;]"' in html


def test_source_counts_for_an_older_index_are_computed_once(leak_world, tmp_path):
    """An index built before the counts were recorded: computed on demand, cached beside the manifest
    under a name the engine never reads, and the index still opens and counts."""
    import shutil

    from propme_metrics.index.format import SOURCE_COUNTS_NAME
    from propme_metrics.index.manifest import MANIFEST_NAME
    from propme_metrics.index.reader import open_index
    from propme_metrics.index.source_counts import index_source_counts

    root, records, tok = leak_world
    old = tmp_path / "old"
    shutil.copytree(root / "index", old)
    data = json.loads((old / MANIFEST_NAME).read_text())
    expected = data.pop("source_counts")
    (old / MANIFEST_NAME).write_text(json.dumps(data))
    assert index_source_counts(old).sources == expected == _brute_counts(records, tok)
    cached = json.loads((old / SOURCE_COUNTS_NAME).read_text())
    assert cached["sources"] == expected and cached["field"] == "source"
    (old / "offset.0").rename(old / "moved")  # a second call reads the cache, not the shards
    assert index_source_counts(old).sources == expected
    (old / "moved").rename(old / "offset.0")
    stale = {k: v for k, v in cached.items() if k != "format"} | {"sources": {"x": {"documents": 1, "tokens": 1}}}
    (old / SOURCE_COUNTS_NAME).write_text(json.dumps(stale))  # a cache in an older layout is recomputed
    assert index_source_counts(old).sources == expected
    index = open_index(old)
    ids = index.encode(next(r["text"] for r in records if r["source"] == "planted"))
    assert index.count(ids) == 1


def _trace(count: int, full: bool, n_tokens: int = 12, source: str = "s") -> TraceResult:
    doc = TracedDocument(0, 0, "x", {"source": source}, "full_raw" if full else "partial", 1.0, 3, 3, 3, "t", (0, 1))
    return TraceResult("k", "t", n_tokens, False, final_spans=[FinalSpan(0, n_tokens, "t", count, [doc])])


@pytest.mark.parametrize("count, bucket", [(0, "unknown"), (1, "1"), (2, "2-10"), (10, "2-10"), (11, "11-100"),
                                           (100, "11-100"), (101, ">100"), (10_000, ">100")])
def test_buckets_and_the_rare_threshold(count, bucket):
    assert bucket_of(count) == bucket
    # rare: a full match whose whole text occurs 1..RARE_MAX_COUNT times; an unknown count (anchors) is not rare
    assert is_rare_full_match(_trace(count, True)) == (1 <= count <= RARE_MAX_COUNT)
    assert not is_rare_full_match(_trace(count, False))


def test_rare_threshold_is_a_setting_of_fmr_rare():
    """fmr_rare at any threshold is the share of full matches whose corpus count is 1..threshold."""
    from propme_metrics.metrics.values import summarize

    counts = [1, 2, 10, 11, 150, 0]  # 0: found through anchors only, count unknown: never rare
    traces = [_trace(c, True) for c in counts] + [_trace(1, False)]
    assert summarize(traces).fmr_rare == pytest.approx(3 / 7)  # the default, RARE_MAX_COUNT = 10
    for threshold in (1, 2, 9, 10, 11, 150, 1000):
        expected = sum(1 <= c <= threshold for c in counts) / len(traces)
        assert summarize(traces, rare_max_count=threshold).fmr_rare == pytest.approx(expected), threshold


def test_whole_count_falls_back_to_the_least_span_count():
    """A full match found through anchors only ((0, L) has count 0): its other spans bound its count."""
    doc = TracedDocument(0, 0, "x", {}, "full_raw", 1.0, 3, 3, 3, "t", (0, 1))
    spans = [FinalSpan(0, 12, "t", 0, [doc]), FinalSpan(1, 12, "t", 7, []), FinalSpan(3, 9, "t", 40, [])]
    t = TraceResult("k", "t", 12, False, final_spans=spans)
    assert whole_count(t) == 7 and is_rare_full_match(t)
    t.final_spans[1].count = 300
    assert whole_count(t) == 40 and not is_rare_full_match(t)
    assert whole_count(TraceResult("k", "t", 12, False, final_spans=spans[:1])) is None


def test_full_match_is_shared_by_its_sources():
    from propme_metrics.metrics.provenance import generation_leaks

    docs = [TracedDocument(0, i, "x", {"source": s} if s else {}, m, nv, 1, 1, 1, "t", (0, 1))
            for i, (s, m, nv) in enumerate([("a", "full_raw", 1.0), ("b", "full_raw", 0.5), ("b", "partial", 0.25),
                                            (None, "partial", 0.25)])]
    g = generation_leaks(TraceResult("k", "t", 8, False, final_spans=[FinalSpan(0, 8, "t", 150, docs)]))
    assert g.full_by_source == {"a": 0.5, "b": 0.5} and g.full_bucket == ">100"
    assert g.nv_by_source == {"a": 1.0, "b": 0.75, "unknown": 0.25} and g.nv_by_bucket == {">100": 2.0}
    assert Counter(generation_leaks(_trace(3, False)).nv_by_bucket) == Counter({"2-10": 1.0})
