"""Runs read back from lm-eval output into typed runs (`metrics.runs`): results files, their samples
files (every traced generation parsed into a `TraceResult` here, once), re-traces, and the
likelihood subtask's scored documents."""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import first_non_finite, json_objects
from propme_metrics.core.lmeval_files import (
    date_id,
    model_identity,
    read_json,
    read_results,
    results_files,
    samples_path_of,
)
from propme_metrics.metrics import registry
from propme_metrics.metrics.leaks import RARE_MAX_COUNT, RARE_MAX_COUNT_KEY, check_rare_max_count
from propme_metrics.metrics.likelihood import N_KEY, P_KEY, SUBTASK_SUFFIX, DocumentLikelihood, is_likelihood_config
from propme_metrics.metrics.runs import LikelihoodTask, RunTask, TracedPrompt, stops_inside_continuation
from propme_metrics.metrics.values import contributions, counts_for_metrics
from propme_metrics.prompts.settings import SETTINGS
from propme_metrics.trace.inputs import SampleRow, read_samples
from propme_metrics.trace.result import TraceResult
from propme_metrics.trace.summary import RETRACE_HINT, read_summary


def _task_corpus_setting(task: str, metadata: dict[str, Any]) -> tuple[str, str] | None:
    corpus, setting = metadata.get("corpus"), metadata.get("setting")
    if corpus and setting:
        return str(corpus), str(setting)
    if not task.startswith("propme_"):
        return None
    rest = task[len("propme_"):]
    for s in sorted(SETTINGS, key=len, reverse=True):
        if rest.endswith("_" + s):
            return str(corpus or rest[: -len(s) - 1]), str(setting or s)
    if "_" in rest:
        c, s = rest.rsplit("_", 1)
        return str(corpus or c), str(setting or s)
    return None


@dataclass
class Retrace:
    """Results of `propme trace` run on a samples file: they replace that file's traces (by key)."""

    summary_path: Path
    samples_path: Path             #: the samples file that was re-traced (resolved)
    index_identity: str
    results: dict[str, dict[str, Any]]   #: generation key -> TraceResult dict
    used: int = 0
    config: dict[str, Any] | None = None  #: the tracing settings of the re-trace
    mixed_settings: bool = False          #: accepted although the run traced with other settings


def load_retrace(summary_path: str | Path) -> Retrace:
    """Read a `propme trace` SUMMARY.json (and the RESULTS.jsonl it names) made from an lm-eval samples file."""
    summary_path = Path(summary_path)
    summary = read_summary(summary_path)
    identity, samples, results_path = summary.index_identity, summary.input_path.resolve(), summary.results_path
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
    return Retrace(summary_path, samples, identity, results, config=summary.config)


def load_samples(path: Path, task: str, retraces: Sequence[Retrace] = (), setting: str | None = None,
                 rare_max_count: int | None = None
                 ) -> tuple[list[TracedPrompt], set[str | None], dict[str, str] | None, int, dict[str, Any] | None]:
    """A samples file's prompts with their traces, the index identities they name, the start token of
    its first row, `fmr_rare`'s threshold (`rare_max_count` if given, else the one the run logged
    with its documents, else the default) and the tracing settings of its generations (None when
    not recorded). A row that names another setting than its task's (`setting`) is refused: its
    numbers would be reported under the wrong setting; so is a file traced with several settings."""
    retrace = next((r for r in retraces if r.samples_path == path.resolve()), None)
    prompts: dict[str, TracedPrompt] = {}
    identities: set[str | None] = set()
    first_filter: str | None = None
    configs: dict[str, dict[str, Any]] = {}
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the samples file {path}: {exc}") from None
    with fh:
        rows = read_samples(list(json_objects(fh, str(path), "the samples file is damaged: re-run lm-eval for this task")))
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
            doc = s.doc
            said = trace.get("setting", doc.get("setting"))
            if setting is not None and said is not None and str(said) != setting:
                raise ConfigError(f"{path}, line {lineno}: the row says setting {said!r}, but its task {task} is the "
                                  f"{setting} setting", "report the samples file of each setting under its own "
                                  "task (lm-eval writes samples_<task>_<date>.jsonl); do not rename or mix them")
            pid = str(trace.get("prompt_id", doc.get("id", row.get("doc_id"))))
            identity = doc.get("index_identity", trace.get("index_identity"))
            identities.add(identity)
            config = _run_trace_config(doc)
            if retrace is not None and _apply_retrace(retrace, s, trace, identity, path):
                config = retrace.config if retrace.config is not None else config
            if config is not None:
                configs.setdefault(json.dumps(config, sort_keys=True), config)
            rec = prompts.get(pid)
            if rec is None:
                rec = prompts[pid] = TracedPrompt(
                    id=pid, prompt=str(doc.get("prompt", _prompt_from_arguments(row))),
                    domain=str(doc.get("domain") or ""), language=str(doc.get("language") or ""),
                    continuation=str(doc.get("continuation") or ""), source_doc=str(doc.get("source_doc") or ""),
                    index_path=str(doc.get("index_path") or ""))
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
    if retrace is not None and retrace.mixed_settings:
        configs = {}  # mixed on request (--retraced-other-settings): the settings are not one, nor checked
    if len(configs) > 1:
        raise ConfigError(f"{path} holds generations traced with different tracing settings "
                          f"({_config_difference(*list(configs.values())[:2])}); PM would mix them",
                          "re-trace the whole file with one set of settings (`propme trace --input`)")
    return (list(prompts.values()), identities, rows[0].start_token if rows else None, rare,
            next(iter(configs.values()), None))


