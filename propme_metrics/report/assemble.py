"""`propme report`: PM scores with intervals, leaderboard tables, plots and an HTML trace explorer.

Input: lm-eval output written with `--log_samples` from PropMe's tasks (`propme_<corpus>_<setting>`).
A RUN is an output folder (searched recursively for `results_*.json`, each with its
`samples_<task>_<date id>.jsonl` files beside it) or one results file. Every number is computed
from the traced generations in the samples files (`trace.generations`, parsed into `TraceResult`s
once by `report.load`), by the statistics of `metrics/` (`metrics.results`, `metrics.leak_analysis`,
`metrics.extraction_curve`, `metrics.compare`), through `metrics.values.contributions` (degenerate and failed generations excluded), grouped by prompt: each
prompt contributes one `pm.PromptStat` (numerator, denominator) per metric, and the bootstrap
resamples prompts; in the prompt-free settings (`unconditional`, `minimal_cue`) the unit is the
generation instead. The start token every prompt began with (recorded in each logged document) is
shown per corpus. When the same model, revision and task occur in several results files, the
latest (by lm-eval's date id) is used; runs made with lm-eval `--limit` never replace full runs
(nor the reverse): they form their own corpus label `<corpus>_limit<N>`. Rows and checkpoint trajectories follow input order: the
RUN arguments as given, results files inside a folder by date id (chronologically).

Intervals (one `pm.IntervalSpec`: `bootstrap` resamples, `seed`, the bootstrap method and the confidence
level every label is written from, `pm.CONFIDENCE` by default): the expanded percentile bootstrap over
prompts or generations (numpy
`default_rng(seed)`; for PM the propensity and prefix prompt sets are resampled independently,
`pm.bootstrap_pm`), and Wilson score intervals over counted generations for the proportions.

Leaderboard columns (`leaderboard.csv`, `leaderboard.json`; one row per model and revision): their
patterns and meaning are defined once, in `report.columns.leaderboard_columns` (docs/cli.md shows
them). `<corpus>` is the corpus name of the task metadata; with `separate=True` / `--separate`, runs
of one corpus that used different indexes or prompt sets are reported apart as `<corpus>_set1`,
`<corpus>_set2`, ... (in input order). Empty cells (null in JSON) mean "not run" or "not defined" (a
setting with no counted generation has no metrics and no PM: never 0; `build_report` then raises
`IncompleteReportError` after writing). The metrics are the registry's (`metrics.registry`,
docs/method.md). The report holds no personal data values: report.html masks leaked items unless
`show_pii=True` (`--show-pii`).

The likelihood subtask's (n, p) curves (`metrics.extraction_curve`, shown by `report.extraction_views`;
docs/method.md, probabilistic extraction)
are in leaderboard.json (`likelihood`), leaderboard.md and `likelihood_<corpus>.png`.

Other outputs in the report folder: `leaderboard.md` (Markdown tables), `capability_<corpus>.png`
(capability = prefix value on x, propensity = each propensity setting's value on y, per metric and model,
diagonal PM = 0.5), `trajectory_<corpus>_<model>.png` (PM per metric across revisions, in input
order, when several revisions of a model are given) and `report.html` (self-contained: tables,
plots, and every prompt and generation with its final spans; click a span for its source
documents), `leaderboard.html` (a sortable, filterable page of the models with interval bars and
the paired comparisons, `report.leaderboard_page`) and `eee/data/propme/<developer>/<model>/<uuid>.json` (Every Eval
Ever records, `report.eee`). `propme-report-files.json` lists the files written: a later report into
the same folder removes those of them it does not write again (a stale plot), and never any other
file. Every file is written into a staging folder first and moved into place once all are written,
so a failed or killed report leaves the earlier one whole.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from glob import escape as glob_escape
from pathlib import Path, PurePosixPath
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import hold_lock, write_atomic
from propme_metrics.core.outputs import write_staged
from propme_metrics.metrics.compare import compare_results
from propme_metrics.metrics.extraction_curve import LikelihoodResult, likelihood_results
from propme_metrics.metrics.leaks import RARE_MAX_COUNT
from propme_metrics.metrics.pm import IntervalSpec
from propme_metrics.metrics.results import CorpusResult, corpus_result
from propme_metrics.metrics.runs import RunTask
from propme_metrics.prompts.settings import PREFIX, PROMPTED_SETTINGS, setting_sort_key, task_name
from propme_metrics.report.columns import (
    columns_for,
    headline_columns,
    headline_rows,
    headline_view_columns,
    row_values,
)
from propme_metrics.report.contamination_views import html_section
from propme_metrics.report.contents import IncompleteReportError, MissingPrefixError, Report
from propme_metrics.report.eee import write_eee
from propme_metrics.report.extraction_views import columns as likelihood_columns
from propme_metrics.report.extraction_views import row_values as likelihood_row_values
from propme_metrics.report.extraction_views import write_plots as write_likelihood_plots
from propme_metrics.report.groups import (
    ComparableTasks,
    dedupe_likelihood,
    dedupe_tasks,
    group_tasks,
    prompt_set_fingerprint,
)
from propme_metrics.report.html import write_html
from propme_metrics.report.leaderboard_page import write_page
from propme_metrics.report.load import (
    describe_chat_template,
    describe_start_token,
    load_likelihood,
    load_retrace,
    load_tasks,
)
from propme_metrics.report.plots import write_plots
from propme_metrics.report.request import ReportRequest
from propme_metrics.report.robustness_views import robustness_columns, robustness_values
from propme_metrics.report.writers import write_comparisons, write_csv, write_json, write_markdown
from propme_metrics.runs.lmeval import LmEvalRun, TaskKind, read_run

#: the list of files the last report wrote into its folder (so the next one removes only those it replaces)
WRITTEN_NAME = "propme-report-files.json"
#: the hidden folder inside the report folder where a report is written before it is moved into place
STAGING_NAME = ".propme-report-staging"


@contextmanager
def report_lock(out: str | Path) -> Iterator[None]:
    """Hold `.<out>.propme-report-lock` beside the report folder while a report is made and written
    into it (`core.files.hold_lock`): a second report into the same folder stops at once, before any
    work, instead of sharing the staging folder and mixing two reports' files."""
    final = Path(os.path.realpath(Path(out).absolute()))
    busy = ConfigError(f"another `propme report` is writing {out} right now",
                       "wait for it to finish, or give this report another --out")
    with ExitStack() as held:
        try:
            held.enter_context(hold_lock(final.parent / f".{final.name}.propme-report-lock", busy))
        except OSError as exc:
            raise ConfigError(f"cannot create the report folder {out}: {exc}") from None
        yield


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


