"""Shared fixtures: the real GPT-2 tokenizer (offline) and small indexes built from planted corpora."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from propme_metrics.build import build_index  # noqa: E402
from propme_metrics.sources import CorpusSource  # noqa: E402
from propme_metrics.synthetic import generate_corpus, gpt2_tokenizer  # noqa: E402


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def make_index(corpus: Path, out: Path, tokenizer: Path, **kwargs):
    """Build an index quietly (no progress bars) and return its manifest."""
    kwargs.setdefault("progress", False)
    kwargs.setdefault("check_space", False)
    return build_index(CorpusSource(str(corpus)), out, tokenizer=str(tokenizer), **kwargs)


def word_level_tokenizer(out: Path, n_words: int) -> Path:
    """A word-level tokenizer w0..w<n-1>, then [UNK] = n and </s> = n + 1, saved to `out`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(n_words)}
    vocab.update({"[UNK]": n_words, "</s>": n_words + 1})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="[UNK]").save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory) -> Path:
    return gpt2_tokenizer(tmp_path_factory.mktemp("gpt2-tokenizer"))


@pytest.fixture(scope="session")
def synthetic_records() -> list[dict]:
    return list(generate_corpus(120, seed=7))


@pytest.fixture(scope="session")
def synthetic_index(tmp_path_factory, gpt2_dir, synthetic_records) -> Path:
    """A 2-shard index of 120 generated Danish/English documents (GPT-2 tokenizer)."""
    root = tmp_path_factory.mktemp("synthetic")
    corpus = write_jsonl(root / "corpus.jsonl", synthetic_records)
    make_index(corpus, root / "index", gpt2_dir, num_shards=2)
    return root / "index"


@pytest.fixture(scope="session")
def demo_paths(tmp_path_factory):
    """The demo's corpus, index, memorizing model and prompt files at CI size (built once per session)."""
    from propme_metrics.demo import SMALL, prepare

    return prepare(tmp_path_factory.mktemp("demo"), SMALL)
