"""Streaming documents out of a corpus: local JSONL (plain, .gz, .zst), parquet, or a HF dataset.

Documents are read one at a time (never the whole corpus in memory); each comes out as its text
and the metadata fields the user chose to keep.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from propme_metrics.core.checksums import ALGORITHM, file_digest, sampled_digest
from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import json_objects, scrub_surrogates

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst")
PARQUET_SUFFIXES = (".parquet",)


@dataclass
class Document:
    """One corpus document: its text and the kept metadata fields."""

    text: str
    metadata: dict[str, Any]


@dataclass
class CorpusSource:
    """Where documents come from, which fields to read, and which sources to leave out."""

    location: str
    text_field: str = "text"
    keep_fields: tuple[str, ...] = ("id", "source")
    source_field: str = "source"
    exclude_sources: tuple[str, ...] = ()
    revision: str | None = None
    config: str | None = None
    split: str = "train"
    files: list[Path] = field(default_factory=list, init=False)
    _stats: dict[str, dict[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)
    replaced_surrogates: int = field(default=0, init=False, compare=False)  #: documents fixed by the last pass
    #: documents the last pass left out, per excluded source
    excluded: dict[str, int] = field(default_factory=dict, init=False, compare=False)
    #: every source the last pass saw (kept when sources are excluded, to suggest a misspelt one)
    seen_sources: set[str] = field(default_factory=set, init=False, compare=False)

    def __post_init__(self) -> None:
        for option, value in (("--text-field", self.text_field), ("--source-field", self.source_field)):
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{option} is empty: it must name a field of the documents",
                                  f"leave {option} out for its default, or name a field")
        if any(not s.strip() for s in self.exclude_sources):
            raise ConfigError(f"--exclude-sources names an empty source ({','.join(self.exclude_sources)!r})",
                              "give comma-separated source names, e.g. depbank,jvj")
        path = Path(self.location)
        if path.exists():
            self.files = _corpus_files(path)
        elif self.location.count("/") == 1 and not self.location.startswith((".", "/")):
            self.files = []  # a Hugging Face dataset id
        else:
            raise ConfigError(f"corpus {self.location!r} does not exist",
                              "give a .jsonl/.jsonl.gz/.jsonl.zst/.parquet file, a folder of them, "
                              "or a Hugging Face dataset id such as owner/name")

    @property
    def is_local(self) -> bool:
        return bool(self.files)

    def describe(self, known: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """A JSON-able identity of the source, for the manifest and the build's parameter hash.

        Local files are identified by name, size and a content checksum, so an edited corpus gets
        another identity even when its size is unchanged. `known` (from `file_stats` of an earlier
        build) lets a file whose size, mtime and sampled checksum are unchanged skip re-reading.
        """
        desc: dict[str, Any] = {
            "location": str(Path(self.location).resolve()) if self.is_local else self.location,
            "kind": "files" if self.is_local else "huggingface",
            "text_field": self.text_field,
            "keep_fields": list(self.keep_fields),
            "source_field": self.source_field,
            "exclude_sources": sorted(self.exclude_sources),
        }
        if self.is_local:
            desc["files"] = [{"path": name, "bytes": st["bytes"], ALGORITHM: st[ALGORITHM]}
                             for name, st in self.file_stats(known).items()]
        else:
            desc.update(revision=self.revision, config=self.config, split=self.split)
        return desc

    def file_stats(self, known: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
        """{name: {bytes, mtime_ns, sample, xxh3_128}} of each local file (computed once per object)."""
        if self._stats is None:
            known = known or {}
            root = Path(self.location)
            stats = {}
            for p in self.files:
                name = str(p.relative_to(root)) if root.is_dir() else p.name
                st = p.stat()
                entry = {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "sample": sampled_digest(p)}
                old = known.get(name) or {}
                same = all(old.get(k) == v for k, v in entry.items()) and old.get(ALGORITHM)
                entry[ALGORITHM] = old[ALGORITHM] if same else file_digest(p)
                stats[name] = entry
            self._stats = stats
        return self._stats

    def estimated_text_bytes(self) -> int | None:
        """Rough uncompressed size of the corpus text, for the disk-space check (None if unknown)."""
        if not self.is_local:
            return None
        total = 0
        for p in self.files:
            size = p.stat().st_size
            total += size if p.name.endswith(".jsonl") else 4 * size
        return total

    def longest_line_bytes(self) -> int | None:
        """Bytes of the longest line of the local plain .jsonl files (the largest document the
        tokenizer will hold at once), found by a fast scan; None when no such file is given."""
        import numpy as np

        plain = [p for p in self.files if p.name.endswith(".jsonl")]
        if not plain:
            return None
        longest = 0
        for p in plain:
            run = 0  # bytes since the last newline, carried over block boundaries
            with open(p, "rb") as fh:
                while block := fh.read(1 << 24):
                    ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
                    if not ends.size:
                        run += len(block)
                        continue
                    longest = max(longest, run + int(ends[0]), int(np.diff(ends).max(initial=0)))
                    run = len(block) - int(ends[-1]) - 1
            longest = max(longest, run)
        return longest

    def __iter__(self) -> Iterator[Document]:
        """The documents in corpus order; lone surrogates in them become U+FFFD (counted in
        `replaced_surrogates`), since they cannot be stored as UTF-8."""
        excluded = set(self.exclude_sources)
        self.replaced_surrogates, self.excluded, self.seen_sources = 0, dict.fromkeys(self.exclude_sources, 0), set()
        records = self._local_records() if self.is_local else self._hub_records()
        for where, record in records:
            record, n = scrub_surrogates(record)
            self.replaced_surrogates += bool(n)
            if self.text_field not in record:
                raise ConfigError(
                    f"{where}: no field {self.text_field!r} in the document (fields: {', '.join(sorted(record)) or 'none'})",
                    "name the text field with --text-field")
            text = record[self.text_field]
            if not isinstance(text, str):
                raise ConfigError(f"{where}: field {self.text_field!r} is {type(text).__name__}, not text")
            if excluded:
                source = str(record.get(self.source_field))
                self.seen_sources.add(source)
                if source in excluded:
                    self.excluded[source] += 1
                    continue
            meta = {k: _jsonable(record[k]) for k in self.keep_fields if k in record}
            yield Document(text=text, metadata=meta)

    def check_excluded(self) -> None:
        """After a pass: refuse an excluded source that no document had (a misspelt name would
        otherwise exclude nothing, silently), naming the nearest sources that exist."""
        import difflib

        missing = [s for s, n in self.excluded.items() if not n]
        if missing:
            near = sorted({m for s in missing for m in difflib.get_close_matches(s, self.seen_sources, n=3)})
            raise ConfigError(f"--exclude-sources {', '.join(map(repr, missing))}: no document has that "
                              f"{self.source_field!r}" + (f" (did you mean {', '.join(map(repr, near))}?)" if near
                                                            else ""),
                              f"the corpus's sources include {', '.join(sorted(self.seen_sources)[:12])}"
                              + (" ..." if len(self.seen_sources) > 12 else "")
                              + "; name the field holding the source with --source-field")

    def _local_records(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for path in self.files:
            if path.name.endswith(PARQUET_SUFFIXES):
                yield from _parquet_records(path, (self.text_field, self.source_field, *self.keep_fields))
            else:
                yield from _jsonl_records(path)

    def _hub_records(self) -> Iterator[tuple[str, dict[str, Any]]]:
        import datasets

        try:
            ds = datasets.load_dataset(self.location, name=self.config, revision=self.revision,
                                       split=self.split, streaming=True)
        except Exception as exc:  # hub/network/config errors come in many types
            raise ConfigError(
                f"cannot open Hugging Face dataset {self.location!r}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                "check the id, --config, --split and --revision, and that the hub is reachable "
                "(or download the files and pass the local folder)") from None
        for i, record in enumerate(ds):
            yield f"{self.location}[{i}]", record


def _corpus_files(path: Path) -> list[Path]:
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(JSONL_SUFFIXES + PARQUET_SUFFIXES))
    unsupported = [p for p in files if not p.name.endswith(JSONL_SUFFIXES + PARQUET_SUFFIXES)]
    if unsupported:
        raise ConfigError(f"unsupported corpus file {unsupported[0]}",
                          "PropMe reads .jsonl, .jsonl.gz, .jsonl.zst and .parquet files")
    if not files:
        raise ConfigError(f"no corpus files (.jsonl, .jsonl.gz, .jsonl.zst, .parquet) under {path}")
    return files


def _lines(path: Path) -> Iterator[str]:
    """Text lines of a plain, gzip or zstd file; a truncated zstd stream is an error, not an end."""
    if path.name.endswith(".zst"):
        yield from _zstd_lines(path)
        return
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            yield _decode_line(raw, path, lineno)


def _decode_line(raw: bytes, path: Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}:{lineno}: not UTF-8 (byte {exc.start + 1} of the line is {raw[exc.start]:#04x})",
                          "convert the corpus to UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None


def _zstd_lines(path: Path) -> Iterator[str]:
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    dobj, in_frame, pending, lineno = dctx.decompressobj(), False, b"", 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                while chunk:
                    in_frame = True
                    pending += dobj.decompress(chunk)
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        lineno += 1
                        yield _decode_line(line + b"\n", path, lineno)
                    if dobj.eof:  # a frame ended: the rest of the chunk starts the next one
                        chunk, dobj, in_frame = dobj.unused_data, dctx.decompressobj(), False
                    else:
                        chunk = b""
    except zstandard.ZstdError as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "check that the file is complete and not corrupted") from None
    if in_frame:
        raise ConfigError(f"cannot read {path}: the zstd stream is truncated",
                          "check that the file is complete and not corrupted")
    if pending:
        yield _decode_line(pending, path, lineno + 1)


def _jsonl_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        for lineno, record in json_objects(_lines(path), str(path),
                                           "each line of a JSONL corpus must be one JSON object"):
            yield f"{path}:{lineno}", record
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "check that the file is complete and not corrupted") from None


def _parquet_records(path: Path, wanted: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Rows of the columns `wanted` (the text field first); a missing text column is one message
    listing the file's columns, not only those read."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        names = set(pf.schema_arrow.names)
        if wanted[0] not in names:
            raise ConfigError(f"{path}: no column {wanted[0]!r} for the document text (columns: "
                              f"{', '.join(pf.schema_arrow.names) or 'none'})", "name the text column with --text-field")
        columns = [c for c in dict.fromkeys(wanted) if c in names]
        row = 0
        for batch in pf.iter_batches(batch_size=1024, columns=columns):
            for record in batch.to_pylist():
                row += 1
                yield f"{path}[row {row}]", record
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid derives from ValueError
        raise ConfigError(f"cannot read {path}: {exc}", "check that the file is a complete parquet file") from None


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)