def build_report(request: ReportRequest) -> Report:
    """Read lm-eval runs, compute base metrics and PM with intervals, write the report into
    `request.out` (a `report.request.ReportRequest`: its fields say what each setting does).

    Writes leaderboard.csv/.json/.md, PNG plots and report.html (see the module docstring).
    Raises ConfigError for unusable input (nothing written) and MissingPrefixError (a ConfigError)
    after writing the base metrics when a corpus lacks the prefix setting. The request's
    `bootstrap` resamples with its `seed` make every bootstrap interval (one `IntervalSpec` at
    `pm.CONFIDENCE`); 0 skips the bootstrap (no bootstrap intervals, no paired comparisons).

    Four steps: load the runs' tasks, compute each model's results per corpus, lay out the
    leaderboard's rows, write the files.
    """
    r = request
    with report_lock(r.out):  # a second report into `out` stops here, before any work
        intervals = IntervalSpec(r.bootstrap, r.seed, r.confidence)
        notes: list[str] = []
        read = [read_run(run) for run in r.runs]  # each results file read once
        tasks = _load_tasks(r.runs, read, r.retraced, r.retraced_other_trace_options, notes, r.rare_max_count)
        computed = _compute(group_tasks(tasks, r.separate), r.pm_metrics, intervals, notes)
        likelihood_tasks = dedupe_likelihood(load_likelihood([x for found in read for x in found]), notes)
        likelihood = likelihood_results(likelihood_tasks, computed.results, intervals, notes, r.discoverable_n,
                                        r.discoverable_p)
        report = _lay_out(r.out, tasks, computed, likelihood, r.pm_metrics, intervals, notes)
        report.comparisons = _comparisons(report, r.pairing)
        if r.contamination is not None:
            report.contamination = r.contamination
            report.contamination_html = html_section(r.contamination, r.html_docs_per_span, r.html_snippet_chars,
                                                     r.show_pii)
        _write(report, plots=r.plots, html=r.html, html_docs_per_span=r.html_docs_per_span,
               html_snippet_chars=r.html_snippet_chars, show_pii=r.show_pii)
        _raise_if_incomplete(report, computed)
        return report


