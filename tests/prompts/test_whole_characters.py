"""Prefix prompts and continuations are whole characters, also where a byte-level tokenizer splits
a character over two tokens (CJK, emoji)."""
from __future__ import annotations

import random

import pytest

from propme_metrics.index.reader import open_index
from propme_metrics.prompts.prompt_set import build_prompt_set
from propme_metrics.prompts.settings import CONTINUATION_TOKENS, PREFIX_TOKENS
from support.corpora import make_index, write_jsonl

CJK = "記憶模型語言文書训练数据隐私泄露東京大阪北海道漢字仮名"
EMOJI = "😀🚀🧪📚🌍🎉🔒🦊"


@pytest.fixture(scope="module")
def cjk_index(tmp_path_factory, gpt2_dir):
    rng = random.Random(5)
    docs = []
    for i in range(10):
        text = "".join(rng.choice(CJK + EMOJI) + (" " if rng.random() < 0.15 else "") for _ in range(160))
        docs.append({"id": f"doc-{i}", "text": text})
    root = tmp_path_factory.mktemp("cjk")
    make_index(write_jsonl(root / "corpus.jsonl", docs), root / "index", gpt2_dir)
    return open_index(root / "index"), {d["id"]: d["text"] for d in docs}


def _whole(index, ids) -> bool:
    """Independent check: the corpus has no U+FFFD, so a decoded piece holding one was cut inside a character."""
    return "\ufffd" not in index.decode(ids)


def test_prefix_prompts_end_and_continuations_start_on_whole_characters(cjk_index):
    index, texts = cjk_index
    ps = build_prompt_set(index, "prefix", n=10, seed=1)
    moved = 0
    for rec in ps.records:
        doc_ix = rec.source_doc["doc_ix"]
        ids = index.document(doc_ix, max_tokens=PREFIX_TOKENS + CONTINUATION_TOKENS).token_ids.tolist()
        text = texts[rec.source_doc["metadata"]["id"]]
        assert "\ufffd" not in rec.prompt and "\ufffd" not in rec.continuation
        # the document's own text, cut once: prompt then continuation, nothing lost or doubled
        assert text.startswith(rec.prompt + rec.continuation)
        k = rec.longest_span  # the prompt's token count
        # the longest whole-character prefix of at most 50 tokens (brute force over every cut)
        assert k == max(c for c in range(1, PREFIX_TOKENS + 1) if _whole(index, ids[:c]))
        end = k + rec.continuation_tokens
        assert end == max(e for e in range(k + 1, k + CONTINUATION_TOKENS + 1) if _whole(index, ids[k:e]))
        moved += k < PREFIX_TOKENS
    assert moved >= 3  # the corpus does put the 50th boundary inside characters (else the test proves nothing)


def test_cut_keeps_the_token_count_where_the_boundary_is_whole(gpt2_dir):
    from transformers import AutoTokenizer

    from propme_metrics.prompts.prompt_set import whole_character_cut

    tok = AutoTokenizer.from_pretrained(str(gpt2_dir))
    decode = tok.decode
    ids = tok.encode("plain ascii text " * 10, add_special_tokens=False)
    assert whole_character_cut(decode, ids, 7) == 7
    ids = tok.encode("🚀", add_special_tokens=False)  # one emoji, several byte-level tokens
    assert len(ids) > 1
    assert whole_character_cut(decode, ids, 1) == 0
    assert whole_character_cut(decode, ids, 1, forward=True) == len(ids)
