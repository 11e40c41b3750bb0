"""Scale on one machine: index build and tracing from 10M to 1B tokens, warm and cold, in one run.

    python benchmarks/scale.py [--sizes 10M,100M,1B] [--work DIR] [--generations 45] [--keep]
    python benchmarks/scale.py --sizes 10M --skip-build   # reuse the indexes already in --work
    python benchmarks/scale.py --sizes 10M --ray [ADDRESS] --actors 1,2   # the same study on Ray as well

Per size it builds (or reuses) an index of a generated corpus: words drawn from GPT-2's
vocabulary with a Zipf-like distribution (id order stands for frequency, as in BPE), sentences of
varying length, and repeated boilerplate (a pool of notices and menus that a fifth of the documents
carry, plus exact duplicates of 2% of documents). Each build runs in its own process, so its peak
RSS is its own; the build is split into tokenization and suffix array (libdivsufsort, or whatever
`--sa-builder` names) and the top-level samples of the search accelerator.

Tracing is measured in fresh processes on 256-token generations (a third copied from documents, a
third lightly edited copies, a third new text), one worker, per generation:
  * warm: the index in the page cache (traced once before timing);
  * cold: before each generation every index file is evicted from the page cache (the process's
    own mappings are dropped with madvise(MADV_DONTNEED), then posix_fadvise(POSIX_FADV_DONTNEED)
    on every file of the index folder), which stands for an index far larger than memory;
for the plain search (today's: no accelerator) and the accelerated one (top level in memory,
random-access mappings, batched read-ahead); both must give identical results, which is checked.
The last table gives the growth per 10x tokens of each figure.

With --ray (ADDRESS or RAY_ADDRESS; none: a local cluster on this machine) each index has --shards
shards (default: the largest --actors count) and the same study runs on Ray in the same run: the
same corpus built with `build_index_on_ray` (checked byte-identical to the local build, timed
against it), and the same generations traced with the Ray tracer for each actor count, warm with
one driver thread and with two per actor, cold with one (each actor drops its mappings, then the
page cache is dropped), every result checked equal to the local tracer's; gen/s and ratios are
against the local accelerated tracer (one process) measured in the same run. Then the driver
limit (`ray_study.py`): steps and actor calls per generation, the driver's and actors' CPU per
call, the generations per second one driver core sustains, and, labelled as an extrapolation,
the actor count at which one driver becomes the bound for this index and for the Common Pile.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _common import (  # noqa: E402
    PhaseTimes,
    drop_mappings,
    drop_page_cache,
    evict,
    maxrss_mib,
    parse_size,
    resident_fraction,
    size_name,
    status_kb,
)
from ray_study import (  # noqa: E402
    Pass,
    RayCall,
    Steps,
    build_on_ray,
    compute_ms,
    count_steps,
    driver_limit,
    print_driver_limit,
    project,
    ray_call_cost,
    timed_pass,
)

GEN_TOKENS = 256


# -- the corpus -----------------------------------------------------------------------------------

class WordSampler:
    """Text with a realistic word distribution, fast: GPT-2's whole-word tokens ranked by id (BPE merge
    order approximates frequency) drawn with p(rank) ~ 1/(rank + 2.7); sentences of about 14 words
    with commas; a pool of 200 boilerplate paragraphs (notices, menus) that a fifth of the documents
    carry verbatim. Every document comes as pieces that give both its text and, without running the
    tokenizer, its exact GPT-2 token ids (checked against the tokenizer on every run)."""

    def __init__(self, tokenizer, seed: int):
        import numpy as np

        self.np = np
        vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
        words = [w[1:] for w, _ in vocab if w.startswith("Ġ") and w[1:].isalpha() and w[1:].islower()]
        ranks = np.arange(len(words))
        p = 1.0 / (ranks + 2.7)
        self.cum = np.cumsum(p / p.sum())
        # pieces: word + punctuation (+ a space before it unless it starts a document), plain or capitalized
        pieces = [(w.capitalize() if cap else w) + punct
                  for cap in (False, True) for punct in ("", ",", ".", "?") for w in words]
        self.table = np.asarray([x + " " for x in pieces], dtype=object)
        self.v = len(words)
        self._tok = tokenizer
        self._ids_spaced: dict[int, list[int]] = {}
        self._pieces = pieces
        self.newlines = self._encode("\n\nX")[:-len(self._encode("X"))]
        self.rng = np.random.default_rng(seed)
        self.boilerplate = [self.sentences(int(self.rng.integers(30, 120))) for _ in range(200)]

    def _encode(self, text: str) -> list[int]:
        return self._tok(text, add_special_tokens=False)["input_ids"]

    def sentences(self, n_words: int):
        """Piece indices of `n_words` words in sentences."""
        np, rng = self.np, self.rng
        w = np.minimum(np.searchsorted(self.cum, rng.random(n_words)), self.v - 1)
        ends = rng.random(n_words) < 1 / 14
        ends[-1] = True
        punct = np.where(ends, np.where(rng.random(n_words) < 0.9, 2, 3), np.where(rng.random(n_words) < 1 / 10, 1, 0))
        cap = np.concatenate(([True], ends[:-1]))
        return (cap * 4 + punct) * self.v + w

    def document(self) -> list:
        """A document: one or two runs of pieces (body, and boilerplate before or after it)."""
        n_words = int(min(6000, max(20, self.rng.lognormal(5.3, 0.8))))
        body = self.sentences(n_words)
        if self.rng.random() < 0.2:
            plate = self.boilerplate[int(self.rng.integers(len(self.boilerplate)))]
            return [body, plate] if self.rng.random() < 0.5 else [plate, body]
        return [body]

    def text(self, doc: list) -> str:
        return "\n\n".join("".join(self.table[run].tolist()).rstrip() for run in doc)

    def _piece_tables(self):
        """Token ids of every piece: with its leading space (index p), without it (p + 8V), the
        paragraph break (16V) and the document separator (16V + 1), as one flat array + offsets.
        A piece's tokens are its word's followed by its punctuation mark's (checked on every run)."""
        np = self.np
        if getattr(self, "_flat", None) is None:
            from propme_metrics.index.format import token_layout

            words = self._pieces[:self.v]
            forms = {}
            for cap in (False, True):
                for space in (True, False):
                    texts = [(" " if space else "") + (w.capitalize() if cap else w) for w in words]
                    forms[cap, space] = self._tok(texts, add_special_tokens=False)["input_ids"]
            punct_ids = [[], *[self._encode(x) for x in (",", ".", "?")]]
            rows = []
            for space in (True, False):
                for cap in (False, True):
                    for punct in range(4):
                        rows += [ids + punct_ids[punct] for ids in forms[cap, space]]
            rows += [self.newlines, [token_layout(2).separator]]
            self._len = np.asarray([len(r) for r in rows], dtype=np.int64)
            self._start = np.concatenate(([0], np.cumsum(self._len)[:-1]))
            self._flat = np.asarray([t for r in rows for t in r], dtype=np.int64)
        return self._flat, self._start, self._len

    def batch_units(self, n_docs: int) -> list:
        """`n_docs` documents drawn like `document()` (the same distributions, drawn for the whole
        batch at once), each as piece-table indices."""
        np, rng, v = self.np, self.rng, self.v
        n_words = np.clip(rng.lognormal(5.3, 0.8, n_docs), 20, 6000).astype(np.int64)
        total = int(n_words.sum())
        w = np.minimum(np.searchsorted(self.cum, rng.random(total)), v - 1)
        last = np.cumsum(n_words) - 1
        ends = rng.random(total) < 1 / 14
        ends[last] = True
        punct = np.where(ends, np.where(rng.random(total) < 0.9, 2, 3), np.where(rng.random(total) < 1 / 10, 1, 0))
        cap = np.concatenate(([True], ends[:-1]))
        units = (cap * 4 + punct) * v + w
        first = last - n_words + 1
        units[first] += 8 * v  # a document starts unspaced
        plate = rng.random(n_docs) < 0.2
        which = rng.integers(len(self.boilerplate), size=n_docs)
        before = rng.random(n_docs) < 0.5
        brk = np.asarray([16 * v])
        out = []
        for i, body in enumerate(np.split(units, first[1:])):
            if plate[i]:
                p = self.boilerplate[which[i]].copy()
                p[0] += 8 * v
                if before[i]:
                    body = np.concatenate((p, brk, body))
                else:
                    body = np.concatenate((body, brk, p))
            out.append(body)
        return out

    def units_text(self, units) -> str:
        """The text of piece-table indices (the inverse of the tokenization shortcut)."""
        v8 = 8 * self.v
        parts = []
        for u in units.tolist():
            if u == 2 * v8:
                parts[-1] = parts[-1].rstrip() + "\n\n"
            elif u >= v8:
                parts.append(self.table[u - v8])
            else:
                parts.append(" " + self.table[u] if parts and not parts[-1].endswith("\n") else self.table[u])
        return "".join(x if x.endswith("\n") else x.rstrip(" ") for x in parts).rstrip()

    def units(self, doc: list):
        """A document as piece-table indices (its first word and each word after a break unspaced)."""
        np = self.np
        n8 = 8 * self.v
        parts = []
        for k, run in enumerate(doc):
            if k:
                parts.append(np.asarray([2 * n8]))
            run = run.copy()
            run[0] += n8
            parts.append(run)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def ids_of_units(self, units):
        """Token ids of a sequence of piece-table indices (GPT-2 splits words from the space before)."""
        np = self.np
        flat, start, length = self._piece_tables()
        lens = length[units]
        ends = np.cumsum(lens)
        gather = np.repeat(start[units] - (ends - lens), lens) + np.arange(int(ends[-1]) if len(ends) else 0)
        return flat[gather]

    def ids(self, doc: list) -> list[int]:
        return self.ids_of_units(self.units(doc)).tolist()


