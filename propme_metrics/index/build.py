"""Building an infini-gram v4 index from a corpus with any HF tokenizer.

The build happens in a hidden staging folder beside `--out` and is moved into place only after
the manifest is written (`index/install.py`), so an interrupted build never leaves a folder that
opens as an index. Re-running the same build resumes it: finished steps (tokenization, each
shard's suffix array) are skipped. The steps: the shard writer (`index/shard_writer.py`), the
suffix arrays (`index/suffix_array.py`), the search samples (`index/toplevel.py`), the manifest.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from propme_metrics.core.checksums import checksum_files
from propme_metrics.core.errors import ConfigError, IndexFormatError
from propme_metrics.core.files import write_atomic
from propme_metrics.core.memory import address_space_limit, available_memory, out_of_memory, total_memory
from propme_metrics.core.progress import progress_bar
from propme_metrics.index.format import (
    STATE_NAME,
    TOKENIZER_DIRNAME,
    WORD_STARTS_NAME,
    ShardFile,
    index_file_names,
    is_build_temp,
    sa_temp_dir,
    shard_file,
    staging_dir,
    token_layout,
)
from propme_metrics.index.install import (
    build_lock,
    check_out_spares_source,
    existing_index,
    finished_build,
    install,
    real_out,
    recover_interrupted_install,
    write_errors,
)
from propme_metrics.index.manifest import IndexManifest, ShardInfo, TokenizerInfo
from propme_metrics.index.shard_writer import DEFAULT_BATCH_SIZE, ShardWriter, WrittenShards, tokenize_corpus
from propme_metrics.index.sizing import (
    TEXT_BYTES_PER_TOKEN,
    check_document_memory,
    check_shard_memory,
    estimate_build,
)
from propme_metrics.index.source_counts import count_sources
from propme_metrics.index.sources import CorpusSource
from propme_metrics.index.suffix_array import build_suffix_array
from propme_metrics.index.tokenizer import (
    DEFAULT_TOKENIZER,
    ENCODE_CHECK_TEXTS,
    VocabInfo,
    analyze_vocab,
    check_encodes,
    encode_batch,
    files_sha256,
    load_tokenizer,
    max_token_id,
    tokenizer_hash,
)
from propme_metrics.index.toplevel import write_toplevel
from propme_metrics.version import __version__

BYTES_PER_TOKEN_ON_DISK = 7  # rule of thumb of docs/index-format.md (sizes on disk), temporary space excluded
#: the phases `on_phase(name, seconds)` reports, in order (the suffix array and samples once per shard)
PHASES = ("tokenize", "suffix_array", "toplevel", "manifest", "install")

#: `on_phase(name, seconds)`: told after each phase of a build how long it took (for timings)
PhaseCallback = Callable[[str, float], None]
#: `write_shards(writer, bar)`: fills the shard writer and returns `writer.finish()` (default: tokenize the source)
ShardFiller = Callable[[ShardWriter, Any], WrittenShards]


def choose_token_width(max_id: int, requested: int | None) -> int:
    """2 bytes when every id fits below the 16-bit separator, else 4; a forced 2 must fit."""
    fits = token_layout(2).max_id
    needed = 2 if max_id <= fits else 4
    if requested is None:
        return needed
    if requested not in (2, 4):
        raise ConfigError(f"token width must be 2 or 4 bytes, not {requested}")
    if requested < needed:
        raise ConfigError(
            f"the tokenizer's largest id is {max_id}, which does not fit a 16-bit index (ids up to {fits})",
            "leave --token-width unset (32-bit is chosen automatically) or pass --token-width 4")
    return requested


def default_build_memory() -> int:
    """The suffix-array step's memory budget unless told otherwise: half of the machine's RAM."""
    return total_memory() // 2


@dataclass
class BuildPlan:
    """Everything one build of one index folder needs, checked and derived before any work."""

    source: CorpusSource
    out: Path                    #: the index folder (a symlinked --out resolved)
    tokenizer: str               #: name or folder, as given
    tokenizer_revision: str | None
    tok: Any                     #: the loaded HF tokenizer
    max_id: int
    width: int
    tok_hash: str
    num_shards: int
    shard_ids: list[int]
    batch_size: int
    cpus: int
    mem_bytes: int
    force: bool
    check_space: bool
    progress: bool
    sa_builder: str
    params: dict[str, Any]       #: what identifies the build (see `build_params`)
    params_hash: str
    announce: Callable[[str], None] | None = None
    on_phase: PhaseCallback | None = None
    write_shards: ShardFiller | None = None

    @property
    def work(self) -> Path:
        """The staging folder the build happens in."""
        return staging_dir(self.out)

    @cached_property
    def vocab(self) -> VocabInfo:
        """The tokenizer's word starts and delimiters (for the index files and the manifest): derived once."""
        return analyze_vocab(self.tok)

    def phase_done(self, name: str, started: float) -> None:
        """Tell `on_phase` that phase `name`, begun at `started` (perf_counter), is done."""
        if self.on_phase is not None:
            self.on_phase(name, time.perf_counter() - started)


