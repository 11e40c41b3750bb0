"""`propme trace` reports which data leaks (the report's source and duplication tables) in the terminal
and in SUMMARY.json: a corpus of three sources, generations copied from two of them."""
from __future__ import annotations

import json
import random

import pytest

from support.corpora import make_index, write_jsonl

N_NOTICES = 120


@pytest.fixture(scope="module")
def world(tmp_path_factory, gpt2_dir):
    """Sources `planted` (3 long documents), `news` (60 short ones), `notices` (120 documents ending
    in the same notice); generations: the start of each planted document, the notice, 2 new sentences."""
    from propme.demo.synthetic import BOILERPLATE, boilerplate_documents, document_text

    root = tmp_path_factory.mktemp("trace-leaks")
    rng = random.Random(3)
    planted = [{"id": f"planted-{i}", "source": "planted", "text": document_text(rng, "en", 12)} for i in range(3)]
    news = [{"id": f"news-{i}", "source": "news", "text": document_text(rng, "en", 2)} for i in range(60)]
    notices = [r for r in boilerplate_documents(N_NOTICES, seed=4, source="notices") if r["id"] != "notice-template"]
    make_index(write_jsonl(root / "corpus.jsonl", planted + news + notices), root / "index", gpt2_dir)
    copies = []
    for r in planted:  # the document's first ~40 words: verbatim in exactly one document
        words = r["text"].split(" ")
        copies.append(" ".join(words[:40]))
    fresh = ["Zebra quantum marmalade orbits the violet accordion factory.",
             "Seventeen purple tractors hummed beside a frozen lighthouse."]
    gens = [{"id": f"copy-{i}", "completion": t} for i, t in enumerate(copies)]
    gens += [{"id": "notice", "completion": BOILERPLATE}]
    gens += [{"id": f"fresh-{i}", "completion": t} for i, t in enumerate(fresh)]
    return root, write_jsonl(root / "gens.jsonl", gens)


def test_trace_reports_sources_and_duplication(world, tmp_path, cli_run):
    root, gens = world
    code, out, err = cli_run("trace", "--index", root / "index", "--input", gens, "--out", tmp_path / "r.jsonl",
                             "--summary", tmp_path / "s.json", "--bootstrap", "200", "--quiet")
    assert code == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    leaks = summary["leaks"]
    assert leaks["setting"] == "traced" and leaks["source_field"] == "source" and leaks["note"] is None
    # the independent expectation: three planted copies and the notice are full matches, nothing else
    results = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    full = {r["key"] for r in results if any(d["match"] == "full_raw" for s in r["final_spans"] for d in s["documents"])}
    assert full == {"copy-0", "copy-1", "copy-2", "notice"}
    assert leaks["full_matches"] == 4
    shares = {s["source"]: s["full_share"] for s in leaks["top_sources"]}
    assert shares["planted"] == pytest.approx(3 / 4) and shares["notices"] == pytest.approx(1 / 4)
    # planted: 3 of 4 full matches from a tiny share of the corpus tokens: the most enriched source
    assert leaks["top_sources"][0]["source"] == "planted" and leaks["top_sources"][0]["enrichment_full"]["estimate"] > 1
    buckets = {b["bucket"]: b["full_matches"] for b in leaks["duplication"]}
    assert buckets["1"] == 3 and buckets[">100"] == 1  # each copy occurs once, the notice in 120 documents
    assert "Which data leaks: traced generations" in out and "By corpus count" in out and "planted" in out
    assert summary["fmr"] == pytest.approx(4 / 6)  # the metrics are unchanged beside the tables


def test_trace_with_continuations_has_the_extraction_table(world, tmp_path, cli_run):
    root, gens = world
    rows = [json.loads(line) for line in gens.read_text().splitlines()]
    for r in rows:  # prefix-style input: each row's true continuation is its own text
        r["continuation"] = r["completion"]
    inp = write_jsonl(tmp_path / "prefix.jsonl", rows)
    code, out, err = cli_run("trace", "--index", root / "index", "--input", inp, "--out", tmp_path / "r.jsonl",
                             "--summary", tmp_path / "s.json", "--bootstrap", "0", "--quiet")
    assert code == 0, err
    leaks = json.loads((tmp_path / "s.json").read_text())["leaks"]
    assert leaks["setting"] == "prefix"
    extraction = {e["bucket"]: (e["extracted"], e["generations"]) for e in leaks["extraction_by_duplication"]}
    assert extraction["1"] == (3, 3) and extraction[">100"] == (1, 1)
    assert sum(n for _, n in extraction.values()) == 6  # every generation, by its continuation's count
    assert leaks["top_sources"][0]["enrichment_full"]["low"] is None  # --bootstrap 0: no interval


