"""Prompt sets (issue 4): prefix sampling, built-in and candidate prompts, verbatim check, sidecar."""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import pytest

from propme.cli.app import main
from propme.demo.synthetic import generate_corpus
from propme_metrics.core.errors import ConfigError
from propme_metrics.index.reader import Index
from propme_metrics.prompts.prompt_set import (
    PromptRecord,
    available_languages,
    build_prompt_set,
    builtin_prompts,
    candidate_id,
    load_prompt_set,
    longest_overlap,
    overlap_profile,
    sidecar_path,
    write_prompt_set,
)
from support.corpora import make_index, write_jsonl

BASE_DOMAINS = {"legal", "news", "books", "conversation", "social_media", "web", "encyclopedic", "medical", "spoken"}
DOMAINS = {"da": BASE_DOMAINS, "en": BASE_DOMAINS | {"science", "code", "government", "patents"}}


@pytest.fixture(scope="module")
def index(synthetic_index) -> Index:
    return Index(synthetic_index)


@pytest.fixture(scope="module")
def n_eligible(index) -> int:
    n = int((index.document_lengths >= 100).sum())
    assert 20 <= n < len(index.document_lengths)  # the fixture has both long and short documents
    return n


@pytest.fixture(scope="module")
def builtin_sets(index) -> dict[tuple[str, str], object]:
    """The built-in generic and specific sets of both languages, 100 prompts each, built once."""
    return {(lang, setting): build_prompt_set(index, setting, n=100, seed=42, language=lang)
            for lang in ("da", "en") for setting in ("generic", "specific")}


@pytest.fixture(scope="module")
def other_index(tmp_path_factory, gpt2_dir) -> Index:
    root = tmp_path_factory.mktemp("other")
    corpus = write_jsonl(root / "corpus.jsonl", generate_corpus(12, seed=99))
    make_index(corpus, root / "index", gpt2_dir)
    return Index(root / "index")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


# --- built-in sets --------------------------------------------------------------------------------

def test_builtin_sets_sizes_duplicates_domains():
    assert set(available_languages()) >= {"da", "en"}
    all_ids = set()
    for lang in ("da", "en"):
        recs = builtin_prompts(lang)
        for setting in ("generic", "specific"):
            part = [r for r in recs if r["setting"] == setting]
            assert len(part) >= 100, (lang, setting, len(part))
            assert {r["domain"] for r in part} == DOMAINS[lang], (lang, setting)
        assert {r["setting"] for r in recs} == {"generic", "specific"}
        assert all(r["language"] == lang and r["prompt"].strip() == r["prompt"] and r["prompt"] for r in recs)
        ids = [r["id"] for r in recs]
        prompts = [r["prompt"] for r in recs]
        assert len(set(ids)) == len(ids), [i for i, c in Counter(ids).items() if c > 1]
        assert len(set(prompts)) == len(prompts), [p for p, c in Counter(prompts).items() if c > 1]
        assert not all_ids & set(ids)
        all_ids |= set(ids)


def test_builtin_sets_build_with_low_overlap(index, builtin_sets):
    for (lang, setting), ps in builtin_sets.items():
        recs = ps.records
        assert len(recs) == 100 and len({r.id for r in recs}) == 100
        assert {r.setting for r in recs} == {setting} and {r.language for r in recs} == {lang}
        per_domain = Counter(r.domain for r in recs)
        assert set(per_domain) == DOMAINS[lang]
        assert max(per_domain.values()) - min(per_domain.values()) <= 1  # stratified evenly
        for r in recs:  # independent of the builder: the whole prompt never occurs in the corpus
            ids = index.encode(r.prompt)
            assert index.count(ids) == 0 and index.count(index.encode(" " + r.prompt)) == 0, r.id
            assert 0 <= r.longest_span < len(ids)
            if r.longest_span:  # the span is a piece of the prompt's tokens (as is or after a space)
                pieces = [v[i:i + r.longest_span] for v in (ids, index.encode(" " + r.prompt))
                          for i in range(len(v) - r.longest_span + 1)]
                span = next(p for p in pieces if index.decode(p) == r.longest_span_text and index.count(p) > 0)
                assert r.longest_span_count == index.count(span)
            assert r.source_doc is None and r.continuation is None
        prof = ps.manifest["overlap_profile"]
        assert prof == overlap_profile(recs) and prof["n"] == 100
        assert prof["share_span_ge_10"] == 0.0 and prof["max_longest_span"] < 10
        assert ps.manifest["source"]["kind"] == "builtin" and ps.manifest["rejected"] == []


