"""Shared fixtures: the real GPT-2 tokenizer (offline) and small indexes built from planted corpora."""
from __future__ import annotations

import inspect
import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from propme.demo.synthetic import generate_corpus  # noqa: E402
from support.corpora import gpt2_tokenizer, make_index, write_jsonl  # noqa: E402,F401

#: fixtures that make a test slow (a model trained: the demo's, the leak and PII worlds'; a browser); with
#: the folders below and any test that runs stock `lm_eval` itself, they define the `slow` marker that
#: `make test-fast` leaves out (`make test` runs all). Tests marked `slow` by hand besides: those that index
#: lm-eval's built-in tasks, and fresh `propme` processes killed or capped from outside (each imports torch;
#: the SIGKILL-at-each-step builds of tests/index/test_build_safety.py stay fast in forked children).
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


def pytest_runtest_setup(item):
    index_module = sys.modules.get("lm_eval.tasks._index")  # imported by a test: lm-eval 0.4.12 or later
    if index_module is not None and not getattr(index_module.TaskIndex.build, "index_once", False):
        index_builtin_tasks_once(index_module)


def index_builtin_tasks_once(index_module) -> None:
    """lm-eval indexes its ~15k built-in task YAML files for every TaskManager that includes them
    (`propme contamination`, `propme report --include-path`: about 6 s of CPU each). In this process
    they are indexed once: each later index of that unchanged folder is a copy of the first (lm-eval
    deep-copies a task's config when it builds the task); other folders are indexed as usual."""
    builtin, original, cache = Path(index_module.__file__).parent, index_module.TaskIndex.build, {}

    def build(paths, *, resolve_includes=True):
        index = {}
        for root in paths:  # lm-eval indexes each folder alone, then later folders override earlier ones
            if Path(root) == builtin and resolve_includes:
                if builtin not in cache:
                    cache[builtin] = original([root])
                part = dict(cache[builtin])
            else:
                part = original([root], resolve_includes=resolve_includes)
            for name, entry in part.items():
                if name in index:
                    index_module.log.warning("Task '%s' from %s overrides existing task from %s", name,
                                             entry.yaml_path, index[name].yaml_path)
                index[name] = entry
        return index

    build.index_once = True
    index_module.TaskIndex.build = staticmethod(build)


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
    from propme.cli import app as cli
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
    from propme.demo.layout import SMALL
    from propme.demo.run import prepare

    return prepare(tmp_path_factory.mktemp("demo"), SMALL)
