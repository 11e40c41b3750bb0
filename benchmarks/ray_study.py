"""What the Ray benchmarks share (`ray_trace.py`, `scale.py --ray`): the Ray build checked against
the local one, timed tracing passes that count search steps and the driver's and actors' CPU time,
and the driver limit derived from them (how many generations per second one driver sustains, and
at how many actors it, not the actors, becomes the bound).

Why CPU time: on a small machine the driver, the actors and Ray's own processes share the cores,
so wall-clock throughput there says little about a cluster; the CPU each side spends per
generation does carry over (each actor gets a core of its own there; the driver has one).
"""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MANIFEST = "propme-manifest.json"


def same_index(a: Path, b: Path) -> bool:
    """Same file names in both index folders, every file but the manifest byte-identical."""
    import filecmp

    names = sorted(p.name for p in a.iterdir() if p.is_file())
    if names != sorted(p.name for p in b.iterdir() if p.is_file()):
        return False
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names if n != MANIFEST)


@dataclass
class RayBuild:
    """A Ray build of the corpus a local index was built from, and how it compares."""

    tasks: int
    cpus_per_task: int
    seconds: float
    identical: bool


def build_on_ray(corpus: Path, local: Path, out: Path, tokenizer: Path, shards: int, address: str | None,
                 cpus_per_task: int = 1, sa_builder: str = "auto") -> RayBuild:
    """`build_index_on_ray` of `corpus` into `out` (cluster start-up not timed), compared with `local`."""
    from propme_metrics.core.cluster import connect
    from propme_metrics.index.ray_build import build_index_on_ray
    from propme_metrics.index.sources import CorpusSource

    connect(address)
    t = time.perf_counter()
    build_index_on_ray(CorpusSource(str(corpus)), out, address=address, tokenizer=str(tokenizer), num_shards=shards,
                       cpus_per_task=cpus_per_task, progress=False, check_space=False, sa_builder=sa_builder)
    return RayBuild(shards, cpus_per_task, time.perf_counter() - t, same_index(local, out))


# -- timed passes ----------------------------------------------------------------------------------


@dataclass
class Steps:
    """Calls of the tracer's two shard primitives (each is one search step of a generation: on Ray,
    one round trip to the actors), the shard groups they go to and what they cost."""

    searches: int = 0  #: calls of `search_shards`
    windows: int = 0  #: calls of `shard_windows`
    search_calls: int = 0  #: shard groups the searches went to (actors on Ray, shards locally)
    window_calls: int = 0  #: shard groups asked for windows
    window_ranks: int = 0  #: windows asked for
    search_s: float = 0.0  #: wall time inside searches, then windows (meaningful with one thread)
    windows_s: float = 0.0
    search_cpu_s: float = 0.0  #: process CPU inside searches, then windows (meaningful with one thread)
    windows_cpu_s: float = 0.0

    @property
    def steps(self) -> int:
        return self.searches + self.windows

    @property
    def calls(self) -> int:
        return self.search_calls + self.window_calls


def count_steps(tracer) -> Steps:
    """Wrap the `search_shards` and `shard_windows` of `tracer.search` (the only places it searches) to count
    and time them (thread-safe counts)."""
    steps, lock = Steps(), threading.Lock()
    groups = tracer.search.shards
    on_ray = bool(groups) and hasattr(groups[0], "positions")
    search, windows = tracer.search.search_shards, tracer.search.shard_windows

    def counted_search(*args):
        t0, c0 = time.perf_counter(), time.process_time()
        out = search(*args)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        with lock:
            steps.searches += 1
            steps.search_calls += len(groups)
            steps.search_s += dt
            steps.search_cpu_s += dc
        return out

    def counted_windows(by_shard, max_disp_len):
        t0, c0 = time.perf_counter(), time.process_time()
        out = windows(by_shard, max_disp_len)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        asked = sum(1 for g in groups if any(p in g.positions for p in by_shard)) if on_ray else len(by_shard)
        with lock:
            steps.windows += 1
            steps.window_calls += asked
            steps.window_ranks += sum(len(r) for r in by_shard.values())
            steps.windows_s += dt
            steps.windows_cpu_s += dc
        return out

    tracer.search.search_shards, tracer.search.shard_windows = counted_search, counted_windows
    return steps


def _process_cpu(_host) -> float:
    """Run inside an actor (`__ray_call__`): its process's CPU seconds so far, all threads."""
    return time.process_time()


def actor_cpu(tracer) -> float:
    """CPU seconds used so far by the actor processes of a Ray tracer, summed."""
    import ray
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors cannot import this script
    return sum(ray.get([g.actor.__ray_call__.remote(_process_cpu) for g in tracer.search.shards]))


class _Echo:
    """An actor that does nothing with its arguments: what one call costs Ray itself."""

    def search(self, *arrays):
        return [arrays]


@dataclass
class RayCall:
    """Ray's own cost of one actor call carrying a search step's arrays (no work in the actor)."""

    driver_cpu_us: float
    actor_cpu_us: float
    round_trip_us: float