def write_corpus(path: Path, tokenizer, target_tokens: int, seed: int) -> dict:
    """Write generated documents until about `target_tokens` tokens (calibrated on a first sample)."""
    sampler = WordSampler(tokenizer, seed)
    probe = [sampler.text(sampler.document()) for _ in range(300)]
    probe_tokens = sum(len(x) for x in tokenizer(probe, add_special_tokens=False)["input_ids"])
    tokens_per_doc = probe_tokens / len(probe)
    n_docs = max(10, round(target_tokens / tokens_per_doc))
    rng = random.Random(seed)
    recent: list[str] = []
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n_docs):
            if recent and rng.random() < 0.02:
                text = rng.choice(recent)  # an exact duplicate of a recent document
            else:
                text = probe[i] if i < len(probe) else sampler.text(sampler.document())
                if len(recent) < 1000:
                    recent.append(text)
                elif rng.random() < 0.01:
                    recent[rng.randrange(1000)] = text
            fh.write(json.dumps({"id": f"doc-{i:09d}", "source": "generated", "text": text}) + "\n")
    return {"documents": n_docs, "bytes": path.stat().st_size}


# -- build (own process) -------------------------------------------------------------------------

def measure_build(work: Path, size: int, tokenizer_dir: Path, seed: int, sa_builder: str, shards: int = 1,
                  ray_address: str | None = None) -> dict:
    """Build the index of a generated corpus of `size` tokens in `shards` shards, timed by phase;
    with `ray_address` ("" for a local cluster) the same corpus is then built on Ray and compared."""
    from propme_metrics.index.build import build_index, default_build_memory
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.index.suffix_array import choose_sa_builder
    from propme_metrics.index.tokenizer import load_tokenizer

    tok = load_tokenizer(str(tokenizer_dir))
    name = size_name(size)
    corpus = work / f"corpus-{name}.jsonl"
    out = work / f"index-{name}"
    t = time.perf_counter()
    info = write_corpus(corpus, tok, size, seed)
    gen_s = time.perf_counter() - t
    print(f"  corpus {name}: {info['documents']:,} documents, {info['bytes'] / 2**30:.2f} GiB "
          f"(generated in {gen_s:.0f} s)", file=sys.stderr, flush=True)
    phases = PhaseTimes()
    t = time.perf_counter()
    manifest = build_index(CorpusSource(str(corpus)), out, tokenizer=str(tokenizer_dir), num_shards=shards,
                           check_space=False, progress=False, sa_builder=sa_builder, on_phase=phases)
    whole = time.perf_counter() - t
    record = {"size": size, "shards": shards, "tokens": manifest.total_tokens, "documents": manifest.total_documents,
              "text_bytes": info["bytes"], "corpus_seconds": gen_s, "build_seconds": whole,
              "tokenize_seconds": phases.seconds.get("tokenize", 0.0), **_index_record(out, phases),
              "rss_after_tokenize_mib": phases.rss_mib.get("tokenize", 0.0), "peak_rss_mib": maxrss_mib(),
              "peak_rss_children_mib": maxrss_mib(resource.RUSAGE_CHILDREN),
              "sa_builder": choose_sa_builder(manifest.shards[0].ds_bytes, default_build_memory(), sa_builder)}
    if ray_address is not None:  # after the local figures
        print(f"  building {name} on Ray ...", file=sys.stderr, flush=True)
        ray_out = work / f"index-{name}-ray"
        shutil.rmtree(ray_out, ignore_errors=True)
        record["ray_build"] = asdict(build_on_ray(corpus, out, ray_out, tokenizer_dir, shards, ray_address or None,
                                                  sa_builder=sa_builder))
        shutil.rmtree(ray_out)
    corpus.unlink()
    return record


