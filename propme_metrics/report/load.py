"""PropMe's tasks of lm-eval runs (read by `runs.lmeval`) as the report's typed tasks
(`metrics.runs`): every traced generation of their samples files parsed into a `TraceResult`,
once, re-traces applied, and the likelihood subtask's scored documents."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import first_non_finite, json_objects
from propme_metrics.metrics import registry
from propme_metrics.metrics.likelihood import N_KEY, P_KEY, DocumentLikelihood
from propme_metrics.metrics.provenance import RARE_MAX_COUNT, RARE_MAX_COUNT_KEY, check_rare_max_count
from propme_metrics.metrics.runs import LikelihoodTask, RunTask, TracedPrompt, stops_inside_continuation
from propme_metrics.metrics.values import contributions, counts_for_metrics
from propme_metrics.prompts.start import StartToken
from propme_metrics.runs.lmeval import LmEvalRun, LmEvalTask, TaskKind, read_run
from propme_metrics.runs.samples import DAMAGED_HINT, SampleRow, read_samples_file
from propme_metrics.trace.result import TraceConfig, TraceResult
from propme_metrics.trace.summary import RETRACE_HINT, read_summary


@dataclass
class Retrace:
    """Results of `propme trace` run on a samples file: they replace that file's traces (by key)."""

    summary_path: Path
    samples_path: Path             #: the samples file that was re-traced (resolved)
    index_identity: str
    results: dict[str, dict[str, Any]]   #: generation key -> TraceResult dict
    used: int = 0
    config: TraceConfig | None = None     #: the tracing options of the re-trace
    mixed_trace_options: bool = False     #: accepted although the run traced with other tracing options


def load_retrace(summary_path: str | Path) -> Retrace:
    """Read a `propme trace` SUMMARY.json (and the RESULTS.jsonl it names) made from an lm-eval samples file."""
    summary_path = Path(summary_path)
    summary = read_summary(summary_path)
    identity, samples, results_path = summary.index_identity, summary.input_path.resolve(), summary.results_path
    try:
        config = TraceConfig(**summary.config) if summary.config is not None else None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{summary_path}: its tracing options (config) are not this release's ({exc})",
                          RETRACE_HINT) from None
    results: dict[str, dict[str, Any]] = {}
    try:
        with open(results_path, encoding="utf-8") as fh:
            for lineno, row in json_objects(fh, str(results_path)):
                bad = first_non_finite(row)
                if bad or not isinstance(row.get("key"), str):
                    raise ConfigError(f"{results_path}:{lineno}: not a trace result ({bad or 'no key'})",
                                      RETRACE_HINT)
                results[row["key"]] = row
    except OSError as exc:
        raise ConfigError(f"cannot read the re-traced results {results_path} named by {summary_path}: {exc}",
                          RETRACE_HINT) from None
    return Retrace(summary_path, samples, identity, results, config=config)


@dataclass
class LoadedSamples:
    """A samples file's prompts with their traces, and what its rows recorded about them."""

    prompts: list[TracedPrompt]
    identities: set[str | None]        #: the index identities its generations name
    start_token: StartToken | None     #: of its first row (None: not recorded)
    rare_max_count: int                #: `fmr_rare`'s threshold its values were computed with
    trace_config: TraceConfig | None   #: the tracing options of its generations (None: not recorded)


