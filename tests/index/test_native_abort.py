"""Under an address-space limit the tokenizer library aborts the process when an allocation fails
(SIGABRT from Rust or C++, which no Python handler can catch): the index build then runs in a child
process, and its death is one out-of-memory message (exit 4), never a bare abort (issue 35, item 15)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from propme_metrics.core.errors import ConfigError, OutOfMemoryError
from propme_metrics.core.lifetime import in_child
from support.corpora import write_jsonl


def _died(what: str) -> OutOfMemoryError:
    return OutOfMemoryError(f"the child {what}")


def test_in_child_returns_the_result_and_raises_the_error_with_its_hint():
    assert in_child(lambda: {"pid": os.getpid(), "x": [1, 2]}, _died)["x"] == [1, 2]
    assert in_child(os.getpid, _died) != os.getpid()

    def refuse():
        raise ConfigError("bad corpus", "fix it")

    with pytest.raises(ConfigError) as err:
        in_child(refuse, _died)
    assert err.value.message == "bad corpus" and err.value.hint == "fix it"


def test_a_child_that_aborts_is_reported_not_fatal():
    with pytest.raises(OutOfMemoryError, match="was stopped by SIGABRT"):
        in_child(os.abort, _died)


@pytest.mark.slow  # three fresh `propme` processes (each imports torch) under address-space caps
def test_index_build_under_an_address_space_limit_says_out_of_memory(tmp_path, gpt2_dir):
    """`propme index build` under prlimit --as / ulimit -v, in a fresh interpreter as a user runs it: one
    out-of-memory message (exit 4), never "cannot load tokenizer", "a bug in PropMe" or a traceback. The
    caps fail in three places: Python's import of the tokenizer (300 MB), C++ code (600 MB: std::bad_alloc)
    and the Rust tokenizer (750 MB), which abort the whole process unless the build runs in a child."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": str(i), "text": "Ferries and bridges. " * 50}
                                                for i in range(20)])
    code = "import sys; from propme.cli.app import main; sys.exit(main(sys.argv[1:]))"
    for limit in (300 * 10**6, 600 * 10**6, 750 * 10**6):
        proc = subprocess.run([sys.executable, "-c", code, "index", "build", str(corpus), "--out",
                               str(tmp_path / f"idx{limit}"), "--tokenizer", str(gpt2_dir), "--quiet",
                               "--skip-space-check"], preexec_fn=lambda limit=limit: resource.setrlimit(
                                   resource.RLIMIT_AS, (limit, limit)), capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            continue
        assert proc.returncode == 4, (limit, proc.returncode, proc.stderr[-2000:])
        assert "out of memory" in proc.stderr and "address-space limit" in proc.stderr
        for wrong in ("cannot load tokenizer", "bug in PropMe", "Traceback"):
            assert wrong not in proc.stderr, (limit, proc.stderr[-2000:])
        for wrong in ("memory allocation of", "Fatal Python error"):  # the abort's own words come before, not after
            assert wrong not in proc.stderr.split("error: out of memory")[-1], (limit, proc.stderr[-2000:])
