"""PropMe's lm-eval side: task discovery and the metric hooks named by the task YAML."""
from __future__ import annotations
