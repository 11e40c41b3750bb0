"""The metric registry, per-generation values and their aggregates, PM scores and intervals."""
