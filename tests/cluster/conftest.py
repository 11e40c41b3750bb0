"""The local Ray cluster of the tests in this folder (all of them slow: tests/conftest.py)."""
from __future__ import annotations

import pytest


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
