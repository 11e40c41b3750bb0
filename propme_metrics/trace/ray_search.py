"""Tracing on a Ray cluster: actors hold runs of shards memory-mapped; the tracer logic stays local.

Only the suffix-array searches and document windows go to actors, one request per actor per step,
all actors at once, so results are identical to local tracing.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from propme_metrics.core.cluster import connect, unwrap_ray_error
from propme_metrics.core.errors import ConfigError, IndexFormatError, PropMeError
from propme_metrics.index.search import IndexSearch, SearchBounds, search_group


class ShardHost:
    """A Ray actor's state: a run of an index's shards, memory-mapped on the node it runs on."""

    def __init__(self, folder: str, first: int, shards: list[tuple[int, int]], width: int):
        from propme_metrics.index.search import ShardSearcher

        self.first = first  #: engine position of the first shard held
        self.searchers = [ShardSearcher(Path(folder), sid, width, base) for sid, base in shards]

    def search(self, arr: np.ndarray, qstart: np.ndarray, qend: np.ndarray, upper: np.ndarray) -> SearchBounds:
        return search_group(self.searchers, arr, qstart, qend, upper)

    def windows(self, by_shard: dict[int, list[int]], max_disp_len: int) -> dict[int, list]:
        return {pos: self.searchers[pos - self.first].windows(ranks, max_disp_len) for pos, ranks in by_shard.items()}


@dataclass
class _ActorShards:
    """A Ray actor and the engine positions of the shards it holds."""

    actor: Any
    positions: range  #: engine positions of the shards the actor holds


def shard_groups(n_shards: int, n_actors: int) -> list[range]:
    """Contiguous runs of engine positions, one per actor, as even as possible."""
    n_actors = max(1, min(n_actors, n_shards))
    bounds = [round(i * n_shards / n_actors) for i in range(n_actors + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


class RaySearch(IndexSearch):
    """The index's search path with its shards held by Ray actors: one request per actor per step."""

    def __init__(self, index, ray, actors: int | None):
        self._ray, self._n_actors = ray, actors
        super().__init__(index)

    def open_shards(self) -> list[_ActorShards]:
        ray = self._ray
        index = self.index
        shards = self.shard_bases()
        n_actors = self._n_actors or max(1, min(len(shards), int(ray.available_resources().get("CPU", 1))))
        host = ray.remote(ShardHost).options(num_cpus=1, max_restarts=3, max_task_retries=3,
                                             scheduling_strategy="SPREAD")
        groups = [_ActorShards(host.remote(str(index.path), r.start,
                                     [shards[p] for p in r], index.token_width), r)
                  for r in shard_groups(len(shards), n_actors)]
        try:
            ray.get([g.actor.__ray_ready__.remote() for g in groups])
        except Exception as exc:
            cause = unwrap_ray_error(exc)
            raise IndexFormatError(f"a Ray actor cannot open the shards of {index.path}: "
                                   f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1:]}",
                                   "put the index on a file system every node mounts at the same path") from None
        return groups

    def _gather(self, refs: list) -> list:
        try:
            return self._ray.get(refs)
        except Exception as exc:
            cause = unwrap_ray_error(exc)
            if isinstance(cause, (ValueError, PropMeError)):
                raise cause from None
            raise IndexFormatError(f"a Ray actor holding shards failed: {type(cause).__name__}: {cause}",
                                   "check the cluster (`ray status`) and re-run") from None

    def search_shards(self, arr, qstart, qend, upper) -> SearchBounds:
        refs = [g.actor.search.remote(arr, qstart, qend, upper) for g in self.shards]
        return SearchBounds.join(self._gather(refs))

    def shard_windows(self, by_shard, max_disp_len):
        calls = [(g, {p: r for p, r in by_shard.items() if p in g.positions}) for g in self.shards]
        refs = [g.actor.windows.remote(asked, max_disp_len) for g, asked in calls if asked]
        merged: dict[int, list] = {}
        for part in self._gather(refs):
            merged.update(part)
        return merged

    def close(self) -> None:
        """Let the actors go (their CPUs return to the cluster)."""
        for g in self.shards:
            self._ray.kill(g.actor)
        self.shards = []


def ray_search(index, address: str | None = None, actors: int | None = None) -> RaySearch:
    """The index's search path with its shards held by `actors` Ray actors (default: one per free
    CPU, at most one per shard), for other work than tracing (the contamination check)."""
    _check_actors(actors)
    return RaySearch(index, connect(address), actors)


def _check_actors(actors: int | None) -> None:
    if actors is not None and actors < 1:
        raise ConfigError("--actors must be at least 1")


def _tracer_class():
    from propme_metrics.trace.tracer import Tracer, TraceRunner

    class RayTracer(Tracer):
        """SimpleTrace whose shards are held by Ray actors; results identical to local tracing.

        Each search step of a generation goes to every actor at once; `workers` > 1 traces that
        many generations concurrently in driver threads, so the actors are kept busy.
        """

        def __init__(self, index, config=None, address: str | None = None, actors: int | None = None):
            self._ray = connect(address)
            self._n_actors = actors
            super().__init__(index, config)
            self.warm()  # the actors start now, and nothing lazy is raced by tracing threads

        def _open_search(self) -> RaySearch:
            return RaySearch(self.index, self._ray, self._n_actors)

        def _runner(self, jobs, workers):
            return _ThreadRunner(self, jobs, workers) if workers > 1 and len(jobs) > 1 else TraceRunner(self, jobs, 1)

        def close(self) -> None:
            """Let the actors go (their CPUs return to the cluster)."""
            self.search.close()

    return RayTracer


def ray_tracer(index, config=None, address: str | None = None, actors: int | None = None):
    """A tracer whose shards live in `actors` Ray actors (default: one per free CPU, at most one per shard)."""
    _check_actors(actors)
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
