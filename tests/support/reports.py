"""A report made as `propme report` makes it, in one call for the tests: computed
(`build_report`), written (`write_report`) and laid out (`lay_out`)."""
from __future__ import annotations

from dataclasses import dataclass

from propme_metrics.report.assemble import build_report
from propme_metrics.report.contents import Report
from propme_metrics.report.folder import ReportFiles, write_report
from propme_metrics.report.layout import ReportLayout, lay_out
from propme_metrics.report.request import ReportRequest


@dataclass(frozen=True)
class Made:
    """What was computed, the tables laid out from it and the files written."""

    report: Report
    layout: ReportLayout
    files: ReportFiles


def make_report(request: ReportRequest) -> Made:
    """Compute the report, write it (raising what `write_report` raises after writing) and lay it out."""
    report = build_report(request)
    files = write_report(report)
    return Made(report, lay_out(report), files)