def plan_build(source: CorpusSource, out: str | Path, tokenizer: str = DEFAULT_TOKENIZER,
               tokenizer_revision: str | None = None, num_shards: int = 1, shard_ids: Iterable[int] | None = None,
               token_width: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE, cpus: int | None = None,
               mem_bytes: int | None = None, force: bool = False, check_space: bool = True, progress: bool = True,
               sa_builder: str = "auto", announce=None, on_phase: PhaseCallback | None = None,
               write_shards: ShardFiller | None = None) -> BuildPlan:
    """The preamble of every build (local or Ray): check the options and `--out` against the corpus,
    load the tokenizer, choose the token width and identify the build. `write_shards` stands in for
    tokenizing the source, for a caller that has the token ids already (a benchmark's generated
    corpus); the build's identity is still the source's."""
    out = real_out(Path(out))
    if num_shards < 1:
        raise ConfigError("--shards must be at least 1")
    shard_ids = sorted(set(range(num_shards) if shard_ids is None else shard_ids))
    if not shard_ids or shard_ids[0] < 0 or shard_ids[-1] >= num_shards:
        raise ConfigError(f"--shard-ids must lie in 0..{num_shards - 1}")
    check_out_spares_source(out, source)
    tok = load_tokenizer(tokenizer, tokenizer_revision)
    if len(tok) == 0:
        raise ConfigError(f"the tokenizer {tokenizer!r} has an empty vocabulary",
                          "pass a tokenizer folder or hub id with a vocabulary (tokenizer.json or vocab files)")
    if write_shards is None:
        check_encodes(lambda texts: encode_batch(tok, texts),
                      [doc.text for doc in itertools.islice(source, ENCODE_CHECK_TEXTS)], f"the tokenizer {tokenizer!r}",
                      "pass the tokenizer the model was trained with, saved whole (tokenizer.json, e.g. "
                      "AutoTokenizer.from_pretrained(...).save_pretrained(DIR)); check it with tok('some text')")
    max_id = max_token_id(tok)
    width = choose_token_width(max_id, token_width)
    tok_hash = tokenizer_hash(tok)
    params, params_hash = build_params(source.describe(known=_known_source_stats(out, staging_dir(out))), tokenizer,
                                       tokenizer_revision, tok_hash, width, num_shards, shard_ids)
    return BuildPlan(source=source, out=out, tokenizer=tokenizer, tokenizer_revision=tokenizer_revision, tok=tok,
                     max_id=max_id, width=width, tok_hash=tok_hash, num_shards=num_shards, shard_ids=shard_ids,
                     batch_size=batch_size, cpus=cpus or os.cpu_count() or 1,
                     mem_bytes=mem_bytes or default_build_memory(), force=force, check_space=check_space,
                     progress=progress, sa_builder=sa_builder, params=params, params_hash=params_hash,
                     announce=announce, on_phase=on_phase, write_shards=write_shards)


def build_index(source: CorpusSource, out: str | Path, tokenizer: str = DEFAULT_TOKENIZER, **options) -> IndexManifest:
    """Build (or resume, or reuse) the index of `source` in folder `out` and return its manifest.

    `options` are those of `plan_build`. `announce(text)`, when given, receives the estimate of
    disk, memory and time before the build starts (from the corpus' file sizes) and again from the
    exact counts before the suffix arrays; `on_phase(name, seconds)` the time of each phase.

    Under an address-space limit (`ulimit -v`, prlimit --as) the build runs in a child process (the
    callbacks too): the tokenizer library aborts the process when an allocation fails there, which
    no handler can catch, and the child's death is reported as out of memory instead."""
    if address_space_limit() is None:
        return _build(source, out, tokenizer, options)
    from propme_metrics.core.lifetime import in_child

    return in_child(lambda: _build(source, out, tokenizer, options),
                    lambda died: out_of_memory(f"building the index (the build process {died})"))


