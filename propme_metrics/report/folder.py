"""The report folder (`write_report`): every file of a report written into a staging folder first
and moved into place once all are written, so a failed or killed report leaves the earlier one
whole; `propme-report-files.json` lists the files written, and a later report into the same folder
removes those of them it does not write again (a stale plot), never any other file. The files
written are a `ReportFiles`; a report written with undefined parts raises `IncompleteReportError`."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, fields
from glob import escape as glob_escape
from pathlib import Path, PurePosixPath

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import hold_lock, write_atomic
from propme_metrics.core.outputs import write_staged
from propme_metrics.report.contamination_views import html_section
from propme_metrics.report.contents import Report
from propme_metrics.report.eee import write_eee
from propme_metrics.report.extraction_views import write_plots as write_likelihood_plots
from propme_metrics.report.html import write_html
from propme_metrics.report.layout import ReportLayout, lay_out
from propme_metrics.report.leaderboard_page import write_page
from propme_metrics.report.plots import write_plots
from propme_metrics.report.writers import write_comparisons, write_csv, write_json, write_markdown

#: the list of files the last report wrote into its folder (so the next one removes only those it replaces)
WRITTEN_NAME = "propme-report-files.json"
#: the hidden folder inside the report folder where a report is written before it is moved into place
STAGING_NAME = ".propme-report-staging"


class IncompleteReportError(ConfigError):
    """The report was written (what was computed is in `report`, the files in `files`) but something
    in it is undefined: exit status 2."""

    def __init__(self, message: str, hint: str | None = None, report: Report | None = None,
                 files: ReportFiles | None = None):
        super().__init__(message, hint)
        self.report = report
        self.files = files


class MissingPrefixError(IncompleteReportError):
    """PM needs the prefix setting; the report (base metrics) was written anyway and is in `report`."""


@dataclass(frozen=True)
class ReportFiles:
    """The files a report wrote into its folder `out`."""

    out: Path
    leaderboard_csv: Path        #: the headline columns (`columns.headline_columns`)
    leaderboard_full_csv: Path   #: every column
    leaderboard_json: Path
    leaderboard_md: Path
    leaderboard_html: Path       #: the models' page (`report.leaderboard_page`)
    comparisons_json: Path | None = None   #: None: no paired comparisons
    comparisons_csv: Path | None = None
    html: Path | None = None     #: report.html (None: not asked for)
    plots: list[Path] = field(default_factory=list)
    eee: list[Path] = field(default_factory=list)   #: Every Eval Ever records, one per model and revision

    @property
    def paths(self) -> list[Path]:
        """Every file written."""
        return [p for p in (self.leaderboard_csv, self.leaderboard_full_csv, self.leaderboard_json,
                            self.leaderboard_md, self.comparisons_json, self.comparisons_csv, self.html,
                            self.leaderboard_html)
                if p is not None] + list(self.plots) + list(self.eee)

    def placed(self, out: Path, where: dict[Path, Path]) -> ReportFiles:
        """The same files at their places in `out` (`where`: each path -> its place)."""
        def moved(value):
            return [where[p] for p in value] if isinstance(value, list) else where.get(value)
        return ReportFiles(out, **{f.name: moved(getattr(self, f.name)) for f in fields(self) if f.name != "out"})


@contextmanager
def report_lock(out: str | Path) -> Iterator[None]:
    """Hold `.<out>.propme-report-lock` beside the report folder while a report is written into it
    (`core.files.hold_lock`): a second report into the same folder stops at once instead of sharing
    the staging folder and mixing two reports' files (`propme report` holds it from the start,
    before any work)."""
    final = Path(os.path.realpath(Path(out).absolute()))
    busy = ConfigError(f"another `propme report` is writing {out} right now",
                       "wait for it to finish, or give this report another --out")
    with ExitStack() as held:
        try:
            held.enter_context(hold_lock(final.parent / f".{final.name}.propme-report-lock", busy))
        except OSError as exc:
            raise ConfigError(f"cannot create the report folder {out}: {exc}") from None
        yield


def write_report(report: Report) -> ReportFiles:
    """Write the report into its request's `out`: leaderboard.csv/_full.csv/.json/.md, the
    comparisons, PNG plots, report.html, leaderboard.html and the Every Eval Ever records, all at
    once (`core.outputs.write_staged`: a report that fails or is killed while writing leaves the
    earlier report whole, never parts of two), then record them. After writing, raises
    IncompleteReportError when a task counted nothing and MissingPrefixError when a corpus lacks
    the prefix setting (both carry the report and its files)."""
    final = report.request.out
    with report_lock(final):
        layout = lay_out(report)
        staged: list[ReportFiles] = []

        def write(stage: Path) -> list[Path]:
            staged.append(_write_into(report, layout, stage))
            return staged[0].paths

        finals = write_staged(final, STAGING_NAME, write, "report folder")
        files = staged[0].placed(final, dict(zip(staged[0].paths, finals)))
        try:
            _record_written(final, files.paths)
        except OSError as exc:
            raise ConfigError(f"cannot write the report into {final}: {exc}") from None
    _raise_if_incomplete(report, files)
    return files


def _write_into(report: Report, layout: ReportLayout, out: Path) -> ReportFiles:
    """Write every file of the report into `out`."""
    r = report.request
    write_csv(out / "leaderboard.csv", layout.headline_columns, layout.headline_rows)
    write_csv(out / "leaderboard_full.csv", layout.columns, layout.rows)
    write_json(out / "leaderboard.json", report, layout)
    write_markdown(out / "leaderboard.md", report)
    comparisons_json = comparisons_csv = html = None
    if report.comparisons is not None:
        comparisons_json, comparisons_csv = out / "comparisons.json", out / "comparisons.csv"
        write_comparisons(comparisons_json, comparisons_csv, report.comparisons)
    plots = write_plots(report, out) + write_likelihood_plots(report.likelihood, out) if r.plots else []
    if r.html:
        section = ("" if report.contamination is None else
                   html_section(report.contamination, r.html_docs_per_span, r.html_snippet_chars, r.show_pii))
        html = write_html(report, out / "report.html", docs_per_span=r.html_docs_per_span,
                          snippet_chars=r.html_snippet_chars, show_pii=r.show_pii, contamination=section,
                          plot_files=plots)
    eee = write_eee(report, out)
    comparisons = [row.to_dict() for row in report.comparisons.rows] if report.comparisons is not None else []
    page = write_page(out / "leaderboard.html", layout.rows, layout.view_columns, comparisons,
                      "report.html" if r.html else None, report.intervals.confidence)
    return ReportFiles(out, out / "leaderboard.csv", out / "leaderboard_full.csv", out / "leaderboard.json",
                       out / "leaderboard.md", page, comparisons_json, comparisons_csv, html, plots, eee)


def _record_written(out: Path, paths: list[Path]) -> None:
    """Remove the files an earlier report wrote into `out` that this one did not (a stale plot must not
    sit beside the new report) and the temporary files a killed PropMe 0.2 report left of any of
    them, then record this report's files. A file PropMe did not write is never removed: only
    names in the earlier record are (and their `.<name>.*.tmp` temporaries)."""
    names = sorted(p.relative_to(out).as_posix() for p in paths)  # e.g. eee/data/.../<uuid>.json: paths inside `out`
    record = out / WRITTEN_NAME
    if record.is_dir() and not record.is_symlink():
        raise ConfigError(f"{record} is a folder, where PropMe keeps the list of the report's files",
                          "move or remove that folder (PropMe never deletes a folder it did not make)")
    known = _earlier_files(out)
    for name in known:
        if name not in names:
            (out / name).unlink(missing_ok=True)
    for name in set(known) | set(names) | {WRITTEN_NAME}:
        where = (out / name).parent
        for tmp in where.glob(f".{glob_escape(PurePosixPath(name).name)}.*.tmp"):
            if not tmp.is_dir() or tmp.is_symlink():
                tmp.unlink(missing_ok=True)
    write_atomic(record, json.dumps({"files": names}, indent=2) + "\n")


def _earlier_files(out: Path) -> list[str]:
    """The files the earlier report's record lists; none when the record is missing or damaged (not
    PropMe's layout, a name outside `out`, or a name that is now a folder: PropMe records files
    only), so a damaged record never makes a report fail or removes anything."""
    try:
        earlier = json.loads((out / WRITTEN_NAME).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(earlier, list) or not all(isinstance(n, str) and _inside(n) for n in earlier):
        return []
    known = [n for n in earlier if n != WRITTEN_NAME]
    if any((out / n).is_dir() and not (out / n).is_symlink() for n in known):
        return []
    return known


def _inside(name: str) -> bool:
    """A recorded name is a relative path below the report folder (no '..', not absolute)."""
    path = PurePosixPath(name)
    return bool(path.parts) and not path.is_absolute() and ".." not in path.parts and "\\" not in name


def _raise_if_incomplete(report: Report, files: ReportFiles) -> None:
    """After writing: IncompleteReportError when a task counted nothing, MissingPrefixError when a
    corpus lacks the prefix setting (both carry the report and its files)."""
    out = files.out
    if report.uncounted:
        names = ", ".join(dict.fromkeys(report.uncounted))
        raise IncompleteReportError(
            f"nothing was counted in {names}: its metrics and PM are undefined and left empty. "
            f"The report was written to {out}",
            "re-trace the failed generations with `propme trace --input samples_<task>_*.jsonl` "
            "(see the 'error' field of each), or re-run lm-eval for that task", report=report, files=files)
    if report.missing_prefix:
        names = ", ".join(dict.fromkeys(report.missing_prefix))
        raise MissingPrefixError(
            f"PM needs the prefix setting: {names} is missing ({'; '.join(report.problems)}). "
            f"Base metrics were written to {out}",
            f"run lm-eval with --tasks {names} (or the whole group) and pass that run too",
            report=report, files=files)
