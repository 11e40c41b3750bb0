"""Every Eval Ever records: the report's numbers in the EvalEval coalition's results format (schema 0.3.0).

`propme report` writes one record per model and revision into `<out>/eee/` (`<model>[@<revision>].json`).
Each base metric of each setting and each PM is one `evaluation_result`:

- `evaluation_result_id` and `metric_config.metric_id`: `propme.<corpus>.<metric>.<setting>`, PM as
  `propme.<corpus>.pm_<metric>.<setting>` (a namespaced id, as the schema asks of metrics that have
  no canonical global id); `evaluation_name` is the lm-eval task (`propme_<corpus>_<setting>`), as the
  schema's own lm-eval converter names results;
- `lower_is_better` from the registry (every PropMe metric measures memorization), the range
  (`min_score`, `max_score`: proportions and PM in [0, 1], ALS and PII items unbounded above);
- `score_details.uncertainty`: the interval shown for the metric (`confidence_interval` with its
  `method` and `confidence_level`), `num_samples` (the units the interval resamples or counts) and
  `num_bootstrap_samples` for a bootstrap interval;
- `source_data` (a private data set): the index identity, prompt-set fingerprint and start token.

An undefined value (None: nothing to compute it from) is left out, never written as 0; an interval
whose ends are undefined is left out of its result. The records hold no personal data values.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from propme_metrics.core.files import write_atomic
from propme_metrics.metrics import registry
from propme_metrics.metrics.results import CorpusResult, MetricResult, finite
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS
from propme_metrics.report.cells import slug
from propme_metrics.report.contents import Report

#: the schema version the records follow (tests validate them against the official schema files)
SCHEMA_VERSION = "0.3.0"
#: the folder of the records inside the report folder
EEE_DIR = "eee"
#: metrics whose values have no upper bound (the rest, and PM, lie in [0, 1])
_UNBOUNDED = {"als": "tokens", "pii_items": "items per generation"}


@dataclass(frozen=True)
class ShownInterval:
    """The interval a record gives for a value: its ends, how it was computed, over how many units."""

    low: float
    high: float
    method: str
    num_samples: int
    confidence: float
    resamples: int | None = None   #: bootstrap resamples (None for a closed-form interval)


def _defined(*values: float | None) -> bool:
    return all(finite(v) is not None for v in values)


def _shown_interval(res: CorpusResult, setting: str, metric: str, mr: MetricResult) -> ShownInterval | None:
    """The interval the report shows for a base metric, with the method `metrics.pm.metric_interval` chose
    (modified Wilson over counted generations for a proportion, a bootstrap over units otherwise)."""
    if not (mr.method and _defined(mr.low, mr.high)):
        return None
    stats = res.settings[setting].task.stats(metric)
    n = int(round(sum(s.denominator for s in stats))) if registry.metric(metric).proportion else len(stats)
    return ShownInterval(mr.low, mr.high, mr.method, n, mr.confidence, mr.resamples or None)


def _unit(setting: str) -> str:
    return "generation" if setting in PROMPT_FREE_SETTINGS else "prompt"


def _source_data(res: CorpusResult, setting: str) -> dict[str, Any]:
    start = res.start_token or {}
    details = {"corpus": res.corpus, "corpus_label": res.label, "setting": setting,
               "index_identity": res.index_identity or "", "prompt_set": res.prompt_set,
               "start_token": start.get("token", ""), "start_token_choice": start.get("choice", "")}
    return {"dataset_name": f"propme_{res.label}_{setting}", "source_type": "other",
            "additional_details": {k: str(v) for k, v in details.items()}}


def _metric_config(metric_id: str, name: str, description: str, unit: str | None, higher_is_better: bool,
                   parameters: dict[str, Any]) -> dict[str, Any]:
    """`unit` None: a value in [0, 1]; else the unit of a value without an upper bound."""
    return {"evaluation_description": description, "metric_id": metric_id, "metric_name": name,
            "metric_kind": "memorization", "metric_unit": unit or "proportion",
            "lower_is_better": not higher_is_better, "score_type": "continuous",
            "min_score": 0.0, "max_score": 1.0 if unit is None else "Infinity", "metric_parameters": parameters}


def _score(value: float, interval: ShownInterval | None, details: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"score": value, "details": {k: str(v) for k, v in details.items()}}
    if interval is not None:
        uncertainty: dict[str, Any] = {
            "confidence_interval": {"lower": interval.low, "upper": interval.high, "confidence_level": interval.confidence,
                                    "method": interval.method},
            "num_samples": interval.num_samples}
        if interval.resamples is not None:
            uncertainty["num_bootstrap_samples"] = interval.resamples
        out["uncertainty"] = uncertainty
    return out


def _base_results(res: CorpusResult) -> list[dict[str, Any]]:
    out = []
    for setting, sr in res.settings.items():
        for metric, mr in sr.metrics.items():
            if not _defined(mr.value):
                continue  # undefined: left out, never 0
            spec = registry.metric(metric)
            metric_id = f"propme.{res.label}.{metric}.{setting}"
            params = {"setting": setting, "aggregation": spec.aggregation.name, "unit_of_resampling": _unit(setting)}
            if metric == "fmr_rare":
                params["rare_max_count"] = sr.task.rare_max_count
            out.append({
                "evaluation_result_id": metric_id, "evaluation_name": sr.task.task,
                "source_data": _source_data(res, setting),
                "metric_config": _metric_config(metric_id, spec.label, spec.description, _UNBOUNDED.get(metric),
                                                spec.higher_is_better, params),
                "score_details": _score(mr.value, _shown_interval(res, setting, metric, mr),
                                        {"prompts": sr.counts["prompts"], "generations_counted": sr.counts["counted"],
                                         "degenerate": sr.counts["degenerate"], "failed": sr.counts["failed"]})})
    return out


def _pm_results(res: CorpusResult) -> list[dict[str, Any]]:
    out = []
    for (metric, setting), iv in res.pm.items():
        if not _defined(iv.estimate):
            continue  # undefined: a side has nothing counted
        spec = registry.metric(metric)
        metric_id = f"propme.{res.label}.pm_{metric}.{setting}"
        p_task, c_task = res.settings[setting].task, res.settings[PREFIX].task
        interval = None
        if iv.method and _defined(iv.low, iv.high):
            interval = ShownInterval(iv.low, iv.high, iv.method, len(p_task.stats(metric)), iv.confidence,
                                     iv.resamples or None)
        params = {"base_metric": metric, "propensity_setting": setting, "capability_setting": PREFIX}
        out.append({
            "evaluation_result_id": metric_id, "evaluation_name": f"propme_{res.label}_{setting}_vs_{PREFIX}",
            "source_data": _source_data(res, setting),
            "metric_config": _metric_config(
                metric_id, f"PM {spec.label}",
                f"PM = p / (p + c) of {spec.label}: {setting} (p) against {PREFIX} (c); 0 leaks only under "
                "attack, 0.5 the same, 1 more unprompted", None, False, params),
            "score_details": _score(iv.estimate, interval, {
                "propensity_units": len(p_task.stats(metric)), "capability_units": len(c_task.stats(metric)),
                "resampling": f"{_unit(setting)}s of {setting} and prompts of {PREFIX}, independently",
                **({"withheld": iv.withheld} if iv.withheld else {})})})
    return out


def _model_info(model: str, revision: str, model_args: str) -> dict[str, Any]:
    details = {"deployment_type": "unknown", "model_availability": "unknown", "model_args": model_args}
    if revision:
        details["revision"] = revision
    info: dict[str, Any] = {"name": model, "id": model, "additional_details": details}
    if "/" in model and not model.startswith(("/", ".", "~")):
        info["developer"] = model.split("/", 1)[0]  # a hub id: its owner, as the schema's converters read it
    return info


def eee_records(report: Report, retrieved: float | None = None) -> dict[str, dict[str, Any]]:
    """File name -> record, one per model and revision, in the report's row order."""
    from propme_metrics import __version__

    stamp = str(int(time.time() if retrieved is None else retrieved))
    by_model: dict[tuple[str, str], list[CorpusResult]] = {}
    for r in report.results:
        by_model.setdefault((r.model, r.revision), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for (model, revision), results in by_model.items():
        who = model + (f"@{revision}" if revision else "")
        first_task = next(iter(results[0].settings.values())).task
        evaluation = [x for r in results for x in (*_pm_results(r), *_base_results(r))]
        record = {
            "schema_version": SCHEMA_VERSION, "evaluation_id": f"propme/{who}/{stamp}", "retrieved_timestamp": stamp,
            "source_metadata": {"source_name": "PropMe", "source_type": "evaluation_run",
                                "source_organization_name": "", "evaluator_relationship": "other",
                                "additional_details": {"corpora": ", ".join(r.label for r in results),
                                                       "bootstrap_seed": str(report.intervals.seed)}},
            "eval_library": {"name": "propme", "version": __version__,
                             "additional_details": {"generations_by": "lm_eval",
                                                    "pm_metrics": ",".join(report.pm_metrics)}},
            "model_info": _model_info(model, revision, first_task.model_args),
            "evaluation_results": evaluation}
        name = f"{slug(who)}.json"
        while name in out:
            name = name[:-5] + "_.json"
        out[name] = record
    return out


def write_eee(report: Report, out: Path, retrieved: float | None = None) -> list[Path]:
    """Write the records into `out/eee/`; the paths written."""
    folder = out / EEE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, record in eee_records(report, retrieved).items():
        path = folder / name
        write_atomic(path, json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
        paths.append(path)
    return paths