def _comparisons(report: Report, pairing: str):
    """The paired comparisons of the report's models (None without a bootstrap or a second model)."""
    if not report.intervals.bootstrap:
        return None
    return compare_results(report.results, report.pm_metrics, report.intervals, pairing)


def _load_tasks(runs: Sequence[str | Path], read: Sequence[Sequence[LmEvalRun]], retraced: Sequence[str | Path],
                retraced_other_trace_options: bool, notes: list[str], rare_max_count: int | None) -> list[RunTask]:
    """The runs' PropMe tasks with their traced samples (re-traces applied), one per model,
    revision, task and --limit, those without samples dropped; ConfigError when nothing is left
    (none at all when the runs hold the likelihood subtask alone: that is reported by itself) or the
    tasks used different `fmr_rare` thresholds."""
    tasks: list[RunTask] = []
    retraces = [load_retrace(p) for p in retraced]
    by_samples: dict[Path, Path] = {}
    for r in retraces:
        if r.samples_path in by_samples:
            same = Path(by_samples[r.samples_path]).resolve() == Path(r.summary_path).resolve()
            raise ConfigError(f"--retraced {r.summary_path} " + ("is given twice" if same else
                              f"and {by_samples[r.samples_path]} both re-trace {r.samples_path}")
                              + ": one re-trace per samples file", "pass each re-trace once")
        by_samples[r.samples_path] = r.summary_path
        r.mixed_trace_options = retraced_other_trace_options
    for run, files in zip(runs, read):
        found = load_tasks(files, retraces, rare_max_count)
        if not found:
            notes.append(f"{run}: no PropMe task in its results")
        tasks.extend(found)
    for r in retraces:
        if not r.used:
            raise ConfigError(f"{r.summary_path} re-traced {r.samples_path}, which is not a samples file of the runs "
                              "given (or none of its keys matched)", "pass the run that holds that samples file")
        notes.append(f"{r.samples_path.name}: {r.used} generation(s) taken from the re-trace {r.summary_path}"
                     + (" (its tracing options were not checked against the run's: --retraced-other-trace-options)"
                        if retraced_other_trace_options else ""))
    likelihood_only = not tasks and any(r.of_kind(TaskKind.LIKELIHOOD) for files in read for r in files)
    if not tasks and not likelihood_only:
        raise ConfigError(f"no PropMe task (propme_<corpus>_<setting>) in {', '.join(map(str, runs))}",
                          "run lm-eval with --tasks propme_<corpus> --log_samples")
    tasks = dedupe_tasks(tasks, notes)
    for t in tasks:
        if not t.prompts:
            notes.append(f"{t.task} of {t.label}: no samples in {t.samples_path}; ignored")
    tasks = [t for t in tasks if t.prompts]
    if not tasks and not likelihood_only:
        raise ConfigError(f"the samples files of {', '.join(map(str, runs))} hold no samples")
    thresholds = {t.rare_max_count: t for t in tasks}
    if len(thresholds) > 1:
        raise ConfigError("the runs counted fmr_rare with different thresholds (" + ", ".join(
            f"{n} in {t.task} of {t.label}" for n, t in sorted(thresholds.items())) + "), so their fmr_rare and its "
            "PM cannot be compared", "pass --rare-max-count N (rare_max_count=N) to recount every run with one")
    return tasks