def test_longest_span_matches_brute_force(index, synthetic_records):
    sent = _sentences(synthetic_records[3]["text"])[1]
    prompts = ["Zqxv blorf " + sent + " glimmerwocks plonk", "Pingviner spiller skak " + sent[:30],
               "totally unrelated qwzx words", sent]
    for text in prompts:
        ids = index.encode(text)
        best = max((j - i for i in range(len(ids)) for j in range(i + 1, len(ids) + 1)
                    if index.count(ids[i:j]) > 0), default=0)
        length, count, span = longest_overlap(index, ids)
        assert length == best == len(span), text
        assert count == (index.count(span) if span else 0)
        if span:
            assert any(ids[i:i + length] == span for i in range(len(ids)))


# --- prefix -----------------------------------------------------------------------------------

def test_prefix_prompts_are_document_starts(index, n_eligible):
    ps = build_prompt_set(index, "prefix", n=n_eligible, seed=42)
    engine, tok = index.engine, index.tokenizer
    total_docs = engine.get_total_doc_cnt()
    long_docs = {ix for ix in range(total_docs) if engine.get_doc_by_ix_2(doc_ix=ix, max_ctx_len=0)["doc_len"] >= 100}
    used = [r.source_doc["doc_ix"] for r in ps.records]
    assert len(set(used)) == len(used) == n_eligible
    assert set(used) == long_docs  # every long document, and never a short one
    for r in ps.records:
        doc = engine.get_doc_by_ix_2(doc_ix=r.source_doc["doc_ix"], max_ctx_len=100)
        assert doc["doc_len"] >= 100 and len(doc["token_ids"]) == 100
        ids = doc["token_ids"]

        def text(a, b):
            return tok.decode(ids[a:b], clean_up_tokenization_spaces=False)

        # 50 and 50 tokens, each cut moved back only as far as a whole character needs (ø, å: two bytes)
        k = max(c for c in range(1, 51) if "\ufffd" not in text(0, c))
        end = max(e for e in range(k + 1, k + 51) if "\ufffd" not in text(k, e))
        assert k >= 48 and end - k >= 48
        assert r.prompt == text(0, k) and r.continuation == text(k, end)
        assert r.continuation_tokens == end - k and r.longest_span == k and r.longest_span_count >= 1
        assert r.source_doc["metadata"] == json.loads(doc["metadata"])
        assert r.domain == r.source_doc["metadata"]["source"]
        assert r.id == f"prefix-{index.manifest.identity}-{r.source_doc['doc_ix']}"
    assert ps.manifest["overlap_profile"]["share_span_ge_10"] == 1.0


def test_prefix_short_documents_never_used_with_higher_threshold(index):
    ps = build_prompt_set(index, "prefix", n=10, seed=1, min_doc_tokens=300)
    assert all(index.document_lengths[r.source_doc["doc_ix"]] >= 300 for r in ps.records)


# --- determinism ------------------------------------------------------------------------------

@pytest.mark.parametrize("setting", ["prefix", "generic"])
def test_same_seed_same_file_other_seed_other_sample(index, tmp_path, setting):
    kw = {"n": 30, "language": "da"}
    files = []
    for name, seed in (("a", 42), ("b", 42), ("c", 7)):
        ps = build_prompt_set(index, setting, seed=seed, **kw)
        files.append(write_prompt_set(ps, tmp_path / name / "prompts.jsonl"))
    a, b, c = (f.read_bytes() for f in files)
    assert a == b and a != c
    sa, sb = (json.loads(sidecar_path(f).read_text()) for f in files[:2])
    assert sa == sb
    ids_a = {json.loads(line)["id"] for line in a.decode().splitlines()}
    ids_c = {json.loads(line)["id"] for line in c.decode().splitlines()}
    assert ids_a != ids_c  # another sample, not only another order


# --- candidates -------------------------------------------------------------------------------

