"""Output paths checked before any work: an output never replaces one of the command's inputs,
another of its outputs, or anything inside an index folder (a folder holding a PropMe manifest);
and a command's files written into a folder all at once (`write_staged`).

Paths are compared by device and inode when they exist, so a symlink or a hard link to an input
is caught as surely as the same spelling. A character device or FIFO output is written in place
(`core.files`); any other special file (a block device, a socket) is refused.
"""
from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import is_stream, write_atomic

#: the file that marks a folder as a PropMe index (its manifest); outputs never go inside such a folder
MANIFEST_NAME = "propme-manifest.json"


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what `path` names, following symlinks; None when nothing is there."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _spelling(path: Path) -> Path:
    """The absolute path with every existing symlink resolved (the path need not exist)."""
    return Path(os.path.realpath(Path(path).absolute()))


def index_folder_holding(path: str | Path) -> Path | None:
    """The nearest folder above `path` (or its resolved target) that holds a PropMe manifest, if any."""
    path = Path(path).absolute()
    for candidate in (path, _spelling(path)):
        for folder in candidate.parents:
            if (folder / MANIFEST_NAME).is_file():
                return folder
    return None


def _same(a: Path, b: Path) -> bool:
    ia, ib = _identity(a), _identity(b)
    if ia is not None and ib is not None:
        return ia == ib
    return _spelling(a) == _spelling(b)


def _within(path: Path, folder: Path) -> bool:
    path, folder = _spelling(path), _spelling(folder)
    return path == folder or folder in path.parents


def check_outputs(outputs: dict[str, str | Path | None], inputs: dict[str, str | Path | None] | None = None,
                  folders: dict[str, str | Path | None] | None = None, *, output_folders: tuple[str, ...] = (),
                  index_outputs: tuple[str, ...] = ()) -> None:
    """Refuse (ConfigError, exit 2) before any work an output that is an input, equals another
    output, or lies inside an index folder; and a file output that names an existing folder.

    `outputs` and `inputs` map an option's name (for the message) to a path; `folders` are input
    folders that no output may lie inside (e.g. the parts an index join reads); names in
    `output_folders` are outputs that are folders themselves (e.g. a report's --out), and those in
    `index_outputs` folders that may already hold an index (the --out of an index build, which
    replaces only its own index)."""
    hint = "choose an output path that is none of the command's inputs, outputs or index files"
    given = {k: Path(v) for k, v in outputs.items() if v is not None}
    sources = {k: Path(v) for k, v in (inputs or {}).items() if v is not None}
    protected = {k: Path(v) for k, v in (folders or {}).items() if v is not None}
    seen: list[tuple[str, Path]] = []
    for name, path in given.items():
        for other, earlier in seen:
            if _same(path, earlier) and not is_stream(path):  # two streams into one device or pipe lose nothing
                raise ConfigError(f"{name} {path} is the same file as {other} {earlier}: one would overwrite the other",
                                  hint)
        seen.append((name, path))
        for what, source in sources.items():
            if _same(path, source):
                raise ConfigError(f"{name} {path} is the input {what} {source}: writing it would destroy the input",
                                  hint)
        index = index_folder_holding(path)
        if index is not None:
            raise ConfigError(f"{name} {path} lies inside the index folder {index}: writing there would damage "
                              "the index", hint)
        for what, folder in protected.items():
            if _within(path, folder):
                raise ConfigError(f"{name} {path} lies inside the input {what} {folder}: writing there could "
                                  "overwrite its files", hint)
        if name in output_folders:
            if path.exists() and not path.is_dir():
                raise ConfigError(f"{name} {path} exists and is not a folder", "choose a folder for it")
            if (path / MANIFEST_NAME).is_file() and name not in index_outputs:
                raise ConfigError(f"{name} {path} is an index folder: writing there would damage the index", hint)
        elif path.is_dir():
            raise ConfigError(f"{name} {path} is a folder, not a file", "name the file to write, e.g. "
                              f"{path / 'out.jsonl'}")
        elif _special(path) and not is_stream(path):
            raise ConfigError(f"{name} {path} is a {_special(path)}: PropMe writes regular files, character "
                              "devices and FIFOs only", "name a regular file (or a FIFO to stream the output)")


def _special(path: Path) -> str | None:
    """What kind of special file `path` is (a block device, a socket, ...), None for a regular file,
    a folder or nothing."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    kinds = ((stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
             (stat.S_ISFIFO, "FIFO"))
    return next((what for test, what in kinds if test(mode)), None)


def write_staged(folder: Path, stage_name: str, write: Callable[[Path], list[Path]], what: str) -> list[Path]:
    """Write a command's files into `folder` all at once: `write(stage)` writes them into the hidden
    staging folder `stage_name` inside `folder` and returns their paths there; each is then moved
    to the same place inside `folder` (streamed into it when the file there is a device or FIFO),
    and their final paths are returned. A write that fails (or is killed) leaves the earlier files
    in `folder` whole, never some of each; a killed write's staging folder is removed by the next.
    `what` names the folder in messages ("report folder"). An OSError of `write` is a ConfigError
    saying nothing in `folder` was changed."""
    stage = folder / stage_name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
    except OSError as exc:
        raise ConfigError(f"cannot create the {what} {folder}: {exc}", "choose a writable --out") from None
    try:
        try:
            written = write(stage)
        except OSError as exc:
            raise ConfigError(f"cannot write into the {what} {folder}: {exc}; the files already in {folder} were "
                              "left as they were", "free space or choose another --out, then run it again") from None
        return [_move_into(path, stage, folder) for path in written]
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _move_into(path: Path, stage: Path, folder: Path) -> Path:
    """`path` (inside `stage`) moved to the same place inside `folder`."""
    target = folder / path.relative_to(stage)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if is_stream(target):
            write_atomic(target, path.read_bytes())
        else:
            os.replace(path, target)
    except OSError as exc:
        raise ConfigError(f"cannot move {target} into place: {exc}", "run it again") from None
    return target