@dataclass
class _Computed:
    """The compute step's results, and what keeps the report from being complete."""

    results: list[CorpusResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   #: one line each, shown and written
    missing: list[str] = field(default_factory=list)    #: prefix subtasks that were not run
    uncounted: list[str] = field(default_factory=list)  #: tasks with no counted generation


def _compute(groups: list[ComparableTasks], pm_metrics: tuple[str, ...], intervals: IntervalSpec,
             notes: list[str]) -> _Computed:
    """Base metrics, leaks and PM of every model (and revision) in every group of comparable tasks."""
    out = _Computed()
    for g in groups:
        if g.limit is not None:
            notes.append(f"{g.label}: runs made with lm-eval --limit {g.limit:g} (a subset of the prompts), "
                         f"reported apart from full runs and not comparable to them")
        units: dict[tuple[str, str], dict[str, RunTask]] = {}
        for t in g.tasks:
            units.setdefault((t.model, t.revision), {})[t.setting] = t
        fingerprint = prompt_set_fingerprint({s: sorted(ids) for s, ids in g.prompt_ids.items()} | {"_index": g.identity})
        for (model, revision), by_setting in units.items():
            out.results.append(_corpus_result(g, model, revision, by_setting, fingerprint, pm_metrics, intervals,
                                              notes, out))
    return out


def _corpus_result(g: ComparableTasks, model: str, revision: str, by_setting: dict[str, RunTask], fingerprint: str,
                   pm_metrics: tuple[str, ...], intervals: IntervalSpec, notes: list[str],
                   computed: _Computed) -> CorpusResult:
    """One model's results on one corpus label (`metrics.results.corpus_result`: settings, leaks, PM),
    its notes and problems recorded."""
    ordered = sorted(by_setting, key=setting_sort_key)
    res = corpus_result(g.label, g.identity, fingerprint, by_setting, pm_metrics, intervals)
    settings = res.settings
    starts = {by_setting[s].start_token: by_setting[s].task for s in ordered}
    label = f"{model}" + (f" (revision {revision})" if revision else "")
    if res.leaks.note:
        notes.append(f"{label}, corpus {g.label}: {res.leaks.note}")
    notes.append(f"{label}, corpus {g.label}: start token: " + "; ".join(
        f"{describe_start_token(k)} ({t if len(starts) > 1 else 'every setting'})"
        for k, t in starts.items()) + f"; prompts: {describe_chat_template(g.chat_template_sha)}")
    if PREFIX in by_setting:
        if not res.propensity_settings:
            notes.append(f"{label}, corpus {g.label}: only the prefix setting was run; no PM")
    else:
        subtask = task_name(g.corpus, PREFIX)
        computed.missing.append(subtask)
        computed.problems.append(f"{label}, corpus {g.label}: {subtask} is missing, so PM cannot be computed "
                                 f"(ran: {', '.join(by_setting[s].task for s in ordered)}); base metrics reported")
    for s in PROMPTED_SETTINGS:  # the prompt-free propensity settings are optional: not named when absent
        if s not in by_setting and PREFIX in by_setting:
            notes.append(f"{label}, corpus {g.label}: {task_name(g.corpus, s)} not run")
    for s in ordered:
        c = settings[s].counts
        if c["failed"]:
            notes.append(f"{label}, {by_setting[s].task}: tracing failed for {c['failed']} of "
                         f"{c['generations']} generations (excluded)")
        if short := by_setting[s].cut_short():
            notes.append(f"{label}, {by_setting[s].task}: {short} of {c['generations']} generations stopped inside "
                         "the true continuation (shorter than it: raise max_gen_toks), so they cannot show "
                         "extraction and are not counted in it" + ("; extraction is undefined" if
                                                                  settings[s].metrics.get("extraction") and
                                                                  settings[s].metrics["extraction"].estimate is None
                                                                  else ""))
        if not c["counted"]:
            computed.uncounted.append(by_setting[s].task)
            computed.problems.append(
                f"{label}, corpus {g.label}: no generation of {by_setting[s].task} was counted "
                f"({c['failed']} failed, {c['degenerate']} degenerate of {c['generations']}), so its "
                "metrics and PM are undefined (left empty, not 0)")
    return res


def _lay_out(out: Path, tasks: list[RunTask], computed: _Computed, likelihood: list[LikelihoodResult],
             pm_metrics: tuple[str, ...], intervals: IntervalSpec, notes: list[str]) -> Report:
    """The leaderboard's columns and rows (one per model and revision, in input order of first
    appearance), the results sorted the same way, as a Report."""
    results = computed.results
    labels = sorted({r.label for r in results})
    rows_by_model: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        rows_by_model.setdefault((r.model, r.revision), {"model": r.model, "revision": r.revision})
    order = list(dict.fromkeys((t.model, t.revision) for t in tasks))
    columns = ["model", "revision"]
    for label in labels:
        settings = sorted({s for r in results if r.label == label for s in r.settings}, key=setting_sort_key)
        columns += columns_for(label, settings, pm_metrics)
        columns += robustness_columns([r for r in results if r.label == label])
    for r in results:
        rows_by_model[(r.model, r.revision)].update(row_values(r, pm_metrics))
        rows_by_model[(r.model, r.revision)].update(robustness_values(r))
    columns += likelihood_columns(likelihood)
    for lr in likelihood:
        rows_by_model.setdefault((lr.model, lr.revision), {"model": lr.model, "revision": lr.revision}).update(
            likelihood_row_values(lr))
        if (lr.model, lr.revision) not in order:
            order.append((lr.model, lr.revision))
    rows = [{c: rows_by_model[k].get(c) for c in columns} for k in order if k in rows_by_model]
    results.sort(key=lambda r: (labels.index(r.label), order.index((r.model, r.revision))))
    return Report(out=out, columns=columns, rows=rows, results=results, labels=labels, pm_metrics=pm_metrics,
                  intervals=intervals, notes=notes, problems=computed.problems, likelihood=likelihood,
                  rare_max_count=tasks[0].rare_max_count if tasks else RARE_MAX_COUNT)


def _write(report: Report, *, plots: bool, html: bool, html_docs_per_span: int, html_snippet_chars: int,
           show_pii: bool) -> None:
    """Write the leaderboard files, the plots and report.html into `report.out` all at once
    (`core.outputs.write_staged`: a report that fails or is killed while writing leaves the earlier
    report whole, never parts of two reports), recording each path in `report`."""
    final = report.out

    def write(stage: Path) -> list[Path]:
        _write_into(report, stage, plots=plots, html=html, html_docs_per_span=html_docs_per_span,
                    html_snippet_chars=html_snippet_chars, show_pii=show_pii)
        return report.paths

    finals = write_staged(final, STAGING_NAME, write, "report folder")
    placed = dict(zip(report.paths, finals))   # staged path -> its place in `final`
    for name in _FILE_FIELDS:
        if getattr(report, name) is not None:
            setattr(report, name, placed[getattr(report, name)])
    report.plots = [placed[p] for p in report.plots]
    report.eee = [placed[p] for p in report.eee]
    try:
        _record_written(final, report.paths)
    except OSError as exc:
        raise ConfigError(f"cannot write the report into {final}: {exc}") from None


#: the `Report` fields naming one written file each
_FILE_FIELDS = ("leaderboard_csv", "leaderboard_full_csv", "leaderboard_json", "leaderboard_md", "comparisons_json",
                "comparisons_csv", "html", "leaderboard_html")


def _write_into(report: Report, out: Path, *, plots: bool, html: bool, html_docs_per_span: int,
                html_snippet_chars: int, show_pii: bool) -> None:
    """Write every file of the report into `out`, recording each path in `report`."""
    report.leaderboard_csv = out / "leaderboard.csv"
    write_csv(report.leaderboard_csv, headline_columns(report), headline_rows(report))
    report.leaderboard_full_csv = out / "leaderboard_full.csv"
    write_csv(report.leaderboard_full_csv, report.columns, report.rows)
    report.leaderboard_json = out / "leaderboard.json"
    write_json(report.leaderboard_json, report)
    report.leaderboard_md = out / "leaderboard.md"
    write_markdown(report.leaderboard_md, report)
    if report.comparisons is not None:
        report.comparisons_json, report.comparisons_csv = out / "comparisons.json", out / "comparisons.csv"
        write_comparisons(report.comparisons_json, report.comparisons_csv, report.comparisons)
    if plots:
        report.plots = write_plots(report, out)
        report.plots += write_likelihood_plots(report.likelihood, out)
    if html:
        report.html = write_html(report, out / "report.html", docs_per_span=html_docs_per_span,
                                 snippet_chars=html_snippet_chars, show_pii=show_pii)
    report.eee = write_eee(report, out)
    comparisons = [row.to_dict() for row in report.comparisons.rows] if report.comparisons is not None else []
    report.leaderboard_html = write_page(out / "leaderboard.html", report.rows, headline_view_columns(report),
                                         comparisons, "report.html" if html else None,
                                         report.intervals.confidence)


def _raise_if_incomplete(report: Report, computed: _Computed) -> None:
    """After writing: IncompleteReportError when a task counted nothing, MissingPrefixError when a
    corpus lacks the prefix setting (both carry the report)."""
    out = report.out
    if computed.uncounted:
        names = ", ".join(dict.fromkeys(computed.uncounted))
        raise IncompleteReportError(
            f"nothing was counted in {names}: its metrics and PM are undefined and left empty. "
            f"The report was written to {out}",
            "re-trace the failed generations with `propme trace --input samples_<task>_*.jsonl` "
            "(see the 'error' field of each), or re-run lm-eval for that task", report=report)
    if computed.missing:
        names = ", ".join(dict.fromkeys(computed.missing))
        raise MissingPrefixError(
            f"PM needs the prefix setting: {names} is missing ({'; '.join(computed.problems)}). "
            f"Base metrics were written to {out}",
            f"run lm-eval with --tasks {names} (or the whole group) and pass that run too",
            report=report)