def test_planted_candidate_is_rejected_and_reported(index, synthetic_records, tmp_path):
    start = _sentences(synthetic_records[0]["text"])[0]  # opens a document
    middle = _sentences(synthetic_records[5]["text"])[2]  # follows a space or a paragraph break
    invented = ["Pingvinerne på Amager spiller skak med en blå giraf hver tirsdag",
                "Zorblax the wandering teapot forgot its umbrella on Neptune",
                "Quantum ferrets negotiated the price of moonlight with a clarinet"]
    path = tmp_path / "cands.txt"
    path.write_text("\n".join([invented[0], start, "", invented[1], middle, invented[2], invented[0]]) + "\n",
                    encoding="utf-8")
    ps = build_prompt_set(index, "generic", n=3, seed=42, candidates=path, language="da")
    out = write_prompt_set(ps, tmp_path / "out.jsonl")
    assert sorted(r.prompt for r in ps.records) == sorted(invented)
    assert all(r.id == candidate_id(r.prompt) and r.language == "da" and r.domain is None for r in ps.records)
    side = json.loads(sidecar_path(out).read_text())
    verbatim = {r["prompt"]: r for r in side["rejected"] if "verbatim" in r["reason"]}
    assert set(verbatim) == {start, middle}
    assert verbatim[start]["line"] == 2 and verbatim[middle]["line"] == 5
    assert any(r["reason"].startswith("duplicate") and r["line"] == 7 for r in side["rejected"])
    assert side["source"]["kind"] == "candidates"
    assert side["source"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    for r in ps.records:
        assert index.count(index.encode(r.prompt)) == 0


def test_jsonl_candidates_keep_ids_and_filter_setting(index, tmp_path):
    recs = [{"id": "g1", "prompt": "Min hund kan godt lide at ligge i solen når", "domain": "web",
             "setting": "generic"},
            {"id": "s1", "prompt": "Retten fandt efter en samlet vurdering, at tiltalte", "domain": "legal",
             "setting": "specific"},
            {"prompt": "Der var engang en lille mus der boede i en kæmpestor ost", "domain": "books"}]
    path = write_jsonl(tmp_path / "c.jsonl", recs)
    ps = build_prompt_set(index, "generic", n=2, seed=0, candidates=path, language="da")
    assert {r.id for r in ps.records} == {"g1", candidate_id(recs[2]["prompt"])}
    assert {r.domain for r in ps.records} == {"web", "books"}
    back = PromptRecord.from_dict(ps.records[0].to_dict())
    assert back == ps.records[0] and list(back.to_dict())[:3] == ["id", "prompt", "setting"]


# --- errors -----------------------------------------------------------------------------------

def test_error_too_few_eligible_documents(index, n_eligible):
    with pytest.raises(ConfigError, match=rf"{n_eligible} documents of at least 100 tokens.*--n {n_eligible + 1}"):
        build_prompt_set(index, "prefix", n=n_eligible + 1)


def test_error_empty_candidates_file(index, tmp_path):
    for name, text in (("empty.txt", ""), ("blank.txt", "\n  \n\n"), ("empty.jsonl", "")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match="holds no prompts"):
            build_prompt_set(index, "generic", n=1, candidates=tmp_path / name, language="da")


def test_error_unknown_or_missing_language(index, tmp_path):
    with pytest.raises(ConfigError, match=r"'fr'.*da, en"):
        build_prompt_set(index, "generic", n=5, language="fr")
    with pytest.raises(ConfigError, match=r"'fr'.*da, en"):
        builtin_prompts("fr")
    with pytest.raises(ConfigError, match="need a language"):
        build_prompt_set(index, "specific", n=5)
    (tmp_path / "c.txt").write_text("Hello there, general\n")
    with pytest.raises(ConfigError, match="unknown language"):
        build_prompt_set(index, "generic", n=1, candidates=tmp_path / "c.txt", language="Klingon!")


def test_error_too_few_surviving_candidates(index, synthetic_records, tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(_sentences(synthetic_records[0]["text"])[0] + "\nEn helt opfundet sætning om blå giraffer\n")
    with pytest.raises(ConfigError, match=r"only 1 of 2 .*--n 2; 1 rejected.*verbatim") as err:
        build_prompt_set(index, "generic", n=2, candidates=path, language="da")
    assert "lower --n" in err.value.hint


def test_error_unknown_setting_and_bad_n(index):
    with pytest.raises(ConfigError, match="unknown prompt setting"):
        build_prompt_set(index, "unconditional", n=5)
    with pytest.raises(ConfigError, match="positive"):
        build_prompt_set(index, "prefix", n=0)


# --- sidecar and refusal ----------------------------------------------------------------------

def test_sidecar_ties_file_to_index(index, other_index, builtin_sets, tmp_path):
    ps = builtin_sets[("en", "specific")]
    out = write_prompt_set(ps, tmp_path / "p.jsonl")
    side = json.loads(sidecar_path(out).read_text())
    assert sidecar_path(out).name == "p.jsonl.manifest.json"
    for key, value in {"format": "propme-prompts/1", "setting": "specific", "language": "en", "n": 100,
                       "seed": 42, "index_identity": index.manifest.identity,
                       "tokenizer_sha256": index.manifest.tokenizer.sha256, "prefix_tokens": 50,
                       "continuation_tokens": 50, "min_doc_tokens": 100}.items():
        assert side[key] == value, key
    assert "propme_version" in side and "overlap_profile" in side
    loaded = load_prompt_set(out, index=index)
    assert [r.to_dict() for r in loaded.records] == [r.to_dict() for r in ps.records]
    assert load_prompt_set(out).manifest == side
    with pytest.raises(ConfigError, match=rf"built for index {index.manifest.identity}, not "
                                          rf"{other_index.manifest.identity}"):
        load_prompt_set(out, index=other_index)


def test_load_refuses_missing_corrupt_or_edited(index, builtin_sets, tmp_path):
    out = write_prompt_set(builtin_sets[("da", "generic")], tmp_path / "p.jsonl")
    side = sidecar_path(out)
    good = side.read_text()
    side.write_text("{not json")
    with pytest.raises(ConfigError, match="corrupt"):
        load_prompt_set(out, index=index)
    side.unlink()
    with pytest.raises(ConfigError, match="no sidecar manifest"):
        load_prompt_set(out, index=index)
    side.write_text(good)
    out.write_bytes(out.read_bytes().replace(b"Hvis", b"Hvad", 1))
    with pytest.raises(ConfigError, match="changed after it was built"):
        load_prompt_set(out, index=index)


# --- CLI --------------------------------------------------------------------------------------

def test_cli_prompts_build(synthetic_index, synthetic_records, tmp_path, capsys):
    cands = tmp_path / "c.txt"
    cands.write_text(_sentences(synthetic_records[0]["text"])[0]
                     + "\nEn helt opfundet sætning om blå giraffer\nEndnu en sætning om lilla elefanter\n")
    out = tmp_path / "g.jsonl"
    rc = main(["prompts", "build", "--index", str(synthetic_index), "--setting", "generic", "--n", "2",
               "--candidates", str(cands), "--language", "da", "--out", str(out), "--quiet"])
    text = capsys.readouterr().out
    assert rc == 0 and out.is_file() and sidecar_path(out).is_file()
    assert "generic (candidates)" in text and "prefix (reference)" in text
    assert "1 candidate(s) rejected" in text and "verbatim" in text
    rc = main(["prompts", "build", "--index", str(synthetic_index), "--setting", "prefix", "--n", "5",
               "--out", str(tmp_path / "p.jsonl"), "--quiet"])
    assert rc == 0 and len((tmp_path / "p.jsonl").read_text().splitlines()) == 5
    (tmp_path / "empty.txt").write_text("")
    rc = main(["prompts", "build", "--index", str(synthetic_index), "--setting", "specific",
               "--candidates", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "x.jsonl"), "--quiet"])
    assert rc == 2 and not (tmp_path / "x.jsonl").exists()


def test_cache_tag_follows_format_rules_and_builtin_file_not_the_release(monkeypatch):
    """The prompt cache is keyed on what the prompts depend on: a release that changes none of it
    reuses the cached sets; a new format, new selection rules or an edited built-in file do not."""
    import propme_metrics.version
    from propme_metrics.prompts import prompt_set as build

    tags = {(s, lang): build.cache_tag(s, lang) for s in ("generic", "specific", "prefix") for lang in ("da", "en")}
    assert tags[("prefix", "da")] == tags[("prefix", "en")]  # prefix prompts come from the index alone
    assert len({tags[("generic", "da")], tags[("generic", "en")], tags[("prefix", "da")]}) == 3
    monkeypatch.setattr(propme_metrics.version, "__version__", "99.0.0")
    assert build.cache_tag("generic", "da") == tags[("generic", "da")]
    monkeypatch.setattr(build, "PROMPT_RULES_VERSION", build.PROMPT_RULES_VERSION + 1)
    assert build.cache_tag("generic", "da") != tags[("generic", "da")]
    assert build.cache_tag("prefix", None) != tags[("prefix", "da")]
    monkeypatch.undo()
    monkeypatch.setattr(build, "PROMPTS_FORMAT", "propme-prompts/2")
    assert build.cache_tag("prefix", None) != tags[("prefix", "da")]


def test_at_most_builds_what_the_index_allows_and_names_the_callers_option(index, n_eligible, synthetic_records,
                                                                            tmp_path):
    """lm-eval's loader asks for `n_prompts` and takes what the index allows (issue 46, item 4)."""
    ps = build_prompt_set(index, "prefix", n=n_eligible + 50, seed=1, at_most=True, option="n_prompts")
    assert len(ps.records) == n_eligible and ps.manifest["requested"] == n_eligible + 50
    assert len({r.id for r in ps.records}) == n_eligible
    with pytest.raises(ConfigError, match=r"fewer than n_prompts") as err:
        build_prompt_set(index, "prefix", n=n_eligible + 1, option="n_prompts")
    assert "lower n_prompts" in err.value.hint and "--n" not in err.value.hint
    # none at all: refused even with at_most
    with pytest.raises(ConfigError, match=r"has 0 documents of at least 100000 tokens"):
        build_prompt_set(index, "prefix", n=3, at_most=True, min_doc_tokens=100000)
    path = tmp_path / "c.txt"
    path.write_text(_sentences(synthetic_records[0]["text"])[0] + "\nEn helt opfundet sætning om blå giraffer\n")
    kept = build_prompt_set(index, "generic", n=2, candidates=path, language="da", at_most=True)
    assert len(kept.records) == 1
