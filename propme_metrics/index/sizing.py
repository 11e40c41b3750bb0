"""What a build will take (disk, memory, time) before it starts, and refusing shards that cannot fit.

The rates were measured on a 2-core machine with little other load (`benchmarks/index_build.py`,
`benchmarks/suffix_array.py`; per core where the step uses every core, GPT-2 tokenizer on
generated English); they give the order of magnitude, not a promise.
"""
from __future__ import annotations

from dataclasses import dataclass

from propme_metrics.core.errors import ConfigError
from propme_metrics.index.format import pointer_size
from propme_metrics.index.suffix_array import choose_sa_builder, divsufsort_memory

TEXT_BYTES_PER_TOKEN = 4.0        #: UTF-8 bytes of text per token, for estimates from file sizes
DOC_BYTES_PER_TOKEN = 0.25        #: offset, metaoff and metadata bytes per token (about 80 per document)
RUST_TOKENS_PER_RAM_BYTE = 0.4    #: rule of thumb: a rust_indexing shard holds at most 0.4 x RAM tokens
TOKENIZE_TOKENS_PER_CPU_S = 0.5e6  #: fast HF tokenizer, batched, per core
DIVSUFSORT_BYTES_PER_S = 10e6     #: libdivsufsort (one core) incl. writing the table, bytes of tokenized.N
RUST_TOKENS_PER_CPU_S = 1.3e6     #: rust_indexing make-part + merge + concat on normal text, per core
#: peak memory of the HF fast tokenizer per byte of one document's text (131 measured on a 6.7 MB
#: single-line document with GPT-2; a 48 MB one peaked at 7.3 GB with the Llama tokenizer)
TOKENIZE_MEMORY_PER_TEXT_BYTE = 150


