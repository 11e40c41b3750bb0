"""Building an infini-gram v4 index from a corpus with any HF tokenizer.

The build happens in a hidden sibling folder and is moved into place only after the manifest is
written, so an interrupted build never leaves a folder that opens as an index. Re-running the
same build resumes it: finished steps (tokenization, each shard's suffix array) are skipped.
Suffix arrays come from libdivsufsort (`pydivsufsort`) when the shard fits in memory, else from
the `rust_indexing` binary shipped in the infini-gram wheel (see `build_suffix_array`).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from propme_metrics import __version__
from propme_metrics.core.checksums import checksum_files
from propme_metrics.core.errors import BuildError, ConfigError, IndexFormatError
from propme_metrics.core.files import open_locked, write_atomic
from propme_metrics.core.memory import available_memory, total_memory
from propme_metrics.core.progress import progress_bar, rate
from propme_metrics.index.format import pointer_size, pointers
from propme_metrics.index.manifest import (
    MANIFEST_NAME,
    SHARD_FILES,
    TOKENIZER_DIRNAME,
    WORD_STARTS_NAME,
    IndexManifest,
    ShardInfo,
    TokenizerInfo,
    shard_file,
)
from propme_metrics.index.sizing import (
    TEXT_BYTES_PER_TOKEN,
    check_document_memory,
    check_shard_memory,
    estimate_build,
)
from propme_metrics.index.source_counts import count_sources, joined_source_counts
from propme_metrics.index.sources import CorpusSource
from propme_metrics.index.tokenizer import (
    DEFAULT_TOKENIZER,
    analyze_vocab,
    files_sha256,
    load_tokenizer,
    max_token_id,
    tokenizer_hash,
)

STATE_NAME = "propme-build-state.json"
OVERLAP_BYTES = 100_000  # how far suffix-array parts overlap (the binary's hack size)
BYTES_PER_TOKEN_ON_DISK = 7  # rule of thumb of docs/index-format.md (sizes on disk), temporary space excluded


def partial_dir(out: Path) -> Path:
    """Where a build of `out` happens before it is moved into place."""
    return out.parent / f".{out.name}.propme-partial"


def rust_indexing_binary() -> Path:
    """The suffix-array builder that ships inside the infini-gram wheel."""
    import infini_gram

    binary = Path(infini_gram.__file__).parent / "rust_indexing"
    if not binary.is_file():
        raise BuildError(f"the infini-gram package has no rust_indexing binary at {binary}",
                         "reinstall infini-gram==2.6.0 from a wheel for this platform")
    return binary


def choose_token_width(max_id: int, requested: int | None) -> int:
    """2 bytes when every id fits below the separator 0xFFFF, else 4; a forced 2 must fit."""
    needed = 2 if max_id <= 0xFFFE else 4
    if requested is None:
        return needed
    if requested not in (2, 4):
        raise ConfigError(f"token width must be 2 or 4 bytes, not {requested}")
    if requested < needed:
        raise ConfigError(
            f"the tokenizer's largest id is {max_id}, which does not fit a 16-bit index (ids up to 65534)",
            "leave --token-width unset (32-bit is chosen automatically) or pass --token-width 4")
    return requested


def build_index(
    source: CorpusSource,
    out: str | Path,
    tokenizer: str = DEFAULT_TOKENIZER,
    tokenizer_revision: str | None = None,
    num_shards: int = 1,
    shard_ids: Iterable[int] | None = None,
    token_width: int | None = None,
    batch_size: int = 1024,
    cpus: int | None = None,
    mem_bytes: int | None = None,
    force: bool = False,
    check_space: bool = True,
    progress: bool = True,
    sa_builder: str = "auto",
    announce=None,
) -> IndexManifest:
    """Build (or resume, or reuse) the index of `source` in folder `out` and return its manifest.

    `announce(text)`, when given, receives the estimate of disk, memory and time before the build
    starts (from the corpus' file sizes) and again from the exact counts before the suffix arrays."""
    out = _real_out(Path(out))
    cpus = cpus or os.cpu_count() or 1
    mem_bytes = mem_bytes or _half_of_ram()
    if num_shards < 1:
        raise ConfigError("--shards must be at least 1")
    shard_ids = sorted(set(range(num_shards) if shard_ids is None else shard_ids))
    if not shard_ids or shard_ids[0] < 0 or shard_ids[-1] >= num_shards:
        raise ConfigError(f"--shard-ids must lie in 0..{num_shards - 1}")
    _check_out_spares_source(out, source)

    tok = load_tokenizer(tokenizer, tokenizer_revision)
    if len(tok) == 0:
        raise ConfigError(f"the tokenizer {tokenizer!r} has an empty vocabulary",
                          "pass a tokenizer folder or hub id with a vocabulary (tokenizer.json or vocab files)")
    max_id = max_token_id(tok)
    width = choose_token_width(max_id, token_width)
    tok_hash = tokenizer_hash(tok)
    work = partial_dir(out)
    params, params_hash = build_params(source.describe(known=_known_source_stats(out, work)), tokenizer,
                                       tokenizer_revision, tok_hash, width, num_shards, shard_ids)

    try:
        with _build_lock(out):
            return _build_locked(source, tok, out, work, params, params_hash, tokenizer, tokenizer_revision,
                                 max_id, width, tok_hash, num_shards, shard_ids, batch_size, cpus, mem_bytes,
                                 force, check_space, progress, sa_builder, announce)
    except OSError as exc:
        raise ConfigError(f"cannot write the index: {exc.strerror or exc} ({exc.filename or work})",
                          "free disk space or choose a writable --out; re-run the same command to resume "
                          "(finished steps are kept)") from None


def _build_locked(source: CorpusSource, tok, out: Path, work: Path, params: dict[str, Any], params_hash: str,
                  tokenizer: str, tokenizer_revision: str | None, max_id: int, width: int, tok_hash: str,
                  num_shards: int, shard_ids: list[int], batch_size: int, cpus: int, mem_bytes: int, force: bool,
                  check_space: bool, progress: bool, sa_builder: str, announce) -> IndexManifest:
    """The build proper, while this process alone builds `out`: reuse, finish, resume or start it."""
    _recover_interrupted_install(out, work)
    existing = _existing_index(out, params_hash, force)
    if existing is not None:
        return existing
    finished = _finished_partial(work, params_hash)
    if finished is not None:  # killed between the manifest and the move: only the move is left
        _install(work, out)
        return finished

    state = _load_state(work, params_hash)
    if state is None:
        text_bytes = source.estimated_text_bytes()
        if text_bytes:
            _plan(int(text_bytes / TEXT_BYTES_PER_TOKEN), "from the corpus' file sizes", width, num_shards, cpus,
                  mem_bytes, sa_builder, announce, longest_bytes=source.longest_line_bytes())
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        state = {"params_hash": params_hash, "tokenized": None, "suffix_arrays": [],
                 "source_stats": source.file_stats() if source.is_local else {}}
        _save_state(work, state)
    if check_space:
        _check_disk_space(work, source.estimated_text_bytes(), width)
    started = time.time()
    counts = _run_steps(source, tok, work, state, width, num_shards, shard_ids, batch_size, cpus, mem_bytes,
                        check_space, progress, sa_builder, announce)
    shards = [
        ShardInfo(id=sid, documents=counts[str(sid)]["documents"], tokens=counts[str(sid)]["tokens"],
                  ds_bytes=shard_file(work, "tokenized", sid).stat().st_size,
                  sa_bytes=shard_file(work, "table", sid).stat().st_size)
        for sid in shard_ids
    ]
    vocab = analyze_vocab(tok)
    _remove_strays(work)
    manifest = IndexManifest(
        source=params["source"],
        tokenizer=TokenizerInfo(
            name=tokenizer, revision=tokenizer_revision, cls=type(tok).__name__, vocab_size=len(tok),
            max_id=max_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
            family=vocab.family, sha256=tok_hash, files_sha256=files_sha256(work / TOKENIZER_DIRNAME)),
        token_width=width,
        delimiter_ids=vocab.delimiter_ids,
        num_shards=num_shards,
        shard_ids=shard_ids,
        shards=shards,
        build={"params_hash": params_hash, "batch_size": batch_size, "cpus": cpus,
               "seconds_last_run": round(time.time() - started, 2),
               "source_stats": state.get("source_stats", {}),
               "replaced_surrogates": state.get("replaced_surrogates", 0)},
        versions=_versions(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        files=checksum_files(work, index_file_names(shard_ids)),
        source_counts=count_sources(work, shard_ids, width, params["source"]["source_field"]),
    )
    manifest.write(work)  # its presence marks a finished build (see _finished_partial)
    (work / STATE_NAME).unlink()
    _install(work, out)
    return manifest


def _run_steps(source: CorpusSource, tok, work: Path, state: dict[str, Any], width: int, num_shards: int,
               shard_ids: list[int], batch_size: int, cpus: int, mem_bytes: int, check_space: bool,
               progress: bool, sa_builder: str, announce) -> dict[str, dict[str, int]]:
    """Tokenize (unless done), then build each shard's suffix array not yet built; save progress after each."""
    with progress_bar(progress) as bar:
        if state["tokenized"] is None:
            tok.save_pretrained(work / TOKENIZER_DIRNAME)
            (work / WORD_STARTS_NAME).write_text("".join(f"{i}\n" for i in analyze_vocab(tok).word_start_ids))
            try:
                counts, replaced = _tokenize(source, tok, work, width, num_shards, shard_ids, batch_size, bar)
            except ConfigError:  # a corpus problem: nothing worth resuming
                shutil.rmtree(work, ignore_errors=True)
                raise
            state["tokenized"], state["replaced_surrogates"] = counts, replaced
            _save_state(work, state)
        counts = state["tokenized"]
        _plan(max(c["tokens"] + c["documents"] for c in counts.values()) * num_shards,
              "from the tokenized shards", width, num_shards, cpus, mem_bytes, sa_builder, announce)
        for sid in shard_ids:
            if sid in state["suffix_arrays"]:
                continue
            if check_space:
                _check_disk_space(work, None, width, ds_bytes=shard_file(work, "tokenized", sid).stat().st_size)
            task = bar.add_task(f"suffix array, shard {sid}", total=3, rate="")
            # a fixed name: a rerun after a kill removes the dead run's temporary files first
            build_suffix_array(shard_file(work, "tokenized", sid), shard_file(work, "table", sid), width,
                               cpus, mem_bytes, work / f"tmp-{sid}",
                               on_step=lambda step: bar.update(task, advance=1, rate=step), builder=sa_builder)
            write_toplevel(work, sid, width)
            state["suffix_arrays"].append(sid)
            _save_state(work, state)
    return state["tokenized"]


# --- where the build goes, and how it is moved into place ----------------------------------------


def _real_out(out: Path) -> Path:
    """The folder to build into: a symlinked --out stands for its target (the link is kept)."""
    out = out.absolute()
    return out.resolve() if out.is_symlink() else out


def old_dir(out: Path) -> Path:
    """Where a replaced index waits, during the final move, until the new one is in place."""
    return out.parent / f".{out.name}.propme-old"


def index_file_names(shard_ids: Iterable[int]) -> list[str]:
    """Every file (or folder) a finished index holds besides its manifest."""
    from propme_metrics.index.toplevel import toplevel_path

    shard_ids = list(shard_ids)
    return ([TOKENIZER_DIRNAME, WORD_STARTS_NAME] + [shard_file("", kind, sid).name
                                                     for sid in shard_ids for kind in SHARD_FILES]
            + [toplevel_path("", sid).name for sid in shard_ids])


def files_not_written_by_propme(folder: Path, manifest: IndexManifest) -> list[str]:
    """The files under the index `folder` (relative paths) that its manifest does not list: a
    replacing build must not delete them. PropMe's own temporary names (`.NAME.*.tmp` of a listed
    file) count as its files; an index older than recorded checksums lists its entries by name."""
    listed = set(manifest.files) | {MANIFEST_NAME}
    by_name = set(index_file_names(manifest.shard_ids)) if not manifest.files else set()
    folders = {str(parent) for name in listed for parent in Path(name).parents}
    foreign = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_dir() and not p.is_symlink():  # a folder of no listed file is the user's (even empty)
            if str(rel) not in folders and rel.parts[0] not in by_name:
                foreign.append(f"{rel}/")
            continue
        temp = p.name.startswith(".") and p.name.endswith(".tmp")  # atomic_output's `.NAME.XXXX.tmp`
        if str(rel) in listed or rel.parts[0] in by_name or (
                temp and str(rel.parent / p.name[1:].rsplit(".", 2)[0]) in listed):
            continue
        foreign.append(str(rel))
    return foreign


def _check_out_spares_source(out: Path, source: CorpusSource) -> None:
    """Refuse an --out that is, or holds, part of the corpus: replacing it would delete the corpus."""
    if not source.is_local:
        return
    root = Path(source.location).resolve()
    for p in [root, *source.files]:
        p = p.resolve()
        if p == out or out in p.parents:
            raise ConfigError(f"--out {out} is or contains the corpus {p}; building there could delete it",
                              "choose an --out outside the corpus folder")


@contextmanager
def _build_lock(out: Path) -> Iterator[None]:
    """Hold `.<out>.propme-lock` beside `out` for the whole build; a second build of `out` stops at once.
    The lock file is removed at the end (a build that finds it unlinked under its lock tries again)."""
    path = out.parent / f".{out.name}.propme-lock"
    busy = ConfigError(f"another `propme index build` is building {out} right now",
                       "wait for it to finish (re-running the same command afterwards is a no-op)")
    while True:
        fh = open_locked(path, "a", busy)
        try:
            same = os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        fh.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        fh.close()


def _recover_interrupted_install(out: Path, work: Path) -> None:
    """Finish or undo a final move that was killed half-way (see `_install`)."""
    old = old_dir(out)
    if not old.exists():
        return
    if out.exists() or _finished_partial(work, None) is not None:
        if not out.exists():
            os.replace(work, out)
        shutil.rmtree(old)
    else:  # the new build is not complete: bring the old index back
        os.replace(old, out)


def _install(work: Path, out: Path) -> None:
    """Move a finished build into place: the old index aside, the new one in, the old one deleted.

    A kill at any point leaves either the old index or the new one at `out` (after the next run's
    `_recover_interrupted_install`), never a mixture.
    """
    old = old_dir(out)
    if out.exists():
        os.replace(out, old)
    os.replace(work, out)
    _fsync_dir(out.parent)
    if old.exists():
        shutil.rmtree(old)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _finished_partial(work: Path, params_hash: str | None) -> IndexManifest | None:
    """The manifest of a finished build still waiting in `work` (of these parameters, if given)."""
    if not (work / MANIFEST_NAME).is_file():
        return None
    try:
        manifest = IndexManifest.read(work)
    except IndexFormatError:
        return None
    if params_hash is not None and manifest.build.get("params_hash") != params_hash:
        return None
    (work / STATE_NAME).unlink(missing_ok=True)
    return manifest


def _remove_strays(work: Path) -> None:
    """Delete what a killed run left in the build folder (temporary suffix-array files)."""
    for p in work.iterdir():
        if p.name.startswith("tmp-") or p.name.endswith(".partial"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def _known_source_stats(out: Path, work: Path) -> dict[str, dict[str, Any]]:
    """File stats of the corpus recorded by an earlier build of `out` (to skip re-hashing)."""
    try:
        return json.loads((work / STATE_NAME).read_text()).get("source_stats") or {}
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return IndexManifest.read(out).build.get("source_stats") or {}
    except IndexFormatError:
        return {}


def _plan(tokens: int, basis: str, width: int, num_shards: int, cpus: int, mem_bytes: int, sa_builder: str,
          announce, longest_bytes: int | None = None) -> None:
    """Announce the estimated needs of the build and refuse a shard, or a document (`longest_bytes`:
    the longest line of the corpus), that cannot fit in memory."""
    estimate = estimate_build(tokens, basis, num_shards, width, cpus, mem_bytes, sa_builder)
    tokenize_memory = check_document_memory(longest_bytes, available_memory())
    if announce is not None:
        announce(estimate.describe() + (f"; tokenizing its longest document ({longest_bytes / 2**20:,.1f} MiB) "
                                        f"takes about {tokenize_memory / 2**30:,.1f} GiB of memory"
                                        if tokenize_memory > 2**28 else ""))
    check_shard_memory(estimate.tokens_per_shard, width, num_shards, mem_bytes, total_memory(), sa_builder, basis)


def build_params(source: dict[str, Any], tokenizer: str, revision: str | None, tok_sha256: str, width: int,
                 num_shards: int, shard_ids: list[int]) -> tuple[dict[str, Any], str]:
    """What identifies a build, and its hash (a finished index with the same hash is reused)."""
    params = {"source": source, "tokenizer": {"name": tokenizer, "revision": revision, "sha256": tok_sha256},
              "token_width": width, "num_shards": num_shards, "shard_ids": list(shard_ids)}
    return params, hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


def join_indexes(parts: list[str | Path], out: str | Path, build_info: dict[str, Any] | None = None,
                 replace: bool = False) -> IndexManifest:
    """Join shard sets built separately (`--shard-ids` on several machines) into one index.

    `build_info` replaces the manifest's record of the part folders (a build that joins and then
    removes its own parts says how it ran instead). With `replace`, an index already at `out`
    (checked by the caller to hold only PropMe's files) is swapped for the joined one atomically,
    as a local build does: an interrupted join leaves the old index in place."""
    from propme_metrics.index.reader import checksum_mismatches
    from propme_metrics.index.toplevel import toplevel_path

    out = _real_out(Path(out))
    manifests = [IndexManifest.read(p) for p in parts]
    for path, m in zip(parts, manifests):  # a damaged part must not pass its damage on under a new checksum
        bad = checksum_mismatches(Path(path), m.files, full=True)
        if bad:
            raise IndexFormatError(f"part {path}: {bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
                                   "rebuild that part (the same `propme index build ... --shard-ids`) or copy it "
                                   "again, then join")
    first = manifests[0]
    for path, m in zip(parts, manifests):
        same = (m.source == first.source and m.tokenizer.sha256 == first.tokenizer.sha256
                and m.token_width == first.token_width and m.num_shards == first.num_shards)
        if not same:
            raise ConfigError(f"{path} was built from another corpus, tokenizer or shard count than {parts[0]}",
                              "join only parts of one build (same SOURCE, --tokenizer and --shards)")
    ids = [sid for m in manifests for sid in m.shard_ids]
    if len(ids) != len(set(ids)):
        raise ConfigError("the parts overlap: a shard id occurs in more than one part")
    if sorted(ids) != list(range(first.num_shards)):
        missing = sorted(set(range(first.num_shards)) - set(ids))
        raise ConfigError(f"shards {missing} are missing", "build them with --shard-ids and join again")
    if out.exists() and any(out.iterdir()) and not (replace and (out / MANIFEST_NAME).is_file()):
        raise ConfigError(f"output folder {out} is not empty", "join into a new folder")
    work = partial_dir(out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copytree(Path(parts[0]) / TOKENIZER_DIRNAME, work / TOKENIZER_DIRNAME)
    shutil.copy2(Path(parts[0]) / WORD_STARTS_NAME, work / WORD_STARTS_NAME)
    for path, m in zip(parts, manifests):
        for sid in m.shard_ids:
            for kind in SHARD_FILES:
                _link_or_copy(shard_file(path, kind, sid), shard_file(work, kind, sid))
            top = toplevel_path(path, sid)  # the search accelerator of the shard, when its build wrote one
            if top.is_file():
                _link_or_copy(top, toplevel_path(work, sid))
    _, params_hash = build_params(first.source, first.tokenizer.name, first.tokenizer.revision,
                                  first.tokenizer.sha256, first.token_width, first.num_shards,
                                  list(range(first.num_shards)))
    if build_info is None:
        build_info = {"joined_from": [str(Path(p).absolute()) for p in parts]}
    joined = IndexManifest(
        source=first.source, tokenizer=first.tokenizer, token_width=first.token_width,
        delimiter_ids=first.delimiter_ids, num_shards=first.num_shards,
        shard_ids=list(range(first.num_shards)),
        shards=sorted((s for m in manifests for s in m.shards), key=lambda s: s.id),
        build={"params_hash": params_hash, **build_info},
        versions=_versions(), created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        files=checksum_files(work, index_file_names(range(first.num_shards))),
        source_counts=joined_source_counts([m.source_counts for m in manifests]))
    joined.write(work)
    _install(work, out)
    return joined


SA_BUILDERS = ("auto", "divsufsort", "rust")


def divsufsort_memory(ds_bytes: int) -> int:
    """Bytes of memory libdivsufsort needs for one `tokenized.N`: the file itself plus a 32-bit
    (64-bit from 2 GiB on) entry for every byte offset, odd ones included."""
    return ds_bytes * (1 + (4 if ds_bytes < 2**31 else 8))


def choose_sa_builder(ds_bytes: int, mem_bytes: int, requested: str = "auto") -> str:
    """'divsufsort' when asked for, or on 'auto' when it fits in `mem_bytes`; else 'rust'."""
    if requested not in SA_BUILDERS:
        raise ConfigError(f"unknown suffix-array builder {requested!r}", f"choose one of {', '.join(SA_BUILDERS)}")
    if requested == "auto":
        return "divsufsort" if divsufsort_memory(ds_bytes) <= mem_bytes else "rust"
    return requested


def build_suffix_array(ds_path: Path, sa_path: Path, width: int, cpus: int, mem_bytes: int, tmp: Path,
                       on_step=lambda step: None, builder: str = "auto") -> None:
    """Suffix array of one `tokenized.N` (engine order: byte order of the suffixes), written to `sa_path`.

    libdivsufsort sorts every byte offset in memory in O(n log n) whatever the text, so long
    repeats (tables, logs, boilerplate) cost no more than prose; the offsets that are multiples of
    the token width, in that order, are exactly the engine's suffix array. rust_indexing works in
    parts of `mem_bytes` and merges them, for shards that do not fit; it slows down on long repeats
    and orders suffixes that agree on their first 100,000 bytes arbitrarily among themselves (no
    query that short can tell them apart). 'auto' takes libdivsufsort when it fits in `mem_bytes`.
    """
    if choose_sa_builder(ds_path.stat().st_size, mem_bytes, builder) == "divsufsort":
        _divsufsort_suffix_array(ds_path, sa_path, width, on_step)
    else:
        _rust_suffix_array(ds_path, sa_path, width, cpus, mem_bytes, tmp, on_step)


def _divsufsort_suffix_array(ds_path: Path, sa_path: Path, width: int, on_step, chunk: int = 1 << 24) -> None:
    """libdivsufsort over the bytes of `tokenized.N`, keeping the offsets aligned to the token width."""
    import pydivsufsort

    ds_size = ds_path.stat().st_size
    ratio = pointer_size(ds_size)
    data = np.memmap(ds_path, dtype=np.uint8, mode="c")  # writable for ctypes; pages stay the file's
    on_step("read")
    order = pydivsufsort.divsufsort(data)
    del data
    on_step("divsufsort")
    tmp_sa = sa_path.with_name(sa_path.name + ".partial")
    with open(tmp_sa, "wb") as fh:
        for first in range(0, len(order), chunk):
            part = order[first:first + chunk]
            part = part[(part & (width - 1)) == 0].astype("<u8")
            fh.write(part.view(np.uint8).reshape(-1, 8)[:, :ratio].tobytes())
    del order
    _check_sa_size(tmp_sa, ds_path, width, ratio, "libdivsufsort")
    os.replace(tmp_sa, sa_path)
    on_step("write")


def _check_sa_size(tmp_sa: Path, ds_path: Path, width: int, ratio: int, who: str) -> None:
    expected = (ds_path.stat().st_size // width) * ratio
    if tmp_sa.stat().st_size != expected:
        raise BuildError(f"{who} wrote {tmp_sa.stat().st_size} bytes of suffix array for {ds_path.name}, "
                         f"expected {expected}", "re-run the build; if it repeats, report it with the corpus size")


def write_toplevel(folder: Path, sid: int, width: int) -> None:
    """The in-memory search accelerator's samples of a finished suffix array (`toplevel.py`)."""
    from propme_metrics.index.toplevel import build_toplevel, save_toplevel, toplevel_path

    n = shard_file(folder, "tokenized", sid).stat().st_size // width
    save_toplevel(build_toplevel(folder, sid, width), toplevel_path(folder, sid), n, width)


def _rust_suffix_array(ds_path: Path, sa_path: Path, width: int, cpus: int, mem_bytes: int, tmp: Path,
                       on_step) -> None:
    """rust_indexing: make-part (parallel), merge, concat.

    For 32-bit tokens the binary's own 4-byte mode allocates 32 GiB up front, so the array is
    built in 2-byte mode and the pointers that are not 4-byte aligned are dropped: byte order
    among the aligned suffixes is unchanged, so the result is exact.
    """
    binary = str(rust_indexing_binary())
    ds_size = ds_path.stat().st_size
    ratio = pointer_size(ds_size)
    unit = 2  # the binary's unit; 4-byte tokens are filtered afterwards
    batches = 1
    while batches * (mem_bytes // 8) < ds_size:
        batches *= 2
    jobs = batches * cpus if ds_size > 4 * OVERLAP_BYTES else 1
    part = -(-(ds_size // jobs) // unit) * unit  # round up to whole units
    shutil.rmtree(tmp, ignore_errors=True)
    parts_dir, merged_dir = tmp / "parts", tmp / "merged"
    parts_dir.mkdir(parents=True)
    merged_dir.mkdir()
    common = ["--data-file", str(ds_path), "--ratio", str(ratio), "--token-width", str(unit)]
    ranges = [(i * part, min((i + 1) * part + OVERLAP_BYTES, ds_size)) for i in range(jobs) if i * part < ds_size]
    for first in range(0, len(ranges), cpus):
        _run_all([[binary, "make-part", *common, "--parts-dir", str(parts_dir),
                   "--start-byte", str(s), "--end-byte", str(e)] for s, e in ranges[first:first + cpus]])
    on_step("make-part")
    _run_all([[binary, "merge", *common, "--parts-dir", str(parts_dir), "--merged-dir", str(merged_dir),
               "--num-threads", str(cpus), "--hacksize", str(OVERLAP_BYTES)]])
    on_step("merge")
    shutil.rmtree(parts_dir)
    merged_files = sum(1 for p in merged_dir.iterdir() if p.is_file())  # tiny shards merge into fewer files
    tmp_sa = tmp / "table.unfiltered" if width != unit else sa_path.with_name(sa_path.name + ".partial")
    _run_all([[binary, "concat", *common, "--merged-dir", str(merged_dir), "--merged-file", str(tmp_sa),
               "--num-threads", str(max(1, min(cpus, merged_files)))]])
    if width != unit:
        filtered = sa_path.with_name(sa_path.name + ".partial")
        _keep_aligned_pointers(tmp_sa, filtered, ratio, width)
        tmp_sa = filtered
    _check_sa_size(tmp_sa, ds_path, width, ratio, "rust_indexing")
    os.replace(tmp_sa, sa_path)
    shutil.rmtree(tmp)
    on_step("concat")


def _keep_aligned_pointers(src: Path, dst: Path, ratio: int, width: int, chunk: int = 1 << 22) -> None:
    """Copy a suffix array, keeping only pointers that are multiples of `width` (order preserved)."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while True:
            raw = np.frombuffer(fin.read(chunk * ratio), dtype=np.uint8)
            if raw.size == 0:
                break
            rows = raw.reshape(-1, ratio)
            fout.write(rows[pointers(rows, ratio) % width == 0].tobytes())


def _run_all(commands: list[list[str]]) -> None:
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in commands]
    failures = []
    for cmd, proc in zip(commands, procs):
        _, err = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"`{' '.join(cmd[1:3])}` exited {proc.returncode}: {err.decode(errors='replace')[-500:]}")
    if failures:
        raise BuildError("suffix-array step failed: " + "; ".join(failures),
                         "check free disk space and memory, then re-run the same command to resume")


def _tokenize(source: CorpusSource, tok, work: Path, width: int, num_shards: int, shard_ids: list[int],
              batch_size: int, bar) -> tuple[dict[str, dict[str, int]], int]:
    """Stream documents into shards (document i goes to shard i mod N); write v4 files and unigrams.

    Returns the counts per shard and how many documents had lone surrogates replaced."""
    dtype = np.uint16 if width == 2 else np.uint32
    sep = np.iinfo(dtype).max
    vocab_len = max_token_id(tok) + 1
    wanted = set(shard_ids)
    files = {sid: {kind: open(shard_file(work, kind, sid), "wb") for kind in ("tokenized", "offset", "metadata", "metaoff")}
             for sid in shard_ids}
    pos = {sid: [0, 0] for sid in shard_ids}  # byte offsets into tokenized.N and metadata.N
    unigrams = {sid: np.zeros(vocab_len, dtype=np.int64) for sid in shard_ids}
    counts = {sid: {"documents": 0, "tokens": 0} for sid in shard_ids}
    task = bar.add_task("tokenizing", total=None, rate="")
    started, n_docs, n_tokens = time.time(), 0, 0

    def flush(batch: list[tuple[int, Any]]) -> None:
        nonlocal n_docs, n_tokens
        mine = [(i, d) for i, d in batch if i % num_shards in wanted]
        if mine:
            ids = tok([d.text for _, d in mine], add_special_tokens=False,
                      return_attention_mask=False)["input_ids"]
            per_shard: dict[int, list[tuple[Any, list[int]]]] = {}
            for (i, doc), doc_ids in zip(mine, ids):
                per_shard.setdefault(i % num_shards, []).append((doc, doc_ids))
            for sid, docs in per_shard.items():
                lengths = np.array([len(x) + 1 for _, x in docs], dtype=np.uint64)
                flat = np.full(int(lengths.sum()), sep, dtype=dtype)
                starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
                body = np.fromiter(chain.from_iterable(x for _, x in docs), dtype=dtype, count=len(flat) - len(docs))
                mask = np.ones(len(flat), dtype=bool)
                mask[starts] = False
                flat[mask] = body
                lines = [(json.dumps(doc.metadata, ensure_ascii=False) + "\n").encode("utf-8") for doc, _ in docs]
                line_lengths = np.array([len(x) for x in lines], dtype=np.uint64)
                f = files[sid]
                f["offset"].write((pos[sid][0] + starts.astype(np.uint64) * width).astype(np.uint64).tobytes())
                f["tokenized"].write(flat.tobytes())
                f["metaoff"].write((pos[sid][1] + np.concatenate(([0], np.cumsum(line_lengths)[:-1]))).astype(np.uint64).tobytes())
                f["metadata"].write(b"".join(lines))
                pos[sid][0] += flat.nbytes
                pos[sid][1] += int(line_lengths.sum())
                unigrams[sid] += np.bincount(body, minlength=vocab_len)[:vocab_len] if len(body) else 0
                counts[sid]["documents"] += len(docs)
                counts[sid]["tokens"] += len(body)
                n_tokens += len(body)
        n_docs += len(batch)
        elapsed = time.time() - started
        bar.update(task, completed=n_docs,
                   rate=f"{rate(n_docs, elapsed, 'docs')}  {rate(n_tokens, elapsed, 'tok')}")

    try:
        batch: list[tuple[int, Any]] = []
        for i, doc in enumerate(source):
            batch.append((i, doc))
            if len(batch) >= batch_size:
                flush(batch)
                batch = []
        flush(batch)
    finally:
        for f in files.values():
            for fh in f.values():
                fh.close()
    if n_docs == 0:
        raise ConfigError(f"the corpus {source.location} has no documents"
                          + (" left after --exclude-sources" if source.exclude_sources else ""),
                          "check the path, --split and the source filter")
    empty = [sid for sid in shard_ids if counts[sid]["documents"] == 0]
    if empty:
        raise ConfigError(f"shard(s) {empty} got no documents ({n_docs} documents for {num_shards} shards)",
                          "use fewer --shards")
    for sid in shard_ids:
        with open(shard_file(work, "unigram", sid), "w") as fh:
            for tid in np.flatnonzero(unigrams[sid]):
                fh.write(f"{tid} {unigrams[sid][tid]}\n")
            fh.write(f"{sep} {counts[sid]['documents']}\n")
    bar.update(task, total=n_docs)
    return {str(sid): c for sid, c in counts.items()}, source.replaced_surrogates


def _existing_index(out: Path, params_hash: str, force: bool) -> IndexManifest | None:
    """The index already at `out` if it is this build; None if `out` may be (re)built; else an error.

    Only an empty folder or a PropMe index (with --force) is ever replaced: anything else in
    `out` is refused, --force or not, so that no command deletes files PropMe did not write.
    """
    if not out.exists():
        return None
    if not out.is_dir():
        raise ConfigError(f"output path {out} exists and is not a folder", "choose a new folder for --out")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return None
    foreign = entries
    if (out / MANIFEST_NAME).is_file():
        manifest = IndexManifest.read(out)
        if manifest.build.get("params_hash") == params_hash and not force:
            return manifest
        foreign = files_not_written_by_propme(out, manifest)
    if (out / MANIFEST_NAME).is_file() and not foreign:
        if not force:
            raise ConfigError(
                f"{out} already holds a different index (source {manifest.source.get('location')}, "
                f"tokenizer {manifest.tokenizer.name}, {manifest.num_shards} shard(s)); "
                "the corpus, its content or the tokenizer differ from that build",
                "choose another --out, or pass --force to replace it")
        return None
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    raise ConfigError(f"output folder {out} is not empty and holds files that PropMe did not write ({shown})",
                      "move them out of the folder or choose an empty or new one; PropMe never deletes files "
                      "it did not write, even with --force")


def _load_state(work: Path, params_hash: str) -> dict[str, Any] | None:
    try:
        state = json.loads((work / STATE_NAME).read_text())
    except (OSError, ValueError):
        return None
    return state if state.get("params_hash") == params_hash else None


def _save_state(work: Path, state: dict[str, Any]) -> None:
    write_atomic(work / STATE_NAME, json.dumps(state))


def _check_disk_space(work: Path, text_bytes: int | None, width: int, ds_bytes: int | None = None) -> None:
    free = shutil.disk_usage(work).free
    if ds_bytes is not None:  # suffix array: table (up to 5 bytes/token here) + the same again in parts
        need = 2 * (ds_bytes // width) * 5
    elif text_bytes is not None:  # about 4 bytes of text per token
        need = (text_bytes // 4) * (BYTES_PER_TOKEN_ON_DISK + 5)
    else:
        return
    if free < need:
        raise ConfigError(f"not enough disk space in {work.parent}: about {human_bytes(need)} needed, "
                          f"{human_bytes(free)} free",
                          "free space, build to another --out, or pass --skip-space-check if the estimate is wrong")


def human_bytes(n: int) -> str:
    """A size for messages: '512 B', '3.4 MiB', '1.2 GiB' (never '0.0 GiB' for a small folder)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _half_of_ram() -> int:
    return total_memory() // 2


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _versions() -> dict[str, str]:
    versions = {"propme": __version__, "python": platform.python_version()}
    for pkg in ("infini-gram", "transformers", "tokenizers", "datasets"):
        try:
            versions[pkg] = importlib_metadata.version(pkg)
        except importlib_metadata.PackageNotFoundError:
            pass
    return versions

