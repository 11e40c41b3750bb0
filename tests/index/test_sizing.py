"""Build estimates (disk, memory, time) printed before a build, and shards refused when they cannot
fit in memory, with the option that fixes it."""
from __future__ import annotations

import pytest

from propme.cli import app as cli
from propme.demo.synthetic import generate_corpus
from propme_metrics.core.errors import ConfigError
from propme_metrics.index.build import build_index
from propme_metrics.index.format import staging_dir
from propme_metrics.index.sizing import (
    RUST_TOKENS_PER_RAM_BYTE,
    TEXT_BYTES_PER_TOKEN,
    check_shard_memory,
    estimate_build,
    shards_needed,
)
from propme_metrics.index.sources import CorpusSource
from propme_metrics.index.suffix_array import divsufsort_memory
from support.corpora import write_jsonl


def test_estimate_counts_every_file():
    e = estimate_build(10**9, "test", 4, 2, cpus=8, mem_bytes=16 * 2**30)
    assert e.tokens_per_shard == 250_000_000
    assert e.builder == "divsufsort"  # 500 MB of tokens x 5 fits in 16 GiB
    # per shard: 2 bytes of tokens + 4-byte pointers (500 MB of tokens need 29 bits) + documents
    assert e.disk_bytes == 4 * int(250_000_000 * (2 + 4) + 250_000_000 * 0.25)
    assert e.memory_bytes == divsufsort_memory(500_000_000)
    assert e.seconds > 0 and "GiB" in e.describe() and "divsufsort" in e.describe()
    more = estimate_build(10**9, "test", 4, 2, cpus=16, mem_bytes=16 * 2**30)
    assert more.seconds < e.seconds  # tokenization scales with cores
    big = estimate_build(10**10, "test", 1, 2, cpus=8, mem_bytes=16 * 2**30)
    assert big.builder == "rust" and big.memory_bytes <= 16 * 2**30


def test_one_long_document_is_tokenized_on_one_core():
    """A corpus that is one 400 MB document: its tokenization cannot spread over 8 cores, so the
    estimate is that document's tokens at one core's rate (plus the suffix-array step), whatever
    the cores; many small documents of the same size do spread."""
    from propme_metrics.index.sizing import TEXT_BYTES_PER_TOKEN, TOKENIZE_TOKENS_PER_CPU_S

    text_bytes = 400 * 10**6
    tokens = int(text_bytes / TEXT_BYTES_PER_TOKEN)
    spread = estimate_build(tokens, "test", 1, 4, cpus=8, mem_bytes=16 * 2**30)
    one = estimate_build(tokens, "test", 1, 4, cpus=8, mem_bytes=16 * 2**30, longest_bytes=text_bytes)
    sa = spread.seconds - tokens / (TOKENIZE_TOKENS_PER_CPU_S * 8)
    assert one.seconds == pytest.approx(tokens / TOKENIZE_TOKENS_PER_CPU_S + sa)
    assert one.seconds > spread.seconds + 6 * tokens / (TOKENIZE_TOKENS_PER_CPU_S * 8)


def test_shard_too_large_for_divsufsort_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as err:
        check_shard_memory(10**9, 2, 1, mem_bytes=4 * 2**30, ram_bytes=8 * 2**30, sa_builder="divsufsort")
    assert "--shards 3" in err.value.hint and "--sa-builder auto" in err.value.hint
    check_shard_memory(10**9 // 3, 2, 3, mem_bytes=4 * 2**30, ram_bytes=8 * 2**30, sa_builder="divsufsort")


def test_shard_beyond_the_rust_rule_is_refused_with_the_fix():
    ram = 8 * 2**30
    limit = int(RUST_TOKENS_PER_RAM_BYTE * ram)
    check_shard_memory(limit, 2, 1, mem_bytes=ram // 2, ram_bytes=ram)  # auto: rust, at the limit
    with pytest.raises(ConfigError) as err:
        check_shard_memory(limit + 1, 2, 2, mem_bytes=ram // 2, ram_bytes=ram)
    assert "--shards 3" in err.value.hint  # the fewest that fit: 2 x (limit + 1) tokens in 3 shards
    check_shard_memory(-(-2 * (limit + 1) // 3), 2, 3, mem_bytes=ram // 2, ram_bytes=ram)


def test_build_refuses_before_writing_anything(tmp_path, gpt2_dir):
    corpus = write_jsonl(tmp_path / "c.jsonl", generate_corpus(200, seed=1))
    with pytest.raises(ConfigError) as err:
        build_index(CorpusSource(str(corpus)), tmp_path / "idx", tokenizer=str(gpt2_dir), progress=False,
                    check_space=False, mem_bytes=1000, sa_builder="divsufsort")
    assert "--shards" in err.value.hint
    assert not (tmp_path / "idx").exists() and not staging_dir(tmp_path / "idx").exists()


def test_cli_prints_the_estimate_first(tmp_path, gpt2_dir, capsys):
    corpus = write_jsonl(tmp_path / "c.jsonl", generate_corpus(100, seed=2))
    code = cli.main(["index", "build", str(corpus), "--out", str(tmp_path / "idx"), "--tokenizer", str(gpt2_dir),
                     "--skip-space-check"])
    err = capsys.readouterr().err
    assert code == 0
    lines = [x for x in err.splitlines() if x.startswith("estimate")]
    assert len(lines) == 2, err
    assert "from the corpus' file sizes" in lines[0] and "from the tokenized shards" in lines[1]
    expected = int(corpus.stat().st_size / TEXT_BYTES_PER_TOKEN)
    assert f"{expected:,} tokens" in lines[0]


@pytest.mark.parametrize("tokens, builder, expected", [
    (10**9, "divsufsort", 3),  # 2 shards: 1e9 bytes each need 5e9 bytes (4.7 GiB) for libdivsufsort, over 4 GiB
    (5 * 10**9, "auto", 2),    # rust_indexing holds 0.4 x 8 GiB = 3.4e9 tokens a shard
    (10**6, "auto", 1),
])
def test_shards_needed_is_the_fewest_the_build_accepts(tokens, builder, expected):
    mem, ram = 4 * 2**30, 8 * 2**30
    n = shards_needed(tokens, 2, mem, ram, builder)
    assert n == expected
    check_shard_memory(-(-tokens // n), 2, n, mem, ram, builder)  # accepted
    if n > 1:
        with pytest.raises(ConfigError):
            check_shard_memory(-(-tokens // (n - 1)), 2, n - 1, mem, ram, builder)


def test_fewest_shards_include_shards_above_2_gib_of_tokens():
    """The search serves shards of 5-byte pointers: 3B 16-bit tokens on a machine whose memory sorts
    them in one piece stay one shard."""
    assert shards_needed(3 * 10**9, 2, mem_bytes=64 * 2**30, ram_bytes=128 * 2**30, sa_builder="divsufsort") == 1
    assert shards_needed(3 * 10**9, 2, mem_bytes=16 * 2**30, ram_bytes=32 * 2**30, sa_builder="divsufsort") == 3
