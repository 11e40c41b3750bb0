"""Index builds on a Ray cluster: one Ray task per shard, joined by the driver.

Each task runs the ordinary build of one shard (`--shard-ids` style) into its own part folder, so a
retried task resumes its part where the killed one stopped; the driver then joins the parts, which
makes the index byte-identical to a local build of the same source (the manifest's run record
aside). Every node must see the index folder at the same path (a shared file system) and have
PropMe installed in the same environment as the driver.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from propme_metrics.core.cluster import connect, unwrap_ray_error
from propme_metrics.core.errors import BuildError, ConfigError, PropMeError
from propme_metrics.index.format import ray_parts_dir
from propme_metrics.index.shard_writer import DEFAULT_BATCH_SIZE

if TYPE_CHECKING:  # pragma: no cover
    from propme_metrics.index.build import BuildPlan

#: a build task's memory beyond its suffix array: Python, the tokenizer, read buffers
TASK_BASE_MEMORY = 1 << 30
TASK_RETRIES = 3


def task_memory(source, num_shards: int, width: int) -> int | None:
    """Memory to declare for one shard's task, from the corpus size (None when it is unknown)."""
    text = source.estimated_text_bytes()
    if not text:
        return None
    from propme_metrics.index.sizing import TEXT_BYTES_PER_TOKEN
    from propme_metrics.index.suffix_array import (
        divsufsort_memory,  # the in-memory builder's need; rust_indexing fits in the same budget
    )

    ds_bytes = int(text / TEXT_BYTES_PER_TOKEN) // num_shards * width
    return TASK_BASE_MEMORY + divsufsort_memory(ds_bytes)


@dataclass
class PartResult:
    """What one shard's task reports back to the driver."""

    shard: int
    documents: int
    tokens: int
    seconds: float
    node: str


def _build_part(source, part: str, sid: int, tokenizer: str, revision: str | None, num_shards: int, width: int,
                batch_size: int, cpus: int, mem_bytes: int | None, check_space: bool, sa_builder: str) -> PartResult:
    """Body of one Ray task: the ordinary build of shard `sid` into its part folder (resumable)."""
    import socket

    from propme_metrics.index.build import build_index

    started = time.time()
    manifest = build_index(source, part, tokenizer=tokenizer, tokenizer_revision=revision, num_shards=num_shards,
                           shard_ids=[sid], token_width=width, batch_size=batch_size, cpus=cpus,
                           mem_bytes=mem_bytes, check_space=check_space, progress=False, sa_builder=sa_builder)
    return PartResult(sid, manifest.total_documents, manifest.total_tokens, round(time.time() - started, 2),
                      socket.gethostname())


def build_index_on_ray(source, out: str | Path, address: str | None = None, tokenizer: str | None = None,
                       tokenizer_revision: str | None = None, num_shards: int = 1, token_width: int | None = None,
                       batch_size: int = DEFAULT_BATCH_SIZE, cpus_per_task: int = 1,
                       memory_per_task: int | None = None, force: bool = False, check_space: bool = True,
                       progress: bool = True, sa_builder: str = "auto", retries: int = TASK_RETRIES):
    """Build the index of `source` in `out` with one Ray task per shard, then join the shards.

    The preamble, the lock on `out`, the protection of the corpus and the atomic install are the
    local build's. A task that fails for a system reason (its worker or node died) is retried up
    to `retries` times and resumes its part; an error of the build itself (a bad corpus, a full
    disk) stops the build with that error. Finished parts are kept, so re-running resumes.
    """
    from propme_metrics.index.build import plan_build, reusable_index
    from propme_metrics.index.install import build_lock, write_errors
    from propme_metrics.index.join import join_locked
    from propme_metrics.index.tokenizer import DEFAULT_TOKENIZER

    if cpus_per_task < 1:
        raise ConfigError("--cpus must be at least 1")
    plan = plan_build(source, out, tokenizer or DEFAULT_TOKENIZER, tokenizer_revision, num_shards,
                      token_width=token_width, batch_size=batch_size, cpus=cpus_per_task, force=force,
                      check_space=check_space, progress=progress, sa_builder=sa_builder)
    with write_errors(plan.work), build_lock(plan.out):
        reused = reusable_index(plan)
        if reused is not None:
            return reused
        root = ray_parts_dir(plan.out)
        info = _run_parts(plan, root, address, memory_per_task, retries)
        manifest = join_locked([root / f"shard-{sid}" for sid in range(num_shards)], plan.out, build_info=info,
                               replace=force)
        shutil.rmtree(root)
        return manifest


def _run_parts(plan: BuildPlan, root: Path, address: str | None, memory_per_task: int | None, retries: int) -> dict:
    """Every shard's build as a Ray task into `root/shard-N`; returns the run record for the manifest."""
    from propme_metrics.core.progress import progress_bar

    source, num_shards, cpus_per_task = plan.source, plan.num_shards, plan.cpus
    ray = connect(address)
    memory = memory_per_task or task_memory(source, num_shards, plan.width)
    root.mkdir(parents=True, exist_ok=True)
    remote = ray.remote(_build_part).options(num_cpus=cpus_per_task, memory=memory, max_retries=retries,
                                             retry_exceptions=False)
    # the suffix-array builder's budget: the declared memory less the task's base (half, for small tasks)
    mem_bytes = max(memory - TASK_BASE_MEMORY, memory // 2) if memory else None
    started = time.time()
    pending = {remote.remote(source, str(root / f"shard-{sid}"), sid, plan.tokenizer, plan.tokenizer_revision,
                             num_shards, plan.width, plan.batch_size, cpus_per_task, mem_bytes, plan.check_space,
                             plan.sa_builder): sid
               for sid in range(num_shards)}
    results: list[PartResult] = []
    try:
        with progress_bar(plan.progress) as bar:
            task = bar.add_task(f"shards on Ray ({cpus_per_task} CPU"
                                + (f", {memory / 2**30:.1f} GiB" if memory else "") + " each)",
                                total=num_shards, rate="")
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                sid = pending.pop(done[0])
                try:
                    results.append(ray.get(done[0]))
                except Exception as exc:  # Ray wraps what the task raised; report it as one message
                    raise _part_error(sid, exc, retries) from None
                last = results[-1]
                bar.update(task, advance=1, rate=f"shard {sid}: {last.tokens:,} tok in {last.seconds:.0f} s "
                                                 f"on {last.node}")
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    results.sort(key=lambda r: r.shard)
    return {"batch_size": plan.batch_size, "cpus": cpus_per_task,
            "ray": {"tasks": num_shards, "memory_per_task": memory, "nodes": sorted({r.node for r in results}),
                    "task_seconds": [r.seconds for r in results]},
            "seconds_last_run": round(time.time() - started, 2)}


def _part_error(sid: int, exc: BaseException, retries: int) -> PropMeError:
    cause = unwrap_ray_error(exc)
    if isinstance(cause, PropMeError):
        cause.message = f"shard {sid}: {cause.message}"
        return cause
    if isinstance(cause, KeyboardInterrupt):
        return BuildError(f"shard {sid} was interrupted on the cluster", "re-run the same command to resume")
    text = str(cause).strip().splitlines()
    system = type(cause).__module__.startswith("ray")  # the worker or node died: Ray retried it
    return BuildError(f"shard {sid} failed on the Ray cluster" + (f" after {retries} retries" if system else "") + ": "
                      f"{type(cause).__name__}: {text[-1] if text else ''}",
                      "check the node's memory and disk (`ray status`, the worker logs under /tmp/ray), "
                      "then re-run the same command: finished shards are kept")
