"""What `propme trace`'s leak tables cost beside the tracing itself, measured in the same run.

Builds a generated corpus (`generate_corpus`: 10 sources) and its index with a byte-level BPE trained on it,
traces N generations (half copied from documents, half new generated text, which partly matches),
then runs the leak analysis (`report.trace_provenance.trace_leaks`) on the results with the default
bootstrap and without one. Prints each time (wall and CPU) and its ratio to the tracing time.

    python benchmarks/trace_provenance.py --generations 600 --docs 4000
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    from propme.demo.synthetic import document_text, generate_corpus, train_tokenizer
    from propme_metrics.index.reader import open_index
    from propme_metrics.metrics.pm import DEFAULT_BOOTSTRAP
    from propme_metrics.report.trace_provenance import trace_leaks, traced_task
    from propme_metrics.testing import make_index, write_jsonl
    from propme_metrics.trace.inputs import TraceInput
    from propme_metrics.trace.result import TraceConfig
    from propme_metrics.trace.tracer import Tracer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=600)
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--bootstrap", type=int, default=DEFAULT_BOOTSTRAP)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        records = list(generate_corpus(args.docs, seed=1))
        corpus = write_jsonl(root / "corpus.jsonl", records)
        tok = train_tokenizer([r["text"] for r in records], root / "tok")
        make_index(corpus, root / "index", tok)
        index = open_index(root / "index")
        rng = random.Random(2)
        inputs = []
        for i in range(args.generations):
            if i % 2:
                text = " ".join(rng.choice(records)["text"].split(" ")[:40])
            else:
                text = document_text(rng, rng.choice(("da", "en")), 3)
            inputs.append(TraceInput(f"g{i}", text))
        tracer = Tracer(index, TraceConfig())
        results, t_wall, t_cpu = _timed(lambda: tracer.trace([g.text for g in inputs], [g.key for g in inputs]))
        rows = {"tracing": (t_wall, t_cpu)}
        for b in (args.bootstrap, 0):
            _, w, c = _timed(lambda b=b: trace_leaks(traced_task(inputs, results, index.path,
                                                                 index.manifest.identity, 10), b, 0))
            rows[f"leak tables, bootstrap {b}"] = (w, c)
        print(f"{args.generations} generations, {args.docs} documents, load {os.getloadavg()[0]:.2f}")
        for name, (w, c) in rows.items():
            print(f"{name:32s} wall {w:8.2f} s  cpu {c:8.2f} s  ratio to tracing (cpu) {c / t_cpu:6.3f}")
        print(json.dumps({k: {"wall_s": w, "cpu_s": c} for k, (w, c) in rows.items()}))


if __name__ == "__main__":
    main()
