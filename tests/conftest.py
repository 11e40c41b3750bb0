"""Shared fixtures: the real GPT-2 tokenizer (offline) and small indexes built from planted corpora."""
from __future__ import annotations

import inspect
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from propme_metrics.demo.synthetic import generate_corpus  # noqa: E402
from support.corpora import gpt2_tokenizer, make_index, write_jsonl  # noqa: E402,F401

#: fixtures that make a test slow (a model trained: the demo's, the leak and PII worlds'; a browser); with
#: the folders below and any test that runs stock `lm_eval` itself, they define the `slow` marker that
#: `make test-fast` leaves out (`make test` runs all)
SLOW_FIXTURES = frozenset({"demo_paths", "leak_world", "pii_world", "chromium"})
SLOW_FOLDERS = frozenset({"cluster", "demo"})  #: Ray clusters; the demo end to end


def _runs_lm_eval(item) -> bool:
    try:
        return "run_lm_eval(" in inspect.getsource(item.function)
    except (OSError, TypeError):
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (SLOW_FIXTURES.intersection(item.fixturenames) or item.path.parent.name in SLOW_FOLDERS
                or _runs_lm_eval(item)):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's headless Chromium (installed by .ci/run); the test is skipped without it."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no Chromium: install Debian's chromium package (the CI script does)")
    return browser


@pytest.fixture
def cli_run(capsys, monkeypatch):
    """`propme ...` in-process: (exit code, stdout, stderr) on a wide console; never a traceback."""
    from propme_metrics.cli import app as cli
    from propme_metrics.core.progress import stderr_console

    monkeypatch.setattr(stderr_console, "_width", 10_000)

    def run(*args) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as exc:  # argparse's own usage errors (exit 2)
            code = exc.code
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    return run


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory) -> Path:
    return gpt2_tokenizer(tmp_path_factory.mktemp("gpt2-tokenizer"))


@pytest.fixture(scope="session")
def synthetic_records() -> list[dict]:
    return list(generate_corpus(120, seed=7))


@pytest.fixture(scope="session")
def synthetic_index(tmp_path_factory, gpt2_dir, synthetic_records) -> Path:
    """A 2-shard index of 120 generated Danish/English documents (GPT-2 tokenizer)."""
    root = tmp_path_factory.mktemp("synthetic")
    corpus = write_jsonl(root / "corpus.jsonl", synthetic_records)
    make_index(corpus, root / "index", gpt2_dir, num_shards=2)
    return root / "index"


@pytest.fixture(scope="session")
def demo_paths(tmp_path_factory):
    """The demo's corpus, index, memorizing model and prompt files at CI size (built once per session)."""
    from propme_metrics.demo.run import SMALL, prepare

    return prepare(tmp_path_factory.mktemp("demo"), SMALL)
