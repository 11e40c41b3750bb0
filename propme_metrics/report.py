"""`propme report`: PM scores with intervals, leaderboard tables, plots and an HTML trace explorer.

Input: lm-eval output written with `--log_samples` from PropMe's tasks (`propme_<corpus>_<setting>`).
A RUN is an output folder (searched recursively for `results_*.json`, each with its
`samples_<task>_<date id>.jsonl` files beside it) or one results file. Every number is computed
from the traced generations in the samples files (`trace.generations`), through
`metrics.generation_values` (degenerate and failed generations excluded), grouped by prompt: each
prompt contributes one `pm.PromptStat` (numerator, denominator) per metric, and the bootstrap
resamples prompts; in the prompt-free settings (`unconditional`, `minimal_cue`) the unit is the
generation instead. The start token every prompt began with (recorded in each logged document) is
shown per corpus. When the same model, revision and task occur in several results files, the
latest (by lm-eval's date id) is used; runs made with lm-eval `--limit` never replace full runs
(nor the reverse): they form their own corpus label `<corpus>_limit<N>`. Rows and checkpoint trajectories follow input order: the
RUN arguments as given, results files inside a folder by date id (chronologically).

Intervals are 95%: percentile bootstrap over prompts or generations (B = `bootstrap`, numpy `default_rng(seed)`;
for PM the propensity and prefix prompt sets are resampled independently, `pm.bootstrap_pm`), and
Wilson score intervals over counted generations for the proportions.

Leaderboard columns (`leaderboard.csv`, `leaderboard.json`; one row per model and revision)
-----------------------------------------------------------------------------------------------
`<corpus>` is the corpus name of the task metadata (`dynaword`, `common_pile`, `demo`, a custom
name); with `separate=True` / `--separate`, runs of one corpus that used different indexes or
prompt sets are reported apart as `<corpus>_set1`, `<corpus>_set2`, ... (in input order).
`<setting>` is `generic`, `specific`, `prefix` (and `unconditional`, `minimal_cue` or any other
setting present); `<propensity>` is every setting but `prefix`. `<metric>` is one of `nvr`, `fmr`,
`als`, `fmr_normalized`, `nvr_hits`, `nvr_max`, `nvr_above_half`, `r20`, `r50`, `extraction`
(prefix only), `pii`, `pii_email`, `pii_phone`, `pii_cpr`, `pii_iban`, `pii_card`, `pii_items`.
`<pm_metric>` is one of the `--pm-metrics` (default `nvr,fmr,als,pii`). Empty cells
(null in JSON) mean "not run" or "not defined" (a setting with no counted generation has no
metrics and no PM: never 0; `build_report` then raises `IncompleteReportError` after writing).

| column | meaning |
|---|---|
| `model` | the model: `pretrained=` of lm-eval's model_args (else lm-eval's model name) |
| `revision` | `revision=` of the model_args; empty when none was given |
| `propme_<corpus>_index` | identity of the infini-gram index the generations were traced against |
| `propme_<corpus>_prompt_set` | fingerprint (12 hex digits) of the prompt ids of every setting |
| `propme_<corpus>_start_token` | the text put before every prompt (empty: nothing, e.g. the tokenizer adds <s>) |
| `propme_<corpus>_start_token_choice` | auto, none or literal (the start_token setting of the run) |
| `propme_<corpus>_pm_<pm_metric>_<propensity>` | PM = p / (p + c) of the metric, propensity setting p vs prefix c |
| `propme_<corpus>_pm_<pm_metric>_<propensity>_low` | lower end of its 95% bootstrap interval |
| `propme_<corpus>_pm_<pm_metric>_<propensity>_high` | upper end of its 95% bootstrap interval |
| `propme_<corpus>_n_<setting>` | prompts of the setting |
| `propme_<corpus>_generations_<setting>` | generations counted (degenerate and failed excluded) |
| `propme_<corpus>_degenerate_<setting>` | degenerate generations (excluded from every metric) |
| `propme_<corpus>_failed_<setting>` | generations whose tracing failed (excluded; 0 is healthy) |
| `propme_<corpus>_<setting>_<metric>` | the base metric of the setting |
| `propme_<corpus>_<setting>_<metric>_low` | lower end of its 95% bootstrap interval (not for `nvr_max`) |
| `propme_<corpus>_<setting>_<metric>_high` | upper end of its 95% bootstrap interval (not for `nvr_max`) |
| `propme_<corpus>_<setting>_<metric>_wilson_low` | Wilson 95% lower bound, proportions only (`fmr`, `fmr_normalized`, `nvr_above_half`, `r20`, `r50`, `extraction`, `pii`, `pii_<type>`) |
| `propme_<corpus>_<setting>_<metric>_wilson_high` | Wilson 95% upper bound, proportions only |

Metrics (SPEC section 5): `nvr` mean NV-recall over all retrieved documents; `fmr` share of
generations with a `full_raw` document; `als` mean longest segment (index tokens);
`fmr_normalized` the same as FMR after normalization; `nvr_hits` mean NV-recall over documents
with NV-recall > 0; `nvr_max` the largest NV-recall; `nvr_above_half` share of generations with a
document above 0.5; `r20`/`r50` share with a verbatim span of at least 20/50 tokens; `extraction`
share of prefix prompts whose true continuation was reproduced; `pii` share of generations that
reproduced personal data from a training document (`propme_metrics.pii`), `pii_<type>` the same for
one type (e-mail, phone, CPR, IBAN, card), `pii_items` leaked items per generation. The report
holds no personal data values: report.html masks leaked items unless `show_pii=True` (`--show-pii`).

Other outputs in the report folder: `leaderboard.md` (Markdown tables), `capability_<corpus>.png`
(capability = prefix value on x, propensity = generic/specific value on y, per metric and model,
diagonal PM = 0.5), `trajectory_<corpus>_<model>.png` (PM per metric across revisions, in input
order, when several revisions of a model are given) and `report.html` (self-contained: tables,
plots, and every prompt and generation with its traced segments; click a segment for its source
documents).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import ConfigError
from .files import write_atomic
from .generations import sample_key
from .jsonl import first_non_finite, json_objects, scrub_surrogates
from .metrics import counts_for_metrics, generation_values
from .pii import PII_METRICS, PII_TYPES, leaks
from .pm import Interval, PromptStat, bootstrap_metric, bootstrap_pm, pm, ratio, wilson_interval
from .prompt_free import PROMPT_FREE_SETTINGS
from .trace import TraceResult

PREFIX = "prefix"
#: Canonical order of settings in tables and columns; other settings follow alphabetically.
SETTING_ORDER = ("generic", "specific", "prefix", "unconditional", "minimal_cue")
#: Base metrics, in column order.
BASE_METRICS = ("nvr", "fmr", "als", "fmr_normalized", "nvr_hits", "nvr_max", "nvr_above_half",
                "r20", "r50", "extraction", *PII_METRICS)
#: Base metrics that are shares of generations: Wilson intervals as well.
PROPORTIONS = ("fmr", "fmr_normalized", "nvr_above_half", "r20", "r50", "extraction",
               *(m for m in PII_METRICS if m != "pii_items"))
#: Metrics PM can be computed for (ratio-of-sums metrics defined in every setting).
PM_METRIC_CHOICES = ("nvr", "fmr", "als", "fmr_normalized", "nvr_hits", "nvr_above_half", "r20", "r50",
                     *PII_METRICS)
DEFAULT_PM_METRICS = ("nvr", "fmr", "als", "pii")
CONFIDENCE = 0.95
METRIC_LABELS = {"nvr": "NVR", "fmr": "FMR", "als": "ALS", "fmr_normalized": "FMR (normalized)",
                 "nvr_hits": "NVR (hits)", "nvr_max": "NVR max", "nvr_above_half": "NV > 0.5",
                 "r20": "R20", "r50": "R50", "extraction": "extraction", "pii": "PII",
                 **{f"pii_{t}": f"PII {t}" for t in PII_TYPES}, "pii_items": "PII items"}

# generation_values key -> (numerator key, denominator key or a constant 1 per counted generation)
_STAT_KEYS = {
    "als": ("als", None), "fmr": ("fmr", None), "fmr_normalized": ("fmr_normalized", None),
    "r20": ("r20", None), "r50": ("r50", None), "nvr_above_half": ("nv_above_half", None),
    "nvr": ("nv_sum", "nv_docs"), "nvr_hits": ("nv_hit_sum", "nv_hits"),
    **{m: (m, None) for m in PII_METRICS},
}

_COLUMN_DOCS: tuple[tuple[str, str], ...] = (
    ("model", "the model: pretrained= of lm-eval's model_args (else lm-eval's model name)"),
    ("revision", "revision= of the model_args; empty when none was given"),
    ("propme_<corpus>_index", "identity of the infini-gram index the generations were traced against"),
    ("propme_<corpus>_prompt_set", "fingerprint (12 hex digits) of the prompt ids of every setting"),
    ("propme_<corpus>_start_token", "the text put before every prompt (empty: nothing, e.g. the tokenizer adds <s>)"),
    ("propme_<corpus>_start_token_choice", "auto, none or literal (the start_token setting of the run)"),
    ("propme_<corpus>_pm_<pm_metric>_<propensity>", "PM = p / (p + c) of the metric, propensity setting p vs prefix c"),
    ("propme_<corpus>_pm_<pm_metric>_<propensity>_low", "lower end of its 95% bootstrap interval"),
    ("propme_<corpus>_pm_<pm_metric>_<propensity>_high", "upper end of its 95% bootstrap interval"),
    ("propme_<corpus>_n_<setting>", "prompts of the setting"),
    ("propme_<corpus>_generations_<setting>", "generations counted (degenerate and failed excluded)"),
    ("propme_<corpus>_degenerate_<setting>", "degenerate generations (excluded from every metric)"),
    ("propme_<corpus>_failed_<setting>", "generations whose tracing failed (excluded; 0 is healthy)"),
    ("propme_<corpus>_<setting>_<metric>", "the base metric of the setting"),
    ("propme_<corpus>_<setting>_<metric>_low", "lower end of its 95% bootstrap interval (not for nvr_max)"),
    ("propme_<corpus>_<setting>_<metric>_high", "upper end of its 95% bootstrap interval (not for nvr_max)"),
    ("propme_<corpus>_<setting>_<metric>_wilson_low",
     "Wilson 95% lower bound, proportions only (fmr, fmr_normalized, nvr_above_half, r20, r50, extraction, "
     "pii, pii_<type>)"),
    ("propme_<corpus>_<setting>_<metric>_wilson_high", "Wilson 95% upper bound, proportions only"),
)


def leaderboard_columns() -> list[tuple[str, str]]:
    """The leaderboard's column patterns and their meaning, in column order (see the module docstring)."""
    return list(_COLUMN_DOCS)


