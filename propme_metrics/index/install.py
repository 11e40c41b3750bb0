"""Where a build goes and how it gets there: the lock, the staging folder, the atomic move into
place, the recovery of a move that was killed half-way, and what an existing `--out` may hold.

Local builds, joins and Ray builds all go through these steps (docs/index-format.md, safe to
interrupt): a kill at any point leaves the old index or the new one, never a mixture, and no
command deletes a file that PropMe did not write.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from propme_metrics.core.errors import ConfigError, IndexFormatError
from propme_metrics.core.files import hold_lock
from propme_metrics.core.memory import is_out_of_memory, out_of_memory
from propme_metrics.index.format import MANIFEST_NAME, STATE_NAME, index_file_names, lock_path, old_dir
from propme_metrics.index.manifest import IndexManifest
from propme_metrics.index.sources import CorpusSource


def real_out(out: Path) -> Path:
    """The folder to build into: a symlinked --out stands for its target (the link is kept)."""
    out = out.absolute()
    return out.resolve() if out.is_symlink() else out


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


def check_out_spares_source(out: Path, source: CorpusSource) -> None:
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
def build_lock(out: Path) -> Iterator[None]:
    """Hold `.<out>.propme-lock` beside `out` for the whole build (`hold_lock`); a second build of
    `out` stops at once."""
    busy = ConfigError(f"another `propme index build` is building {out} right now",
                       "wait for it to finish (re-running the same command afterwards is a no-op)")
    with hold_lock(lock_path(out), busy):
        yield


def recover_interrupted_install(out: Path, work: Path) -> None:
    """Finish or undo a final move that was killed half-way (see `install`)."""
    old = old_dir(out)
    if not old.exists():
        return
    if out.exists() or finished_build(work, None) is not None:
        if not out.exists():
            os.replace(work, out)
        shutil.rmtree(old)
    else:  # the new build is not complete: bring the old index back
        os.replace(old, out)


def install(work: Path, out: Path) -> None:
    """Move a finished build into place: the old index aside, the new one in, the old one deleted.

    A kill at any point leaves either the old index or the new one at `out` (after the next run's
    `recover_interrupted_install`), never a mixture.
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


def finished_build(work: Path, params_hash: str | None) -> IndexManifest | None:
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


def existing_index(out: Path, params_hash: str, force: bool) -> IndexManifest | None:
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


def link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@contextmanager
def write_errors(work: Path) -> Iterator[None]:
    """A failed write while building or joining (a full disk, a read-only folder) as one message."""
    try:
        yield
    except OSError as exc:
        if is_out_of_memory(exc):
            raise out_of_memory("building the index") from None
        raise ConfigError(f"cannot write the index: {exc.strerror or exc} ({exc.filename or work})",
                          "free disk space or choose a writable --out; re-run the same command to resume "
                          "(finished steps are kept)") from None