def load_samples(path: Path, task: str, retraces: Sequence[Retrace] = (), setting: str | None = None,
                 rare_max_count: int | None = None, rows: list[SampleRow] | None = None) -> LoadedSamples:
    """A samples file's prompts with their traces (`rows`: the file's rows, when already read), the
    index identities they name, the start token of its first row, `fmr_rare`'s threshold
    (`rare_max_count` if given, else the one the run logged with its documents, else the default)
    and the tracing options of its generations. A row that names another setting than its task's
    (`setting`) is refused: its numbers would be reported under the wrong setting; so is a file
    traced with several sets of tracing options."""
    retrace = next((r for r in retraces if r.samples_path == path.resolve()), None)
    prompts: dict[str, TracedPrompt] = {}
    identities: set[str | None] = set()
    first_filter: str | None = None
    configs: dict[TraceConfig, None] = {}
    rows = read_samples_file(path) if rows is None else rows
    rare = rare_max_count or _logged_rare_max_count(rows, path)
    for s in rows:
        lineno, row, filt = s.lineno, s.row, s.filter
        if first_filter is None:
            first_filter = filt
        elif filt != first_filter:
            continue  # one row per doc per filter: keep the first filter's rows
        trace = row.get("trace")
        if not isinstance(trace, dict) and retrace is not None:
            trace = row["trace"] = _retraced_row(retrace, s)  # a --predict_only run, traced afterwards
        if not isinstance(trace, dict) or not isinstance(trace.get("generations"), list):
            raise _untraced(path, lineno, task, row)
        bad = first_non_finite(trace["generations"], "trace.generations")
        if bad:
            raise ConfigError(f"{path}, line {lineno}: {bad} is not a finite number",
                              "the samples file is damaged: re-trace it with `propme trace --input` "
                              "or re-run lm-eval for this task")
        doc = s.document
        said = trace.get("setting", doc.setting or None)
        if setting is not None and said is not None and str(said) != setting:
            raise ConfigError(f"{path}, line {lineno}: the row says setting {said!r}, but its task {task} is the "
                              f"{setting} setting", "report the samples file of each setting under its own "
                              "task (lm-eval writes samples_<task>_<date>.jsonl); do not rename or mix them")
        pid = str(trace.get("prompt_id", s.prompt_id))
        identity = doc.index_identity if doc.index_identity is not None else trace.get("index_identity")
        identities.add(identity)
        config = doc.trace
        if retrace is not None and _apply_retrace(retrace, s, trace, identity, path):
            config = retrace.config if retrace.config is not None else config
        if config is not None:
            configs.setdefault(config)
        rec = prompts.get(pid)
        if rec is None:
            rec = prompts[pid] = TracedPrompt(
                id=pid, prompt=s.prompt, domain=str(doc.domain or ""), language=str(doc.language or ""),
                continuation=str(doc.continuation or ""), source_doc=str(doc.source_doc or ""),
                index_path=str(doc.index_path or ""))
        for j, gen in enumerate(trace["generations"]):
            try:
                result = TraceResult.from_dict(gen)
            except (KeyError, TypeError, ValueError) as exc:
                old = isinstance(gen, dict) and "segments" in gen and "final_spans" not in gen
                raise ConfigError(f"{path}, line {lineno}: generation {j} of prompt {pid} is not a "
                                  f"PropMe trace ({type(exc).__name__}: {exc})",
                                  "it was traced by PropMe 0.1 (segments, not final spans): re-run the "
                                  "lm-eval tasks, or re-trace the file with `propme trace`" if old else
                                  None) from None
            rec.generations.append(result)
            if stops_inside_continuation(result, rec.continuation):
                result = replace(result, extracted=None)  # too short to show extraction: not counted in it
            # personal data is recomputed from the trace: one definition, whatever the run recorded
            rec.values.append(contributions(result, rare_max_count=rare) if counts_for_metrics(result) else None)
    if retrace is not None and retrace.mixed_trace_options:
        configs = {}  # mixed on request (--retraced-other-trace-options): the tracing options are not one, nor checked
    if len(configs) > 1:
        raise ConfigError(f"{path} holds generations traced with different tracing options "
                          f"({_config_difference(*list(configs)[:2])}); PM would mix them",
                          "re-trace the whole file with one set of tracing options (`propme trace --input`)")
    return LoadedSamples(list(prompts.values()), identities, rows[0].start_token if rows else None, rare,
                         next(iter(configs), None))


def _differing(a: TraceConfig, b: TraceConfig) -> list[tuple[str, Any, Any]]:
    """(option, a's value, b's value) of each tracing option two configurations differ in."""
    da, db = a.to_dict(), b.to_dict()
    return [(k, da[k], db[k]) for k in sorted(da) if da[k] != db[k]]