def _config_difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The settings two tracing configurations differ in, e.g. "mode 'text' and 'mixed'"."""
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k} {a.get(k)!r} and {b.get(k)!r}" for k in differ[:4])


def describe_trace_config(config: dict[str, Any] | None) -> str:
    """One line naming a task's tracing settings, for messages."""
    return "not recorded" if config is None else ", ".join(f"{k}={v!r}" for k, v in sorted(config.items()))


def chat_template_sha(results: dict[str, Any]) -> str | None:
    """The sha256 of the chat template an lm-eval results file says its prompts went through
    (`chat_template_sha`, or the hash of `chat_template`, as lm-eval computes it); None for plain prompts."""
    sha, template = results.get("chat_template_sha"), results.get("chat_template")
    if isinstance(sha, str) and sha:
        return sha
    if isinstance(template, str) and template:
        return hashlib.sha256(template.encode("utf-8")).hexdigest()
    return None


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
    return {"prompt_id": sample.doc.get("id", sample.row.get("doc_id")), "generations": gens}


def _logged_rare_max_count(rows: Sequence[SampleRow], path: Path) -> int:
    """The `fmr_rare` threshold the run logged with its documents (the default for older runs)."""
    logged = {s.doc.get(RARE_MAX_COUNT_KEY) for s in rows} - {None}
    if len(logged) > 1:
        raise ConfigError(f"{path} mixes fmr_rare thresholds ({RARE_MAX_COUNT_KEY} "
                          f"{', '.join(sorted(map(str, logged)))})", "pass --rare-max-count to use one")
    return check_rare_max_count(logged.pop(), f"{RARE_MAX_COUNT_KEY} in {path}") if logged else RARE_MAX_COUNT


def describe_start_token(start: dict[str, str] | None) -> str:
    """One line for tables and notes: what every prompt started with, and why."""
    return "not recorded (run made before PropMe recorded start tokens)" if start is None else start["note"]


def _apply_retrace(retrace: Retrace, sample: SampleRow, trace: dict[str, Any], identity: Any, path: Path) -> bool:
    """Replace a row's traced generations by their re-traced results (same keys as `propme trace`);
    whether any was replaced."""
    if identity is not None and str(identity) != retrace.index_identity:
        raise ConfigError(f"{retrace.summary_path} traced {path} against index {retrace.index_identity}, but its "
                          f"generations were traced against {identity}",
                          "re-trace against the index the run used (its identity is in the samples' doc)")
    run_config = _run_trace_config(sample.doc)
    if run_config is not None and retrace.config is not None and not retrace.mixed_settings:
        differ = sorted(k for k in set(run_config) | set(retrace.config) if run_config.get(k) != retrace.config.get(k))
        if differ:
            shown = ", ".join(f"{k} {retrace.config.get(k)!r} (run: {run_config.get(k)!r})" for k in differ[:4])
            raise ConfigError(f"{retrace.summary_path} re-traced {path.name} with other tracing settings than the "
                              f"run: {shown}; PM would mix the two",
                              "re-trace with the run's settings (the same `propme trace` options as its task "
                              "metadata), or pass --retraced-other-settings to report them anyway")
    gens, used = trace["generations"], 0
    for j in range(len(gens)):
        new = retrace.results.get(sample.key(j, len(gens)))
        if new is not None:
            gens[j] = new
            used += 1
    retrace.used += used
    return used > 0