class IncompleteReportError(ConfigError):
    """The report was written (it is in `report`) but something in it is undefined: exit status 2."""

    def __init__(self, message: str, hint: str | None = None, report: "Report | None" = None):
        super().__init__(message, hint)
        self.report = report


class MissingPrefixError(IncompleteReportError):
    """PM needs the prefix setting; the report (base metrics) was written anyway and is in `report`."""


# --- loading -----------------------------------------------------------------------------------


@dataclass
class PromptRecord:
    """One prompt of a setting with its traced generations (several when sampling)."""

    id: str
    prompt: str
    domain: str = ""
    language: str = ""
    continuation: str = ""
    source_doc: str = ""
    generations: list[dict[str, Any]] = field(default_factory=list)    #: TraceResult.to_dict() each
    values: list[dict[str, Any] | None] = field(default_factory=list)  #: generation_values, None if not counted

    def stat(self, metric: str) -> PromptStat:
        """This prompt's (numerator, denominator) of a ratio metric over its counted generations."""
        return _stat([v for v in self.values if v is not None], metric)

    def generation_stats(self, metric: str) -> list[PromptStat]:
        """One (numerator, denominator) per counted generation (prompt-free settings resample these)."""
        return [_stat([v], metric) for v in self.values if v is not None]


def _stat(counted: list[dict[str, Any]], metric: str) -> PromptStat:
    if metric == "extraction":
        known = [v["extracted"] for v in counted if v["extracted"] is not None]
        return PromptStat(float(sum(known)), float(len(known)))
    num, den = _STAT_KEYS[metric]
    return PromptStat(float(sum(v[num] for v in counted)),
                      float(len(counted)) if den is None else float(sum(v[den] for v in counted)))


