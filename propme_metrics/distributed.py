"""PropMe on a Ray cluster: index builds as one Ray task per shard, tracing through actors holding shards.

Ray is imported only inside these functions, when `--ray` (or `trace_backend: ray`) asks for it:
importing PropMe never imports Ray. Every node must see the index folder at the same path (a
shared file system) and have PropMe installed in the same environment as the driver.

Build: each task runs the ordinary build of one shard (`--shard-ids` style) into its own part
folder, so a retried task resumes its part where the killed one stopped; the driver then joins
the parts, which makes the index byte-identical to a local build of the same source (the
manifest's run record aside). Tracing: the tracer logic is the local one; only the suffix-array
searches and document windows go to actors, one request per actor per step, all actors at once.
"""
from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BuildError, ConfigError, IndexFormatError, PropMeError

#: a build task's memory beyond its suffix array: Python, the tokenizer, read buffers
TASK_BASE_MEMORY = 1 << 30
TASK_RETRIES = 3


def import_ray():
    """The `ray` module, or one clear message saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray (trace_backend: ray) needs Ray, which is not installed in this environment",
                          'pip install "propme[ray]" here and on every node of the cluster') from None
    return ray


def connect(address: str | None = None):
    """Join the Ray cluster at `address` (else RAY_ADDRESS; neither: start a local one) and return `ray`."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or None
    try:
        ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"at {address}" if address else "on this machine"
        raise ConfigError(f"cannot start or reach a Ray cluster {where}: {exc}",
                          "start one with `ray start --head` and pass its address (--ray HOST:6379 or "
                          "RAY_ADDRESS), or leave the address out for a local cluster") from None
    return ray


def _cause(exc: BaseException) -> BaseException:
    """The exception a Ray task or actor raised, unwrapped from Ray's error."""
    return getattr(exc, "cause", None) or exc


# -- index build -----------------------------------------------------------------------------------


def parts_dir(out: Path) -> Path:
    """Where the shards of a Ray build of `out` are built before they are joined."""
    return out.parent / f".{out.name}.propme-ray-parts"


def task_memory(source, num_shards: int, width: int) -> int | None:
    """Memory to declare for one shard's task, from the corpus size (None when it is unknown)."""
    text = source.estimated_text_bytes()
    if not text:
        return None
    from .build import divsufsort_memory  # the in-memory builder's need; rust_indexing fits in the same budget
    from .sizing import TEXT_BYTES_PER_TOKEN

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

    from .build import build_index

    started = time.time()
    manifest = build_index(source, part, tokenizer=tokenizer, tokenizer_revision=revision, num_shards=num_shards,
                           shard_ids=[sid], token_width=width, batch_size=batch_size, cpus=cpus,
                           mem_bytes=mem_bytes, check_space=check_space, progress=False, sa_builder=sa_builder)
    return PartResult(sid, manifest.total_documents, manifest.total_tokens, round(time.time() - started, 2),
                      socket.gethostname())


