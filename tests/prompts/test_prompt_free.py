"""Prompt-free settings and Tatoeba candidates (issue 11)."""
from __future__ import annotations

import math
import re
from collections import Counter

import pytest
import wordfreq

from propme_metrics.core.errors import ConfigError
from propme_metrics.index.reader import Index
from propme_metrics.prompts.prompt_free import cue_words, prompt_free_records
from propme_metrics.prompts.prompt_set import build_prompt_set, read_candidates


def test_cue_words_are_wordfreqs_top_alphabetic_words():
    for language in ("da", "en"):
        words = cue_words(language)
        assert len(words) == 100 and all(w.isalpha() for w, _ in words)
        # independent of the helper: walk the full list and keep the first 100 alphabetic words
        expected = [w for w in wordfreq.top_n_list(language, 400) if w.isalpha()][:100]
        assert [w for w, _ in words] == expected
        assert all(f == wordfreq.word_frequency(w, language) > 0 for w, f in words)
    with pytest.raises(ConfigError, match="no word list"):
        cue_words("xx")


def test_minimal_cue_draws_by_frequency_with_the_seed():
    recs = prompt_free_records("minimal_cue", 4000, seed=42, language="da")
    assert recs == prompt_free_records("minimal_cue", 4000, seed=42, language="da")
    assert [r.prompt for r in recs] != [r.prompt for r in prompt_free_records("minimal_cue", 4000, seed=1,
                                                                             language="da")]
    assert len({r.id for r in recs}) == 4000 and {r.setting for r in recs} == {"minimal_cue"}
    words = dict(cue_words("da"))
    total = sum(words.values())
    lower = {w.capitalize(): w for w in words}
    assert all(r.prompt in lower and r.prompt[0].isupper() for r in recs)
    counts = Counter(lower[r.prompt] for r in recs)
    for word in list(words)[:5]:  # each share within 4 standard deviations of its frequency weight
        p = words[word] / total
        assert abs(counts[word] - 4000 * p) <= 4 * math.sqrt(4000 * p * (1 - p)), word


def test_unconditional_records_and_bad_arguments():
    recs = prompt_free_records("unconditional", 12, seed=42)
    assert [r.prompt for r in recs] == [""] * 12 and recs[0].id == "unconditional-00"
    with pytest.raises(ConfigError, match="needs the corpus language"):
        prompt_free_records("minimal_cue", 3)
    with pytest.raises(ConfigError, match="not a prompt-free setting"):
        prompt_free_records("generic", 3)


def test_tatoeba_export_as_candidates(synthetic_index, synthetic_records, tmp_path):
    index = Index(synthetic_index)
    danish = next(r["text"] for r in synthetic_records if r["language"] == "da")
    # a sentence of the corpus that follows a space there: found through the leading-space tokenization
    in_corpus = next(s for s in re.split(r"(?<=[.!?])\s+", danish)[1:] if " " + s in danish)
    assert index.count(index.encode(" " + in_corpus)) > 0
    lines = [f"{1000 + i}\tdan\tPingvinen nummer {i} spiller skak med en zqx{i} elefant." for i in range(6)]
    lines += ["77\tdan\t" + in_corpus, "88\teng\tThe penguin plays chess.", "99\t\\N\tUkendt sprog her."]
    path = tmp_path / "dan_sentences.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    raw, _ = read_candidates(path)
    assert [r["id"] for r in raw][:2] == ["tatoeba-1000", "tatoeba-1001"] and raw[7]["language"] == "eng"
    ps = build_prompt_set(index, "generic", n=6, seed=42, language="da", candidates=path)
    assert sorted(r.id for r in ps.records) == [f"tatoeba-{1000 + i}" for i in range(6)]
    assert {r.language for r in ps.records} == {"da"}
    rejected = {r["id"]: r["reason"] for r in ps.manifest["rejected"]}
    assert "occurs verbatim" in rejected["tatoeba-77"]  # caught through the leading-space tokenization
    assert ps.manifest["counts"]["candidates"] == 7  # 6 + the corpus sentence (not eng, not Tatoeba's unknown \\N)
    with pytest.raises(ConfigError, match="several languages"):
        build_prompt_set(index, "generic", n=3, seed=42, candidates=path)
