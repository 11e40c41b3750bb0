"""`propme report`: PM scores with intervals, leaderboard tables, plots and an HTML trace explorer.

Input: lm-eval output written with `--log_samples` from PropMe's tasks (`propme_<corpus>_<setting>`).
A RUN is an output folder (searched recursively for `results_*.json`, each with its
`samples_<task>_<date id>.jsonl` files beside it) or one results file. Every number is computed
from the traced generations in the samples files (`trace.generations`, parsed into `TraceResult`s
once by `report.load`), by the statistics of `metrics/` (`metrics.results`, `metrics.provenance_analysis`,
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
setting with no counted generation has no metrics and no PM: never 0; `report.folder.write_report`
then raises `IncompleteReportError` after writing). The metrics are the registry's (`metrics.registry`,
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
Ever records, `report.eee`).

`build_report(request)` computes (a `contents.Report`, nothing written); `report.folder.write_report`
writes its files (staged, then moved into place and recorded: `report.folder`), the tables laid out
by `report.layout`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics.compare import Comparisons, compare_results
from propme_metrics.metrics.extraction_curve import likelihood_results
from propme_metrics.metrics.pm import IntervalSpec
from propme_metrics.metrics.provenance import RARE_MAX_COUNT
from propme_metrics.metrics.results import CorpusResult, corpus_result
from propme_metrics.metrics.runs import RunTask
from propme_metrics.prompts.settings import PREFIX, PROMPTED_SETTINGS, setting_sort_key, task_name
from propme_metrics.report.contents import Report
from propme_metrics.report.groups import (
    ComparableTasks,
    dedupe_likelihood,
    dedupe_tasks,
    group_tasks,
    prompt_set_fingerprint,
)
from propme_metrics.report.load import (
    describe_chat_template,
    describe_start_token,
    load_likelihood,
    load_retrace,
    load_tasks,
)
from propme_metrics.report.request import ReportRequest
from propme_metrics.runs.lmeval import LmEvalRun, TaskKind, read_run


def build_report(request: ReportRequest) -> Report:
    """Read lm-eval runs and compute the report `request` asks for (a `report.request.ReportRequest`:
    its fields say what each setting does): base metrics, leaks and PM with intervals per model and
    corpus, the likelihood curves and the paired comparisons; nothing is written
    (`report.folder.write_report` writes the files). Raises ConfigError for unusable input. The
    request's `bootstrap` resamples with its `seed` make every bootstrap interval (one
    `IntervalSpec` at its `confidence`); 0 skips the bootstrap (no bootstrap intervals, no paired
    comparisons).

    Three steps: load the runs' tasks, compute each model's results per corpus, put them in input
    order.
    """
    r = request
    intervals = IntervalSpec(r.bootstrap, r.seed, r.confidence)
    notes: list[str] = []
    read = [read_run(run) for run in r.runs]  # each results file read once
    tasks = _load_tasks(r.runs, read, r.retraced, r.retraced_other_trace_options, notes, r.rare_max_count)
    computed = _compute(group_tasks(tasks, r.separate), r.pm_metrics, intervals, notes)
    likelihood_tasks = dedupe_likelihood(load_likelihood([x for found in read for x in found]), notes)
    likelihood = likelihood_results(likelihood_tasks, computed.results, intervals, notes, r.discoverable_n,
                                    r.discoverable_p)
    models = list(dict.fromkeys([(t.model, t.revision) for t in tasks] + [(x.model, x.revision) for x in likelihood]))
    labels = sorted({x.label for x in computed.results})
    results = sorted(computed.results, key=lambda x: (labels.index(x.label), models.index((x.model, x.revision))))
    return Report(request=r, intervals=intervals, results=results, labels=labels, models=models,
                  likelihood=likelihood, comparisons=_comparisons(results, r.pm_metrics, intervals, r.pairing),
                  rare_max_count=tasks[0].rare_max_count if tasks else RARE_MAX_COUNT, notes=notes,
                  problems=computed.problems, missing_prefix=computed.missing, uncounted=computed.uncounted)


def _comparisons(results: list[CorpusResult], pm_metrics: tuple[str, ...], intervals: IntervalSpec,
                 pairing: str) -> Comparisons | None:
    """The paired comparisons of the report's models (None without a bootstrap)."""
    if not intervals.bootstrap:
        return None
    return compare_results(results, pm_metrics, intervals, pairing)


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
