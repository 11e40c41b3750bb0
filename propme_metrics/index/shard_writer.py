"""Writing documents into infini-gram v4 shard files: token ids, offsets, metadata lines, unigrams,
and the per-source document and token counts of what was written.

Document i of the corpus goes to shard i mod N; a build of some shards (`--shard-ids`) writes only
those. The counts per source are taken from each record as it is written, with the same unwrapping
and source rule (`format.unwrap_metadata`, `source_counts.source_of`) that `index/source_counts.py`
applies to a finished index's metadata lines, so both ways of counting agree.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.progress import rate
from propme_metrics.index.format import ShardFile, TokenLayout, shard_file, token_layout, unwrap_metadata
from propme_metrics.index.source_counts import source_of
from propme_metrics.index.sources import CorpusSource

#: documents per tokenizer call (the build's --batch-size)
DEFAULT_BATCH_SIZE = 1024
#: the shard files the writer streams (the suffix array `table.N` comes later, `unigram.N` at the end)
STREAMED_FILES = (ShardFile.TOKENIZED, ShardFile.OFFSET, ShardFile.METADATA, ShardFile.METAOFF)


@dataclass
class WrittenShards:
    """What the writer wrote: counts per shard and per source, and the documents fixed on the way."""

    shards: dict[str, dict[str, int]]              #: str(shard id) -> {"documents": n, "tokens": n}
    sources: dict[str, dict[str, int]]             #: source -> {"documents": n, "tokens": n}
    replaced_surrogates: int = 0
    excluded: dict[str, int] = field(default_factory=dict)   #: documents left out per excluded source


@dataclass
class ShardWriter:
    """The open shard files of one build; `write` appends tokenized documents, `close` finishes them."""

    folder: Path
    width: int
    vocab_len: int                #: token ids below this are counted in `unigram.N`
    shard_ids: Sequence[int]
    source_field: str
    layout: TokenLayout = field(init=False)
    _files: dict[int, dict[str, Any]] = field(default_factory=dict, init=False)
    _pos: dict[int, list[int]] = field(default_factory=dict, init=False)    #: bytes into tokenized.N, metadata.N
    _unigrams: dict[int, np.ndarray] = field(default_factory=dict, init=False)
    _counts: dict[int, dict[str, int]] = field(default_factory=dict, init=False)
    _sources: dict[str, dict[str, int]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.layout = token_layout(self.width)
        for sid in self.shard_ids:
            self._files[sid] = {kind: open(shard_file(self.folder, kind, sid), "wb") for kind in STREAMED_FILES}
            self._pos[sid] = [0, 0]
            self._unigrams[sid] = np.zeros(self.vocab_len, dtype=np.int64)
            self._counts[sid] = {"documents": 0, "tokens": 0}

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close_files()

    def write(self, sid: int, metadata: Sequence[dict[str, Any]], ids: Sequence[Sequence[int]]) -> int:
        """Append documents (their metadata and token ids: lists or arrays) to shard `sid`; returns
        the tokens written."""
        dtype, width = self.layout.dtype, self.width
        lengths = np.array([len(x) + 1 for x in ids], dtype=np.uint64)
        flat = np.full(int(lengths.sum()), self.layout.separator, dtype=dtype)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        if isinstance(ids[0], np.ndarray):
            body = np.concatenate(ids).astype(dtype, copy=False)
        else:  # lists from the tokenizer: one pass over them, no array per document
            body = np.fromiter(chain.from_iterable(ids), dtype=dtype, count=len(flat) - len(ids))
        mask = np.ones(len(flat), dtype=bool)
        mask[starts] = False
        flat[mask] = body
        texts = [json.dumps(meta, ensure_ascii=False) for meta in metadata]
        lines = [(text + "\n").encode("utf-8") for text in texts]
        line_lengths = np.array([len(x) for x in lines], dtype=np.uint64)
        f, pos = self._files[sid], self._pos[sid]
        f[ShardFile.OFFSET].write((pos[0] + starts.astype(np.uint64) * width).astype(np.uint64).tobytes())
        f[ShardFile.TOKENIZED].write(flat.tobytes())
        f[ShardFile.METAOFF].write((pos[1] + np.concatenate(([0], np.cumsum(line_lengths)[:-1]))).astype(np.uint64).tobytes())
        f[ShardFile.METADATA].write(b"".join(lines))
        pos[0] += flat.nbytes
        pos[1] += int(line_lengths.sum())
        self._unigrams[sid] += np.bincount(body, minlength=self.vocab_len)[:self.vocab_len] if len(body) else 0
        self._counts[sid]["documents"] += len(ids)
        self._counts[sid]["tokens"] += len(body)
        for meta, doc_ids in zip(metadata, ids):  # the record as written, not parsed back from its line
            entry = self._sources.setdefault(source_of(unwrap_metadata(meta), self.source_field),
                                             {"documents": 0, "tokens": 0})
            entry["documents"] += 1
            entry["tokens"] += len(doc_ids)
        return len(body)

    def close_files(self) -> None:
        for f in self._files.values():
            for fh in f.values():
                fh.close()

    def empty_shards(self) -> list[int]:
        """The shards no document went to so far."""
        return [sid for sid in self.shard_ids if self._counts[sid]["documents"] == 0]

    def finish(self) -> WrittenShards:
        """Close the streamed files, write every `unigram.N` (separator row last: the document
        count) and return the counts."""
        self.close_files()
        for sid in self.shard_ids:
            write_unigrams(shard_file(self.folder, ShardFile.UNIGRAM, sid), self._unigrams[sid], self.layout.separator,
                           self._counts[sid]["documents"])
        return WrittenShards(shards={str(sid): c for sid, c in self._counts.items()},
                             sources=dict(sorted(self._sources.items())))


def write_unigrams(path: Path, counts: np.ndarray, separator: int, documents: int) -> None:
    """A `unigram.N` file: a row (id, count) for every id that occurs, the separator's row last
    (its count is the shard's document count, one separator per document)."""
    with open(path, "w") as fh:
        for tid in np.flatnonzero(counts):
            fh.write(f"{tid} {counts[tid]}\n")
        fh.write(f"{separator} {documents}\n")


def tokenize_corpus(source: CorpusSource, writer: ShardWriter, encode: Callable[[list[str]], list[list[int]]],
                    num_shards: int, batch_size: int = DEFAULT_BATCH_SIZE, bar=None) -> WrittenShards:
    """Stream the corpus through `encode` (a batch of texts -> their token ids) into the writer's
    shards, `batch_size` documents at a time; `bar` (a progress bar) shows documents and tokens."""
    wanted = set(writer.shard_ids)
    task = bar.add_task("tokenizing", total=None, rate="") if bar is not None else None
    started, n_docs, n_tokens = time.time(), 0, 0

    def flush(batch: list[tuple[int, Any]]) -> None:
        nonlocal n_docs, n_tokens
        mine = [(i, d) for i, d in batch if i % num_shards in wanted]
        if mine:
            per_shard: dict[int, tuple[list, list]] = {}
            for (i, doc), doc_ids in zip(mine, encode([d.text for _, d in mine])):
                meta, ids = per_shard.setdefault(i % num_shards, ([], []))
                meta.append(doc.metadata)
                ids.append(doc_ids)
            for sid, (meta, ids) in per_shard.items():
                n_tokens += writer.write(sid, meta, ids)
        n_docs += len(batch)
        if task is not None:
            elapsed = time.time() - started
            bar.update(task, completed=n_docs, rate=f"{rate(n_docs, elapsed, 'docs')}  {rate(n_tokens, elapsed, 'tok')}")

    with writer:
        batch: list[tuple[int, Any]] = []
        for i, doc in enumerate(source):
            batch.append((i, doc))
            if len(batch) >= batch_size:
                flush(batch)
                batch = []
        flush(batch)
    source.check_excluded()
    if n_docs == 0:
        raise ConfigError(f"the corpus {source.location} has no documents"
                          + (" left after --exclude-sources" if source.exclude_sources else ""),
                          "check the path, --split and the source filter")
    empty = writer.empty_shards()
    if empty:
        raise ConfigError(f"shard(s) {empty} got no documents ({n_docs} documents for {num_shards} shards)",
                          "use fewer --shards")
    written = writer.finish()
    if task is not None:
        bar.update(task, total=n_docs)
    written.replaced_surrogates, written.excluded = source.replaced_surrogates, dict(source.excluded)
    return written
