"""The stock lm-eval CLI with one spy: every tracing call of PropMe's deferred hooks is logged.

Usage: python lmeval_trace_spy.py CALLS.jsonl <lm_eval arguments>. Each line of CALLS.jsonl is one
call of `propme_tasks.deferred.traced`: {"generations": how many, "workers": how many processes},
so tests can check that a real run traced each task in one bulk call.
"""
from __future__ import annotations

import json
import sys


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    from propme_tasks import deferred

    out = open(sys.argv[1], "a", encoding="utf-8")
    original = deferred.traced

    def spy(tracer, jobs, workers):
        out.write(json.dumps({"generations": len(jobs), "workers": workers}) + "\n")
        out.flush()
        return original(tracer, jobs, workers)

    deferred.traced = spy
    sys.argv = ["lm_eval", *sys.argv[2:]]
    cli_evaluate()


if __name__ == "__main__":
    main()