@dataclass
class BuildEstimate:
    """Estimated needs of a build; `basis` says where the token count comes from."""

    tokens: int
    basis: str
    num_shards: int
    width: int
    builder: str                 #: suffix-array builder 'auto' picks for the largest shard
    disk_bytes: int              #: the finished index
    temp_bytes: int              #: extra space while a suffix array is built
    memory_bytes: int            #: peak memory of the suffix-array step of one shard
    seconds: float               #: on `cpus` cores

    @property
    def tokens_per_shard(self) -> int:
        return -(-self.tokens // self.num_shards)

    def describe(self) -> str:
        return (f"estimate ({self.basis}): {self.tokens:,} tokens in {self.num_shards} shard(s); "
                f"disk {_gib(self.disk_bytes)} (+{_gib(self.temp_bytes)} while building), memory "
                f"{_gib(self.memory_bytes)} per shard build ({self.builder}), time about "
                f"{_duration(self.seconds)}")


def estimate_build(tokens: int, basis: str, num_shards: int, width: int, cpus: int, mem_bytes: int,
                   sa_builder: str = "auto", longest_bytes: int | None = None) -> BuildEstimate:
    """Disk, memory and time for `tokens` tokens split evenly into `num_shards` shards. The
    tokenizer spreads documents over the cores, but one document is tokenized on one core: the
    longest document (`longest_bytes` of text) takes at least its own tokens at one core's rate."""
    per_shard = -(-tokens // num_shards)
    ds_bytes = max(width, per_shard * width)
    ptr_size = pointer_size(ds_bytes)
    builder = choose_sa_builder(ds_bytes, mem_bytes, sa_builder)
    table = per_shard * ptr_size
    disk = int(num_shards * (ds_bytes + table + per_shard * DOC_BYTES_PER_TOKEN))
    if builder == "divsufsort":
        memory, temp = divsufsort_memory(ds_bytes), table
        sa_seconds = num_shards * ds_bytes / DIVSUFSORT_BYTES_PER_S
    else:
        memory, temp = min(mem_bytes, ds_bytes * 8), 2 * table
        sa_seconds = tokens / (RUST_TOKENS_PER_CPU_S * cpus)
    longest_tokens = (longest_bytes or 0) / TEXT_BYTES_PER_TOKEN
    seconds = max(tokens / (TOKENIZE_TOKENS_PER_CPU_S * cpus), longest_tokens / TOKENIZE_TOKENS_PER_CPU_S) + sa_seconds
    return BuildEstimate(tokens=tokens, basis=basis, num_shards=num_shards, width=width, builder=builder,
                         disk_bytes=disk, temp_bytes=temp, memory_bytes=memory, seconds=seconds)


def _shard_problem(tokens_per_shard: int, width: int, mem_bytes: int, ram_bytes: int, sa_builder: str,
                   basis: str) -> tuple[str, str] | None:
    """Why a shard of `tokens_per_shard` tokens cannot be built in memory, and what else to try
    besides more shards (None when it can)."""
    ds_bytes = max(width, tokens_per_shard * width)
    builder = choose_sa_builder(ds_bytes, mem_bytes, sa_builder)
    why = f" ({basis})" if basis else ""
    if builder == "divsufsort" and divsufsort_memory(ds_bytes) > mem_bytes:
        return (f"a shard of {tokens_per_shard:,} tokens{why} needs {_gib(divsufsort_memory(ds_bytes))} of memory "
                f"for libdivsufsort, more than the {_gib(mem_bytes)} allowed",
                " (or --sa-builder auto, which falls back to rust_indexing)")
    limit = int(RUST_TOKENS_PER_RAM_BYTE * ram_bytes)
    if builder == "rust" and tokens_per_shard > limit:
        return (f"a shard of {tokens_per_shard:,} tokens{why} is more than this machine can index in one piece "
                f"(at most about {limit:,} tokens: 0.4 x {_gib(ram_bytes)} of RAM)", "")
    return None


def check_shard_memory(tokens_per_shard: int, width: int, num_shards: int, mem_bytes: int, ram_bytes: int,
                       sa_builder: str = "auto", basis: str = "") -> None:
    """Refuse a shard whose suffix array cannot be built in memory, naming the fewest shards that fit."""
    problem = _shard_problem(tokens_per_shard, width, mem_bytes, ram_bytes, sa_builder, basis)
    if problem is not None:
        why, alternative = problem
        fewest = shards_needed(tokens_per_shard * num_shards, width, mem_bytes, ram_bytes, sa_builder)
        raise ConfigError(why, f"use --shards {fewest}{alternative}")


def shards_needed(tokens: int, width: int, mem_bytes: int, ram_bytes: int, sa_builder: str = "auto") -> int:
    """The fewest shards of `tokens` tokens in all that a build accepts (`check_shard_memory`): with
    'divsufsort', every shard sorted in `mem_bytes`; with 'auto' or 'rust', within 0.4 x RAM. Fewer,
    larger shards trace faster (each search visits every shard), and the search serves any shard
    size, so this is the layout to prefer."""
    shards = 1
    while _shard_problem(-(-tokens // shards), width, mem_bytes, ram_bytes, sa_builder, "") is not None:
        shards += 1
    return shards


def check_document_memory(longest_bytes: int | None, available_bytes: int) -> int:
    """Refuse, before anything is tokenized, a document whose tokenization cannot fit in the memory
    available (a single-line corpus of tens of MB needs GBs); returns the estimated peak (0 if unknown)."""
    if not longest_bytes:
        return 0
    need = int(longest_bytes * TOKENIZE_MEMORY_PER_TEXT_BYTE)
    if need > available_bytes:
        raise ConfigError(
            f"the corpus' longest document ({longest_bytes / 2**20:,.1f} MiB of JSON on one line) needs about "
            f"{_gib(need)} of memory to tokenize ({TOKENIZE_MEMORY_PER_TEXT_BYTE} bytes per byte of text), more "
            f"than the {_gib(available_bytes)} available",
            "split that document into several (e.g. at paragraph breaks), or build on a machine with more memory")
    return need


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
