"""Adopting an index that infini-gram's own indexer wrote: a PropMe index folder whose shard files
are links to that folder's files, with PropMe's own files beside them (docs/index-format.md,
adopted indexes).

Nothing is ever written into the infini-gram folder, which may be read-only. Adoption checks what
it can without reading the shards in full (the files' sizes against each other, the token width,
the document separators at sampled offsets, sampled metadata lines, the unigram counts against
the files, the order of sampled suffix-array ranks, that the tokenizer reproduces sampled
documents' tokens) and refuses the folder with the reason otherwise; the manifest records what it
checked, and sampled checksums of every file it links to, which every opening compares. Files the
folder lacks are computed into the new index: `unigram.N` from `tokenized.N`, and for an index
built without `--add_metadata` one empty record per document. Then the search samples are taken
as for a build. The finished folder opens like any other index: the reader follows the links.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from propme_metrics.core.checksums import ALGORITHM, checksum_files, sampled_digest
from propme_metrics.core.errors import ConfigError, IndexFormatError
from propme_metrics.core.progress import progress_bar
from propme_metrics.index.build import build_versions, tokenizer_info, write_tokenizer_files
from propme_metrics.index.format import (
    MANIFEST_NAME,
    SHARD_FILES,
    TOKENIZER_DIRNAME,
    WORD_STARTS_NAME,
    ShardFile,
    document_bounds,
    metadata_line,
    parse_metadata,
    pointer_size,
    read_unigrams,
    shard_file,
    staging_dir,
    token_layout,
    toplevel_path,
)
from propme_metrics.index.install import (
    build_lock,
    existing_index,
    finished_build,
    install,
    real_out,
    recover_interrupted_install,
    write_errors,
)
from propme_metrics.index.manifest import IndexManifest, ShardInfo
from propme_metrics.index.reader import Check, suffix_order_faults
from propme_metrics.index.shard_writer import write_unigrams
from propme_metrics.index.source_counts import DEFAULT_SOURCE_FIELD, metadata_field
from propme_metrics.index.tokenizer import analyze_vocab, load_tokenizer, max_token_id, tokenizer_hash
from propme_metrics.index.toplevel import write_toplevel

#: the kind an adopted index's manifest gives its source
SOURCE_KIND = "infini-gram"
SUFFIX_SAMPLES = 256      #: adjacent suffix-array pairs checked per shard
DOCUMENT_SAMPLES = 32     #: documents (over all shards) whose tokens the tokenizer must reproduce
WINDOW_TOKENS = 512       #: tokens of a sampled document decoded and encoded again, at most
#: share of the sampled documents the tokenizer must reproduce: the right tokenizer reproduces
#: nearly all (a slow and a fast implementation differ on rare texts), a wrong one nearly none
ROUND_TRIP_SHARE = 0.75
OFFSET_BLOCKS, OFFSET_BLOCK = 8, 256   #: document offsets read per shard: blocks spread over the file
_SCAN_BYTES = 1 << 26     #: bytes of `tokenized.N` read per step when its unigram counts are computed
_NAME = re.compile(r"^(" + "|".join(SHARD_FILES) + r")\.(\d+)$")
#: the metadata line written for each document of an index built without metadata
EMPTY_RECORD = b"{}\n"


@dataclass
class _Shard:
    """One shard of the infini-gram folder: its files there, and what adoption learnt of it."""

    id: int                        #: the shard's id in the adopted index
    files: dict[ShardFile, Path]
    folder: Path                   #: the infini-gram folder that holds it ...
    local_id: int                  #: ... under this id
    ds_bytes: int = 0
    sa_bytes: int = 0
    documents: int = 0
    unigrams: np.ndarray | None = None   #: counts computed from `tokenized.N` when the folder has no `unigram.N`

    def path(self, kind: ShardFile) -> Path:
        return self.files[kind]


@dataclass
class _Adoption:
    """What one adoption found and decided, before anything is written."""

    ig_dirs: list[Path]
    out: Path
    tokenizer: str
    revision: str | None
    tok: Any
    max_id: int
    width: int
    shards: list[_Shard]
    source_field: str
    checks: list[Check] = field(default_factory=list)

    def check(self, name: str, detail: str) -> None:
        self.checks.append(Check(name, True, detail))


def adopt_index(ig_dirs: str | Path | list[str | Path], out: str | Path, tokenizer: str,
                tokenizer_revision: str | None = None, source_field: str | None = None, force: bool = False,
                progress: bool = True) -> IndexManifest:
    """Adopt the infini-gram index in `ig_dirs` (one folder, or several whose shards together make one
    corpus, numbered on in the order given) as a PropMe index at `out`, or return the one already
    there; `tokenizer` is the tokenizer the index was built with, `source_field` the key inside each
    document's metadata that names its source (dotted for a nested one)."""
    igs = [Path(d).resolve() for d in ([ig_dirs] if isinstance(ig_dirs, (str, Path)) else ig_dirs)]
    out = real_out(Path(out))
    if len(set(igs)) < len(igs):
        raise ConfigError("an infini-gram folder is named twice", "name each folder once")
    shards: list[_Shard] = []
    for ig in igs:
        _check_folders(ig, out)
        shards += _find_shards(ig, len(shards))
    tok = load_tokenizer(tokenizer, tokenizer_revision)
    plan = _Adoption(igs, out, tokenizer, tokenizer_revision, tok, max_token_id(tok), 0, shards,
                     source_field or DEFAULT_SOURCE_FIELD)
    referred = {shard_file("", kind, s.id).name: s.path(kind) for s in plan.shards for kind in s.files}
    recorded = {name: {"bytes": p.stat().st_size, ALGORITHM: None, "sample": sampled_digest(p)}
                for name, p in referred.items()}
    params = {"adopted_from": [str(d) for d in igs], "files": {n: {"bytes": r["bytes"], "sample": r["sample"]}
                                                               for n, r in recorded.items()},
              "tokenizer": {"name": tokenizer, "revision": tokenizer_revision, "sha256": tokenizer_hash(tok)},
              "source_field": plan.source_field}
    params_hash = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
    work = staging_dir(out)
    with write_errors(work), build_lock(out):
        recover_interrupted_install(out, work)
        existing = existing_index(out, params_hash, force)
        if existing is not None:  # adopted already from these very files (sizes and sampled checksums)
            return existing
        finished = finished_build(work, params_hash)
        if finished is not None:
            install(work, out)
            return finished
        _check(plan, explicit_source_field=source_field is not None)
        plan.check("checksums", f"sampled blocks of {len(recorded)} files recorded (compared whenever the index "
                                "opens)")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        manifest = _write(plan, work, referred, recorded, params_hash, progress)
        install(work, out)
    return manifest


