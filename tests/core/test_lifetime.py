"""Forked tracing workers never outlive a SIGKILLed parent, and never keep its lock: after a real
SIGKILL of `propme trace --workers 2` (and of a process tracing through the lm-eval hooks' bulk
tracing), every worker is gone within seconds and the journal's lock is free for the rerun."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import open_locked
from propme_metrics.trace.runner import journal_path
from support.corpora import write_jsonl

WAIT_SECONDS = 60


def _many_generations(path: Path, records: list[dict], n: int) -> Path:
    texts = [records[i % len(records)]["text"][:300] + f" variant {i}" for i in range(n)]
    return write_jsonl(path, [{"id": f"g{i}", "completion": t} for i, t in enumerate(texts)])


def _workers_of(proc: subprocess.Popen, ready: callable) -> list[psutil.Process]:
    """The worker processes of `proc` once it has forked two and `ready()` holds."""
    deadline = time.time() + WAIT_SECONDS
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        children = psutil.Process(proc.pid).children()
        if len(children) >= 2 and ready():
            return children
        time.sleep(0.05)
    pytest.fail("the workers never started")


def _kill_and_expect_workers_gone(proc: subprocess.Popen, workers: list[psutil.Process]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    gone, alive = psutil.wait_procs(workers, timeout=15)
    for p in alive:  # clean up before failing
        p.kill()
    assert not alive, f"{len(alive)} worker(s) outlived their SIGKILLed parent"


@pytest.mark.slow  # a fresh `propme trace` with workers, killed from outside
def test_sigkill_of_trace_with_workers_leaves_no_worker_and_a_free_lock(tmp_path, synthetic_index,
                                                                       synthetic_records):
    inp = _many_generations(tmp_path / "g.jsonl", synthetic_records, 6000)
    out = tmp_path / "r.jsonl"
    code = "import sys; from propme.cli.app import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "trace", "--index", str(synthetic_index), "--input", str(inp),
                             "--out", str(out), "--summary", str(tmp_path / "s.json"), "--workers", "2", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers = _workers_of(proc, lambda: journal_path(out).exists())
    _kill_and_expect_workers_gone(proc, workers)
    busy = ConfigError("busy")
    open_locked(journal_path(out), "a+b", busy).close()  # what the rerun takes first: free


@pytest.mark.slow  # a fresh interpreter tracing through the lm-eval hooks, killed from outside
def test_sigkill_during_bulk_tracing_of_the_lmeval_hooks_leaves_no_worker(tmp_path, synthetic_index,
                                                                         synthetic_records):
    texts = [synthetic_records[i % len(synthetic_records)]["text"][:300] + f" v{i}" for i in range(6000)]
    (tmp_path / "jobs.json").write_text(json.dumps(texts))
    code = ("import json, sys\nfrom propme_metrics.trace.tracer import Tracer\n"
            "from propme_tasks.deferred import traced\n"
            "texts = json.load(open(sys.argv[2]))\n"
            "jobs = [(t, f'k{i}', None) for i, t in enumerate(texts)]\n"
            "for _ in traced(Tracer(sys.argv[1]), jobs, 2):\n    pass\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(synthetic_index), str(tmp_path / "jobs.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _kill_and_expect_workers_gone(proc, _workers_of(proc, lambda: True))


def test_a_lock_of_a_dead_process_is_free_although_its_forked_child_lives(tmp_path):
    """Any forked child (not only a tracing worker) lets go of its parent's locks as it starts."""
    lock = tmp_path / "journal"
    code = ("import os, sys, time\nfrom pathlib import Path\nfrom propme_metrics.core.files import open_locked\n"
            "fh = open_locked(Path(sys.argv[1]), 'a+b', RuntimeError('busy'))\n"
            "if os.fork() == 0:\n    os.write(1, b'child\\n')\n    time.sleep(120)\n    os._exit(0)\n"
            "os.write(1, b'parent\\n')\ntime.sleep(120)\n")  # one write each: the lines never interleave
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    # both running: the child has passed its after-fork hooks (which let go of the lock) before it prints
    assert sorted(proc.stdout.readline().strip() for _ in range(2)) == ["child", "parent"]
    child = psutil.Process(proc.pid).children()[0]
    with pytest.raises(ConfigError):  # held while its process lives
        open_locked(lock, "a+b", ConfigError("busy"))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    try:
        assert child.is_running()
        open_locked(lock, "a+b", ConfigError("busy")).close()
    finally:
        child.kill()