def _index_record(out: Path, phases: PhaseTimes) -> dict:
    """The suffix-array and top-level times of a build and the sizes of the index it made."""
    files = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
    return {"sa_seconds": phases.seconds.get("suffix_array", 0.0), "toplevel_seconds": phases.seconds.get("toplevel", 0.0),
            "shard_bytes": sum(v for k, v in files.items() if not k.startswith("propme-")),
            "toplevel_bytes": sum(v for k, v in files.items() if k.startswith("propme-toplevel"))}


def measure_token_level_build(work: Path, size: int, tokenizer_dir: Path, seed: int, sa_builder: str) -> dict:
    """The same corpus written straight as token ids (the tokenizer is not run; its time is
    extrapolated from the sizes that ran it): `build_index` with a `write_shards` that feeds the
    package's shard writer the generated ids, then the build's own suffix array, top level,
    manifest and install, timed by phase. The index's source is a one-line file naming the corpus."""
    import numpy as np

    from propme_metrics.index.build import build_index, default_build_memory
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.index.suffix_array import choose_sa_builder
    from propme_metrics.index.tokenizer import load_tokenizer

    tok = load_tokenizer(str(tokenizer_dir))
    out = work / f"index-{size_name(size)}"
    shutil.rmtree(out, ignore_errors=True)
    named = work / f"token-level-{size_name(size)}.jsonl"  # what the manifest records as the source
    named.write_text(json.dumps({"id": "corpus", "source": "generated",
                                 "text": f"generated token-level corpus, {size_name(size)} tokens, seed {seed}"}) + "\n")
    sampler = WordSampler(tok, seed)
    rng = random.Random(seed)
    written_s: list[float] = []

    def write_shards(writer, bar):
        t = time.perf_counter()
        n_docs = n_tokens = 0
        recent: list = []
        while n_tokens < size:
            metas, ids = [], []
            for units in sampler.batch_units(4096):
                if recent and rng.random() < 0.02:
                    units = rng.choice(recent)
                else:
                    if n_docs + len(ids) < 400:  # the shortcut must be the tokenizer's output
                        assert sampler.ids_of_units(units).tolist() == \
                            tok(sampler.units_text(units), add_special_tokens=False)["input_ids"]
                    if len(recent) < 1000:
                        recent.append(units)
                    elif rng.random() < 0.01:
                        recent[rng.randrange(1000)] = units
                metas.append({"id": f"doc-{n_docs + len(ids):09d}", "source": "generated"})
                ids.append(sampler.ids_of_units(units).astype(np.uint16))
            n_tokens += writer.write(0, metas, ids)
            n_docs += len(ids)
        written_s.append(time.perf_counter() - t)
        print(f"  token-level corpus {size_name(size)}: {n_docs:,} documents, {n_tokens:,} tokens "
              f"(written in {written_s[0]:.0f} s)", file=sys.stderr, flush=True)
        return writer.finish()

    phases = PhaseTimes()
    manifest = build_index(CorpusSource(str(named)), out, tokenizer=str(tokenizer_dir), check_space=False,
                           progress=False, sa_builder=sa_builder, on_phase=phases, write_shards=write_shards)
    return {"size": size, "shards": 1, "tokens": manifest.total_tokens, "documents": manifest.total_documents,
            "text_bytes": None, "corpus_seconds": written_s[0],
            "build_seconds": None, "tokenize_seconds": None, **_index_record(out, phases),
            "rss_after_tokenize_mib": None, "peak_rss_mib": maxrss_mib(),
            "peak_rss_sa_mib": phases.rss_mib.get("suffix_array", 0.0),
            "peak_rss_children_mib": maxrss_mib(resource.RUSAGE_CHILDREN),
            "sa_builder": choose_sa_builder(manifest.shards[0].ds_bytes, default_build_memory(), sa_builder)}


# -- generations ----------------------------------------------------------------------------------

