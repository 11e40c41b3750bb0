"""PropMe metrics: infini-gram indexes, SimpleTrace, memorization metrics and PM scores.

Nothing here imports lm-eval; the lm-eval side lives in `propme_tasks`. The names in `__all__`
are the supported Python API (docs/python-api.md); they load on first use, so `import
propme_metrics` stays cheap, and the modules behind them are free to move.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from propme_metrics.version import __version__  # the one definition is propme_metrics/version.py

#: public name -> the module that defines it
_API = {
    "CorpusSource": "propme_metrics.index.sources",
    "build_index": "propme_metrics.index.build",
    "join_indexes": "propme_metrics.index.join",
    "open_index": "propme_metrics.index.reader",
    "verify_index": "propme_metrics.index.reader",
    "build_prompt_set": "propme_metrics.prompts.prompt_set",
    "load_prompt_set": "propme_metrics.prompts.prompt_set",
    "write_prompt_set": "propme_metrics.prompts.prompt_set",
    "Tracer": "propme_metrics.trace.tracer",
    "TraceConfig": "propme_metrics.trace.result",
    "TraceResult": "propme_metrics.trace.result",
    "METRICS": "propme_metrics.metrics.registry",
    "Metric": "propme_metrics.metrics.registry",
    "summarize": "propme_metrics.metrics.values",
    "build_report": "propme_metrics.report.assemble",
    "write_report": "propme_metrics.report.folder",
    "ReportRequest": "propme_metrics.report.request",
}

__all__ = [  # the names of _API, spelled out for tools that read __all__ statically
    "__version__", "CorpusSource", "build_index", "join_indexes", "open_index", "verify_index",
    "build_prompt_set", "load_prompt_set", "write_prompt_set", "Tracer", "TraceConfig", "TraceResult",
    "METRICS", "Metric", "summarize", "build_report", "write_report", "ReportRequest",
]

if TYPE_CHECKING:  # pragma: no cover
    from propme_metrics.index.build import build_index
    from propme_metrics.index.join import join_indexes
    from propme_metrics.index.reader import open_index, verify_index
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.metrics.registry import METRICS, Metric
    from propme_metrics.metrics.values import summarize
    from propme_metrics.prompts.prompt_set import build_prompt_set, load_prompt_set, write_prompt_set
    from propme_metrics.report.assemble import build_report
    from propme_metrics.report.folder import write_report
    from propme_metrics.report.request import ReportRequest
    from propme_metrics.trace.result import TraceConfig, TraceResult
    from propme_metrics.trace.tracer import Tracer


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    if name not in _API:
        raise AttributeError(f"module 'propme_metrics' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