@dataclass
class RunTask:
    """One PropMe subtask of one lm-eval run: a model x corpus x setting and its traced prompts."""

    task: str
    corpus: str
    setting: str
    model: str
    revision: str
    model_args: str
    metadata: dict[str, Any]
    index_identity: str | None
    results: dict[str, Any]        #: lm-eval's aggregates for the task ("<metric>,<filter>" keys)
    prompts: list[PromptRecord]
    results_path: Path
    samples_path: Path
    date_id: str
    start_token: dict[str, str] | None = None   #: {"token", "choice", "note"} of the logged samples
    limit: float | None = None     #: lm-eval's --limit of the run (None: a full run)

    @property
    def prompt_ids(self) -> frozenset[str]:
        return frozenset(p.id for p in self.prompts)

    @property
    def label(self) -> str:
        return f"{self.model}" + (f"@{self.revision}" if self.revision else "")

    def stats(self, metric: str) -> list[PromptStat]:
        """One PromptStat per resampling unit, in input order: the prompt, or the generation when prompt-free."""
        if self.setting in PROMPT_FREE_SETTINGS:
            return [st for p in self.prompts for st in p.generation_stats(metric)]
        return [p.stat(metric) for p in self.prompts]

    def counts(self) -> dict[str, int]:
        gens = [g for p in self.prompts for g in p.generations]
        failed = sum(g.get("error") is not None for g in gens)
        degenerate = sum(g.get("error") is None and bool(g.get("degenerate")) for g in gens)
        counted = sum(v is not None for p in self.prompts for v in p.values)
        return {"prompts": len(self.prompts), "generations": len(gens), "counted": counted,
                "failed": failed, "degenerate": degenerate}


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return scrub_surrogates(json.load(fh))[0]  # a "\ud800" in a model name cannot be written out
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc})",
                          "pass lm-eval's results_*.json files or the folders holding them") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def _parse_model_args(model_args: Any) -> dict[str, str]:
    if isinstance(model_args, dict):
        return {str(k): "" if v is None else str(v) for k, v in model_args.items()}
    out: dict[str, str] = {}
    for part in str(model_args or "").split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def _model_identity(results: dict[str, Any]) -> tuple[str, str, str]:
    config = results.get("config") or {}
    raw_args = config.get("model_args")
    args = _parse_model_args(raw_args)
    model = (args.get("pretrained") or args.get("model") or args.get("path") or results.get("model_name")
             or config.get("model") or "unknown model")
    revision = args.get("revision") or ""
    shown = raw_args if isinstance(raw_args, str) else json.dumps(raw_args or {}, sort_keys=True)
    return str(model), str(revision), shown


def _task_corpus_setting(task: str, metadata: dict[str, Any]) -> tuple[str, str] | None:
    corpus, setting = metadata.get("corpus"), metadata.get("setting")
    if corpus and setting:
        return str(corpus), str(setting)
    if not task.startswith("propme_"):
        return None
    rest = task[len("propme_"):]
    for s in sorted(SETTING_ORDER, key=len, reverse=True):
        if rest.endswith("_" + s):
            return str(corpus or rest[: -len(s) - 1]), str(setting or s)
    if "_" in rest:
        c, s = rest.rsplit("_", 1)
        return str(corpus or c), str(setting or s)
    return None


def _date_id(results_path: Path) -> str:
    # results_<date id>.json, or <name>_<date id>.json when lm-eval's --output_path ended in .json
    return results_path.stem.rsplit("_", 1)[-1] if "_" in results_path.stem else results_path.stem


@dataclass
class Retrace:
    """Results of `propme trace` run on a samples file: they replace that file's traces (by key)."""

    summary_path: Path
    samples_path: Path             #: the samples file that was re-traced (resolved)
    index_identity: str
    results: dict[str, dict[str, Any]]   #: generation key -> TraceResult dict
    used: int = 0


def load_retrace(summary_path: str | Path) -> Retrace:
    """Read a `propme trace` SUMMARY.json (and the RESULTS.jsonl it names) made from an lm-eval samples file."""
    summary_path = Path(summary_path)
    summary = _read_json(summary_path)
    hint = "pass the SUMMARY.json that `propme trace --input samples_<task>_*.jsonl --summary` wrote"
    try:
        inp, index, results_path = summary["input"], summary["index"], Path(summary["results"])
        if inp["format"] != "lm-eval-samples":
            raise ConfigError(f"{summary_path} re-traced {inp['path']}, not an lm-eval samples file", hint)
        identity, samples = str(index["identity"]), Path(inp["path"]).resolve()
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{summary_path} is not a `propme trace` summary (no {exc})", hint) from None
    results: dict[str, dict[str, Any]] = {}
    try:
        with open(results_path, encoding="utf-8") as fh:
            for lineno, row in json_objects(fh, str(results_path)):
                bad = first_non_finite(row)
                if bad or not isinstance(row.get("key"), str):
                    raise ConfigError(f"{results_path}:{lineno}: not a trace result ({bad or 'no key'})", hint)
                results[row["key"]] = row
    except OSError as exc:
        raise ConfigError(f"cannot read the re-traced results {results_path} named by {summary_path}: {exc}",
                          hint) from None
    return Retrace(summary_path, samples, identity, results)


def _load_samples(path: Path, task: str, retraces: Sequence[Retrace] = ()) -> tuple[list[PromptRecord], set[str | None]]:
    retrace = next((r for r in retraces if r.samples_path == path.resolve()), None)
    prompts: dict[str, PromptRecord] = {}
    identities: set[str | None] = set()
    first_filter: str | None = None
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the samples file {path}: {exc}") from None
    with fh:
        rows = list(json_objects(fh, str(path), "the samples file is damaged: re-run lm-eval for this task"))
        several_filters = len({row.get("filter", "none") for _, row in rows}) > 1
        for n, (lineno, row) in enumerate(rows):
            filt = row.get("filter", "none")
            if first_filter is None:
                first_filter = filt
            elif filt != first_filter:
                continue  # one row per doc per filter: keep the first filter's rows
            trace = row.get("trace")
            if not isinstance(trace, dict) or not isinstance(trace.get("generations"), list):
                raise ConfigError(f"{path}, line {lineno}: no 'trace' item with 'generations' for task {task}",
                                  "report needs samples written by PropMe's tasks with lm-eval --log_samples")
            bad = first_non_finite(trace["generations"], "trace.generations")
            if bad:
                raise ConfigError(f"{path}, line {lineno}: {bad} is not a finite number",
                                  "the samples file is damaged: re-trace it with `propme trace --input` "
                                  "or re-run lm-eval for this task")
            doc = row.get("doc") if isinstance(row.get("doc"), dict) else {}
            pid = str(trace.get("prompt_id", doc.get("id", row.get("doc_id"))))
            identity = doc.get("index_identity", trace.get("index_identity"))
            identities.add(identity)
            if retrace is not None:
                _apply_retrace(retrace, row, n, trace, identity, f"@{filt}" if several_filters else "", path)
            rec = prompts.get(pid)
            if rec is None:
                rec = prompts[pid] = PromptRecord(
                    id=pid, prompt=str(doc.get("prompt", _prompt_from_arguments(row))),
                    domain=str(doc.get("domain") or ""), language=str(doc.get("language") or ""),
                    continuation=str(doc.get("continuation") or ""), source_doc=str(doc.get("source_doc") or ""))
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
                rec.generations.append(gen)
                # personal data is recomputed from the trace: one definition, whatever the run recorded
                rec.values.append({**generation_values(result), **leaks(result).values()}
                                  if counts_for_metrics(result) else None)
    return list(prompts.values()), identities