def _check(plan: _Adoption, explicit_source_field: bool) -> None:
    """Every check of the folders (the token width first: the others read the files with it)."""
    plan.width = _token_width(plan)
    offsets, pairs = np.sum([_check_shard(plan, shard) for shard in plan.shards], axis=0).tolist()
    plan.check("shards", f"{len(plan.shards)} shard(s) 0..{len(plan.shards) - 1}, each with tokenized, table and "
                         "offset files whose sizes agree")
    plan.check("documents", f"{sum(s.documents for s in plan.shards):,} documents; the separator at each of "
                            f"{offsets:,} sampled offsets")
    computed = [s.id for s in plan.shards if s.unigrams is not None]
    plan.check("unigram counts", "every position counted once, one separator per document, no id above the "
                                 "tokenizer's" + (f" (computed from tokenized.N of shard(s) {computed})" if computed else ""))
    plan.check("suffix array", f"{pairs:,} sampled adjacent pairs in order")
    _check_metadata(plan, explicit=explicit_source_field)
    _check_tokenizer(plan)


def _check_folders(ig: Path, out: Path) -> None:
    if not ig.is_dir():
        raise ConfigError(f"no folder {ig}", "give the folder that infini-gram's indexer wrote (its --save_dir)")
    if (ig / MANIFEST_NAME).is_file():
        raise ConfigError(f"{ig} is a PropMe index already", f"pass it as --index {ig}; there is nothing to adopt")
    if out == ig or ig in out.parents or out in ig.parents:
        raise ConfigError(f"--out {out} and the infini-gram folder {ig} lie inside one another",
                          "choose an --out outside the infini-gram folder (adoption never writes there)")