def _run_trace_config(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The tracing settings a logged document was traced with (the hooks record them), if any."""
    raw = doc.get("trace_config")
    try:
        config = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def _prompt_from_arguments(row: dict[str, Any]) -> str:
    try:
        return str(row["arguments"]["gen_args_0"]["arg_0"])
    except (KeyError, TypeError):
        return ""


def load_run(path: str | Path, retraces: Sequence[Retrace] = (), rare_max_count: int | None = None) -> list[RunTask]:
    """Every PropMe subtask of an lm-eval output folder or results file, with its traced samples
    (`rare_max_count`: `fmr_rare`'s threshold instead of the runs' own, `load_samples`).

    Raises ConfigError for unreadable files (bad JSON, missing samples file), naming the file.
    """
    tasks: list[RunTask] = []
    for results_path in results_files(Path(path)):
        data = read_results(results_path)
        model, revision, model_args = model_identity(data)
        run_date = date_id(results_path)
        limit = _run_limit(data, results_path)
        for task, config in data["configs"].items():
            metadata = (config or {}).get("metadata") or {}
            if not isinstance(metadata, dict):
                metadata = {}
            if is_likelihood_config(config):
                continue  # the likelihood subtask has no traces: load_likelihood_run reads it
            cs = _task_corpus_setting(task, metadata)
            if cs is None:
                continue  # not a PropMe task
            samples_path = samples_path_of(results_path, task)
            if not samples_path.is_file():
                raise ConfigError(f"missing samples file {samples_path} for task {task} of {results_path}",
                                  "run lm-eval with --log_samples (and keep the samples files beside the results)")
            prompts, identities, start_token, rare, trace_config = load_samples(
                samples_path, task, retraces, setting=cs[1], rare_max_count=rare_max_count)
            if len(identities) > 1:
                raise ConfigError(f"{samples_path} mixes generations traced against several indexes: "
                                  + ", ".join(sorted(str(i) for i in identities)))
            tasks.append(RunTask(
                task=task, corpus=cs[0], setting=cs[1], model=model, revision=revision, model_args=model_args,
                metadata=metadata, index_identity=next(iter(identities), None),
                results=(data.get("results") or {}).get(task) or {}, prompts=prompts,
                results_path=results_path, samples_path=samples_path, date_id=run_date, limit=limit,
                start_token=start_token, rare_max_count=rare, trace_config=trace_config,
                chat_template_sha=chat_template_sha(data)))
    return tasks


def _run_limit(data: dict[str, Any], path: Path) -> float | None:
    """lm-eval's --limit of a results file (a count, or a share when below 1); None for a full run."""
    limit = (data.get("config") or {}).get("limit")
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit <= 0:
        raise ConfigError(f"{path}: config.limit is {limit!r}, not a positive number")
    return float(limit)


def load_likelihood_run(path: str | Path) -> list[LikelihoodTask]:
    """Every likelihood subtask of an lm-eval output folder or results file, with its documents."""
    tasks = []
    for results_path in results_files(Path(path)):
        data = read_json(results_path)
        if not isinstance(data, dict) or not isinstance(data.get("configs"), dict):
            continue  # load.load_run names the file
        model, revision, _ = model_identity(data)
        run_date = date_id(results_path)
        for task, config in data["configs"].items():
            if not isinstance(config, dict) or not is_likelihood_config(config):
                continue
            metadata = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
            corpus = str(metadata.get("corpus") or task[len("propme_"):-len(SUBTASK_SUFFIX) - 1])
            samples = samples_path_of(results_path, task)
            if not samples.is_file():
                raise ConfigError(f"missing samples file {samples} for task {task} of {results_path}",
                                  "run lm-eval with --log_samples (and keep the samples files beside the results)")
            documents, identities, recorded = _documents(samples, task)
            if len(identities) > 1:
                raise ConfigError(f"{samples} mixes documents of several indexes: "
                                  + ", ".join(sorted(map(str, identities))))
            tasks.append(LikelihoodTask(task, corpus, model, revision, metadata, documents, results_path, samples,
                                        run_date, _run_limit(data, results_path), next(iter(identities), None),
                                        recorded))
    return tasks


def _documents(path: Path, task: str) -> tuple[list[DocumentLikelihood], set[str | None], dict[str, Any]]:
    hint = "the samples file is damaged: re-run lm-eval for this task (with --log_samples)"
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the samples file {path}: {exc}") from None
    docs: dict[str, DocumentLikelihood] = {}
    identities: set[str | None] = set()
    recorded: dict[str, Any] = {}
    with fh:
        for s in read_samples(list(json_objects(fh, str(path), hint))):
            item = s.row.get(registry.LIKELIHOOD_DIAGNOSTIC[0])
            try:
                doc = DocumentLikelihood.from_dict(item)
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(f"{path}, line {s.lineno}: no valid 'likelihood' record for task {task} "
                                  f"({type(exc).__name__}: {exc})", hint) from None
            docs.setdefault(doc.id, doc)  # one row per document per filter: keep the first
            if not recorded:
                recorded = {k: item[k] for k in (N_KEY, P_KEY) if item.get(k) is not None}
            identities.add(item.get("index_identity", s.doc.get("index_identity")))
    return list(docs.values()), identities, recorded
