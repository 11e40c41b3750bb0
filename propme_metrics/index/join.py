"""Joining shard sets built separately (`--shard-ids` on several machines, or a Ray build's
tasks) into one index, byte-identical to a build of all shards in one go (the manifest's run
record aside), installed atomically as a build is (`index/install.py`).
"""
from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from propme_metrics.core.checksums import checksum_files
from propme_metrics.core.errors import ConfigError, IndexFormatError
from propme_metrics.index.build import build_params, build_versions
from propme_metrics.index.format import (
    MANIFEST_NAME,
    SHARD_FILES,
    TOKENIZER_DIRNAME,
    WORD_STARTS_NAME,
    index_file_names,
    shard_file,
    staging_dir,
    toplevel_path,
)
from propme_metrics.index.install import (
    build_lock,
    install,
    link_or_copy,
    real_out,
    recover_interrupted_install,
    write_errors,
)
from propme_metrics.index.manifest import IndexManifest
from propme_metrics.index.source_counts import joined_source_counts


def join_indexes(parts: list[str | Path], out: str | Path, build_info: dict[str, Any] | None = None,
                 replace: bool = False) -> IndexManifest:
    """Join the parts into the index `out`, holding the build lock of `out` while it does.

    `build_info` replaces the manifest's record of the part folders (a build that joins and then
    removes its own parts says how it ran instead). With `replace`, an index already at `out`
    (checked by the caller to hold only PropMe's files) is swapped for the joined one atomically,
    as a local build does: an interrupted join leaves the old index in place."""
    out = real_out(Path(out))
    with write_errors(staging_dir(out)), build_lock(out):
        recover_interrupted_install(out, staging_dir(out))
        return join_locked(parts, out, build_info, replace)


def join_locked(parts: list[str | Path], out: Path, build_info: dict[str, Any] | None = None,
                replace: bool = False) -> IndexManifest:
    """`join_indexes` for a caller that already holds the build lock of `out` (a Ray build)."""
    from propme_metrics.index.reader import checksum_mismatches

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
    work = staging_dir(out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copytree(Path(parts[0]) / TOKENIZER_DIRNAME, work / TOKENIZER_DIRNAME)
    shutil.copy2(Path(parts[0]) / WORD_STARTS_NAME, work / WORD_STARTS_NAME)
    for path, m in zip(parts, manifests):
        for sid in m.shard_ids:
            for kind in SHARD_FILES:
                link_or_copy(shard_file(path, kind, sid), shard_file(work, kind, sid))
            top = toplevel_path(path, sid)  # the search accelerator of the shard, when its build wrote one
            if top.is_file():
                link_or_copy(top, toplevel_path(work, sid))
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
        versions=build_versions(), created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        files=checksum_files(work, index_file_names(range(first.num_shards))),
        source_counts=joined_source_counts([m.source_counts for m in manifests]))
    joined.write(work)
    install(work, out)
    return joined