def ray_call_cost(calls: int = 300, n: int = 256) -> RayCall:
    """Time `calls` sequential calls of a no-op actor with four arrays of `n` int64 (a step's query)."""
    import numpy as np
    import ray
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    actor = ray.remote(_Echo).options(num_cpus=1).remote()
    arrays = [np.arange(n, dtype=np.int64) for _ in range(4)]
    for _ in range(20):  # warm: connections, the actor's imports
        ray.get(actor.search.remote(*arrays))
    a0 = ray.get(actor.__ray_call__.remote(_process_cpu))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(calls):
        ray.get(actor.search.remote(*arrays))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    a1 = ray.get(actor.__ray_call__.remote(_process_cpu))
    ray.kill(actor)
    return RayCall(1e6 * cpu / calls, 1e6 * (a1 - a0) / calls, 1e6 * wall / calls)


@dataclass
class Pass:
    """One timed pass of a tracer over the generations: wall and CPU time, per side, and its steps."""

    threads: int
    generations: int
    wall_s: float
    driver_cpu_s: float  #: CPU of the tracing process (all its threads, Ray's included)
    actor_cpu_s: float | None  #: CPU of the actor processes (Ray only)
    steps: Steps
    lines: list[str] = field(default_factory=list, repr=False)  #: results, one JSON line each

    def per_gen_ms(self, seconds: float) -> float:
        return 1000 * seconds / self.generations

    @property
    def gen_per_s(self) -> float:
        return self.generations / self.wall_s

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("lines")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Pass:
        return cls(**{**d, "steps": Steps(**d["steps"])})


def timed_pass(tracer, rows: list[dict], threads: int = 1, before_each=None) -> Pass:
    """Trace `rows` ({"key", "text"}) with `threads` workers, timed. With `before_each` (e.g. a page
    cache eviction), generations go one at a time and only their tracing is timed."""
    on_ray = hasattr(tracer, "_ray")
    steps = count_steps(tracer)
    a0 = actor_cpu(tracer) if on_ray and before_each is None else None
    texts, keys = [r["text"] for r in rows], [r["key"] for r in rows]
    if before_each is None:
        t0, c0 = time.perf_counter(), time.process_time()
        results = tracer.trace(texts, keys, workers=threads)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    else:
        results, wall, cpu = [], 0.0, 0.0
        for text, key in zip(texts, keys):
            before_each()
            t0, c0 = time.perf_counter(), time.process_time()
            results.append(tracer.safe_trace_one(text, key))
            wall, cpu = wall + time.perf_counter() - t0, cpu + time.process_time() - c0
    a1 = actor_cpu(tracer) if a0 is not None else None
    for name in ("search_shards", "shard_windows"):
        del tracer.search.__dict__[name]  # unwrap: the class's methods again
    return Pass(threads, len(rows), wall, cpu, None if a0 is None else a1 - a0, steps,
                [json.dumps(r.to_dict(), sort_keys=True) for r in results])


# -- the driver limit --------------------------------------------------------------------------------


@dataclass
class DriverLimit:
    """Per generation, what tracing on Ray costs the driver and the actors with `actors` actors: the
    round trip from a one-thread pass, the CPU figures from a pass with `threads` driver threads
    (the throughput configuration)."""

    actors: int
    threads: int
    searches: float  #: search steps per generation (each goes to every actor)
    windows: float  #: window steps per generation (each goes to the actors holding a wanted shard)
    ranks: float  #: windows asked per window step
    calls: float  #: actor calls per generation
    logic_ms: float  #: the tracer's own CPU (local tracer CPU less its searches and windows): the driver's floor
    compute_ms: float  #: CPU of the searches and windows themselves (the local tracer's, all shards)
    round_trip_ms: float  #: wall time per step beyond the local tracer's (one thread)
    driver_call_us: float  #: driver CPU per actor call beyond `logic_ms`
    actor_call_us: float  #: actor CPU per call beyond `compute_ms`
    driver_ms: float  #: driver CPU per generation
    driver_busy: float  #: share of one core the driver used
    gen_per_s: float  #: measured, this machine

    @property
    def steps(self) -> float:
        return self.searches + self.windows

    @property
    def ceiling(self) -> float:
        """Generations per second one driver sustains on one core at this cost."""
        return 1000 / self.driver_ms

    def model_calls(self, k: int) -> float:
        """Actor calls per generation with k actors: every search to all of them, each window step
        to those holding one of its `ranks` windows (spread evenly: an upper estimate)."""
        return self.searches * k + self.windows * k * (1 - (1 - 1 / k) ** self.ranks)