def test_no_leak_is_said_so(world, tmp_path, cli_run):
    root, _ = world
    inp = write_jsonl(tmp_path / "g.jsonl", [{"id": "x", "completion": "Zebra quantum marmalade orbits the moon."}])
    code, out, err = cli_run("trace", "--index", root / "index", "--input", inp, "--out", tmp_path / "r.jsonl",
                             "--summary", tmp_path / "s.json", "--quiet")
    assert code == 0, err
    leaks = json.loads((tmp_path / "s.json").read_text())["leaks"]
    assert leaks["full_matches"] == 0 and leaks["duplication"][0]["full_share"] is None  # undefined, not 0
    assert ("no full match and no NV-recall mass" in out) == (leaks["nv_mass"] == 0)


def test_trace_summary_has_the_robustness_figures(world, tmp_path, cli_run):
    """SUMMARY.json's `robustness`: the long spans' corpus counts (each copy once, the notice in 120
    documents), the repeated-sampling shares by generation key, and no floor (no propensity prompt)."""
    root, gens = world
    code, _, err = cli_run("trace", "--index", root / "index", "--input", gens, "--out", tmp_path / "r.jsonl",
                           "--summary", tmp_path / "s.json", "--bootstrap", "200", "--quiet")
    assert code == 0, err
    robust = json.loads((tmp_path / "s.json").read_text())["robustness"]
    figures = {(f["name"], f["setting"]): f for f in robust["figures"]}
    results = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    long = [r["key"] for r in results if r["longest_span"] >= 50]
    assert long and set(long) <= {"copy-0", "copy-1", "copy-2", "notice"}
    copies = sum(k.startswith("copy-") for k in long)
    assert figures[("r50_copies_1", "traced")]["estimate"] == pytest.approx(copies / len(long))
    assert figures[("r50_copies_100", "traced")]["estimate"] == pytest.approx(("notice" in long) / len(long))
    assert figures[("r50_unique", "traced")]["estimate"] == pytest.approx(copies / len(results))
    assert figures[("r50_unique", "traced")]["method"] == "wilson-modified"
    # each generation is its own prompt here: a share of prompts equals the share of generations
    assert figures[("any_span50", "traced")]["estimate"] == pytest.approx(len(long) / len(results))
    assert figures[("floor_als", "floor")]["estimate"] is None and "floor" in robust["note"]


def _trace(cli_run, root, gens, folder, *options):
    code, _, err = cli_run("trace", "--index", root / "index", "--input", gens, "--out", folder / "r.jsonl",
                           "--summary", folder / "s.json", "--bootstrap", "200", "--quiet", *options)
    assert code == 0, err
    return (folder / "r.jsonl").read_bytes(), json.loads((folder / "s.json").read_text())


def test_the_bootstrap_seed_never_changes_the_traces(world, tmp_path, cli_run):
    """--bootstrap-seed seeds the leak tables' bootstrap alone (recorded in SUMMARY.json); --seed the
    document samples alone: the same --seed with two bootstrap seeds gives byte-identical traces and
    metrics; the same bootstrap seed under two --seed gives the same intervals wherever the traces
    agree on the tables' counts."""
    root, gens = world
    traces_a, a = _trace(cli_run, root, gens, tmp_path / "a", "--seed", "5", "--bootstrap-seed", "1")
    traces_b, b = _trace(cli_run, root, gens, tmp_path / "b", "--seed", "5", "--bootstrap-seed", "2")
    assert traces_a == traces_b
    assert (a["bootstrap_seed"], b["bootstrap_seed"], a["config"]["seed"]) == (1, 2, 5)
    assert {k: v for k, v in a.items() if k not in ("leaks", "robustness", "bootstrap_seed", "results")} == \
        {k: v for k, v in b.items() if k not in ("leaks", "robustness", "bootstrap_seed", "results")}

    def intervals(s):
        return [(x["enrichment_full"]["low"], x["enrichment_full"]["high"]) for x in s["leaks"]["top_sources"]]

    _, c = _trace(cli_run, root, gens, tmp_path / "c", "--seed", "6", "--bootstrap-seed", "1")
    if [x["full_matches"] for x in c["leaks"]["top_sources"]] == [x["full_matches"] for x in a["leaks"]["top_sources"]]:
        assert intervals(c) == intervals(a)   # --seed no longer seeds the bootstrap
