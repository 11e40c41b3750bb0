"""What the likelihood subtask costs against `prefix`, per document, measured in one run.

Both subtasks of the demo corpus are built by lm-eval from the same prefix documents and run on the
demo's memorizing model (lm-eval's HF backend, CPU): `prefix` generates greedily (max_gen_toks,
default 256 as in the tasks) and traces each generation; `prefix_likelihood` scores one
loglikelihood request per document and computes its metrics. Rounds alternate the two and the best
of each is kept (a shared machine's load moves). Prints seconds per document and the ratio.

    python benchmarks/likelihood_cost.py                       # a small demo built in a temporary folder
    python benchmarks/likelihood_cost.py --demo propme-demo --rounds 3
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from copy import deepcopy
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", help="a `propme demo` folder (default: prepare a small one in a temporary folder)")
    ap.add_argument("--max-gen-toks", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import get_task_dict

    from propme.demo.layout import SMALL, DemoPaths
    from propme.demo.run import prepare
    from propme_tasks import task_manager

    tmp = None
    if args.demo:
        paths = DemoPaths(Path(args.demo).absolute())
    else:
        tmp = tempfile.TemporaryDirectory()
        paths = prepare(tmp.name, SMALL)
    os.environ.setdefault("PROPME_CACHE_DIR", os.path.join(tmp.name if tmp else str(paths.root), "cache"))
    meta = {"demo_index": str(paths.index), "demo_prefix_prompts": str(paths.prompts("prefix")),
            "pretrained": str(paths.model)}
    tasks = get_task_dict(["propme_demo_prefix", "propme_demo_likelihood"], task_manager(metadata=meta))
    prefix, like = tasks["propme_demo_prefix"], tasks["propme_demo_likelihood"]
    for t in (prefix, like):
        t.build_all_requests(rank=0, world_size=1)
    gen_reqs = [deepcopy(i) for i in prefix.instances]
    for inst in gen_reqs:
        inst.arguments = (inst.arguments[0], {**inst.arguments[1], "max_gen_toks": args.max_gen_toks})
    ll_reqs = list(like.instances)
    n = len(gen_reqs)
    assert n == len(ll_reqs) and {i.doc["id"] for i in gen_reqs} == {i.doc["id"] for i in ll_reqs}
    lm = HFLM(pretrained=str(paths.model), dtype="float32", device="cpu", batch_size=args.batch_size)

    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.rounds):
        parts = {}  # each subtask: the model's requests, then process_results (prefix: SimpleTrace)
        parts["prefix: generation"] = _timed(lambda: lm.generate_until(gen_reqs, disable_tqdm=True))
        outs = parts["prefix: generation"][2]
        parts["prefix: tracing"] = _timed(lambda: [prefix.process_results(i.doc, [o]) for i, o in zip(gen_reqs, outs)])
        parts["prefix_likelihood: loglikelihood"] = _timed(lambda: lm.loglikelihood(ll_reqs, disable_tqdm=True))
        outs = parts["prefix_likelihood: loglikelihood"][2]
        parts["prefix_likelihood: metrics"] = _timed(lambda: [like.process_results(i.doc, [o]) for i, o in zip(ll_reqs, outs)])
        for name in ("prefix", "prefix_likelihood"):
            both = [v for k, v in parts.items() if k.startswith(name + ":")]
            parts[name] = (sum(v[0] for v in both), sum(v[1] for v in both), None)
        for name, (wall, cpu, _) in parts.items():
            best[name] = min(best.get(name, (float("inf"), 0.0)), (wall, cpu))
    load = os.getloadavg()[0]
    print(f"{n} prefix documents of the demo corpus, model {paths.model}, batch size {args.batch_size}, "
          f"prefix max_gen_toks {args.max_gen_toks}, best of {args.rounds} rounds, load average {load:.1f}")
    print("| subtask | wall s / document | CPU s / document |")
    print("|---|---|---|")
    for name, (wall, cpu) in best.items():
        print(f"| {name} | {wall / n:.4f} | {cpu / n:.4f} |")
    ratio = best["prefix"][0] / best["prefix_likelihood"][0]
    cpu_ratio = best["prefix"][1] / max(best["prefix_likelihood"][1], 1e-9)
    print(f"prefix / prefix_likelihood per document: wall time x{ratio:.1f}, CPU time x{cpu_ratio:.1f}")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
