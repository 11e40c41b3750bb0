"""The tests' name for `propme_metrics.testing` (shared with the benchmark scripts)."""
from propme_metrics.testing import gpt2_tokenizer, make_index, word_level_tokenizer, write_jsonl

__all__ = ["gpt2_tokenizer", "make_index", "word_level_tokenizer", "write_jsonl"]
