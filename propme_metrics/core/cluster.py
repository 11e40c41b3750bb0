"""Ray, imported only when asked for (`--ray`, `trace_backend: ray`): importing PropMe never imports it."""
from __future__ import annotations

import os

from propme_metrics.core.errors import ConfigError


def import_ray():
    """The `ray` module, or one clear message saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray (trace_backend: ray) needs Ray, which is not installed in this environment",
                          'pip install "propme[ray]" here and on every node of the cluster') from None
    return ray


def connect(address: str | None = None):
    """Join the Ray cluster at `address` (else RAY_ADDRESS; neither: start a local one) and return `ray`."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or None
    try:
        ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"at {address}" if address else "on this machine"
        raise ConfigError(f"cannot start or reach a Ray cluster {where}: {exc}",
                          "start one with `ray start --head` and pass its address (--ray HOST:6379 or "
                          "RAY_ADDRESS), or leave the address out for a local cluster") from None
    return ray


def unwrap_ray_error(exc: BaseException) -> BaseException:
    """The exception a Ray task or actor raised, unwrapped from Ray's error."""
    return getattr(exc, "cause", None) or exc
