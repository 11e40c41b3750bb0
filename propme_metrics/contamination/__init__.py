"""Contamination of other benchmarks' items in the training corpus, from PropMe's own index."""
