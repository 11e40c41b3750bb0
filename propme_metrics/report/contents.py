"""What a report computed (`Report`: the results of every model on every corpus, the likelihood
curves, the paired comparisons and the notes, in the model order of the input). The leaderboard
tables laid out from it are `report.layout.ReportLayout`; the files written from it,
`report.folder.ReportFiles`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from propme_metrics.metrics.compare import Comparisons
from propme_metrics.metrics.extraction_curve import LikelihoodResult
from propme_metrics.metrics.pm import IntervalSpec
from propme_metrics.metrics.provenance import RARE_MAX_COUNT
from propme_metrics.metrics.results import CorpusResult
from propme_metrics.report.request import ReportRequest


@dataclass
class Report:
    """What `build_report` computed for its request (`report.folder.write_report` writes it)."""

    request: ReportRequest
    intervals: IntervalSpec        #: resamples, seed and confidence of every interval
    results: list[CorpusResult]    #: sorted by corpus label, then by model in `models` order
    labels: list[str]              #: the corpus labels, sorted
    models: list[tuple[str, str]]  #: (model, revision) in input order of first appearance
    likelihood: list[LikelihoodResult] = field(default_factory=list)  #: per model and corpus
    comparisons: Comparisons | None = None   #: paired comparisons of the models (None: no bootstrap)
    rare_max_count: int = RARE_MAX_COUNT   #: `fmr_rare`'s threshold, one for every task of the report
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   #: e.g. a missing prefix setting (PM impossible)
    missing_prefix: list[str] = field(default_factory=list)   #: prefix subtasks that were not run
    uncounted: list[str] = field(default_factory=list)   #: tasks with no counted generation

    @property
    def pm_metrics(self) -> tuple[str, ...]:
        """The metrics PM is computed for (the request's, checked)."""
        return self.request.pm_metrics

    @property
    def contamination(self) -> Any:
        """The `contamination.assess.ContaminationResult` of the runs' other benchmarks, or None."""
        return self.request.contamination