def _config_difference(a: TraceConfig, b: TraceConfig) -> str:
    """The options two tracing configurations differ in, e.g. "mode 'text' and 'mixed'"."""
    return ", ".join(f"{k} {x!r} and {y!r}" for k, x, y in _differing(a, b)[:4])


def describe_trace_config(config: TraceConfig | None) -> str:
    """One line naming a task's tracing options, for messages."""
    return "not recorded" if config is None else ", ".join(f"{k}={v!r}" for k, v in sorted(config.to_dict().items()))


def describe_chat_template(sha: str | None) -> str:
    """Whether prompts went through a chat template, for tables and notes."""
    return "plain prompts (no chat template)" if sha is None else f"lm-eval's chat template (sha256 {sha[:12]})"


def _untraced(path: Path, lineno: int, task: str, row: dict[str, Any]) -> ConfigError:
    """The error for a samples row without PropMe's traces, saying why it has none and what to do."""
    retrace = (f"trace the file with `propme trace --input {path.name} --out RESULTS.jsonl --summary SUMMARY.json` "
               "and pass --retraced SUMMARY.json")
    if "bypass" in row or "bypass" in (row.get("metrics") or []):
        return ConfigError(f"{path}, line {lineno}: task {task} was run with lm-eval --predict_only, which runs no "
                           "PropMe metric, so its samples hold no traces", retrace)
    return ConfigError(f"{path}, line {lineno}: no 'trace' item with 'generations' for task {task}",
                       f"{retrace}, or re-run lm-eval with PropMe's tasks and --log_samples")


def _retraced_row(retrace: Retrace, sample: SampleRow) -> dict[str, Any] | None:
    """A row without traces (a --predict_only run) given its generations' re-traced results, or None
    when the re-trace has none of them (keys as `propme trace --input` gives them); `_apply_retrace`
    then checks and counts them like any re-traced row."""
    single = retrace.results.get(sample.key(0, 1))
    gens = [single] if single is not None else []
    while single is None and (more := retrace.results.get(sample.key(len(gens), 2))) is not None:
        gens.append(more)
    if not gens:
        return None
    return {"prompt_id": sample.prompt_id, "generations": gens}


def _logged_rare_max_count(rows: Sequence[SampleRow], path: Path) -> int:
    """The `fmr_rare` threshold the run logged with its documents (the default for older runs)."""
    logged = {s.document.rare_max_count for s in rows} - {None}
    if len(logged) > 1:
        raise ConfigError(f"{path} mixes fmr_rare thresholds ({RARE_MAX_COUNT_KEY} "
                          f"{', '.join(sorted(map(str, logged)))})", "pass --rare-max-count to use one")
    return check_rare_max_count(logged.pop(), f"{RARE_MAX_COUNT_KEY} in {path}") if logged else RARE_MAX_COUNT


def describe_start_token(start: StartToken | None) -> str:
    """One line for tables and notes: what every prompt started with, and why."""
    return "not recorded (run made before PropMe recorded start tokens)" if start is None else start.note


def _apply_retrace(retrace: Retrace, sample: SampleRow, trace: dict[str, Any], identity: Any, path: Path) -> bool:
    """Replace a row's traced generations by their re-traced results (same keys as `propme trace`);
    whether any was replaced."""
    if identity is not None and str(identity) != retrace.index_identity:
        raise ConfigError(f"{retrace.summary_path} traced {path} against index {retrace.index_identity}, but its "
                          f"generations were traced against {identity}",
                          "re-trace against the index the run used (its identity is in the samples' doc)")
    run_config = sample.document.trace
    if run_config is not None and retrace.config is not None and not retrace.mixed_trace_options:
        differ = _differing(retrace.config, run_config)
        if differ:
            shown = ", ".join(f"{k} {new!r} (run: {old!r})" for k, new, old in differ[:4])
            raise ConfigError(f"{retrace.summary_path} re-traced {path.name} with other tracing options than the "
                              f"run: {shown}; PM would mix the two",
                              "re-trace with the run's tracing options (the same `propme trace` options as its task "
                              "metadata), or pass --retraced-other-trace-options to report them anyway")
    gens, used = trace["generations"], 0
    for j in range(len(gens)):
        new = retrace.results.get(sample.key(j, len(gens)))
        if new is not None:
            gens[j] = new
            used += 1
    retrace.used += used
    return used > 0