def build_index_on_ray(source, out: str | Path, address: str | None = None, tokenizer: str | None = None,
                       tokenizer_revision: str | None = None, num_shards: int = 1, token_width: int | None = None,
                       batch_size: int = 1024, cpus_per_task: int = 1, memory_per_task: int | None = None,
                       force: bool = False, check_space: bool = True, progress: bool = True,
                       sa_builder: str = "auto", retries: int = TASK_RETRIES):
    """Build the index of `source` in `out` with one Ray task per shard, then join the shards.

    A task that fails for a system reason (its worker or node died) is retried up to `retries`
    times and resumes its part; an error of the build itself (a bad corpus, a full disk) stops
    the build with that error. Finished parts are kept, so re-running the command resumes.
    """
    from .build import _existing_index, build_params, choose_token_width, join_indexes
    from .progress import progress_bar
    from .tokenizer import DEFAULT_TOKENIZER, load_tokenizer, max_token_id, tokenizer_hash

    out = Path(out).absolute()
    tokenizer = tokenizer or DEFAULT_TOKENIZER
    if num_shards < 1:
        raise ConfigError("--shards must be at least 1")
    if cpus_per_task < 1:
        raise ConfigError("--cpus must be at least 1")
    tok = load_tokenizer(tokenizer, tokenizer_revision)
    width = choose_token_width(max_token_id(tok), token_width)
    _, params_hash = build_params(source.describe(), tokenizer, tokenizer_revision, tokenizer_hash(tok), width,
                                  num_shards, list(range(num_shards)))
    existing = _existing_index(out, params_hash, force)
    if existing is not None:
        return existing
    ray = connect(address)
    memory = memory_per_task or task_memory(source, num_shards, width)
    root = parts_dir(out)
    root.mkdir(parents=True, exist_ok=True)
    remote = ray.remote(_build_part).options(num_cpus=cpus_per_task, memory=memory, max_retries=retries,
                                             retry_exceptions=False)
    # the suffix-array builder's budget: the declared memory less the task's base (half, for small tasks)
    mem_bytes = max(memory - TASK_BASE_MEMORY, memory // 2) if memory else None
    started = time.time()
    pending = {remote.remote(source, str(root / f"shard-{sid}"), sid, tokenizer, tokenizer_revision, num_shards,
                             width, batch_size, cpus_per_task, mem_bytes, check_space, sa_builder): sid
               for sid in range(num_shards)}
    results: list[PartResult] = []
    try:
        with progress_bar(progress) as bar:
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
    if force and out.exists():
        shutil.rmtree(out)
    results.sort(key=lambda r: r.shard)
    info = {"batch_size": batch_size, "cpus": cpus_per_task,
            "ray": {"tasks": num_shards, "memory_per_task": memory, "nodes": sorted({r.node for r in results}),
                    "task_seconds": [r.seconds for r in results]},
            "seconds_last_run": round(time.time() - started, 2)}
    manifest = join_indexes([root / f"shard-{r.shard}" for r in results], out, build_info=info)
    shutil.rmtree(root)
    return manifest


def _part_error(sid: int, exc: BaseException, retries: int) -> PropMeError:
    cause = _cause(exc)
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


# -- tracing -----------------------------------------------------------------------------------------


class ShardHost:
    """A Ray actor's state: a run of an index's shards, memory-mapped on the node it runs on."""

    def __init__(self, folder: str, first: int, shards: list[tuple[int, int]], width: int):
        from .search import ShardSearcher

        self.first = first  #: engine position of the first shard held
        self.searchers = [ShardSearcher(Path(folder), sid, width, base) for sid, base in shards]

    def search(self, arr: np.ndarray, qstart: np.ndarray, qend: np.ndarray, upper: np.ndarray) -> list:
        return [s.search(s.keys(arr), qstart, qend, upper) for s in self.searchers]

    def windows(self, by_shard: dict[int, list[int]], max_disp_len: int) -> dict[int, list]:
        return {pos: self.searchers[pos - self.first].windows(ranks, max_disp_len) for pos, ranks in by_shard.items()}


@dataclass
class _Group:
    actor: Any
    positions: range  #: engine positions of the shards the actor holds


def shard_groups(n_shards: int, n_actors: int) -> list[range]:
    """Contiguous runs of engine positions, one per actor, as even as possible."""
    n_actors = max(1, min(n_actors, n_shards))
    bounds = [round(i * n_shards / n_actors) for i in range(n_actors + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def _tracer_class():
    from .trace import Tracer, _Runner

    class RayTracer(Tracer):
        """SimpleTrace whose shards are held by Ray actors; results identical to local tracing.

        Each search step of a generation goes to every actor at once; `workers` > 1 traces that
        many generations concurrently in driver threads, so the actors are kept busy.
        """

        def __init__(self, index, config=None, address: str | None = None, actors: int | None = None):
            self._ray = connect(address)
            self._n_actors = actors
            super().__init__(index, config)
            _ = self._logprob  # computed once here, not raced by tracing threads

        def _open_shards(self) -> list[_Group]:
            ray = self._ray
            index = self.index
            docs = {s.id: s.documents for s in index.manifest.shards}
            bases, base = [], 0
            for sid in index.engine_shards:
                bases.append(base)
                base += docs[sid]
            n_actors = self._n_actors or max(1, min(len(bases), int(ray.available_resources().get("CPU", 1))))
            host = ray.remote(ShardHost).options(num_cpus=1, max_restarts=3, max_task_retries=3,
                                                 scheduling_strategy="SPREAD")
            groups = [_Group(host.remote(str(index.path), r.start,
                                         [(index.engine_shards[p], bases[p]) for p in r], index.token_width), r)
                      for r in shard_groups(len(bases), n_actors)]
            try:
                ray.get([g.actor.__ray_ready__.remote() for g in groups])
            except Exception as exc:
                cause = _cause(exc)
                raise IndexFormatError(f"a Ray actor cannot open the shards of {index.path}: "
                                       f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1:]}",
                                       "put the index on a file system every node mounts at the same path") from None
            return groups

        def _gather(self, refs: list) -> list:
            try:
                return self._ray.get(refs)
            except Exception as exc:
                cause = _cause(exc)
                if isinstance(cause, (ValueError, PropMeError)):
                    raise cause from None
                raise IndexFormatError(f"a Ray actor holding shards failed: {type(cause).__name__}: {cause}",
                                       "check the cluster (`ray status`) and re-run") from None

        def _search_shards(self, arr, qstart, qend, upper) -> list:
            refs = [g.actor.search.remote(arr, qstart, qend, upper) for g in self._shards]
            return [r for part in self._gather(refs) for r in part]

        def _shard_windows(self, by_shard, max_disp_len):
            calls = [(g, {p: r for p, r in by_shard.items() if p in g.positions}) for g in self._shards]
            refs = [g.actor.windows.remote(asked, max_disp_len) for g, asked in calls if asked]
            merged: dict[int, list] = {}
            for part in self._gather(refs):
                merged.update(part)
            return merged

        def _runner(self, jobs, workers):
            return _ThreadRunner(self, jobs, workers) if workers > 1 and len(jobs) > 1 else _Runner(self, jobs, 1)

        def close(self) -> None:
            """Let the actors go (their CPUs return to the cluster)."""
            for g in self._shards:
                self._ray.kill(g.actor)
            self._shards = []

    return RayTracer


def ray_tracer(index, config=None, address: str | None = None, actors: int | None = None):
    """A tracer whose shards live in `actors` Ray actors (default: one per free CPU, at most one per shard)."""
    if actors is not None and actors < 1:
        raise ConfigError("--actors must be at least 1")
    return _tracer_class()(index, config, address=address, actors=actors)


class _ThreadRunner:
    """Results of `jobs` in input order, traced by `workers` driver threads (Ray does the searching)."""

    def __init__(self, tracer, jobs, workers: int):
        self.tracer, self.jobs = tracer, jobs
        self.pool = ThreadPoolExecutor(max_workers=min(workers, len(jobs)))

    def __enter__(self):
        return self

    def __iter__(self):
        return self.pool.map(lambda job: self.tracer.safe_trace_one(*job), self.jobs)

    def __exit__(self, *exc) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
