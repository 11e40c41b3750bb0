"""What a report holds (`Report`: the computed results, laid out as leaderboard rows, and the files
written) and the errors that carry a written but incomplete report."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics.compare import Comparisons
from propme_metrics.metrics.extraction_curve import LikelihoodResult
from propme_metrics.metrics.leaks import RARE_MAX_COUNT
from propme_metrics.metrics.pm import IntervalSpec
from propme_metrics.metrics.results import CorpusResult


class IncompleteReportError(ConfigError):
    """The report was written (it is in `report`) but something in it is undefined: exit status 2."""

    def __init__(self, message: str, hint: str | None = None, report: Report | None = None):
        super().__init__(message, hint)
        self.report = report


class MissingPrefixError(IncompleteReportError):
    """PM needs the prefix setting; the report (base metrics) was written anyway and is in `report`."""


@dataclass
class Report:
    """What `build_report` computed and wrote."""

    out: Path
    columns: list[str]
    rows: list[dict[str, Any]]
    results: list[CorpusResult]
    labels: list[str]
    pm_metrics: tuple[str, ...]
    intervals: IntervalSpec        #: resamples, seed and confidence of every interval
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   #: e.g. a missing prefix setting (PM impossible)
    leaderboard_csv: Path | None = None        #: the headline columns (`columns.headline_columns`)
    leaderboard_full_csv: Path | None = None   #: every column (`columns`)
    leaderboard_json: Path | None = None
    leaderboard_md: Path | None = None
    html: Path | None = None
    plots: list[Path] = field(default_factory=list)
    likelihood: list[LikelihoodResult] = field(default_factory=list)  #: per model and corpus
    rare_max_count: int = RARE_MAX_COUNT   #: `fmr_rare`'s threshold, one for every task of the report
    comparisons: Comparisons | None = None   #: paired comparisons of the models (None: fewer than two)
    comparisons_json: Path | None = None
    comparisons_csv: Path | None = None
    leaderboard_html: Path | None = None   #: the models' page (`report.leaderboard_page`)
    eee: list[Path] = field(default_factory=list)   #: Every Eval Ever records, one per model and revision
    contamination_html: str = ""   #: report.html's contamination section (report/contamination_views.py), or none
    contamination: Any = None   #: contamination.assess.ContaminationResult of the runs' other benchmarks, or None

    @property
    def paths(self) -> list[Path]:
        """Every file written."""
        return [p for p in (self.leaderboard_csv, self.leaderboard_full_csv, self.leaderboard_json,
                            self.leaderboard_md, self.comparisons_json, self.comparisons_csv, self.html,
                            self.leaderboard_html)
                if p is not None] + list(self.plots) + list(self.eee)