def driver_limit(local: Pass, seq: Pass, conc: Pass, actors: int) -> DriverLimit:
    """The driver limit from a one-thread local pass, and a one-thread and a many-thread Ray pass
    over the same generations with `actors` actors."""
    n = local.generations
    compute = local.steps.search_cpu_s + local.steps.windows_cpu_s
    logic = local.driver_cpu_s - compute
    return DriverLimit(
        actors=actors, threads=conc.threads, searches=conc.steps.searches / n, windows=conc.steps.windows / n,
        ranks=conc.steps.window_ranks / max(1, conc.steps.windows), calls=conc.steps.calls / n,
        logic_ms=1000 * logic / n, compute_ms=1000 * compute / n,
        round_trip_ms=1000 * (seq.wall_s - local.wall_s) / max(1, seq.steps.steps),
        driver_call_us=1e6 * (conc.driver_cpu_s - logic) / max(1, conc.steps.calls),
        actor_call_us=1e6 * ((conc.actor_cpu_s or 0.0) - compute) / max(1, conc.steps.calls),
        driver_ms=conc.per_gen_ms(conc.driver_cpu_s), driver_busy=conc.driver_cpu_s / conc.wall_s,
        gen_per_s=conc.gen_per_s)


@dataclass
class Projection:
    """EXTRAPOLATION from a measured limit: the actor count where one driver becomes the bound."""

    compute_ms: float  #: search and window CPU per generation of the index projected (all shards)
    actors: int  #: fewest actors that keep up with the driver
    gen_per_s: float  #: the driver's ceiling there: the most one driver traces


def compute_ms(steps: Steps, generations: int, shards: int, to_shards: int, cpu: bool = True) -> float:
    """Search and window time per generation (CPU, else wall: a cold index waits on its disk) of an
    index of `to_shards` shards like the measured one of `shards` (one thread): every step searches
    every shard, while the windows fetched stay as many as measured."""
    search, windows = (steps.search_cpu_s, steps.windows_cpu_s) if cpu else (steps.search_s, steps.windows_s)
    return 1000 * (search * to_shards / shards + windows) / generations


def project(limits: list[DriverLimit], work_ms: float, most: int = 4096) -> Projection:
    """With the per-call costs of the largest measured actor count (the most calls in flight): k
    actors cost the driver logic + `model_calls(k)` calls per generation, and each actor work_ms / k
    plus its share of the calls; the first k whose actors keep up with the driver."""
    lim = max(limits, key=lambda x: x.actors)
    driver_call, actor_call = lim.driver_call_us / 1000, max(0.0, lim.actor_call_us / 1000)
    for k in range(1, most + 1):
        calls = lim.model_calls(k)
        driver = lim.logic_ms + calls * driver_call
        if work_ms / k + calls / k * actor_call <= driver:
            return Projection(work_ms, k, 1000 / driver)
    return Projection(work_ms, most, 1000 / (lim.logic_ms + lim.model_calls(most) * driver_call))


def print_driver_limit(limits: list[DriverLimit], call: RayCall, projections: dict[str, Projection]) -> None:
    """The measured driver-limit table, Ray's own per-call cost, then the labelled extrapolation."""
    print(f"\nDriver limit, measured: CPU time per generation with {limits[0].threads // limits[0].actors} driver "
          "threads per actor; the round trip with one thread; 'local' figures from the local tracer's pass:\n")
    print("| actors | steps/gen (search + windows) | actor calls/gen (model) | tracer logic ms (local) | "
          "search+windows ms (local) | round trip ms/step | driver us/call | actor us/call | driver CPU ms/gen | "
          "driver busy | ceiling gen/s (one driver core) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for lim in limits:
        print(f"| {lim.actors} | {lim.steps:.1f} ({lim.searches:.1f} + {lim.windows:.1f}) | {lim.calls:.1f} "
              f"({lim.model_calls(lim.actors):.1f}) | {lim.logic_ms:.1f} | {lim.compute_ms:.1f} | "
              f"{lim.round_trip_ms:.2f} | {lim.driver_call_us:.0f} | {lim.actor_call_us:.0f} | {lim.driver_ms:.1f} | "
              f"{100 * lim.driver_busy:.0f}% | {lim.ceiling:.1f} |")
    print(f"\nRay's own cost of one actor call (a no-op actor, four arrays of 256 int64 each way, sequential): "
          f"driver {call.driver_cpu_us:.0f} us CPU, actor {call.actor_cpu_us:.0f} us CPU, round trip "
          f"{call.round_trip_us:.0f} us wall.")
    lim = max(limits, key=lambda x: x.actors)
    print(f"\nEXTRAPOLATION (not measured): one driver, each actor on a core of its own; per generation "
          f"{lim.logic_ms:.1f} ms of tracer logic, {lim.searches:.1f} searches to every actor, {lim.windows:.1f} "
          f"window steps of {lim.ranks:.1f} windows each to the actors holding them (the model column above); per "
          f"call {lim.driver_call_us:.0f} us of driver and {lim.actor_call_us:.0f} us of actor CPU "
          f"(measured above, {lim.actors} actors):\n")
    print("| index | search+windows ms/gen | actors until the driver is the bound | gen/s there (driver ceiling) |")
    print("|---|---:|---:|---:|")
    for name, p in projections.items():
        print(f"| {name} | {p.compute_ms:,.1f} | {p.actors:,} | {p.gen_per_s:.1f} |")