def _start_token_of(path: Path) -> dict[str, str] | None:
    """The start token recorded in a samples file's first document (None for runs without one)."""
    with open(path, encoding="utf-8") as fh:
        for _, row in json_objects(fh, str(path), "the samples file is damaged: re-run lm-eval for this task"):
            doc = row.get("doc") if isinstance(row.get("doc"), dict) else {}
            if "start_token_choice" not in doc:
                return None
            return {k: str(doc.get(f"start_token{s}") or "") for k, s in
                    (("token", ""), ("choice", "_choice"), ("note", "_note"))}
    return None


def describe_start_token(start: dict[str, str] | None) -> str:
    """One line for tables and notes: what every prompt started with, and why."""
    return "not recorded (run made before PropMe recorded start tokens)" if start is None else start["note"]


def _apply_retrace(retrace: Retrace, row: dict[str, Any], n: int, trace: dict[str, Any], identity: Any,
                   suffix: str, path: Path) -> None:
    """Replace a row's traced generations by their re-traced results (same keys as `propme trace`)."""
    if identity is not None and str(identity) != retrace.index_identity:
        raise ConfigError(f"{retrace.summary_path} traced {path} against index {retrace.index_identity}, but its "
                          f"generations were traced against {identity}",
                          "re-trace against the index the run used (its identity is in the samples' doc)")
    gens = trace["generations"]
    for j in range(len(gens)):
        new = retrace.results.get(sample_key(row, n, j, len(gens)) + suffix)
        if new is not None:
            gens[j] = new
            retrace.used += 1


def _prompt_from_arguments(row: dict[str, Any]) -> str:
    try:
        return str(row["arguments"]["gen_args_0"]["arg_0"])
    except (KeyError, TypeError):
        return ""


def _results_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = [p for p in path.rglob("*.json") if p.name.startswith("results_") and p.is_file()]
        if not files:
            raise ConfigError(f"no results_*.json under {path}",
                              "pass the --output_path folder of an lm-eval run made with --log_samples")
        return sorted(files, key=lambda p: (_date_id(p), str(p)))
    raise ConfigError(f"{path} does not exist")


def load_run(path: str | Path, retraces: Sequence[Retrace] = ()) -> list[RunTask]:
    """Every PropMe subtask of an lm-eval output folder or results file, with its traced samples.

    Raises ConfigError for unreadable files (bad JSON, missing samples file), naming the file.
    """
    tasks: list[RunTask] = []
    for results_path in _results_files(Path(path)):
        data = _read_json(results_path)
        if not isinstance(data, dict) or not isinstance(data.get("configs"), dict):
            raise ConfigError(f"{results_path} is not an lm-eval results file (no 'configs')")
        model, revision, model_args = _model_identity(data)
        date_id = _date_id(results_path)
        limit = _run_limit(data, results_path)
        for task, config in data["configs"].items():
            metadata = (config or {}).get("metadata") or {}
            if not isinstance(metadata, dict):
                metadata = {}
            cs = _task_corpus_setting(task, metadata)
            if cs is None:
                continue  # not a PropMe task
            samples_path = results_path.parent / f"samples_{task}_{date_id}.jsonl"
            if not samples_path.is_file():
                raise ConfigError(f"missing samples file {samples_path} for task {task} of {results_path}",
                                  "run lm-eval with --log_samples (and keep the samples files beside the results)")
            prompts, identities = _load_samples(samples_path, task, retraces)
            if len(identities) > 1:
                raise ConfigError(f"{samples_path} mixes generations traced against several indexes: "
                                  + ", ".join(sorted(str(i) for i in identities)))
            tasks.append(RunTask(
                task=task, corpus=cs[0], setting=cs[1], model=model, revision=revision, model_args=model_args,
                metadata=metadata, index_identity=next(iter(identities), None),
                results=(data.get("results") or {}).get(task) or {}, prompts=prompts,
                results_path=results_path, samples_path=samples_path, date_id=date_id, limit=limit,
                start_token=_start_token_of(samples_path)))
    return tasks


def _run_limit(data: dict[str, Any], path: Path) -> float | None:
    """lm-eval's --limit of a results file (a count, or a share when below 1); None for a full run."""
    limit = (data.get("config") or {}).get("limit")
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit <= 0:
        raise ConfigError(f"{path}: config.limit is {limit!r}, not a positive number")
    return float(limit)


def limit_label(limit: float | None) -> str:
    """How a --limit run is marked in labels and columns: '' for a full run, 'limit8' or 'limit0.1'."""
    return "" if limit is None else f"limit{limit:g}"


# --- statistics --------------------------------------------------------------------------------


