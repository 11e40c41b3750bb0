"""PropMe metrics: infini-gram indexes, SimpleTrace, memorization metrics and PM scores.

Nothing here imports lm-eval; the lm-eval side lives in `propme_tasks`.
"""
from __future__ import annotations

__version__ = "0.2.0"  #: the one definition of the version (setup.cfg reads it)