def _find_shards(ig: Path, first: int) -> list[_Shard]:
    """The shards of the folder, by id, numbered from `first` in the adopted index; refuses a folder
    without shards, a gap in the ids, and a shard that lacks one of its essential files."""
    found: dict[int, dict[ShardFile, Path]] = {}
    for p in ig.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_file():
            found.setdefault(int(m.group(2)), {})[ShardFile(m.group(1))] = p
    if not found:
        raise ConfigError(f"{ig} holds no infini-gram index (no tokenized.N file)",
                          "give the folder that infini-gram's indexer wrote (its --save_dir)")
    missing_ids = sorted(set(range(max(found) + 1)) - set(found))
    if missing_ids:
        raise IndexFormatError(f"{ig} holds shards up to {max(found)} but not shard(s) {missing_ids[:8]}",
                               "the folder is incomplete: download or copy the missing shards")
    shards = []
    for sid in sorted(found):
        files = found[sid]
        lacking = [shard_file(ig, kind, sid).name for kind in (ShardFile.TOKENIZED, ShardFile.TABLE, ShardFile.OFFSET)
                   if kind not in files]
        if (ShardFile.METADATA in files) != (ShardFile.METAOFF in files):
            lacking.append(shard_file(ig, ShardFile.METAOFF if ShardFile.METADATA in files else ShardFile.METADATA,
                                      sid).name)
        if lacking:
            raise IndexFormatError(f"{ig} lacks {', '.join(lacking)}",
                                   "the folder is incomplete: download or copy the missing files")
        shards.append(_Shard(first + sid, files, ig, sid))
    return shards