def load_tasks(runs: Sequence[LmEvalRun], retraces: Sequence[Retrace] = (),
               rare_max_count: int | None = None) -> list[RunTask]:
    """Every PropMe generation task of read runs (`runs.lmeval`), with its traced samples
    (`rare_max_count`: `fmr_rare`'s threshold instead of the runs' own, `load_samples`).

    Raises ConfigError for unreadable files (bad JSON, missing samples file), naming the file.
    """
    tasks: list[RunTask] = []
    for run in runs:
        for t in run.of_kind(TaskKind.GENERATION):
            loaded = load_samples(t.check_samples(), t.name, retraces, setting=t.setting,
                                  rare_max_count=rare_max_count)
            if len(loaded.identities) > 1:
                raise ConfigError(f"{t.samples_path} mixes generations traced against several indexes: "
                                  + ", ".join(sorted(str(i) for i in loaded.identities)))
            tasks.append(RunTask(
                task=t.name, corpus=str(t.corpus), setting=str(t.setting), model=run.model, revision=run.revision,
                model_args=run.model_args, metadata=t.metadata, index_identity=next(iter(loaded.identities), None),
                results=t.results, prompts=loaded.prompts, results_path=run.results_path,
                samples_path=t.samples_path, date_id=run.date_id, limit=run.limit, start_token=loaded.start_token,
                rare_max_count=loaded.rare_max_count, trace_config=loaded.trace_config,
                chat_template_sha=run.chat_template_sha))
    return tasks


def load_run(path: str | Path, retraces: Sequence[Retrace] = (), rare_max_count: int | None = None) -> list[RunTask]:
    """Every PropMe subtask of an lm-eval output folder or results file, with its traced samples (`load_tasks`)."""
    return load_tasks(read_run(path), retraces, rare_max_count)


def load_likelihood(runs: Sequence[LmEvalRun]) -> list[LikelihoodTask]:
    """Every likelihood subtask of read runs (`runs.lmeval`), with its documents."""
    tasks = []
    for run in runs:
        for t in run.of_kind(TaskKind.LIKELIHOOD):
            documents, identities, recorded = _documents(t)
            if len(identities) > 1:
                raise ConfigError(f"{t.samples_path} mixes documents of several indexes: "
                                  + ", ".join(sorted(map(str, identities))))
            tasks.append(LikelihoodTask(t.name, str(t.corpus), run.model, run.revision, t.metadata, documents,
                                        run.results_path, t.samples_path, run.date_id, run.limit,
                                        next(iter(identities), None), recorded))
    return tasks


def load_likelihood_run(path: str | Path) -> list[LikelihoodTask]:
    """Every likelihood subtask of an lm-eval output folder or results file, with its documents."""
    return load_likelihood(read_run(path))


def _documents(task: LmEvalTask) -> tuple[list[DocumentLikelihood], set[str | None], dict[str, Any]]:
    docs: dict[str, DocumentLikelihood] = {}
    identities: set[str | None] = set()
    recorded: dict[str, Any] = {}
    for s in task.samples():
        item = s.row.get(registry.LIKELIHOOD_DIAGNOSTIC[0])
        try:
            doc = DocumentLikelihood.from_dict(item)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{task.samples_path}, line {s.lineno}: no valid 'likelihood' record for task "
                              f"{task.name} ({type(exc).__name__}: {exc})", DAMAGED_HINT) from None
        docs.setdefault(doc.id, doc)  # one row per document per filter: keep the first
        if not recorded:
            recorded = {k: item[k] for k in (N_KEY, P_KEY) if item.get(k) is not None}
        identities.add(item.get("index_identity", s.document.index_identity))
    return list(docs.values()), identities, recorded
