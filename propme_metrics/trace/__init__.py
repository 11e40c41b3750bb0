"""SimpleTrace: verbatim spans of a generation, the documents they come from, NV-recall, PII leaks."""