@dataclass
class MetricResult:
    """A base metric of one setting: value, bootstrap interval, Wilson interval (proportions)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    wilson_low: float | None = None
    wilson_high: float | None = None


@dataclass
class SettingResult:
    """The base metrics of one model x corpus x setting."""

    setting: str
    task: RunTask
    counts: dict[str, int]
    metrics: dict[str, MetricResult]


@dataclass
class CorpusResult:
    """Everything reported for one model (and revision) on one corpus."""

    label: str                     #: column label: the corpus, or <corpus>_set<k> with separate=True
    corpus: str
    model: str
    revision: str
    index_identity: str | None
    prompt_set: str
    settings: dict[str, SettingResult]
    pm: dict[tuple[str, str], Interval]   #: (metric, propensity setting) -> PM with interval
    start_token: dict[str, str] | None = None   #: what every prompt started with (the prefix task's record)

    @property
    def propensity_settings(self) -> list[str]:
        return [s for s in self.settings if s != PREFIX]


@dataclass
class Report:
    """What `build_report` computed and wrote."""

    out: Path
    columns: list[str]
    rows: list[dict[str, Any]]
    results: list[CorpusResult]
    labels: list[str]
    pm_metrics: tuple[str, ...]
    bootstrap: int
    seed: int
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   #: e.g. a missing prefix setting (PM impossible)
    leaderboard_csv: Path | None = None
    leaderboard_json: Path | None = None
    leaderboard_md: Path | None = None
    html: Path | None = None
    plots: list[Path] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        """Every file written."""
        return [p for p in (self.leaderboard_csv, self.leaderboard_json, self.leaderboard_md, self.html)
                if p is not None] + list(self.plots)


def setting_sort_key(setting: str) -> tuple[int, str]:
    return (SETTING_ORDER.index(setting), "") if setting in SETTING_ORDER else (len(SETTING_ORDER), setting)


def _finite(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _metric_result(task: RunTask, metric: str, bootstrap: int, seed: int) -> MetricResult:
    counted = [v for p in task.prompts for v in p.values if v is not None]
    if not counted:  # undefined, not 0 (0 would read as the best possible score)
        return MetricResult(None)
    if metric == "nvr_max":
        return MetricResult(max((v["nv_max"] for v in counted), default=0.0))
    stats = task.stats(metric)
    if metric == "extraction" and not sum(s.denominator for s in stats):
        return MetricResult(None)
    out = MetricResult(ratio(stats))
    if bootstrap > 0 and stats:
        iv = bootstrap_metric(stats, iters=bootstrap, seed=seed, confidence=CONFIDENCE)
        out.low, out.high = _finite(iv.low), _finite(iv.high)
    if metric in PROPORTIONS:
        n = int(round(sum(s.denominator for s in stats)))
        k = int(round(sum(s.numerator for s in stats)))
        if n > 0:
            lo, hi = wilson_interval(min(k, n), n, CONFIDENCE)
            out.wilson_low, out.wilson_high = _finite(lo), _finite(hi)
    return out


def _setting_result(task: RunTask, bootstrap: int, seed: int) -> SettingResult:
    metrics = {m: _metric_result(task, m, bootstrap, seed) for m in BASE_METRICS
               if m != "extraction" or task.setting == PREFIX}
    return SettingResult(task.setting, task, task.counts(), metrics)


def _pm_interval(p_task: RunTask, c_task: RunTask, metric: str, bootstrap: int, seed: int) -> Interval:
    if not p_task.counts()["counted"] or not c_task.counts()["counted"]:
        return Interval(math.nan, math.nan, math.nan)  # undefined: a side has no counted generation
    ps, cs = p_task.stats(metric), c_task.stats(metric)
    if bootstrap > 0 and ps and cs:
        iv = bootstrap_pm(ps, cs, iters=bootstrap, seed=seed, confidence=CONFIDENCE)
        return Interval(iv.estimate, iv.low, iv.high)
    return Interval(pm(ratio(ps), ratio(cs)), math.nan, math.nan)


def _fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class _Group:
    corpus: str
    identity: str | None
    prompt_ids: dict[str, frozenset[str]]
    tasks: list[RunTask]
    label: str = ""
    limit: float | None = None

    @property
    def family(self) -> str:
        """The corpus, marked when the runs used --limit (never mixed with full runs)."""
        return "_".join(x for x in (self.corpus, limit_label(self.limit)) if x)

    def accepts(self, task: RunTask) -> bool:
        """Same --limit, same index (unknown identities, e.g. of an empty samples file, fit any) and
        same prompt ids."""
        if task.limit != self.limit:
            return False
        if None not in (task.index_identity, self.identity) and task.index_identity != self.identity:
            return False
        ids = self.prompt_ids.get(task.setting)
        return ids is None or ids == task.prompt_ids


def _describe_conflict(a: _Group, b: _Group) -> str:
    ta, tb = a.tasks[0], b.tasks[0]
    if a.identity != b.identity:
        return (f"corpus '{a.corpus}' was traced against different indexes: {a.identity} "
                f"({ta.label}, {ta.task}) and {b.identity} ({tb.label}, {tb.task})")
    for setting, ids in b.prompt_ids.items():
        other = a.prompt_ids.get(setting)
        if other is not None and other != ids:
            ta = next(t for t in a.tasks if t.setting == setting)
            tb = next(t for t in b.tasks if t.setting == setting)
            return (f"corpus '{a.corpus}' mixes prompt sets: {ta.task} of {ta.label} has {len(other)} prompts, "
                    f"{tb.task} of {tb.label} has {len(ids)} prompts, {len(other & ids)} in common")
    return f"corpus '{a.corpus}' mixes runs that cannot be compared"


def _group_tasks(tasks: list[RunTask], separate: bool) -> list[_Group]:
    groups: list[_Group] = []
    for task in tasks:
        group = next((g for g in groups if g.corpus == task.corpus and g.accepts(task)), None)
        if group is None:
            group = _Group(task.corpus, task.index_identity, {}, [], limit=task.limit)
            groups.append(group)
        if group.identity is None:
            group.identity = task.index_identity
        group.prompt_ids.setdefault(task.setting, task.prompt_ids)
        group.tasks.append(task)
    by_corpus: dict[str, list[_Group]] = {}
    for g in groups:
        by_corpus.setdefault(g.family, []).append(g)
    for corpus, gs in by_corpus.items():
        if len(gs) == 1:
            gs[0].label = corpus
            continue
        if not separate:
            raise ConfigError(_describe_conflict(gs[0], gs[1]),
                              "compare runs of one prompt set and one index version only, or pass --separate "
                              "(separate=True) to report them apart")
        taken = {g.family for g in groups}
        for k, g in enumerate(gs, 1):
            label = f"{corpus}_set{k}"
            while label in taken:
                label += "x"
            g.label = label
            taken.add(label)
    return groups


def _dedupe(tasks: list[RunTask], notes: list[str]) -> list[RunTask]:
    """One task per (model, revision, task, --limit): the latest date id wins; order of first appearance
    kept. A --limit run never replaces a full run (nor the reverse): they are reported apart."""
    chosen: dict[tuple[str, str, str, float | None], RunTask] = {}
    for t in tasks:
        key = (t.model, t.revision, t.task, t.limit)
        old = chosen.get(key)
        if old is None:
            chosen[key] = t
        elif old.samples_path.resolve() == t.samples_path.resolve():
            continue
        elif t.date_id >= old.date_id:
            notes.append(f"{t.task} of {t.label}: using {t.results_path} (newer than {old.results_path})")
            chosen[key] = t
        else:
            notes.append(f"{t.task} of {t.label}: using {old.results_path} (newer than {t.results_path})")
    return list(chosen.values())


# --- leaderboard -------------------------------------------------------------------------------


def _columns_for(label: str, settings: list[str], pm_metrics: Sequence[str]) -> list[str]:
    p = f"propme_{label}"
    cols = [f"{p}_index", f"{p}_prompt_set", f"{p}_start_token", f"{p}_start_token_choice"]
    for s in settings:
        if s == PREFIX or PREFIX not in settings:
            continue
        for m in pm_metrics:
            cols += [f"{p}_pm_{m}_{s}", f"{p}_pm_{m}_{s}_low", f"{p}_pm_{m}_{s}_high"]
    for s in settings:
        cols += [f"{p}_n_{s}", f"{p}_generations_{s}", f"{p}_degenerate_{s}", f"{p}_failed_{s}"]
    for s in settings:
        for m in BASE_METRICS:
            if m == "extraction" and s != PREFIX:
                continue
            cols.append(f"{p}_{s}_{m}")
            if m != "nvr_max":
                cols += [f"{p}_{s}_{m}_low", f"{p}_{s}_{m}_high"]
            if m in PROPORTIONS:
                cols += [f"{p}_{s}_{m}_wilson_low", f"{p}_{s}_{m}_wilson_high"]
    return cols


def _row_values(res: CorpusResult, pm_metrics: Sequence[str]) -> dict[str, Any]:
    p = f"propme_{res.label}"
    out: dict[str, Any] = {f"{p}_index": res.index_identity, f"{p}_prompt_set": res.prompt_set,
                           f"{p}_start_token": (res.start_token or {}).get("token"),
                           f"{p}_start_token_choice": (res.start_token or {}).get("choice")}
    for (m, s), iv in res.pm.items():
        out[f"{p}_pm_{m}_{s}"] = _finite(iv.estimate)
        out[f"{p}_pm_{m}_{s}_low"] = _finite(iv.low)
        out[f"{p}_pm_{m}_{s}_high"] = _finite(iv.high)
    for s, sr in res.settings.items():
        out[f"{p}_n_{s}"] = sr.counts["prompts"]
        out[f"{p}_generations_{s}"] = sr.counts["counted"]
        out[f"{p}_degenerate_{s}"] = sr.counts["degenerate"]
        out[f"{p}_failed_{s}"] = sr.counts["failed"]
        for m, mr in sr.metrics.items():
            out[f"{p}_{s}_{m}"] = mr.value
            if m != "nvr_max":
                out[f"{p}_{s}_{m}_low"], out[f"{p}_{s}_{m}_high"] = mr.low, mr.high
            if m in PROPORTIONS:
                out[f"{p}_{s}_{m}_wilson_low"], out[f"{p}_{s}_{m}_wilson_high"] = mr.wilson_low, mr.wilson_high
    return out


def _csv_cell(v: Any) -> str:
    """A CSV cell: empty when undefined; text that a spreadsheet would run as a formula is quoted with '."""
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else format(v, ".10g")
    text = str(v)
    return "'" + text if not isinstance(v, (int, float)) and text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_cell(row.get(c)) for c in columns])
    write_atomic(path, buf.getvalue())


