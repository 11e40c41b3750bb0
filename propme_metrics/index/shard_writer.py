"""Writing documents into infini-gram v4 shard files: token ids, offsets, metadata lines, unigrams,
and the per-source document and token counts of what was written.

Document i of the corpus goes to shard i mod N; a build of some shards (`--shard-ids`) writes only
those. A shard's files are opened when its first document comes, and at most `open_shards_allowed()`
shards keep theirs open (the least recently written are closed and later reopened to append), so the
number of shards is bounded by the documents (every shard needs one), never by the open-file limit.
The counts per source are taken from each record as it is written, with the same unwrapping
and source rule (`format.unwrap_metadata`, `source_counts.source_of`) that `index/source_counts.py`
applies to a finished index's metadata lines, so both ways of counting agree.
"""
from __future__ import annotations

import json
import resource
import time
from collections import OrderedDict
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
#: open-file descriptors left to the rest of the process (tokenizer threads, progress, the source)
RESERVED_FILES = 256


def open_shards_allowed() -> int:
    """How many shards may hold their streamed files open at once: half of what the open-file limit
    leaves after `RESERVED_FILES`, at least one."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 16
    return max(1, (soft - RESERVED_FILES) // (2 * len(STREAMED_FILES)))


@dataclass
class WrittenShards:
    """What the writer wrote: counts per shard and per source, and the documents fixed on the way."""

    shards: dict[str, dict[str, int]]              #: str(shard id) -> {"documents": n, "tokens": n}
    sources: dict[str, dict[str, int]]             #: source -> {"documents": n, "tokens": n}
    replaced_surrogates: int = 0
    excluded: dict[str, int] = field(default_factory=dict)   #: documents left out per excluded source


@dataclass
class ShardWriter:
    """The shard files of one build; `write` appends tokenized documents, `finish` completes them."""

    folder: Path
    width: int
    vocab_len: int                #: token ids below this are counted in `unigram.N`
    shard_ids: Sequence[int]
    source_field: str
    layout: TokenLayout = field(init=False)
    max_open: int = field(default_factory=open_shards_allowed)   #: shards whose files stay open at once
    _files: OrderedDict[int, dict[str, Any]] = field(default_factory=OrderedDict, init=False)  #: open, oldest first
    _pos: dict[int, list[int]] = field(default_factory=dict, init=False)    #: bytes into tokenized.N, metadata.N
    _unigrams: dict[int, np.ndarray] = field(default_factory=dict, init=False)
    _counts: dict[int, dict[str, int]] = field(default_factory=dict, init=False)
    _sources: dict[str, dict[str, int]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.layout = token_layout(self.width)
        self._counts = {sid: {"documents": 0, "tokens": 0} for sid in self.shard_ids}

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
        f, pos = self._open(sid), self._pos[sid]
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

    def _open(self, sid: int) -> dict[str, Any]:
        """Shard `sid`'s streamed files, opened (created on its first document, else appended to)
        after closing the least recently written shard's when `max_open` are open."""
        if sid in self._files:
            self._files.move_to_end(sid)
            return self._files[sid]
        while len(self._files) >= self.max_open:
            for fh in self._files.popitem(last=False)[1].values():
                fh.close()
        mode = "ab" if sid in self._pos else "wb"
        if sid not in self._pos:
            self._pos[sid] = [0, 0]
            self._unigrams[sid] = np.zeros(self.vocab_len, dtype=np.int64)
        self._files[sid] = {kind: open(shard_file(self.folder, kind, sid), mode) for kind in STREAMED_FILES}
        return self._files[sid]

    def close_files(self) -> None:
        while self._files:
            for fh in self._files.popitem(last=False)[1].values():
                fh.close()

    def finish(self) -> WrittenShards:
        """Close the streamed files, refuse a shard no document went to, write every `unigram.N`
        (separator row last: the document count) and return the counts."""
        self.close_files()
        empty = [sid for sid in self.shard_ids if self._counts[sid]["documents"] == 0]
        if empty:
            written = sum(c["documents"] for c in self._counts.values())
            raise ConfigError(f"shard(s) {id_ranges(empty)} got no documents ({written:,} documents for "
                              f"{len(self.shard_ids):,} shards): every shard needs at least one",
                              "use fewer --shards (at most one per document)")
        for sid in self.shard_ids:
            write_unigrams(shard_file(self.folder, ShardFile.UNIGRAM, sid), self._unigrams[sid], self.layout.separator,
                           self._counts[sid]["documents"])
        return WrittenShards(shards={str(sid): c for sid, c in self._counts.items()},
                             sources=dict(sorted(self._sources.items())))


def id_ranges(ids: Sequence[int]) -> str:
    """Sorted ids as runs (`0-4, 7, 9-12`), so a message about 99,970 shards stays one line."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


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
    written = writer.finish()
    if task is not None:
        bar.update(task, total=n_docs)
    written.replaced_surrogates, written.excluded = source.replaced_surrogates, dict(source.excluded)
    return written
