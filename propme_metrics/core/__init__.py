"""Shared plumbing of every layer: errors and exit codes, atomic files, JSON Lines, progress, checksums."""