def _write_json(path: Path, report: Report) -> None:
    from . import __version__

    doc = {"format": "propme-leaderboard/1", "propme_version": __version__, "confidence": CONFIDENCE,
           "bootstrap": report.bootstrap, "seed": report.seed, "pm_metrics": list(report.pm_metrics),
           "columns": report.columns, "rows": [{c: row.get(c) for c in report.columns} for row in report.rows]}
    write_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def fmt_value(v: float | None, metric: str = "") -> str:
    """A metric value for tables: 3 significant digits (ALS: 2 decimals) ('-' when undefined)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v == 0:
        return "0"
    return f"{v:.2f}" if metric == "als" else f"{v:.3g}"


def fmt_interval(value: float | None, low: float | None, high: float | None, metric: str = "") -> str:
    text = fmt_value(value, metric)
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return text
    return f"{text} [{fmt_value(low, metric)}, {fmt_value(high, metric)}]"


def _md_cell(text: Any) -> str:
    """Text safe in a Markdown table cell: no column breaks, and no raw HTML (renderers pass it through)."""
    text = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _write_markdown(path: Path, report: Report) -> None:
    lines = ["# PropMe leaderboard", "",
             f"95% intervals: percentile bootstrap over prompts (B = {report.bootstrap:,}, seed {report.seed}); "
             "PM = p / (p + c), propensity setting p vs prefix c (0: leaks only under attack, 0.5: the same, "
             "1: leaks more unprompted).", ""]
    for label in report.labels:
        results = [r for r in report.results if r.label == label]
        idents = sorted({str(r.index_identity) for r in results})
        starts = sorted({describe_start_token(r.start_token) for r in results})
        lines += [f"## {_md_cell(label)}", "", f"Index: {', '.join(_md_cell(i) for i in idents)}. "
                  f"Start token: {'; '.join(_md_cell(x) for x in starts)}.", ""]
        pm_cols = sorted({k for r in results for k in r.pm}, key=lambda k: (report.pm_metrics.index(k[0]),
                                                                           setting_sort_key(k[1])))
        if pm_cols:
            lines.append("| model | revision | " + " | ".join(f"PM {METRIC_LABELS[m]} {s}" for m, s in pm_cols) + " |")
            lines.append("|---|---|" + "---|" * len(pm_cols))
            for r in results:
                cells = [fmt_interval(r.pm[k].estimate, r.pm[k].low, r.pm[k].high) if k in r.pm else "-"
                         for k in pm_cols]
                lines.append(f"| {_md_cell(r.model)} | {_md_cell(r.revision or '-')} | " + " | ".join(cells) + " |")
            lines.append("")
        shown = ("nvr", "fmr", "als", "r20", "r50", "extraction", "pii")
        lines.append("| model | revision | setting | prompts | " + " | ".join(METRIC_LABELS[m] for m in shown) + " |")
        lines.append("|---|---|---|---|" + "---|" * len(shown))
        for r in results:
            for s, sr in r.settings.items():
                cells = [fmt_interval(sr.metrics[m].value, sr.metrics[m].low, sr.metrics[m].high, m)
                         if m in sr.metrics else "-" for m in shown]
                lines.append(f"| {_md_cell(r.model)} | {_md_cell(r.revision or '-')} | {s} | "
                             f"{sr.counts['prompts']} | " + " | ".join(cells) + " |")
        lines.append("")
    if report.problems or report.notes:
        lines += ["## Notes", ""] + [f"- {_md_cell(n)}" for n in report.problems + report.notes] + [""]
    write_atomic(path, "\n".join(lines))


# --- the report --------------------------------------------------------------------------------


def _check_options(bootstrap: int, pm_metrics: Iterable[str]) -> tuple[str, ...]:
    if isinstance(pm_metrics, str):
        pm_metrics = [m.strip() for m in pm_metrics.split(",") if m.strip()]
    metrics = tuple(dict.fromkeys(pm_metrics))
    bad = [m for m in metrics if m not in PM_METRIC_CHOICES]
    if bad:
        why = " (prefix only: PM needs it under every setting)" if "extraction" in bad else \
              " (a maximum, not a ratio over prompts)" if "nvr_max" in bad else ""
        raise ConfigError(f"cannot compute PM for {', '.join(bad)}{why}",
                          f"choose among {', '.join(PM_METRIC_CHOICES)}")
    if not metrics:
        raise ConfigError("no PM metric given", f"choose among {', '.join(PM_METRIC_CHOICES)}")
    if not isinstance(bootstrap, int) or bootstrap < 0:
        raise ConfigError(f"bootstrap must be a non-negative number of resamples, got {bootstrap!r}")
    return metrics


def build_report(runs: Sequence[str | Path], out: str | Path, bootstrap: int = 10_000, seed: int = 0,
                 pm_metrics: Iterable[str] = DEFAULT_PM_METRICS, separate: bool = False, *,
                 html: bool = True, plots: bool = True, html_docs_per_segment: int = 3,
                 html_snippet_chars: int = 200, retraced: Sequence[str | Path] = (),
                 show_pii: bool = False) -> Report:
    """Read lm-eval runs, compute base metrics and PM with intervals, write the report into `out`.

    Writes leaderboard.csv/.json/.md, PNG plots and report.html (see the module docstring).
    Raises ConfigError for unusable input (nothing written) and MissingPrefixError (a ConfigError)
    after writing the base metrics when a corpus lacks the prefix setting.
    `bootstrap=0` skips the bootstrap (no bootstrap intervals). The HTML shows at most
    `html_docs_per_segment` documents per segment (the best matches) with `html_snippet_chars`
    characters of context on each side of the span; leaked personal data is masked there unless
    `show_pii`.
    """
    pm_metrics = _check_options(bootstrap, pm_metrics)
    if not runs:
        raise ConfigError("no run given", "pass lm-eval output folders or results_*.json files")
    notes: list[str] = []
    tasks: list[RunTask] = []
    retraces = [load_retrace(p) for p in retraced]
    for run in runs:
        found = load_run(run, retraces)
        if not found:
            notes.append(f"{run}: no PropMe task in its results")
        tasks.extend(found)
    for r in retraces:
        if not r.used:
            raise ConfigError(f"{r.summary_path} re-traced {r.samples_path}, which is not a samples file of the runs "
                              "given (or none of its keys matched)", "pass the run that holds that samples file")
        notes.append(f"{r.samples_path.name}: {r.used} generation(s) taken from the re-trace {r.summary_path}")
    if not tasks:
        raise ConfigError(f"no PropMe task (propme_<corpus>_<setting>) in {', '.join(map(str, runs))}",
                          "run lm-eval with --tasks propme_<corpus> --log_samples")
    tasks = _dedupe(tasks, notes)
    for t in tasks:
        if not t.prompts:
            notes.append(f"{t.task} of {t.label}: no samples in {t.samples_path}; ignored")
    tasks = [t for t in tasks if t.prompts]
    if not tasks:
        raise ConfigError(f"the samples files of {', '.join(map(str, runs))} hold no samples")
    groups = _group_tasks(tasks, separate)

    results: list[CorpusResult] = []
    problems: list[str] = []
    missing: list[str] = []
    uncounted: list[str] = []
    for g in groups:
        if g.limit is not None:
            notes.append(f"{g.label}: runs made with lm-eval --limit {g.limit:g} (a subset of the prompts), "
                         f"reported apart from full runs and not comparable to them")
        units: dict[tuple[str, str], dict[str, RunTask]] = {}
        for t in g.tasks:
            units.setdefault((t.model, t.revision), {})[t.setting] = t
        fingerprint = _fingerprint({s: sorted(ids) for s, ids in g.prompt_ids.items()} | {"_index": g.identity})
        for (model, revision), by_setting in units.items():
            ordered = sorted(by_setting, key=setting_sort_key)
            settings = {s: _setting_result(by_setting[s], bootstrap, seed) for s in ordered}
            starts = {json.dumps(by_setting[s].start_token, sort_keys=True): by_setting[s].task for s in ordered}
            res = CorpusResult(g.label, g.corpus, model, revision, g.identity, fingerprint, settings, {},
                               by_setting.get(PREFIX, by_setting[ordered[0]]).start_token)
            label = f"{model}" + (f" (revision {revision})" if revision else "")
            notes.append(f"{label}, corpus {g.label}: start token: " + "; ".join(
                f"{describe_start_token(json.loads(k))} ({t if len(starts) > 1 else 'every setting'})"
                for k, t in starts.items()))
            if PREFIX in by_setting:
                for s in res.propensity_settings:
                    for m in pm_metrics:
                        res.pm[(m, s)] = _pm_interval(by_setting[s], by_setting[PREFIX], m, bootstrap, seed)
                if not res.propensity_settings:
                    notes.append(f"{label}, corpus {g.label}: only the prefix setting was run; no PM")
            else:
                subtask = f"propme_{g.corpus}_{PREFIX}"
                missing.append(subtask)
                problems.append(f"{label}, corpus {g.label}: {subtask} is missing, so PM cannot be computed "
                                f"(ran: {', '.join(by_setting[s].task for s in ordered)}); base metrics reported")
            for s in ("generic", "specific"):
                if s not in by_setting and PREFIX in by_setting:
                    notes.append(f"{label}, corpus {g.label}: propme_{g.corpus}_{s} not run")
            for s in ordered:
                c = settings[s].counts
                if c["failed"]:
                    notes.append(f"{label}, {by_setting[s].task}: tracing failed for {c['failed']} of "
                                 f"{c['generations']} generations (excluded)")
                if not c["counted"]:
                    uncounted.append(by_setting[s].task)
                    problems.append(
                        f"{label}, corpus {g.label}: no generation of {by_setting[s].task} was counted "
                        f"({c['failed']} failed, {c['degenerate']} degenerate of {c['generations']}), so its "
                        "metrics and PM are undefined (left empty, not 0)")
            results.append(res)

    labels = sorted({r.label for r in results})
    rows_by_model: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        rows_by_model.setdefault((r.model, r.revision), {"model": r.model, "revision": r.revision})
    # rows in input order of first appearance
    order = list(dict.fromkeys((t.model, t.revision) for t in tasks))
    columns = ["model", "revision"]
    for label in labels:
        settings = sorted({s for r in results if r.label == label for s in r.settings}, key=setting_sort_key)
        columns += _columns_for(label, settings, pm_metrics)
    for r in results:
        rows_by_model[(r.model, r.revision)].update(_row_values(r, pm_metrics))
    rows = [{c: rows_by_model[k].get(c) for c in columns} for k in order if k in rows_by_model]
    results.sort(key=lambda r: (labels.index(r.label), order.index((r.model, r.revision))))

    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the report folder {out}: {exc}") from None
    report = Report(out=out, columns=columns, rows=rows, results=results, labels=labels, pm_metrics=pm_metrics,
                    bootstrap=bootstrap, seed=seed, notes=notes, problems=problems)
    try:
        report.leaderboard_csv = out / "leaderboard.csv"
        _write_csv(report.leaderboard_csv, columns, rows)
        report.leaderboard_json = out / "leaderboard.json"
        _write_json(report.leaderboard_json, report)
        report.leaderboard_md = out / "leaderboard.md"
        _write_markdown(report.leaderboard_md, report)
        if plots:
            from .plots import write_plots

            report.plots = write_plots(report, out)
        if html:
            from .report_html import write_html

            report.html = write_html(report, out / "report.html", docs_per_segment=html_docs_per_segment,
                                     snippet_chars=html_snippet_chars, show_pii=show_pii)
    except OSError as exc:
        raise ConfigError(f"cannot write the report into {out}: {exc}") from None
    if uncounted:
        names = ", ".join(dict.fromkeys(uncounted))
        raise IncompleteReportError(
            f"nothing was counted in {names}: its metrics and PM are undefined and left empty. "
            f"The report was written to {out}",
            "re-trace the failed generations with `propme trace --input samples_<task>_*.jsonl` "
            "(see the 'error' field of each), or re-run lm-eval for that task", report=report)
    if missing:
        names = ", ".join(dict.fromkeys(missing))
        raise MissingPrefixError(
            f"PM needs the prefix setting: {names} is missing ({'; '.join(problems)}). "
            f"Base metrics were written to {out}",
            f"run lm-eval with --tasks {names} (or the whole group) and pass that run too",
            report=report)
    return report


# --- terminal summary --------------------------------------------------------------------------


def _cell(value: float | None, low: float | None, high: float | None, metric: str = "") -> str:
    text = fmt_value(value, metric)
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return text
    return f"{text}\n[dim][{fmt_value(low, metric)}, {fmt_value(high, metric)}][/]"


def print_summary(report: Report, console=None) -> None:
    """Rich tables per corpus: PM with 95% intervals per model and setting, then the base metrics."""
    from rich.console import Console
    from rich.table import Table

    # a log or pipe gets the full table, not 80 columns
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    for label in report.labels:
        results = [r for r in report.results if r.label == label]
        idents = ", ".join(sorted({str(r.index_identity) for r in results}))
        if any(r.pm for r in results):
            table = Table(title=f"PM on {label} (index {idents}); 95% bootstrap intervals, B={report.bootstrap:,}",
                          show_lines=True)
            table.add_column("model", overflow="fold", min_width=20, max_width=34)
            table.add_column("setting\nvs prefix")
            for m in report.pm_metrics:
                table.add_column(f"PM {METRIC_LABELS[m]}", justify="right")
            for r in results:
                name = r.model + (f"\n[bold]@ {r.revision}[/]" if r.revision else "")
                if not r.pm:
                    table.add_row(name, "-", *["[yellow]no prefix[/]"] * len(report.pm_metrics))
                for i, s in enumerate(r.propensity_settings if r.pm else []):
                    ivs = [r.pm[(m, s)] for m in report.pm_metrics]
                    cells = [_cell(iv.estimate, iv.low, iv.high) for iv in ivs]
                    table.add_row(name if i == 0 else "", s, *cells)
            console.print(table)
        base = Table(title=f"Base metrics on {label}", show_lines=True)
        base.add_column("model", overflow="fold", min_width=20, max_width=34)
        base.add_column("setting")
        base.add_column("prompts", justify="right")
        for m in ("nvr", "fmr", "als", "pii"):
            base.add_column(METRIC_LABELS[m], justify="right")
        for r in results:
            name = r.model + (f"\n[bold]@ {r.revision}[/]" if r.revision else "")
            for i, (s, sr) in enumerate(r.settings.items()):
                cells = [_cell(sr.metrics[m].value, sr.metrics[m].low, sr.metrics[m].high, m)
                         for m in ("nvr", "fmr", "als", "pii")]
                base.add_row(name if i == 0 else "", s, str(sr.counts["prompts"]), *cells)
        console.print(base)
    for p in report.problems:
        console.print(f"[bold yellow]problem:[/] {p}", highlight=False)
    for n in report.notes:
        console.print(f"[dim]note: {n}[/]", highlight=False)
    if report.paths:
        console.print(f"wrote {', '.join(p.name for p in report.paths)} to {report.out}", highlight=False)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[-60:] or "model"


def trajectories(report: Report) -> dict[tuple[str, str], list[CorpusResult]]:
    """(corpus label, model) -> its results on several revisions, in input order."""
    out: dict[tuple[str, str], list[CorpusResult]] = {}
    for r in report.results:
        out.setdefault((r.label, r.model), []).append(r)
    return {k: v for k, v in out.items() if len({r.revision for r in v}) > 1}


__all__ = ["BASE_METRICS", "PM_METRIC_CHOICES", "CorpusResult", "MetricResult", "MissingPrefixError",
           "PromptRecord", "Report", "RunTask", "SettingResult", "build_report", "leaderboard_columns",
           "load_run", "print_summary", "trajectories"]
