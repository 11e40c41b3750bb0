"""The infini-gram index: sources, tokenizer, build, on-disk format, reader and suffix-array search."""
