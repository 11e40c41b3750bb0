"""The local Ray cluster of the tests in this folder (all of them slow: tests/conftest.py), and the
sharded corpus they build on."""
from __future__ import annotations

import pytest

from propme.demo.synthetic import generate_corpus
from support.corpora import make_index, write_jsonl


@pytest.fixture(scope="module")
def ray_cluster(request):
    """A local 2-CPU cluster, once per module; the test is skipped, saying why, without Ray or when it cannot start."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'propme[ray]')")
    import ray.cloudpickle  # noqa: F811 (the submodule must be imported to be an attribute of ray)

    try:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    except Exception as exc:  # no shared memory, no free ports...: skip, saying why
        pytest.skip(f"a local Ray cluster cannot start here: {exc}")
    ray.cloudpickle.register_pickle_by_value(request.module)  # workers need the module's own helpers
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus_and_local(tmp_path_factory, gpt2_dir):
    """A synthetic corpus and its local 4-shard index (test_ray.SHARDS), so that Ray actors each hold
    some: (corpus path, index folder, records)."""
    root = tmp_path_factory.mktemp("ray-corpus")
    records = list(generate_corpus(160, seed=23))
    corpus = write_jsonl(root / "corpus.jsonl", records)
    make_index(corpus, root / "local", gpt2_dir, num_shards=4)
    return corpus, root / "local", records