def _build(source: CorpusSource, out: str | Path, tokenizer: str, options: dict) -> IndexManifest:
    plan = plan_build(source, out, tokenizer, **options)
    with write_errors(plan.work), build_lock(plan.out):
        return _build_locked(plan)


def reusable_index(plan: BuildPlan) -> IndexManifest | None:
    """Under the build lock: finish a killed final move, then the index this build would make if it
    is already at `out` or finished in the staging folder (None: it has to be built)."""
    recover_interrupted_install(plan.out, plan.work)
    existing = existing_index(plan.out, plan.params_hash, plan.force)
    if existing is not None:
        return existing
    finished = finished_build(plan.work, plan.params_hash)
    if finished is not None:  # killed between the manifest and the move: only the move is left
        install(plan.work, plan.out)
    return finished


def _build_locked(plan: BuildPlan) -> IndexManifest:
    """The build proper, while this process alone builds `out`: reuse, finish, resume or start it."""
    reused = reusable_index(plan)
    if reused is not None:
        return reused
    source, work = plan.source, plan.work
    state = _load_state(work, plan.params_hash)
    if state is None:
        text_bytes = source.estimated_text_bytes()
        if text_bytes:
            _check_plan(plan, int(text_bytes / TEXT_BYTES_PER_TOKEN), "from the corpus' file sizes",
                        longest_bytes=source.longest_line_bytes())
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        state = {"params_hash": plan.params_hash, "tokenized": None, "suffix_arrays": [],
                 "source_stats": source.file_stats() if source.is_local else {}}
        _save_state(work, state)
    if plan.check_space:
        _check_disk_space(work, source.estimated_text_bytes(), plan.width)
    started = time.time()
    counts = _run_steps(plan, state)
    t = time.perf_counter()
    shards = [
        ShardInfo(id=sid, documents=counts[str(sid)]["documents"], tokens=counts[str(sid)]["tokens"],
                  ds_bytes=shard_file(work, ShardFile.TOKENIZED, sid).stat().st_size,
                  sa_bytes=shard_file(work, ShardFile.TABLE, sid).stat().st_size)
        for sid in plan.shard_ids
    ]
    tok, vocab = plan.tok, plan.vocab
    _remove_strays(work)
    source_counts = state.get("source_counts")
    if source_counts is None:  # tokenized by a PropMe that did not count sources while writing
        source_counts = count_sources(work, plan.shard_ids, plan.width, plan.params["source"]["source_field"])
    manifest = IndexManifest(
        source=plan.params["source"],
        tokenizer=tokenizer_info(tok, plan.tokenizer, plan.tokenizer_revision, plan.tok_hash, vocab, work),
        token_width=plan.width,
        delimiter_ids=vocab.delimiter_ids,
        num_shards=plan.num_shards,
        shard_ids=plan.shard_ids,
        shards=shards,
        build={"params_hash": plan.params_hash, "batch_size": plan.batch_size, "cpus": plan.cpus,
               "seconds_last_run": round(time.time() - started, 2),
               "source_stats": state.get("source_stats", {}),
               "replaced_surrogates": state.get("replaced_surrogates", 0),
               **({"excluded_documents": state["excluded"]} if state.get("excluded") else {})},
        versions=build_versions(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        files=checksum_files(work, index_file_names(plan.shard_ids)),
        source_counts=source_counts,
    )
    manifest.write(work)  # its presence marks a finished build (see install.finished_build)
    (work / STATE_NAME).unlink()
    plan.phase_done("manifest", t)
    t = time.perf_counter()
    install(work, plan.out)
    plan.phase_done("install", t)
    return manifest


def write_tokenizer_files(folder: Path, tok, vocab: VocabInfo) -> None:
    """The index's copy of its tokenizer and its list of word-start ids (what tracing reads)."""
    tok.save_pretrained(folder / TOKENIZER_DIRNAME)
    (folder / WORD_STARTS_NAME).write_text("".join(f"{i}\n" for i in vocab.word_start_ids))


def tokenizer_info(tok, name: str, revision: str | None, tok_hash: str, vocab: VocabInfo, folder: Path) -> TokenizerInfo:
    """The manifest's record of the tokenizer whose copy `write_tokenizer_files` saved in `folder`."""
    return TokenizerInfo(name=name, revision=revision, cls=type(tok).__name__, vocab_size=len(tok),
                         max_id=max_token_id(tok), eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                         family=vocab.family, sha256=tok_hash, files_sha256=files_sha256(folder / TOKENIZER_DIRNAME))


def _run_steps(plan: BuildPlan, state: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Tokenize (unless done), then build each shard's suffix array not yet built; save progress after each."""
    work, tok = plan.work, plan.tok
    with progress_bar(plan.progress) as bar:
        if state["tokenized"] is None:
            t = time.perf_counter()
            write_tokenizer_files(work, tok, plan.vocab)
            writer = ShardWriter(work, plan.width, plan.max_id + 1, plan.shard_ids,
                                 plan.params["source"]["source_field"])

            def encode(texts: list[str]) -> list[list[int]]:
                return encode_batch(tok, texts)

            try:
                written = (plan.write_shards(writer, bar) if plan.write_shards is not None else
                           tokenize_corpus(plan.source, writer, encode, plan.num_shards, plan.batch_size, bar))
            except ConfigError:  # a corpus problem: nothing worth resuming
                shutil.rmtree(work, ignore_errors=True)
                raise
            state["tokenized"], state["replaced_surrogates"] = written.shards, written.replaced_surrogates
            state["excluded"] = written.excluded
            state["source_counts"] = written.sources
            _save_state(work, state)
            plan.phase_done("tokenize", t)
        counts = state["tokenized"]
        _check_plan(plan, max(c["tokens"] + c["documents"] for c in counts.values()) * plan.num_shards,
                    "from the tokenized shards")
        for sid in plan.shard_ids:
            if sid in state["suffix_arrays"]:
                continue
            ds_path = shard_file(work, ShardFile.TOKENIZED, sid)
            if plan.check_space:
                _check_disk_space(work, None, plan.width, ds_bytes=ds_path.stat().st_size)
            task = bar.add_task(f"suffix array, shard {sid}", total=3, rate="")
            t = time.perf_counter()
            build_suffix_array(ds_path, shard_file(work, ShardFile.TABLE, sid), plan.width, plan.cpus, plan.mem_bytes,
                               sa_temp_dir(work, sid), on_step=lambda step: bar.update(task, advance=1, rate=step),
                               builder=plan.sa_builder)
            plan.phase_done("suffix_array", t)
            t = time.perf_counter()
            write_toplevel(work, sid, plan.width)
            plan.phase_done("toplevel", t)
            state["suffix_arrays"].append(sid)
            _save_state(work, state)
    return state["tokenized"]


def _remove_strays(work: Path) -> None:
    """Delete what a killed run left in the build folder (temporary suffix-array files)."""
    for p in work.iterdir():
        if is_build_temp(p.name):
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


def _check_plan(plan: BuildPlan, tokens: int, basis: str, longest_bytes: int | None = None) -> None:
    """Announce the estimated needs of the build and refuse a shard, or a document (`longest_bytes`:
    the longest line of the corpus), that cannot fit in memory."""
    estimate = estimate_build(tokens, basis, plan.num_shards, plan.width, plan.cpus, plan.mem_bytes, plan.sa_builder,
                              longest_bytes)
    tokenize_memory = check_document_memory(longest_bytes, available_memory())
    if plan.announce is not None:
        plan.announce(estimate.describe() + (f"; tokenizing its longest document ({longest_bytes / 2**20:,.1f} MiB) "
                                             f"takes about {tokenize_memory / 2**30:,.1f} GiB of memory"
                                             if tokenize_memory > 2**28 else ""))
    check_shard_memory(estimate.tokens_per_shard, plan.width, plan.num_shards, plan.mem_bytes, total_memory(),
                       plan.sa_builder, basis)


def build_params(source: dict[str, Any], tokenizer: str, revision: str | None, tok_sha256: str, width: int,
                 num_shards: int, shard_ids: list[int]) -> tuple[dict[str, Any], str]:
    """What identifies a build, and its hash (a finished index with the same hash is reused)."""
    params = {"source": source, "tokenizer": {"name": tokenizer, "revision": revision, "sha256": tok_sha256},
              "token_width": width, "num_shards": num_shards, "shard_ids": list(shard_ids)}
    return params, hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


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


def build_versions() -> dict[str, str]:
    """The versions of PropMe and of the libraries that shape an index, recorded in its manifest."""
    versions = {"propme": __version__, "python": platform.python_version()}
    for pkg in ("infini-gram", "transformers", "tokenizers", "datasets"):
        try:
            versions[pkg] = importlib_metadata.version(pkg)
        except importlib_metadata.PackageNotFoundError:
            pass
    return versions