def _token_width(plan: _Adoption) -> int:
    """The token width (2 or 4 bytes) that the sizes of every shard's `tokenized.N` and `table.N` agree on."""
    widths = set()
    for s in plan.shards:
        s.ds_bytes, s.sa_bytes = s.path(ShardFile.TOKENIZED).stat().st_size, s.path(ShardFile.TABLE).stat().st_size
        if s.ds_bytes == 0:
            raise IndexFormatError(f"{s.path(ShardFile.TOKENIZED)} is empty", "the shard is damaged: copy it again")
        fits = {w: s.ds_bytes % w == 0 and s.sa_bytes == s.ds_bytes // w * pointer_size(s.ds_bytes) for w in (1, 2, 4)}
        if fits[1] and not (fits[2] or fits[4]):
            raise ConfigError(f"{s.folder} is an index of bytes (infini-gram's --token_dtype u8), not of tokens",
                              "PropMe adopts indexes of 16- or 32-bit tokens (u16, u32) only")
        ok = [w for w in (2, 4) if fits[w]]
        if not ok:
            expected = " or ".join(f"{s.ds_bytes // w * pointer_size(s.ds_bytes):,} ({8 * w}-bit tokens)"
                                   for w in (2, 4) if s.ds_bytes % w == 0) or "a multiple of 2"
            raise IndexFormatError(f"{s.path(ShardFile.TABLE)} has {s.sa_bytes:,} bytes; for the {s.ds_bytes:,} bytes "
                                   f"of {s.path(ShardFile.TOKENIZED).name} a suffix array has {expected}",
                                   "the file is truncated or from another index: copy it again")
        widths.add(ok[0])
    if len(widths) > 1:
        raise IndexFormatError(f"the shards of {', '.join(map(str, plan.ig_dirs))} mix 16- and 32-bit tokens",
                               "the folders hold files of two indexes: adopt the folders of one index together")
    width = widths.pop()
    layout = token_layout(width)
    if plan.max_id > layout.max_id:
        raise ConfigError(f"tokenizer {plan.tokenizer!r} has ids up to {plan.max_id:,}, which a {8 * width}-bit "
                          f"index (ids up to {layout.max_id:,}) cannot hold: the index was built with another tokenizer",
                          "name the tokenizer the index was built with (its documentation says which)")
    plan.check("token width", f"{8 * width}-bit tokens, {pointer_size(plan.shards[0].ds_bytes)}-byte suffix "
                              "pointers (from the sizes of tokenized.N and table.N)")
    return width


def _spread(n: int, blocks: int, block: int) -> np.ndarray:
    """Indices 0..n-1 in `blocks` runs of `block` spread over the range (all when n is small), sorted."""
    if n <= blocks * block:
        return np.arange(n)
    starts = np.linspace(0, n - block, blocks).astype(np.int64)
    return np.unique((starts[:, None] + np.arange(block)).ravel())


def _check_shard(plan: _Adoption, s: _Shard) -> tuple[int, int]:
    """Offsets, separators, metadata offsets, unigram counts and suffix order of one shard; returns
    how many offsets and suffix-array pairs were checked."""
    width, sep = plan.width, token_layout(plan.width).separator
    offset_path = s.path(ShardFile.OFFSET)
    size = offset_path.stat().st_size
    if size == 0 or size % 8:
        raise IndexFormatError(f"{offset_path} has {size:,} bytes, not a whole number of 8-byte document offsets",
                               "the file is truncated: copy it again")
    s.documents = size // 8
    offsets = np.memmap(offset_path, dtype="<u8", mode="r")
    ds = np.memmap(s.path(ShardFile.TOKENIZED), dtype=token_layout(width).dtype, mode="r")
    picked = _spread(s.documents, OFFSET_BLOCKS, OFFSET_BLOCK)
    sampled = np.asarray(offsets[picked]).astype(np.int64)
    bad = (sampled % width != 0) | (sampled >= s.ds_bytes)
    if sampled[0] != 0 or bad.any() or (np.diff(sampled) <= 0).any():
        raise IndexFormatError(f"{offset_path} does not list increasing document offsets inside "
                               f"{s.path(ShardFile.TOKENIZED).name} ({s.ds_bytes:,} bytes)",
                               "the file is damaged or from another index: copy it again")
    if (np.asarray(ds[sampled // width]) != sep).any():
        raise IndexFormatError(f"{s.path(ShardFile.TOKENIZED)} has no document separator ({sep:#x}) at some offsets "
                               f"{offset_path.name} lists", "the files are damaged or from different indexes: copy them again")
    if ShardFile.METAOFF in s.files:
        _check_metaoff(s)
    _check_unigrams(plan, s)
    faults, pairs = suffix_order_faults(s.folder, s.local_id, width, SUFFIX_SAMPLES, np.random.default_rng(s.id))
    if faults:
        raise IndexFormatError(f"{s.path(ShardFile.TABLE)} is not the sorted suffix array of "
                               f"{s.path(ShardFile.TOKENIZED).name}: {faults} of {pairs} sampled adjacent pairs are out "
                               "of order or point outside it", "the file is damaged: copy it again")
    return len(picked), pairs


def _check_metaoff(s: _Shard) -> None:
    path, meta_bytes = s.path(ShardFile.METAOFF), s.path(ShardFile.METADATA).stat().st_size
    if path.stat().st_size != 8 * s.documents:
        raise IndexFormatError(f"{path} has {path.stat().st_size:,} bytes; for the {s.documents:,} documents of "
                               f"{s.path(ShardFile.OFFSET).name} it has {8 * s.documents:,}",
                               "the file is truncated or from another index: copy it again")
    sampled = np.asarray(np.memmap(path, dtype="<u8", mode="r")[_spread(s.documents, OFFSET_BLOCKS, OFFSET_BLOCK)])
    if sampled[0] != 0 or (np.diff(sampled.astype(np.int64)) <= 0).any() or int(sampled[-1]) >= meta_bytes:
        raise IndexFormatError(f"{path} does not list increasing line offsets inside "
                               f"{s.path(ShardFile.METADATA).name} ({meta_bytes:,} bytes)",
                               "the file is damaged or from another index: copy it again")


def _check_unigrams(plan: _Adoption, s: _Shard) -> None:
    """`unigram.N` against the shard (every position counted once, one separator per document, no id
    the tokenizer lacks), or, when the folder has none, the counts computed from `tokenized.N`."""
    sep, n = token_layout(plan.width).separator, s.ds_bytes // plan.width
    if ShardFile.UNIGRAM not in s.files:
        s.unigrams, separators = _count_tokens(plan, s)
    else:
        path = s.path(ShardFile.UNIGRAM)
        try:
            rows = read_unigrams(path)
        except ValueError as exc:
            raise IndexFormatError(f"{path} is not a list of (token id, count) rows: {exc}",
                                   "the file is damaged: copy it again") from None
        if int(rows[:, 1].sum()) != n:
            raise IndexFormatError(f"{path} counts {int(rows[:, 1].sum()):,} tokens, {s.path(ShardFile.TOKENIZED).name} "
                                   f"holds {n:,}", "the files are damaged or from different indexes: copy them again")
        ids = rows[rows[:, 0] != sep, 0]
        if ids.size and int(ids.max()) > plan.max_id:
            raise _foreign_id(plan, path, int(ids.max()))
        separators = int(rows[rows[:, 0] == sep, 1].sum())
    if separators != s.documents:
        raise IndexFormatError(f"{s.path(ShardFile.TOKENIZED)} holds {separators:,} document separators, "
                               f"{s.path(ShardFile.OFFSET).name} lists {s.documents:,} documents",
                               "the files are damaged or from different indexes: copy them again")


def _count_tokens(plan: _Adoption, s: _Shard) -> tuple[np.ndarray, int]:
    """(count of every id below the tokenizer's largest, separators) of `tokenized.N`, read once."""
    layout = token_layout(plan.width)
    counts = np.zeros(plan.max_id + 1, dtype=np.int64)
    separators = 0
    step = _SCAN_BYTES // plan.width * plan.width
    with open(s.path(ShardFile.TOKENIZED), "rb") as fh:
        while chunk := fh.read(step):
            ids = np.frombuffer(chunk, dtype=layout.dtype)
            is_sep = ids == layout.separator
            separators += int(is_sep.sum())
            ids = ids[~is_sep]
            if ids.size and int(ids.max()) > plan.max_id:
                raise _foreign_id(plan, s.path(ShardFile.TOKENIZED), int(ids.max()))
            counts += np.bincount(ids, minlength=plan.max_id + 1)
    return counts, separators


def _foreign_id(plan: _Adoption, path: Path, token: int) -> ConfigError:
    return ConfigError(f"{path} holds token id {token:,}, above the largest id ({plan.max_id:,}) of tokenizer "
                       f"{plan.tokenizer!r}: the index was built with another tokenizer",
                       "name the tokenizer the index was built with (its documentation says which)")


def _sampled_documents(plan: _Adoption) -> list[tuple[_Shard, int]]:
    """DOCUMENT_SAMPLES (shard, local document) spread evenly over all documents."""
    bases = np.cumsum([0] + [s.documents for s in plan.shards])
    picks = np.unique(np.linspace(0, bases[-1] - 1, min(DOCUMENT_SAMPLES, int(bases[-1]))).astype(np.int64))
    where = np.searchsorted(bases, picks, side="right") - 1
    return [(plan.shards[int(i)], int(doc - bases[i])) for doc, i in zip(picks, where)]


def _check_metadata(plan: _Adoption, explicit: bool) -> None:
    """Sampled metadata lines are JSON records; the source field is found in them (refused when it
    was named and no sampled document has it)."""
    if all(ShardFile.METADATA not in s.files for s in plan.shards):
        plan.check("metadata", "none in the folder (built without --add_metadata): documents are known by "
                               "their number, their source is 'unknown'")
        return
    records = []
    for s, doc in _sampled_documents(plan):
        if ShardFile.METADATA not in s.files:
            continue
        line = metadata_line(np.memmap(s.path(ShardFile.METAOFF), dtype="<u8", mode="r"),
                             np.memmap(s.path(ShardFile.METADATA), dtype=np.uint8, mode="r"), doc)
        record = parse_metadata(line)
        if "raw" in record and len(record) == 1:
            raise IndexFormatError(f"{s.path(ShardFile.METADATA)}: the line of document {doc} is not JSON "
                                   f"({line[:80]!r})", "the file is damaged or from another index: copy it again")
        records.append(parse_metadata(line, unwrap=True))
    named = sum(metadata_field(r, plan.source_field) not in (None, "") for r in records)
    keys = sorted({k for r in records for k in r})
    if not named and explicit:
        raise ConfigError(f"--source-field {plan.source_field!r}: none of {len(records)} sampled documents' metadata "
                          f"has it (their keys: {', '.join(keys) or 'none'})",
                          "name a key of the documents' metadata (a dotted name for a nested one, e.g. "
                          "meta.pile_set_name)")
    plan.check("metadata", f"{len(records)} sampled lines are JSON records (keys: {', '.join(keys) or 'none'}); "
                           f"{named} name a source in {plan.source_field!r}")


def _window(tokens: np.ndarray, word_start: np.ndarray) -> np.ndarray:
    """At most WINDOW_TOKENS of a document's first tokens, cut before a word start when cut at all
    (so that encoding the window's text alone gives its tokens again)."""
    if len(tokens) <= WINDOW_TOKENS:
        return tokens
    starts = np.flatnonzero(word_start[tokens[WINDOW_TOKENS // 2:WINDOW_TOKENS + 1]])
    return tokens[:WINDOW_TOKENS // 2 + int(starts[-1])] if starts.size else tokens[:WINDOW_TOKENS]


def _check_tokenizer(plan: _Adoption) -> None:
    """The tokenizer, encoding the decoded text of sampled documents, must give their tokens back."""
    vocab = analyze_vocab(plan.tok)
    word_start = np.zeros(plan.max_id + 1, dtype=bool)  # every id of the shards is at most max_id (checked)
    word_start[vocab.word_start_ids] = True
    tried, failed = 0, []
    for s, doc in _sampled_documents(plan):
        offsets = np.memmap(s.path(ShardFile.OFFSET), dtype="<u8", mode="r")
        start, end = document_bounds(offsets, s.ds_bytes // plan.width, plan.width, doc)
        if end <= start:
            continue
        ds = np.memmap(s.path(ShardFile.TOKENIZED), dtype=token_layout(plan.width).dtype, mode="r")
        tokens = np.asarray(ds[start:end]).astype(np.int64)
        ids = _window(tokens, word_start).tolist()
        text = plan.tok.decode(ids, clean_up_tokenization_spaces=False)
        tried += 1
        if plan.tok(text, add_special_tokens=False)["input_ids"] != ids:
            failed.append(f"{s.id}/{doc}")
    if tried and tried - len(failed) < ROUND_TRIP_SHARE * tried:
        raise ConfigError(f"tokenizer {plan.tokenizer!r} does not reproduce the tokens of {len(failed)} of {tried} "
                          f"sampled documents of {', '.join(map(str, plan.ig_dirs))} (shard/document {', '.join(failed[:5])}): the index "
                          "was built with another tokenizer",
                          "name the tokenizer the index was built with (its documentation says which)")
    plan.check("tokenizer", f"{plan.tokenizer} reproduces the tokens of {tried - len(failed)} of {tried} sampled "
                            f"documents (up to {WINDOW_TOKENS} tokens each)"
                            + (f"; not of {', '.join(failed[:5])}" if failed else ""))


def _write_empty_metadata(folder: Path, sid: int, documents: int) -> None:
    """`metadata.N` and `metaoff.N` of one empty record per document (an index built without metadata)."""
    step = 1 << 20
    with open(shard_file(folder, ShardFile.METADATA, sid), "wb") as meta, \
            open(shard_file(folder, ShardFile.METAOFF, sid), "wb") as off:
        for first in range(0, documents, step):
            count = min(step, documents - first)
            meta.write(EMPTY_RECORD * count)
            off.write((np.arange(first, first + count, dtype=np.uint64) * len(EMPTY_RECORD)).astype("<u8").tobytes())


def _write(plan: _Adoption, work: Path, referred: dict[str, Path], recorded: dict[str, dict[str, Any]],
           params_hash: str, progress: bool) -> IndexManifest:
    """The index folder in `work`: links to the infini-gram files, the computed ones, the tokenizer
    copy, word starts, search samples, then the manifest (last: it marks the folder finished)."""
    for name, target in referred.items():
        os.symlink(target, work / name)
    computed: list[str] = []
    sep = token_layout(plan.width).separator
    for s in plan.shards:
        if s.unigrams is not None:
            write_unigrams(shard_file(work, ShardFile.UNIGRAM, s.id), s.unigrams, sep, s.documents)
            computed.append(shard_file("", ShardFile.UNIGRAM, s.id).name)
        if ShardFile.METADATA not in s.files:
            _write_empty_metadata(work, s.id, s.documents)
            computed += [shard_file("", kind, s.id).name for kind in (ShardFile.METADATA, ShardFile.METAOFF)]
    vocab = analyze_vocab(plan.tok)
    write_tokenizer_files(work, plan.tok, vocab)
    with progress_bar(progress) as bar:
        task = bar.add_task("search samples", total=len(plan.shards), rate="")
        for s in plan.shards:
            write_toplevel(work, s.id, plan.width)
            bar.advance(task)
    own = [TOKENIZER_DIRNAME, WORD_STARTS_NAME, *computed, *(toplevel_path("", s.id).name for s in plan.shards)]
    files = {**recorded, **checksum_files(work, own)}
    manifest = IndexManifest(
        source={"kind": SOURCE_KIND, "location": ", ".join(map(str, plan.ig_dirs)), "source_field": plan.source_field},
        tokenizer=tokenizer_info(plan.tok, plan.tokenizer, plan.revision, tokenizer_hash(plan.tok), vocab, work),
        token_width=plan.width,
        delimiter_ids=vocab.delimiter_ids,
        num_shards=len(plan.shards),
        shard_ids=[s.id for s in plan.shards],
        shards=[ShardInfo(id=s.id, documents=s.documents, tokens=s.ds_bytes // plan.width - s.documents,
                          ds_bytes=s.ds_bytes, sa_bytes=s.sa_bytes) for s in plan.shards],
        build={"params_hash": params_hash},
        versions=build_versions(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        files=dict(sorted(files.items())),
        adopted={"from": [str(d) for d in plan.ig_dirs], "referred": sorted(referred), "computed": sorted(computed),
                 "checks": [{"name": c.name, "detail": c.detail} for c in plan.checks]},
    )
    manifest.write(work)
    return manifest