def make_generations(index_dir: Path, tokenizer_dir: Path, n: int, seed: int, path: Path) -> None:
    """n texts of about 256 index tokens: copies of document stretches, edited copies, new text."""
    import numpy as np

    from propme_metrics.index.format import ShardFile, shard_file, token_layout
    from propme_metrics.index.reader import open_index
    from propme_metrics.index.tokenizer import load_tokenizer

    index = open_index(index_dir)
    tok = load_tokenizer(str(tokenizer_dir))
    width = index.token_width
    ds = np.memmap(shard_file(index_dir, ShardFile.TOKENIZED, 0), dtype=token_layout(width).dtype, mode="r")
    offsets = np.fromfile(shard_file(index_dir, ShardFile.OFFSET, 0), dtype="<u8").astype(np.int64) // width
    ends = np.append(offsets[1:], len(ds))
    long_docs = np.flatnonzero(ends - offsets - 1 >= GEN_TOKENS + 30)
    rng = np.random.default_rng(seed)
    pick = rng.choice(long_docs, size=2 * (n // 3), replace=False)
    bow = set(index.word_starts.tolist())

    def copied(doc: int) -> str:
        toks = ds[offsets[doc] + 1:ends[doc]].tolist()
        starts = [i for i in range(len(toks) - GEN_TOKENS) if toks[i] in bow] or [0]
        s = starts[int(rng.integers(len(starts)))]
        return tok.decode(toks[s:s + GEN_TOKENS]).strip()

    def edited(text: str) -> str:
        words = text.split(" ")
        out = []
        for i, w in enumerate(words):
            if i % 10 == 9 and rng.random() < 0.5:
                continue  # delete about one word in 20
            out.append(w)
        return " ".join(out)

    rows = [{"key": f"copy-{j}", "text": copied(int(d))} for j, d in enumerate(pick[:n // 3])]
    rows += [{"key": f"edit-{j}", "text": edited(copied(int(d)))} for j, d in enumerate(pick[n // 3:])]
    sampler = WordSampler(tok, seed + 1000)
    while len(rows) < n:
        ids = sampler.ids([sampler.sentences(400)])[:GEN_TOKENS]
        rows.append({"key": f"new-{len(rows)}", "text": tok.decode(ids).strip()})
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


# -- tracing (own process) -------------------------------------------------------------------------

def measure_trace(index_dir: Path, gens: Path, search: str, cache: str, out: Path) -> dict:
    from propme_metrics.index.format import ShardFile, shard_file
    from propme_metrics.index.search import ShardSearcher
    from propme_metrics.trace.tracer import Tracer

    rows = [json.loads(x) for x in open(gens, encoding="utf-8")]
    t = time.perf_counter()
    tracer = Tracer(index_dir)
    if search == "plain":
        tracer.search.shards = [ShardSearcher(tracer.index.path, s.id, s.width, s.doc_base, accelerate=False)
                          for s in tracer.search.shards]
    open_s = time.perf_counter() - t
    accel_bytes = sum(s.toplevel_bytes for s in tracer.search.shards)
    steps = count_steps(tracer)  # searches (what grows with more shards) and windows, timed
    tracer.trace_one(rows[0]["text"], "warm-up")
    results, times, cpu, residency, timed = [], [], [], [], Steps()
    for i, r in enumerate(rows if cache == "cold" else rows + rows):
        if cache == "cold":
            evict(tracer)
            if i < 3:
                residency.append(resident_fraction(shard_file(index_dir, ShardFile.TABLE, 0)))
        t0, c0, s0 = time.perf_counter(), time.process_time(), asdict(steps)
        res = tracer.trace_one(r["text"], r["key"])
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if cache == "warm" and i < len(rows):
            continue  # first pass warms the pages each generation needs
        times.append(dt)
        cpu.append(dc)
        for k, v in asdict(steps).items():
            setattr(timed, k, getattr(timed, k) + v - s0[k])
        results.append(res.to_dict())
    with open(out, "w", encoding="utf-8") as fh:
        for res in results:
            fh.write(json.dumps(res, sort_keys=True) + "\n")
    one_pass = Pass(1, len(times), sum(times), sum(cpu), None, timed).to_dict()
    times.sort()
    return {"search": search, "cache": cache, "generations": len(times), "open_seconds": open_s,
            "mean_ms": 1000 * sum(times) / len(times), "median_ms": 1000 * times[len(times) // 2],
            "p90_ms": 1000 * times[int(0.9 * (len(times) - 1))], "max_ms": 1000 * times[-1],
            "cpu_ms": 1000 * sum(cpu) / len(cpu), "search_ms": 1000 * timed.search_s / len(times),
            "tokens": sum(r["n_tokens"] for r in results) / len(results),
            "accelerator_bytes": accel_bytes, "maxrss_mib": maxrss_mib(), "pass": one_pass,
            "rss_anon_mib": status_kb("RssAnon") / 1024, "rss_file_mib": status_kb("RssFile") / 1024,
            "table_resident_after_evict": residency}


# -- tracing on Ray (own process) ------------------------------------------------------------------

def _evict_in_actor(host, folder: str) -> None:
    """Run inside a Ray actor (`__ray_call__`): `evict` on the node it runs on, for the shards it holds."""
    drop_mappings(host.searchers)
    drop_page_cache(Path(folder))


def evict_on_ray(tracer) -> None:
    """`evict` for a Ray tracer: in every actor (on its node), then on the driver's node."""
    folder = str(tracer.index.path)
    tracer._ray.get([g.actor.__ray_call__.remote(_evict_in_actor, folder) for g in tracer.search.shards])
    drop_page_cache(tracer.index.path)


def measure_ray_trace(index_dir: Path, gens: Path, address: str | None, actors: list[int], out: Path) -> dict:
    """The generations traced by the Ray tracer for each actor count, after one untimed pass: warm
    with one driver thread and with two per actor, cold with one thread (evicted before each
    generation); results go to `out`-N-PASS.jsonl for the caller to compare; then Ray's own
    cost of one actor call."""
    from propme_metrics.core.cluster import connect
    from propme_metrics.trace.ray_search import ray_tracer

    rows = [json.loads(x) for x in open(gens, encoding="utf-8")]
    t = time.perf_counter()
    ray = connect(address)
    cluster_s = time.perf_counter() - t
    runs = []
    for n in actors:
        print(f"  Ray tracer, {n} actor(s) ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        tracer = ray_tracer(index_dir, address=address, actors=n)
        startup = time.perf_counter() - t
        tracer.trace([r["text"] for r in rows], workers=2 * n)  # warms the pages each generation needs
        passes = {"warm-1": timed_pass(tracer, rows), f"warm-{2 * n}": timed_pass(tracer, rows, threads=2 * n),
                  "cold-1": timed_pass(tracer, rows, before_each=lambda: evict_on_ray(tracer))}
        files = {}
        for name, one in passes.items():
            files[name] = f"{out}-{n}-{name}.jsonl"
            Path(files[name]).write_text("".join(line + "\n" for line in one.lines), encoding="utf-8")
        runs.append({"actors": n, "held": len(tracer.search.shards), "startup_s": startup, "files": files,
                     "passes": {name: one.to_dict() for name, one in passes.items()}})
        tracer.close()
    return {"cluster_cpus": int(ray.cluster_resources().get("CPU", 0)), "cluster_start_s": cluster_s,
            "runs": runs, "call": asdict(ray_call_cost())}


def subprocess_json(args: list[str], timeout: float | None = None) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"measurement {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    sys.stderr.write(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- report ---------------------------------------------------------------------------------------

def slope(xs: list[float], ys: list[float]) -> str:
    """Factor per 10x: least-squares slope of log10(y) on log10(x), as 10 ** slope."""
    pts = [(math.log10(x), math.log10(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return "-"
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    b = sum((p[0] - mx) * (p[1] - my) for p in pts) / var
    return f"x{10 ** b:.2f}"


def report(builds: list[dict], traces: dict[tuple[int, str, str], dict], identical: dict[int, bool]) -> None:
    print(f"\nScale benchmark on {os.cpu_count()} CPUs, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM; "
          f"1-min load average now {os.getloadavg()[0]:.2f}\n")
    print("| tokens | documents | build s | tokenize s | suffix array s (builder) | top level s | tokens/s | "
          "disk bytes/token | peak RSS build MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    measured = [b for b in builds if b["tokenize_seconds"]]
    per_token = measured[-1]["tokenize_seconds"] / measured[-1]["tokens"] if measured else None
    for b in builds:
        if b["tokenize_seconds"] is None:  # written as token ids: the tokenizer's share is extrapolated
            tok_s = per_token * b["tokens"] if per_token else math.nan
            whole = tok_s + b["sa_seconds"] + b["toplevel_seconds"]
            print(f"| {b['tokens']:,} | {b['documents']:,} | ~{whole:.0f} (extrapolated) | ~{tok_s:.0f} "
                  f"(extrapolated, not run) | {b['sa_seconds']:.1f} ({b['sa_builder']}) | {b['toplevel_seconds']:.1f} | "
                  f"~{b['tokens'] / whole:,.0f} | {(b['shard_bytes'] + b['toplevel_bytes']) / b['tokens']:.2f} | "
                  f"{max(b['peak_rss_mib'], b['peak_rss_children_mib']):,.0f} (suffix array) |")
            b = dict(b, build_seconds=whole)
            continue
        print(f"| {b['tokens']:,} | {b['documents']:,} | {b['build_seconds']:.1f} | {b['tokenize_seconds']:.1f} | "
              f"{b['sa_seconds']:.1f} ({b['sa_builder']}) | {b['toplevel_seconds']:.1f} | "
              f"{b['tokens'] / b['build_seconds']:,.0f} | "
              f"{(b['shard_bytes'] + b['toplevel_bytes']) / b['tokens']:.2f} | "
              f"{max(b['peak_rss_mib'], b['peak_rss_children_mib']):,.0f} |")
    print("\nTracing, one worker, ms per generation of about 256 index tokens (mean / median / p90):\n")
    print("| tokens | search | warm ms | cold ms | CPU ms warm / cold | RssAnon MiB (cold run) | ru_maxrss MiB | "
          "accelerator MiB (% of index) | results plain = accelerated |")
    print("|---:|---|---|---|---|---:|---:|---:|---|")
    for b in builds:
        for search in ("plain", "accelerated"):
            w, c = traces.get((b["size"], search, "warm")), traces.get((b["size"], search, "cold"))
            if w is None or c is None:
                continue
            acc = c["accelerator_bytes"]
            print(f"| {b['tokens']:,} | {search} | {w['mean_ms']:.1f} / {w['median_ms']:.1f} / {w['p90_ms']:.1f} | "
                  f"{c['mean_ms']:.1f} / {c['median_ms']:.1f} / {c['p90_ms']:.1f} | "
                  f"{w.get('cpu_ms', math.nan):.1f} / {c.get('cpu_ms', math.nan):.1f} | {c['rss_anon_mib']:.0f} | "
                  f"{max(w['maxrss_mib'], c['maxrss_mib']):.0f} | {acc / 2**20:.1f} "
                  f"({100 * acc / b['shard_bytes']:.2f}%) | {'yes' if identical.get(b['size']) else 'NO'} |")
    if len(builds) >= 2:
        xs = [b["tokens"] for b in builds]
        print("\nGrowth per 10x tokens (least-squares over the sizes; x1.00 = flat, x10 = linear):\n")
        print("| figure | per 10x tokens |")
        print("|---|---:|")
        timed = [b for b in builds if b["build_seconds"]]
        print(f"| build seconds (tokenizer run) | {slope([b['tokens'] for b in timed], [b['build_seconds'] for b in timed])} |")
        print(f"| suffix-array seconds | {slope(xs, [b['sa_seconds'] for b in builds])} |")
        print(f"| peak build RSS | {slope(xs, [max(b['peak_rss_mib'], b['peak_rss_children_mib']) for b in builds])} |")
        for search in ("plain", "accelerated"):
            for cache in ("warm", "cold"):
                ys = [traces[(b["size"], search, cache)]["mean_ms"] for b in builds
                      if (b["size"], search, cache) in traces]
                if len(ys) == len(xs):
                    print(f"| tracing ms, {search}, {cache} | {slope(xs, ys)} |")
                    rss = [traces[(b["size"], search, cache)]["rss_anon_mib"] for b in builds]
                    print(f"| tracing RssAnon, {search}, {cache} | {slope(xs, rss)} |")
    acc = [(b, traces.get((b["size"], "accelerated", "warm")), traces.get((b["size"], "accelerated", "cold")))
           for b in builds]
    acc = [(b, w, c) for b, w, c in acc if w and c]
    if acc:
        first, last = acc[0], acc[-1]
        ratio = last[1]["mean_ms"] / first[1]["mean_ms"]
        cpu_ratio = last[1]["cpu_ms"] / first[1]["cpu_ms"]
        print(f"\nGoals (accelerated): warm at {last[0]['tokens']:,} tokens / warm at {first[0]['tokens']:,}: "
              f"CPU time {cpu_ratio:.2f}, wall clock {ratio:.2f} (goal <= 1.5: {'met' if cpu_ratio <= 1.5 else 'MISSED'} "
              f"on CPU time, the figure that other load on a shared machine does not inflate); cold at "
              f"{last[0]['tokens']:,} tokens {last[2]['mean_ms']:.0f} ms per generation, wall clock (goal < 1000 ms: "
              f"{'met' if last[2]['mean_ms'] < 1000 else 'MISSED'}).")


def report_ray(builds: list[dict], traces: dict, on_ray: dict[int, dict]) -> None:
    """The Ray study: builds on Ray against the local ones, Ray tracing against the local tracer (one
    process, accelerated search, same cache state), then the driver limit and its extrapolation."""
    ray_builds = [b for b in builds if "ray_build" in b]
    if not ray_builds and not on_ray:
        return
    print("\nOn Ray, this machine (a Ray cluster sharing these CPUs):\n")
    if ray_builds:
        print("| tokens | shards | local build s | Ray build s (tasks x CPU) | ratio to local | byte-identical |")
        print("|---:|---:|---:|---:|---:|---|")
        for b in ray_builds:
            r = b["ray_build"]
            print(f"| {b['tokens']:,} | {b['shards']} | {b['build_seconds']:.1f} | {r['seconds']:.1f} "
                  f"({r['tasks']} x {r['cpus_per_task']}) | {r['seconds'] / b['build_seconds']:.2f} | "
                  f"{'yes' if r['identical'] else 'NO'} |")
    for b in builds:
        study = on_ray.get(b["size"])
        if not study:
            continue
        local = {c: Pass.from_dict(traces[(b["size"], "accelerated", c)]["pass"]) for c in ("warm", "cold")}
        print(f"\nTracing {b['tokens']:,} tokens ({b['shards']} shards), {local['warm'].generations} generations, "
              f"Ray cluster of {study['cluster_cpus']} CPUs (started in {study['cluster_start_s']:.1f} s):\n")
        print("| tracer | driver threads | cache | ms/gen | gen/s | ratio to local | driver CPU ms/gen | "
              "actor CPU ms/gen | actor start-up s | results = local |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
        for c, one in local.items():
            print(f"| local Tracer, 1 process | 1 | {c} | {one.per_gen_ms(one.wall_s):.1f} | {one.gen_per_s:.2f} | "
                  f"1.00 | {one.per_gen_ms(one.driver_cpu_s):.1f} | - | - | - |")
        limits = []
        for run in study["runs"]:
            passes = {k: Pass.from_dict(v) for k, v in run["passes"].items()}
            for k, one in passes.items():
                cache, threads = k.split("-")
                actor = "-" if one.actor_cpu_s is None else f"{one.per_gen_ms(one.actor_cpu_s):.1f}"
                print(f"| Ray, {run['held']} actor(s) | {threads} | {cache} | {one.per_gen_ms(one.wall_s):.1f} | "
                      f"{one.gen_per_s:.2f} | {one.gen_per_s / local[cache].gen_per_s:.2f} | "
                      f"{one.per_gen_ms(one.driver_cpu_s):.1f} | {actor} | {run['startup_s']:.1f} | "
                      f"{'yes' if run['identical'][k] else 'NO'} |")
            conc = next(v for k, v in passes.items() if k.startswith("warm-") and k != "warm-1")
            limits.append(driver_limit(local["warm"], passes["warm-1"], conc, run["held"]))
        gens, n = local["warm"].generations, b["shards"]
        here = compute_ms(local["warm"].steps, gens, n, n)
        projections = {f"this index ({n} shards), warm": project(limits, here)}
        for node_gib in NODE_GIB:
            cp = common_pile_shards(node_gib)
            for c in ("warm", "cold"):
                per = compute_ms(local[c].steps, gens, n, cp, cpu=c == "warm")
                projections[f"Common Pile, {cp} shards ({node_gib} GiB nodes), {c}"] = project(limits, per)
        print_driver_limit(limits, RayCall(**study["call"]), projections)
    print("\nRead with care: the projection takes this index's search cost per shard (a Common Pile shard is "
          "larger: each search costs more, so more actors are needed before the driver is the bound) and the "
          "cold one as the actors' busy time (waiting on the disk); shard counts from the build's memory model.")


NODE_GIB = (256, 512, 1024)  #: node sizes for the Common Pile projection
RAY_OBJECT_STORE = (0.3, 200e9)  #: Ray's default object store: this share of a node's RAM, at most these bytes


def common_pile_shards(node_gib: int, width: int = 2) -> int:
    """Shards of the Common Pile such that one shard's build task (libdivsufsort in memory, the task's
    base memory) fits in a node's Ray memory (its RAM less Ray's default object store): the layout a
    Ray build on such nodes can run. EXTRAPOLATION from the build's memory model (`index/sizing.py`)."""
    from propme_metrics.index.ray_build import TASK_BASE_MEMORY
    from propme_metrics.index.sizing import shards_needed

    ram = node_gib * 2**30
    usable = int(ram - min(RAY_OBJECT_STORE[0] * ram, RAY_OBJECT_STORE[1]) - TASK_BASE_MEMORY)
    return shards_needed(int(CORPORA["Common Pile v0.1 (Comma mix)"]), width, usable, ram, "divsufsort")


CORPORA = {"Danish Dynaword": 6.8e9, "Common Pile v0.1 (Comma mix)": 464e9}  #: tokens (Llama-2 tokenizer)
#: (corpus, shards) of the extrapolation: Dynaword in 1B-token shards; the Common Pile in 1B-token
#: shards (what a 24 GiB machine builds) and in about 10B-token shards (what 256 GiB nodes build)
LAYOUTS = (("Danish Dynaword", 7), ("Common Pile v0.1 (Comma mix)", 464), ("Common Pile v0.1 (Comma mix)", 47))
MACHINES = ((1, 2, 24), (1, 64, 512), (8, 128, 1024))  #: (machines, cores each, RAM GiB each) for build hours


def extrapolate(builds: list[dict], traces: dict) -> None:
    """Disk, memory, build hours and traces per hour for the mission's corpora (`LAYOUTS`), from the
    largest size measured: EXTRAPOLATION. Tokenization scales with cores (the rate of the largest
    tokenized size), suffix arrays are built one shard after another per machine at the largest
    size's rate per token (a lower bound for larger shards), and a generation over S shards of T
    tokens costs the measured one-shard cost plus (S - 1) searches of one shard, each the measured
    search share grown by the binary search's depth, log2(T) / log2(measured tokens). Cold: every
    shard read from the disk for every generation (one machine whose RAM cannot hold the index);
    warm: every shard in a page cache, which is the cost per core of a Ray cluster whose nodes keep
    their shards warm, as long as its drivers keep up (`docs/scale.md`, where one driver stops scaling)."""
    from propme_metrics.index.format import pointer_size
    from propme_metrics.index.suffix_array import divsufsort_memory

    b = builds[-1]
    measured = [x for x in builds if x["tokenize_seconds"]]
    w, c = traces.get((b["size"], "accelerated", "warm")), traces.get((b["size"], "accelerated", "cold"))
    if not measured or not (w and c):
        print("\n(no extrapolation: it needs a tokenized size and the largest size traced warm and cold)")
        return
    tok_per_core_s = measured[-1]["tokens"] / measured[-1]["tokenize_seconds"]  # one tokenizer thread
    sa_s_per_token = b["sa_seconds"] / b["tokens"]
    base = b["shard_bytes"] + b["toplevel_bytes"] - b["tokens"] * pointer_size(2 * b["tokens"])  # all but pointers
    print(f"\nEXTRAPOLATION (not measured) from the {b['tokens']:,}-token shard: one generation (about 256 tokens) "
          f"{w['cpu_ms']:.1f} ms of CPU warm ({w['search_ms']:.1f} of it searching), {c['mean_ms']:.1f} ms cold "
          f"({c['search_ms']:.1f} searching); suffix array {sa_s_per_token * 1e9:.0f} s per billion tokens on one "
          f"core; tokenization {tok_per_core_s:,.0f} tokens/s per core (tokenized size {measured[-1]['tokens']:,}).\n")
    print("| corpus | tokens | shards (tokens each) | disk | suffix-array memory per shard | build hours: "
          + " / ".join(f"{n} x {cores} ({ram} GiB)" for n, cores, ram in MACHINES)
          + " | traces/hour per core, shards on disk (cold) | traces/hour per core, shards warm (RAM, or Ray nodes "
          "keeping them) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, shards in LAYOUTS:
        tokens = CORPORA[name]
        per_shard = tokens / shards
        ds_bytes = int(2 * per_shard)
        disk = shards * per_shard * (base / b["tokens"] + pointer_size(ds_bytes))
        hours = [tokens / (tok_per_core_s * cores * n) / 3600 + math.ceil(shards / n) * per_shard * sa_s_per_token / 3600
                 for n, cores, _ram in MACHINES]
        depth = math.log2(per_shard) / math.log2(b["tokens"])
        cold = 3.6e6 / (c["mean_ms"] + (shards - 1) * c["search_ms"] * depth)
        warm = 3.6e6 / (w["cpu_ms"] + (shards - 1) * w["search_ms"] * depth)
        print(f"| {name} | {tokens / 1e9:,.1f}B | {shards} ({per_shard / 1e9:,.1f}B) | {disk / 1e9:,.0f} GB | "
              f"{divsufsort_memory(ds_bytes) / 2**30:,.0f} GiB | " + " / ".join(f"{h:,.1f}" for h in hours)
              + f" | {cold:,.0f} | {warm:,.0f} |")


def main() -> None:
    from propme_metrics.index.suffix_array import SA_BUILDERS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10M,100M,1B", help="index sizes in tokens, e.g. 10M,100M,1B")
    p.add_argument("--work", type=Path, default=Path("/tmp/propme-scale"), help="where corpora and indexes go")
    p.add_argument("--generations", type=int, default=45, help="generations traced per measurement")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sa-builder", default="auto", choices=SA_BUILDERS, help="suffix-array builder")
    p.add_argument("--skip-build", action="store_true", help="reuse the indexes in --work (their build figures "
                   "come from the build-*.json files written when they were built, and tracing figures from "
                   "trace-*.json when they exist)")
    p.add_argument("--skip-trace", action="store_true", help="build (and keep) the indexes only")
    p.add_argument("--keep", action="store_true", help="keep the indexes afterwards")
    p.add_argument("--tokenize-up-to", default="1B", help="sizes above this are written as token ids directly "
                   "(the same corpus; tokenization time extrapolated from the smaller sizes)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="also build each index on Ray and trace the same generations with the Ray tracer, "
                   "for each count in --actors (ADDRESS or RAY_ADDRESS; none: a local cluster)")
    p.add_argument("--actors", default="1,2", help="with --ray: actor counts to measure, e.g. 1,2")
    p.add_argument("--shards", type=int, default=None, help="shards per index (default 1; with --ray, the "
                   "largest actor count, so that every actor holds a shard)")
    p.add_argument("--_build", type=int, help=argparse.SUPPRESS)
    p.add_argument("--_token_level", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--_trace", nargs=4, metavar=("INDEX", "GENS", "SEARCH", "CACHE"), help=argparse.SUPPRESS)
    p.add_argument("--_ray_trace", nargs=2, metavar=("INDEX", "GENS"), help=argparse.SUPPRESS)
    p.add_argument("--_out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    tok_dir = args.work / "gpt2"
    actors = [int(x) for x in args.actors.split(",")]
    shards = args.shards or (max(actors) if args.ray is not None else 1)
    ray_address = None if args.ray is None else args.ray or None
    if args._build:
        if args._token_level:
            print(json.dumps(measure_token_level_build(args.work, args._build, tok_dir, args.seed, args.sa_builder)))
        else:
            print(json.dumps(measure_build(args.work, args._build, tok_dir, args.seed, args.sa_builder, shards,
                                           args.ray)))
        return
    if args._trace:
        index, gens, search, cache = args._trace
        print(json.dumps(measure_trace(Path(index), Path(gens), search, cache, args._out)))
        return
    if args._ray_trace:
        index, gens = args._ray_trace
        print(json.dumps(measure_ray_trace(Path(index), Path(gens), ray_address, actors, args._out)))
        return

    from propme_metrics.testing import gpt2_tokenizer

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if shards > 1 and max(sizes) > parse_size(args.tokenize_up_to):
        sys.exit("sizes above --tokenize-up-to are written as one shard of token ids: "
                 "use --shards 1 (or no --ray), or raise --tokenize-up-to")
    ray_opts = [] if args.ray is None else ["--ray", args.ray, "--actors", args.actors]
    args.work.mkdir(parents=True, exist_ok=True)
    if not (tok_dir / "tokenizer.json").exists():
        gpt2_tokenizer(tok_dir)
    for size in sizes if args.skip_build else []:
        record = args.work / f"build-{size_name(size)}.json"
        built = json.loads(record.read_text()).get("shards", 1) if record.exists() else shards
        if built != shards:
            sys.exit(f"the {size_name(size)} index in {args.work} has {built} shard(s), not {shards}: "
                     "leave out --skip-build to rebuild it, or ask for its shards")
    builds, traces, identical, on_ray = [], {}, {}, {}
    try:
        for size in sizes:
            name = size_name(size)
            index_dir, record = args.work / f"index-{name}", args.work / f"build-{name}.json"
            if not (args.skip_build and record.exists() and (index_dir / "propme-manifest.json").exists()):
                shutil.rmtree(index_dir, ignore_errors=True)
                print(f"building {name} ...", file=sys.stderr, flush=True)
                token_level = ["--_token_level"] if size > parse_size(args.tokenize_up_to) else []
                record.write_text(json.dumps(subprocess_json(["--_build", str(size), "--work", str(args.work),
                                                              "--seed", str(args.seed),
                                                              "--sa-builder", args.sa_builder, *token_level,
                                                              "--shards", str(shards), *ray_opts])))
            builds.append(json.loads(record.read_text()))
            if args.skip_trace:
                continue
            gens = args.work / f"generations-{name}-{args.generations}.jsonl"
            traced = args.work / f"trace-{name}-{args.generations}.json"
            if args.skip_build and traced.exists() and args.ray is None:  # measured earlier, same code and inputs
                saved = json.loads(traced.read_text())
                for key, value in saved["traces"].items():
                    search, cache = key.split("-")
                    traces[(size, search, cache)] = value
                identical[size] = saved["identical"]
                continue
            if not gens.exists():
                make_generations(index_dir, tok_dir, args.generations, args.seed, gens)
            outs = {}
            for search in ("plain", "accelerated"):
                for cache in ("warm", "cold"):
                    print(f"tracing {name}: {search}, {cache} ...", file=sys.stderr, flush=True)
                    out = args.work / f"results-{name}-{search}-{cache}.jsonl"
                    traces[(size, search, cache)] = subprocess_json(
                        ["--_trace", str(index_dir), str(gens), search, cache, "--_out", str(out),
                         "--work", str(args.work)])
                    outs[(search, cache)] = out.read_text()
            identical[size] = len(set(outs.values())) == 1
            saved = {"identical": identical[size], "traces": {
                f"{s}-{c}": traces[(size, s, c)] for s in ("plain", "accelerated") for c in ("warm", "cold")}}
            if args.ray is not None:
                print(f"tracing {name} on Ray ...", file=sys.stderr, flush=True)
                on_ray[size] = saved["ray"] = subprocess_json(
                    ["--_ray_trace", str(index_dir), str(gens), *ray_opts, "--work", str(args.work),
                     "--_out", str(args.work / f"results-{name}-ray")])
                for run in on_ray[size]["runs"]:
                    run["identical"] = {k: Path(f).read_text() == outs[("accelerated", "warm")]
                                        for k, f in run["files"].items()}
            traced.write_text(json.dumps(saved))
            if not args.keep:
                shutil.rmtree(index_dir, ignore_errors=True)
    finally:
        report(builds, traces, identical)
        report_ray(builds, traces, on_ray)
        extrapolate(builds, traces)


if __name__ == "__main__":
    main()
