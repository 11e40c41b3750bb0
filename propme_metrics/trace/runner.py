"""`propme trace` that survives interruption: results go to a journal beside --out as they are
traced, so rerunning the same command keeps the finished generations and traces the rest.

The journal (`.<out name>.propme-partial.jsonl`) starts with a fingerprint of the job (input
content, index identity, tracing parameters, tracing rules); a journal of another job is discarded. It is locked
while a run writes it, so a second run on the same --out stops at once instead of after all its
work. Results come out identical to one uninterrupted run: generations are traced independently
and kept in input order.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import cache_dir, is_stream, open_locked
from propme_metrics.core.progress import progress_bar, rate
from propme_metrics.trace.inputs import TraceInput
from propme_metrics.trace.result import TraceResult
from propme_metrics.trace.tracer import TRACE_RULES_VERSION, Tracer

JOURNAL_FORMAT = "propme-trace-journal/1"
#: generations traced between two journal writes, per worker (what an interruption can cost)
CHUNK_PER_WORKER = 64
#: the journal is forced to disk (fsync) at most this often: a killed process loses nothing written,
#: a crash of the machine at most this much tracing more, and a short job waits for no disk flushes
SYNC_SECONDS = 1.0


def journal_path(out: Path) -> Path:
    """Beside --out; in PropMe's cache folder when --out is a device or a FIFO (nothing is written beside those)."""
    if is_stream(out):
        where = hashlib.sha256(str(out.absolute()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
        return cache_dir() / "trace-journals" / f".{out.name}-{where}.propme-partial.jsonl"
    return out.with_name(f".{out.name}.propme-partial.jsonl")


def job_fingerprint(input_digest: str, index_identity: str, config: dict[str, Any],
                    generations: Sequence[TraceInput]) -> str:
    """What makes two runs the same job: the same input, index, tracing parameters and tracing rules."""
    payload = {"input": input_digest, "index": index_identity, "config": config, "rules": TRACE_RULES_VERSION,
               "keys": hashlib.sha256("\n".join(g.key for g in generations).encode("utf-8", "replace")).hexdigest()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def trace_resumable(tracer: Tracer, generations: Sequence[TraceInput], out: Path, fingerprint: str,
                    workers: int = 1, progress: bool = True,
                    on_result: Callable[[TraceResult], None] | None = None) -> tuple[list[TraceResult], int]:
    """Trace every generation, resuming from the journal of `out`; returns (results, how many were resumed).

    `on_result` is called with each result in input order as it arrives (resumed ones first): what
    the caller does per result then runs while the workers trace the next ones, not after them all.
    The journal is left in place (locked until this returns); `finish` removes it once the final
    files are written.
    """
    path = journal_path(out)
    chunk = CHUNK_PER_WORKER * workers
    fh = open_locked(path, "a+b", ConfigError(f"another `propme trace` is writing {out} right now",
                                              "wait for it to finish, or give this run another --out and --summary"))
    try:
        results = _read_journal(fh, fingerprint, generations)
        resumed = len(results)
        for res in results if on_result is not None else ():
            on_result(res)
        if not resumed:
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"format": JOURNAL_FORMAT, "fingerprint": fingerprint}).encode() + b"\n")
            fh.flush()
        todo = generations[resumed:]
        started = time.time()
        # one set of workers for the whole run (forked before the progress thread starts); the
        # journal is written every `chunk` results
        with tracer.runner([g.text for g in todo], [g.key for g in todo], [g.continuation for g in todo],
                           workers=workers) as traced, progress_bar(progress) as bar:
            task = bar.add_task("tracing", total=len(generations), completed=resumed, rate="")
            lines: list[bytes] = []
            synced = time.monotonic()
            try:
                for res in traced:
                    results.append(res)
                    lines.append(res.json_bytes())
                    if on_result is not None:
                        on_result(res)
                    if len(lines) == chunk or len(results) == len(generations):
                        sync = time.monotonic() - synced >= SYNC_SECONDS
                        _append(fh, lines, sync)
                        synced = time.monotonic() if sync else synced
                        lines = []
                        bar.update(task, completed=len(results),
                                   rate=rate(len(results) - resumed, time.time() - started, "gen"))
            finally:  # interrupted (Ctrl-C, a worker killed): what is finished is kept for the next run
                if lines:
                    _append(fh, lines)
        return results, resumed
    finally:
        fh.close()  # releases the lock


def _append(fh: IO[bytes], lines: list[bytes], sync: bool = True) -> None:
    """Add finished results to the journal, written before more tracing (what a kill may cost is one
    chunk); `sync`: forced to the disk too."""
    fh.write(b"".join(lines))
    fh.flush()
    if sync:
        os.fsync(fh.fileno())


def finish(out: Path) -> None:
    """Remove the journal once RESULTS and SUMMARY are in place."""
    journal_path(out).unlink(missing_ok=True)


def _read_journal(fh: IO[bytes], fingerprint: str, generations: Sequence[TraceInput]) -> list[TraceResult]:
    """The results already in the journal for this job (in input order); [] when it is another job's.
    A line cut short by a kill ends the usable part; the file is truncated there."""
    fh.seek(0)
    header = fh.readline()
    try:
        if json.loads(header) != {"format": JOURNAL_FORMAT, "fingerprint": fingerprint}:
            return []
    except ValueError:
        return []
    results: list[TraceResult] = []
    good_end = fh.tell()
    for line in iter(fh.readline, b""):
        if not line.endswith(b"\n") or len(results) >= len(generations):
            break
        try:
            res = TraceResult.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError):
            break
        if res.key != generations[len(results)].key:
            break
        results.append(res)
        good_end = fh.tell()
    fh.seek(good_end)
    fh.truncate()
    return results
