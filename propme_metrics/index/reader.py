"""Opening a built index: a thin, typed layer over infini-gram's engine, plus verify and info.

The files are checked before the engine sees them (the engine aborts the process on a bad file
instead of raising), and the engine is opened through a path that contains none of the
substrings it uses to recognise shard files.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from propme_metrics.core.checksums import ALGORITHM, file_digest, sample_matches
from propme_metrics.core.errors import IndexFormatError
from propme_metrics.index.format import (
    SHARD_FILES,
    TOKENIZER_DIRNAME,
    WORD_STARTS_NAME,
    ShardFile,
    document_lengths,
    pointer_size,
    pointers,
    read_unigrams,
    shard_file,
    token_layout,
)
from propme_metrics.index.manifest import IndexManifest
from propme_metrics.index.search import DocWindow, IndexSearch


class Index:
    """An opened PropMe index: manifest, tokenizer, and the memory-mapped infini-gram engine."""

    def __init__(self, path: str | Path):
        self.path = Path(path).absolute()
        self.manifest = IndexManifest.read(self.path)
        if not self.manifest.complete:
            raise IndexFormatError(
                f"{self.path} holds shards {self.manifest.shard_ids} of {self.manifest.num_shards} only",
                "build the other shards with --shard-ids and combine them with `propme index join`")
        self._check_files()
        #: shard ids in the engine's order (it sorts file names as strings: 10 before 2)
        self.engine_shards = sorted(self.manifest.shard_ids, key=lambda sid: f"tokenized.{sid}")

    @property
    def token_width(self) -> int:
        return self.manifest.token_width

    @property
    def separator(self) -> int:
        return token_layout(self.token_width).separator

    @cached_property
    def search(self) -> IndexSearch:
        """The index's search path (numpy over the memory-mapped shards): what tracing and prompts use."""
        return IndexSearch(self)

    @cached_property
    def tokenizer(self):
        """The index's own tokenizer, loaded from the copy stored inside the index."""
        from propme_metrics.index.tokenizer import load_tokenizer

        return load_tokenizer(str(self.path / TOKENIZER_DIRNAME))

    @cached_property
    def engine(self):
        from infini_gram.engine import InfiniGramEngine

        tok = self.manifest.tokenizer
        eos = tok.eos_token_id if tok.eos_token_id is not None else 0
        return InfiniGramEngine(
            index_dir=str(_engine_safe_path(self.path)), eos_token_id=eos,
            vocab_size=self.separator, token_dtype=token_layout(self.token_width).engine_dtype,
            # word starts and unigram log-probabilities make the engine's own `attribute` usable too
            bow_ids_path=str(self.path / WORD_STARTS_NAME), precompute_unigram_logprobs=True)

    @cached_property
    def word_starts(self) -> np.ndarray:
        """The word-start token ids the build listed, sorted (an array: a few bytes per id, not a set)."""
        return np.unique(np.array([int(x) for x in (self.path / WORD_STARTS_NAME).read_text().split()], dtype=np.int64))

    @cached_property
    def unigram_table(self) -> np.ndarray:
        """Count of every token id over all shards, by id, the separator left out (an array: a few
        bytes per id, where a dict took about a hundred)."""
        rows = np.concatenate([read_unigrams(shard_file(self.path, ShardFile.UNIGRAM, sid)) for sid in self.manifest.shard_ids]
                              + [np.zeros((0, 2), dtype=np.int64)])
        rows = rows[rows[:, 0] != self.separator]
        table = np.zeros(int(rows[:, 0].max(initial=-1)) + 1, dtype=np.int64)
        np.add.at(table, rows[:, 0], rows[:, 1])
        return table

    @property
    def total_positions(self) -> int:
        """Tokens in the suffix arrays, separators included (the unigram denominator)."""
        return sum(s.ds_bytes // self.token_width for s in self.manifest.shards)

    @cached_property
    def backend(self):
        """The index tokenizer's Rust core (tokenizers), loaded from its tokenizer.json in milliseconds."""
        from propme_metrics.index.tokenizer import load_backend

        return load_backend(self.path / TOKENIZER_DIRNAME)

    def check_tokenizer(self, name: str | None = None) -> None:
        """Refuse (IndexFormatError) the index's stored tokenizer copy, or the tokenizer `name` when
        given, unless it hashes to the manifest's sha256: spans would be counted in other tokens."""
        from propme_metrics.core.errors import ConfigError
        from propme_metrics.index.tokenizer import files_sha256, load_tokenizer, tokenizer_hash

        expected = self.manifest.tokenizer.sha256
        if name is not None:
            what, found = f"tokenizer {name!r}", tokenizer_hash(load_tokenizer(name))
        else:
            what = "the tokenizer stored in the index"
            try:
                self.backend  # noqa: B018 (loads it, or fails for an unreadable copy)
                # unchanged tokenizer files need no HF tokenizer (seconds to import); else it decides
                same_files = self.manifest.tokenizer.files_sha256 == files_sha256(self.path / TOKENIZER_DIRNAME)
                found = expected if same_files else tokenizer_hash(self.tokenizer)
            except ConfigError as exc:  # the copy inside the index cannot be loaded: the index is broken
                raise IndexFormatError(f"the tokenizer stored in {self.path} cannot be loaded: {exc.message}",
                                       "rebuild the index with `propme index build`") from None
        if found != expected:
            raise tokenizer_mismatch(self.path, self.manifest, what, f"sha256 {found[:12]}")

    def encode(self, text: str) -> list[int]:
        """Index-tokenizer ids of a text, no special tokens (as the HF tokenizer with add_special_tokens=False)."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        """Text of index-tokenizer ids (a list or an array, e.g. a window's `token_ids`)."""
        return self.tokenizer.decode(ids.tolist() if hasattr(ids, "tolist") else list(ids),
                                     clean_up_tokenization_spaces=False)

    @cached_property
    def document_lengths(self) -> np.ndarray:
        """Token count of every document, in the engine's document order (doc_ix)."""
        shards = self.search.shards_by_id
        return np.concatenate([document_lengths(shards[sid].offsets, shards[sid].n * self.token_width, self.token_width)
                               for sid in self.engine_shards])

    def count(self, ids: list[int]) -> int:
        """Occurrences of a token sequence in the corpus."""
        return self.search.count(ids)

    def document(self, doc_ix: int, max_tokens: int | None = None) -> DocWindow:
        """The first `max_tokens` tokens (all if None) of document `doc_ix` with its metadata (`.meta`)."""
        return self.search.document(int(doc_ix), max_tokens)

    def _check_files(self) -> None:
        m = self.manifest
        own = {shard_file("", kind, sid).name for sid in m.shard_ids for kind in SHARD_FILES}
        strays = sorted(p.name for p in self.path.iterdir()
                        if p.name not in own and any(kind in p.name for kind in SHARD_FILES))
        if strays:  # the engine reads every file whose name holds a shard kind: they would join the index
            raise IndexFormatError(
                f"{self.path} holds shard files that are not this index's (its shards are {m.shard_ids}): "
                + ", ".join(strays[:8]) + (f" and {len(strays) - 8} more" if len(strays) > 8 else ""),
                "move them out of the index folder (they belong to another index or build), then try again")
        for s in m.shards:
            paths = {kind: shard_file(self.path, kind, s.id) for kind in SHARD_FILES}
            missing = [p.name for p in paths.values() if not p.is_file()]
            if missing and m.adopted:
                gone = shard_file(self.path, ShardFile(missing[0].split(".")[0]), s.id)
                raise IndexFormatError(f"{self.path} refers to {os.readlink(gone) if gone.is_symlink() else gone}, "
                                       f"which is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
                                       f"the infini-gram folder(s) {', '.join(m.adopted['from'])} were moved, are not "
                                       "mounted or lost files: bring them back, or adopt them again from where they "
                                       f"are now (`propme index adopt FOLDER --tokenizer {m.tokenizer.name} --out {self.path} "
                                       "--force`)")
            if missing:
                raise IndexFormatError(f"{self.path} is missing {', '.join(missing)}",
                                       "the index is incomplete or was moved partly; rebuild it")
            sizes = {kind: p.stat().st_size for kind, p in paths.items()}
            ptr_size = pointer_size(s.ds_bytes)
            expected = {ShardFile.TOKENIZED: s.ds_bytes, ShardFile.TABLE: (s.ds_bytes // m.token_width) * ptr_size,
                        ShardFile.OFFSET: 8 * s.documents, ShardFile.METAOFF: 8 * s.documents}
            for kind, size in expected.items():
                if sizes[kind] != size:
                    raise IndexFormatError(
                        f"{paths[kind]} has {sizes[kind]} bytes, the manifest says {size}",
                        "the file is truncated or from another build; rebuild the index")
        if not (self.path / WORD_STARTS_NAME).is_file() or not (self.path / TOKENIZER_DIRNAME).is_dir():
            raise IndexFormatError(f"{self.path} lacks {WORD_STARTS_NAME} or {TOKENIZER_DIRNAME}/",
                                   "rebuild the index with `propme index build`")
        bad = checksum_mismatches(self.path, m.files, full=False)
        if bad and bad[0].startswith(TOKENIZER_DIRNAME + "/"):
            raise tokenizer_mismatch(self.path, m, "the tokenizer stored in the index", bad[0])
        if bad:
            raise IndexFormatError(f"{self.path}: {bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
                                   damage_hint(m))


def damage_hint(manifest: IndexManifest) -> str:
    """What to do about an index file that no longer matches its recorded checksum."""
    if manifest.adopted:
        return (f"a file of the infini-gram folder(s) {', '.join(manifest.adopted['from'])} changed after it was "
                "adopted (disk error, copy gone wrong, edit): restore it from the published index, then adopt again")
    return "a file was changed after the build (disk error, copy gone wrong, edit); rebuild the index or copy it again"


def tokenizer_mismatch(path: Path, manifest: IndexManifest, what: str, found: str) -> IndexFormatError:
    """The one error for a tokenizer that is not the index's (its copy altered, or another one named)."""
    tok = manifest.tokenizer
    return IndexFormatError(
        f"{what} ({found}) is not the index's tokenizer {tok.name!r} (sha256 {tok.sha256[:12]}) of {path}",
        "name the tokenizer the index was built with, or none (the index's own copy is used); a copy inside "
        "the index that is not the one the index was built with was altered: rebuild the index or restore its "
        f"{TOKENIZER_DIRNAME} folder")


def checksum_mismatches(folder: Path, recorded: dict[str, dict[str, Any]], full: bool) -> list[str]:
    """What differs from the checksums recorded at build: sizes and sampled digests, or (`full`) every
    byte of the files whose full digest was recorded (an adopted infini-gram file has sampled ones only)."""
    bad = []
    for name, rec in recorded.items():
        p = folder / name
        if not p.is_file():
            bad.append(f"{name} is missing")
        elif p.stat().st_size != rec.get("bytes"):
            bad.append(f"{name} has {p.stat().st_size} bytes, the manifest says {rec.get('bytes')}")
        elif full and rec.get(ALGORITHM) is not None and file_digest(p) != rec.get(ALGORITHM):
            bad.append(f"{name} does not match its {ALGORITHM} checksum")
        elif (not full or rec.get(ALGORITHM) is None) and not sample_matches(p, rec.get("sample")):
            bad.append(f"{name} does not match its sampled checksum")
    return bad


def open_index(path: str | Path) -> Index:
    """Open an index folder; raises IndexFormatError with a hint when it is missing or broken."""
    return Index(path)


def _engine_safe_path(path: Path) -> Path:
    """`path`, or a symlink to it whose name has none of the engine's file-kind substrings."""
    if not any(word in str(path) for word in SHARD_FILES):
        return path
    root = Path(tempfile.gettempdir()) / f"propme-engine-links-{os.getuid()}"
    if any(word in str(root) for word in SHARD_FILES):
        raise IndexFormatError(f"the index path {path} contains one of {SHARD_FILES}, which confuses the engine",
                               "move the index to a folder whose path avoids those words")
    root.mkdir(exist_ok=True)
    link = root / hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if not link.is_symlink() or os.readlink(link) != str(path):
        tmp = root / f"{link.name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(path, target_is_directory=True)
        os.replace(tmp, link)
    return link


# ---------------------------------------------------------------------------------------------
# verify and info


@dataclass
class Check:
    """One verification check: its name, whether it passed, and what was seen."""

    name: str
    ok: bool
    detail: str


@dataclass
class VerifyReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


#: suffix-array positions `verify_index` checks per shard unless told otherwise
VERIFY_SAMPLES = 2000


def suffix_order_faults(folder: Path, sid: int, width: int, samples: int, rng: np.random.Generator) -> tuple[int, int]:
    """(pairs out of order, pairs checked) of `samples` random adjacent ranks of shard `sid`'s suffix
    array (all when the shard has fewer), and the first and last 16 pairs (the file's ends, where
    truncated and badly copied files differ): both pointers must be whole tokens inside
    `tokenized.N`, and the first suffix must not sort after the second (on their first 4,096 bytes)."""
    ds = np.memmap(shard_file(folder, ShardFile.TOKENIZED, sid), dtype=np.uint8, mode="r")
    sa = np.memmap(shard_file(folder, ShardFile.TABLE, sid), dtype=np.uint8, mode="r")
    ds_bytes = len(ds)
    ptr_size = pointer_size(ds_bytes)
    n = ds_bytes // width

    def ptr_at(rank: int) -> int:
        return int(pointers(np.asarray(sa[rank * ptr_size:(rank + 1) * ptr_size]), ptr_size)[0])

    ranks = np.arange(n - 1) if samples >= n - 1 else np.unique(np.concatenate((
        rng.choice(n - 1, size=samples, replace=False), np.arange(min(16, n - 1)), np.arange(max(0, n - 17), n - 1))))
    faults = 0
    for rank in ranks:
        a, b = ptr_at(int(rank)), ptr_at(int(rank) + 1)
        if a % width or b % width or a >= ds_bytes or b >= ds_bytes or bytes(ds[a:a + 4096]) > bytes(ds[b:b + 4096]):
            faults += 1
    return faults, len(ranks)


def verify_index(path: str | Path, samples: int = VERIFY_SAMPLES, seed: int = 0, full: bool = False) -> VerifyReport:
    """Check sizes, the tokenizer's hash, suffix-array order on sampled ranks, sampled documents and
    unigram sums; with `full`, every file's content checksum as well."""
    report = VerifyReport()
    index = Index(path)  # raises on missing files, size and sampled-checksum mismatches
    report.checks.append(Check("file sizes", True, f"{len(index.manifest.shards)} shard(s) consistent with manifest"))
    from propme_metrics.index.tokenizer import tokenizer_hash

    try:
        stored = tokenizer_hash(index.tokenizer)
    except Exception as exc:  # a tokenizer copy that does not load is exactly what we report
        stored = f"unloadable ({type(exc).__name__}: {exc})"
    report.checks.append(Check("tokenizer", stored == index.manifest.tokenizer.sha256,
                               f"stored copy sha256 {stored[:12]}, manifest {index.manifest.tokenizer.sha256[:12]}"))
    if full:
        recorded = index.manifest.files
        bad = checksum_mismatches(index.path, recorded, full=True)
        sampled = sum(rec.get(ALGORITHM) is None for rec in recorded.values())
        report.checks.append(Check(
            "checksums", bool(recorded) and not bad,
            (f"{len(recorded) - sampled} files, {ALGORITHM}"
             + (f"; {sampled} adopted infini-gram files by their sampled blocks" if sampled else "")
             + (f"; {'; '.join(bad[:5])}" if bad else "")) if recorded
            else "no checksums recorded (built by an older PropMe): rebuild the index to get them"))
    rng = np.random.default_rng(seed)
    width = index.token_width
    bad_order = 0
    checked = 0
    for s in index.manifest.shards:
        faults, pairs = suffix_order_faults(index.path, s.id, width, samples, rng)
        bad_order += faults
        checked += pairs
    report.checks.append(Check("suffix array sorted", bad_order == 0,
                               f"{checked} sampled adjacent pairs, {bad_order} out of order"))
    n_docs = index.manifest.total_documents
    failures = []
    for doc_ix in rng.choice(n_docs, size=min(samples // 10 + 1, n_docs), replace=False):
        try:
            doc = index.document(int(doc_ix), max_tokens=2048)
            if index.separator in doc.token_ids:
                failures.append(int(doc_ix))
            index.decode(doc.token_ids.tolist())
        except Exception:  # a document that cannot be read or decoded is exactly what we report
            failures.append(int(doc_ix))
    report.checks.append(Check("documents decode", not failures,
                               f"{min(samples // 10 + 1, n_docs)} sampled documents"
                               + (f", failed: {failures[:10]}" if failures else "")))
    # every row of the unigram files (the separator's included) against the positions of the suffix arrays
    total = sum(int(read_unigrams(shard_file(index.path, ShardFile.UNIGRAM, sid))[:, 1].sum())
                for sid in index.manifest.shard_ids)
    ok = total == index.total_positions
    table = index.unigram_table
    present = np.flatnonzero(table)
    probe = rng.choice(present, size=min(20, len(present)), replace=False)
    # recounted by infini-gram's engine: an independent reader of the same files
    mismatched = [int(t) for t in probe if index.engine.count(input_ids=[int(t)])["count"] != int(table[t])]
    report.checks.append(Check("unigram counts", ok and not mismatched,
                               f"sum {total:,} vs {index.total_positions:,} positions; "
                               f"{len(probe)} ids recounted through the engine"
                               + (f", mismatched: {mismatched}" if mismatched else "")))
    return report


def index_info(path: str | Path) -> dict[str, Any]:
    """Manifest, file sizes and one decoded sample document, for `propme index info`."""
    index = Index(path)
    sizes = {p.name: p.stat().st_size for p in sorted(index.path.iterdir()) if p.is_file()}
    doc = index.document(0, max_tokens=64)
    return {
        "path": str(index.path),
        "manifest": index.manifest.to_dict(),
        "files": sizes,
        "bytes_total": sum(sizes.values()),
        "sample_document": {"doc_ix": 0, "metadata": doc.meta, "text_start": index.decode(doc.token_ids.tolist())},
    }
