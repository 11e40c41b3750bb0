"""Every Eval Ever records: the report's numbers in the EvalEval coalition's results format (schema 0.3.0).

`propme report` writes one record per model and revision into `<out>/eee/` in the layout of the Every
Eval Ever data repository, `data/propme/<developer>/<model>/<uuid>.json`, with its instance-level
lines beside it as `<uuid>_samples.jsonl`, named in the record's `detailed_evaluation_results`
(`datastore_path`), so `every_eval_ever validate` accepts the files as written and the `data/` folder
can be copied into the repository as it is.
Each base metric of each setting and each PM is one `evaluation_result`:

- `evaluation_result_id` and `metric_config.metric_id`: `propme.<corpus>.<metric>.<setting>`, PM as
  `propme.<corpus>.pm_<metric>.<setting>` (a namespaced id, as the schema asks of metrics that have
  no canonical global id); `evaluation_name` is the lm-eval task (`propme_<corpus>_<setting>`), as the
  schema's own lm-eval converter names results;
- `lower_is_better` from the registry (every PropMe metric measures memorization), the range
  (`min_score`, `max_score`: proportions and PM in [0, 1], ALS and PII items unbounded above);
- `score_details.uncertainty`: the interval shown for the metric (`confidence_interval` with its
  `method`, one of `INTERVAL_METHODS`, and `confidence_level`), `num_samples` (the units the interval
  resamples or counts) and `num_bootstrap_samples` for a bootstrap interval;
- `source_data` (a private data set): the index identity, prompt-set fingerprint and start token.

The likelihood subtask's figures (the registry's likelihood metrics, and the (n, p)-discoverable curve
at the report's n grid) are results of the same record, `propme.<corpus>.<metric>.prefix_likelihood`,
with their intervals over documents (Wilson for a share, the bootstrap for the median).

With a contamination check of the runs' other benchmarks (`propme report --index`), the record of
each model that ran a benchmark also holds, per task, `propme.contamination.<task>.contaminated_share`
(Wilson interval over items) and, for every per-sample metric its run logged,
`propme.contamination.<task>.<metric>.{all,clean,contaminated}` with their intervals and
`propme.contamination.<task>.<metric>.difference` (contaminated - clean, bootstrap interval); the
rule is in each result's `metric_parameters`, the index identity in its `source_data`.

An undefined value (None: nothing to compute it from) is left out, never written as 0; an interval
whose ends are undefined is left out of its result. The records hold no personal data values.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from propme_metrics.core.files import write_atomic
from propme_metrics.core.jsonl import json_line
from propme_metrics.metrics import registry
from propme_metrics.metrics.difference import BOUNDS, UNPAIRED
from propme_metrics.metrics.extraction_curve import LikelihoodResult
from propme_metrics.metrics.pm import (
    ONE_UNIT,
    PERCENTILE,
    PLAIN_PERCENTILE,
    PROPAGATED,
    UNIFORM,
    WILSON,
    ZERO_EVENTS,
    Interval,
    IntervalSpec,
)
from propme_metrics.metrics.results import CorpusResult, finite
from propme_metrics.prompts.settings import LIKELIHOOD_SETTING, PREFIX, PROMPT_FREE_SETTINGS
from propme_metrics.report.contents import Report
from propme_metrics.trace.pii import detect, mask_text

#: the schema version the records follow (tests validate them against the official schema files)
SCHEMA_VERSION = "0.3.0"
#: the folder of the records inside the report folder
EEE_DIR = "eee"
#: the data repository's collection PropMe's records are filed under (`data/<collection>/...`)
COLLECTION = "propme"
#: characters a data-repository path component may not hold (the validator's portability rule)
_UNPORTABLE = re.compile(r'[<>:"\\|?*/\x00-\x1f]+')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
#: the bounds of a continuous score with no known range, as the schema spells them (strict JSON)
UNBOUNDED = ("-Infinity", "Infinity")
#: metrics whose values have no upper bound (the rest, and PM, lie in [0, 1])
_UNBOUNDED = {"als": "tokens", "als_nl": "tokens", "pii_items": "items per generation"}


#: every name a record's `confidence_interval.method` can hold, and what it means: the one list (docs/cli.md's
#: table of interval methods is checked against it, and `_score` refuses any other name)
INTERVAL_METHODS: tuple[tuple[str, str], ...] = (
    (WILSON, "modified Wilson score interval over counted generations (items for contamination shares and 0/1 "
             "metrics, documents for the likelihood subtask's shares): every proportion"),
    (PERCENTILE, "percentile bootstrap over units (prompts; generations in the prompt-free settings; documents for "
                 "the likelihood subtask's median; items for contamination means and differences), its tails expanded for "
                 "small samples: ratio metrics, PM, robustness figures, likelihood and contamination figures"),
    (ZERO_EVENTS, "a ratio metric with no event in any unit: the exact bound on the share of units with an event"),
    (UNIFORM, "a ratio metric with one value in every unit: that bound mirrored"),
    (ONE_UNIT, "a ratio metric with a single unit: from 0 to the largest value one unit can take"),
    (PROPAGATED, "PM whose every resample gives one value: PM at the ends of the two sides' intervals"),
    (PLAIN_PERCENTILE, "plain percentile bootstrap, where an `IntervalSpec` asks for it instead of the expanded one"),
    (UNPAIRED, "a difference of two independent sets of units (a setting's figure minus the corpus' floor): each "
               "side resampled apart, tails expanded"),
    (IntervalSpec(method=PLAIN_PERCENTILE).paired(False), "the same without the expansion, where an `IntervalSpec` "
                                                           "asks for the plain percentile bootstrap"),
    (BOUNDS, "a difference whose every resample gives one value: the difference of the two sides' intervals"),
)
_METHOD_NAMES = frozenset(name for name, _ in INTERVAL_METHODS)


def _defined(*values: float | None) -> bool:
    return all(finite(v) is not None for v in values)


def _shown(iv: Interval, units: int) -> Interval | None:
    """The interval a record gives for a value (`units`: the units it resamples or counts), None where
    it has none or an undefined end."""
    return replace(iv, units=units) if iv.method and _defined(iv.low, iv.high) else None


def _shown_interval(res: CorpusResult, setting: str, metric: str, mr: Interval) -> Interval | None:
    """The interval the report shows for a base metric, with the method `metrics.pm.metric_interval` chose
    (modified Wilson over counted generations for a proportion, a bootstrap over units otherwise)."""
    if not (mr.method and _defined(mr.low, mr.high)):
        return None
    stats = res.settings[setting].task.stats(metric)
    n = int(round(sum(s.denominator for s in stats))) if registry.metric(metric).proportion else len(stats)
    return replace(mr, units=n)


def _unit(setting: str) -> str:
    return "generation" if setting in PROMPT_FREE_SETTINGS else "prompt"


def _source_data(res: CorpusResult, setting: str) -> dict[str, Any]:
    start = res.start_token
    details = {"corpus": res.corpus, "corpus_label": res.label, "setting": setting,
               "index_identity": res.index_identity or "", "prompt_set": res.prompt_set,
               "start_token": start.token if start else "", "start_token_choice": start.choice if start else ""}
    return {"dataset_name": f"propme_{res.label}_{setting}", "source_type": "other",
            "additional_details": {k: str(v) for k, v in details.items()}}


def _metric_config(metric_id: str, name: str, description: str, unit: str | None, higher_is_better: bool,
                   parameters: dict[str, Any], bounds: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """`unit` None: a value in [0, 1]; else the unit of a value without an upper bound (or within `bounds`)."""
    low, high = bounds or (0.0, 1.0 if unit is None else "Infinity")
    return {"evaluation_description": description, "metric_id": metric_id, "metric_name": name,
            "metric_kind": "memorization", "metric_unit": unit or "proportion",
            "lower_is_better": not higher_is_better, "score_type": "continuous",
            "min_score": low, "max_score": high, "metric_parameters": parameters}


def _score(value: float, interval: Interval | None, details: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"score": value, "details": {k: str(v) for k, v in details.items()}}
    if interval is not None:
        if interval.method not in _METHOD_NAMES:
            raise ValueError(f"interval method {interval.method!r} is not one of eee.INTERVAL_METHODS (docs/cli.md)")
        uncertainty: dict[str, Any] = {
            "confidence_interval": {"lower": interval.low, "upper": interval.high, "confidence_level": interval.confidence,
                                    "method": interval.method},
            "num_samples": interval.units}
        if interval.resamples:
            uncertainty["num_bootstrap_samples"] = interval.resamples
        out["uncertainty"] = uncertainty
    return out


def _base_results(res: CorpusResult) -> list[dict[str, Any]]:
    out = []
    for setting, sr in res.settings.items():
        for metric, mr in sr.metrics.items():
            if not _defined(mr.estimate):
                continue  # undefined: left out, never 0
            spec = registry.metric(metric)
            metric_id = f"propme.{res.label}.{metric}.{setting}"
            params = {"setting": setting, "aggregation": spec.pooling.name, "unit_of_resampling": _unit(setting)}
            if metric == "fmr_rare":
                params["rare_max_count"] = sr.task.rare_max_count
            out.append({
                "evaluation_result_id": metric_id, "evaluation_name": sr.task.task,
                "source_data": _source_data(res, setting),
                "metric_config": _metric_config(metric_id, spec.label, spec.description, _UNBOUNDED.get(metric),
                                                spec.higher_is_better, params),
                "score_details": _score(mr.estimate, _shown_interval(res, setting, metric, mr),
                                        {"prompts": sr.counts["prompts"], "generations_counted": sr.counts["counted"],
                                         "degenerate": sr.counts["degenerate"], "failed": sr.counts["failed"],
                                         "loops": sr.counts["loops"]})})
    return out


def _pm_results(res: CorpusResult) -> list[dict[str, Any]]:
    out = []
    for (metric, setting), iv in res.pm.items():
        if not _defined(iv.estimate):
            continue  # undefined: a side has nothing counted
        spec = registry.metric(metric)
        metric_id = f"propme.{res.label}.pm_{metric}.{setting}"
        p_task, c_task = res.settings[setting].task, res.settings[PREFIX].task
        interval = _shown(iv, len(p_task.stats(metric)))
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


def _figure_results(res: CorpusResult) -> list[dict[str, Any]]:
    """The robustness figures (`metrics.figures`), each with its interval; undefined ones left out."""
    out = []
    for f in (res.robustness.figures if res.robustness else []):
        iv, spec = f.value, f.spec
        if not _defined(iv.estimate):
            continue
        metric_id = f"propme.{res.label}.{f.name}.{f.setting}"
        interval = _shown(iv, f.units)
        unit = None if spec.unit_max is not None else "tokens, counts or generations"
        out.append({
            "evaluation_result_id": metric_id, "evaluation_name": f"propme_{res.label}_{f.setting}_robustness",
            "source_data": _source_data(res, f.setting),
            "metric_config": _metric_config(metric_id, spec.label, spec.description, unit, False,
                                            {"setting": f.setting, "figure": f.name, "units": f.unit}),
            "score_details": _score(iv.estimate, interval, {"units": f.units, "unit": f.unit})})
    return out


#: the likelihood metrics' units and bounds where they are not a share in [0, 1]
_LIKELIHOOD_SCALES = {"log10_p_median": ("log10 probability", ("-Infinity", 0.0))}


def likelihood_results(res: LikelihoodResult) -> list[dict[str, Any]]:
    """The likelihood subtask's figures of one model and corpus: each registry likelihood metric, then
    the curve's shares at the report's n grid not among them, with intervals over documents
    (the report's `IntervalSpec`); each value is a statistic over the scored documents."""
    figures = [(m.name, m.label, m.description, m.pooling.name, m.n, res.metrics[m.name])
               for m in registry.LIKELIHOOD_METRICS]
    named = {m.n for m in registry.LIKELIHOOD_METRICS if m.n is not None}
    figures += [(registry.discoverable_name(n), f"disc@{n:,}", f"share of prefix documents (n, p)-discoverable at "
                 f"n = {n:,}", registry.MEAN.name, n, e) for n, e in res.curve.items() if n not in named]
    details = {"corpus": res.corpus, "corpus_label": res.label, "index_identity": res.task.index_identity or ""}
    source = {"dataset_name": res.task.task, "source_type": "other", "additional_details": details}
    out = []
    for name, label, description, aggregation, n, e in figures:
        if not _defined(e.estimate):
            continue
        metric_id = f"propme.{res.label}.{name}.{LIKELIHOOD_SETTING}"
        interval = _shown(e, res.n_documents)
        unit, bounds = _LIKELIHOOD_SCALES.get(name, (None, None))
        params = {"setting": LIKELIHOOD_SETTING, "aggregation": aggregation, "unit_of_resampling": "document",
                  "discoverable_p": res.p, **({"discoverable_n": n} if n is not None else {})}
        out.append({"evaluation_result_id": metric_id, "evaluation_name": res.task.task, "source_data": source,
                    "metric_config": _metric_config(metric_id, label, description, unit, False, params, bounds),
                    "score_details": _score(e.estimate, interval, {"documents": res.n_documents})})
    return out


def _contamination_source(result: Any, task: str) -> dict[str, Any]:
    details = {"benchmark_task": task, "index_identity": result.index_identity, "index_path": result.index_path}
    return {"dataset_name": task, "source_type": "other", "additional_details": details}


def _contamination_results(result: Any, task: str, model: str, higher_is_better: dict[str, bool]) -> list[dict[str, Any]]:
    """A benchmark task's contaminated share and the metrics of `model` (a model label) on all,
    clean and contaminated items and their difference (`contamination.summary.TaskSummary`),
    undefined ones left out."""
    s = result.summaries[task]
    rule = {f"rule_{k}": v for k, v in result.rule.to_dict().items()}
    prefix = f"propme.contamination.{task}"
    out = []

    def add(metric_id: str, name: str, description: str, e: Interval, lower_is_better: bool, bounds: tuple,
            params: dict[str, Any], details: dict[str, Any]) -> None:
        if not _defined(e.estimate):
            return  # undefined: left out, never 0
        interval = _shown(e, s.items if e.units is None else e.units)
        config = {"evaluation_description": description, "metric_id": metric_id, "metric_name": name,
                  "metric_kind": "contamination", "metric_unit": "proportion" if bounds == (0.0, 1.0) else "score",
                  "lower_is_better": lower_is_better, "score_type": "continuous", "min_score": bounds[0],
                  "max_score": bounds[1], "metric_parameters": {**params, **rule}}
        out.append({"evaluation_result_id": metric_id, "evaluation_name": task,
                    "source_data": _contamination_source(result, task), "metric_config": config,
                    "score_details": _score(e.estimate, interval, details)})

    counts = {"items": s.items, "contaminated": s.contaminated, "boilerplate_kgrams": s.boilerplate_kgrams}
    add(f"{prefix}.contaminated_share", "contaminated share",
        f"share of {task}'s items found in the training corpus by the contamination rule", s.share, True,
        (0.0, 1.0), {}, counts)
    for metric, m in s.models.get(model, {}).items():
        binary = m.all.method == WILSON   # 0/1 values (accuracy): the mean lies in [0, 1]
        # a graded metric (Brier score, ROUGE, ...) of any lm-eval task: PropMe knows no range for it, so
        # its bounds are the schema's unbounded ones (a continuous score must give both: the validator)
        bounds = (0.0, 1.0) if binary else UNBOUNDED
        # a filtered metric is logged as `<metric>_<filter>`; lm-eval records the direction of `<metric>`
        named = [k for k in higher_is_better if metric == k or metric.startswith(f"{k}_")]
        higher = higher_is_better[max(named, key=len)] if named else True
        for part in ("all", "clean", "contaminated"):
            add(f"{prefix}.{metric}.{part}", f"{metric} ({part} items)", f"{metric} of {task} on its {part} items",
                getattr(m, part), not higher, bounds, {"metric": metric, "subset": part}, counts)
        add(f"{prefix}.{metric}.difference", f"{metric} contaminated - clean",
            f"{metric} of {task} on contaminated items minus on clean items (a gain from seeing the items in "
            "training; resampled per group)", m.difference, True, (-1.0, 1.0) if binary else UNBOUNDED,
            {"metric": metric, "subset": "contaminated - clean"}, counts)
    return out


def _contamination_by_model(report: Report) -> dict[tuple[str, str], tuple[str, list[dict[str, Any]]]]:
    """(model, revision) -> (model_args, contamination results) of every model that ran the benchmarks."""
    result = report.contamination
    out: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = {}
    for task in result.summaries if result is not None else ():
        for label, run in result.runs.get(task, {}).items():   # items without a model run: no model to attach them to
            out.setdefault((run.model, run.revision), (run.model_args, []))[1].extend(
                _contamination_results(result, task, label, run.higher_is_better))
    return out


def _model_info(model: str, revision: str, model_args: str) -> dict[str, Any]:
    details = {"deployment_type": "unknown", "model_availability": "unknown", "model_args": model_args}
    if revision:
        details["revision"] = revision
    info: dict[str, Any] = {"name": model, "id": model, "additional_details": details}
    if "/" in model and not model.startswith(("/", ".", "~")):
        info["developer"] = model.split("/", 1)[0]  # a hub id: its owner, as the schema's converters read it
    return info


def _records(report: Report, retrieved: float | None) -> list[tuple[dict[str, Any], list[CorpusResult]]]:
    """(record, the model's corpus results) per model and revision."""
    from propme_metrics.version import __version__

    stamp = str(int(time.time() if retrieved is None else retrieved))
    by_model: dict[tuple[str, str], list[CorpusResult]] = {}
    for r in report.results:
        by_model.setdefault((r.model, r.revision), []).append(r)
    contamination = _contamination_by_model(report)
    likelihood: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for lik in report.likelihood:
        likelihood.setdefault((lik.model, lik.revision), []).extend(likelihood_results(lik))
    for key in (*contamination, *likelihood):
        by_model.setdefault(key, [])   # a model that ran only benchmarks or likelihood: a record of those figures
    out: list[tuple[dict[str, Any], list[CorpusResult]]] = []
    for (model, revision), results in by_model.items():
        who = model + (f"@{revision}" if revision else "")
        model_args, checked = contamination.get((model, revision), ("", []))
        if results:
            model_args = next(iter(results[0].settings.values())).task.model_args
        evaluation = [x for r in results for x in (*_pm_results(r), *_base_results(r), *_figure_results(r))]
        evaluation += likelihood.get((model, revision), []) + checked
        record = {
            "schema_version": SCHEMA_VERSION, "evaluation_id": f"propme/{who}/{stamp}", "retrieved_timestamp": stamp,
            "source_metadata": {"source_name": "PropMe", "source_type": "evaluation_run",
                                "source_organization_name": "", "evaluator_relationship": "other",
                                "additional_details": {"corpora": ", ".join(r.label for r in results),
                                                       "bootstrap_seed": str(report.intervals.seed)}},
            "eval_library": {"name": "propme", "version": __version__,
                             "additional_details": {"generations_by": "lm_eval",
                                                    "pm_metrics": ",".join(report.pm_metrics)}},
            "model_info": _model_info(model, revision, model_args),
            "evaluation_results": evaluation}
        out.append((record, results))
    return out


def _component(text: str) -> str:
    """A portable data-repository path component: no reserved characters, no trailing dot or space,
    not `data` nor a Windows device name."""
    part = _UNPORTABLE.sub("_", text.strip()).rstrip(". ") or "unknown"
    return f"_{part}" if part == "data" or part.split(".", 1)[0].upper() in _RESERVED else part


def datastore_path(record: dict[str, Any]) -> str:
    """`data/propme/<developer>/<model>/<uuid>.json` of a record, as the data repository files it: the
    developer is a hub id's owner (else `model_info.developer`, else `unknown`), the model the rest of
    the id; the UUID (version-4 form) is derived from the record's `evaluation_id`, so the same
    evaluation always gets the same name."""
    model_id = str(record["model_info"]["id"])
    parts = [p for p in model_id.split("/") if p]
    if "/" in model_id and not model_id.startswith(("/", ".", "~")) and len(parts) >= 2:
        developer, model = parts[0], "_".join(parts[1:])
    else:
        developer, model = record["model_info"].get("developer") or "unknown", parts[-1] if parts else model_id
    digest = hashlib.sha256(record["evaluation_id"].encode("utf-8")).digest()
    name = uuid.UUID(bytes=digest[:16], version=4)
    return f"data/{COLLECTION}/{_component(developer)}/{_component(model)}/{name}.json"


def _masked(text: str) -> str:
    """Model or corpus text with every personal-data item detected in it masked (`trace.pii`)."""
    return mask_text(text, detect(text))


def instance_records(record: dict[str, Any], results: list[CorpusResult],
                     masked: Callable[[str], str] = _masked) -> list[dict[str, Any]]:
    """The instance-level lines of a record (schema `instance_level_eval` 0.3.0): one per counted
    generation, tied to the result its `is_correct` counts (`evaluation_result_id`): whether the
    generation reproduced training data verbatim as a whole, a full match (FMR) in a propensity
    setting, and for a prefix prompt with a known continuation the document's extraction (the
    `extraction` result: what the prefix setting measures), with `score` the same as 0/1, so their
    mean over a setting is that result. The trace summary is in `metadata`; personal data in the
    prompt, continuation and generation is masked. Generations whose tracing failed or that are
    degenerate count in no metric and have no line. `masked` masks a text (a memoized `_masked` when
    several records share their prompts)."""
    out = []
    ids = {r["evaluation_result_id"] for r in record["evaluation_results"]}
    for res in results:
        for setting, sr in res.settings.items():
            fmr_id = f"propme.{res.label}.fmr.{setting}"
            extraction_id = f"propme.{res.label}.extraction.{setting}"
            if fmr_id not in ids:
                continue   # FMR undefined: nothing counted
            for prompt in sr.task.prompts:
                prompt_text = masked(prompt.prompt)
                reference = [masked(prompt.continuation)] if prompt.continuation else []
                for j, (g, counted) in enumerate(zip(prompt.generations, prompt.values)):
                    if counted is None:
                        continue
                    output = masked(g.text)
                    extraction = setting == PREFIX and g.extracted is not None and extraction_id in ids
                    correct = bool(g.extracted) if extraction else g.full_match
                    result_id = extraction_id if extraction else fmr_id
                    sources = sorted({str(d.source_id) for d in g.documents if d.source_id is not None})
                    meta = {"corpus": res.label, "setting": setting, "prompt_id": prompt.id, "generation": j,
                            "longest_span_tokens": g.longest_span, "nvr_max": max(g.nv_recalls, default=None),
                            "full_match": g.full_match, "full_match_normalized": g.full_match_normalized,
                            "extracted": g.extracted, "final_spans": len(g.final_spans),
                            "source_ids": ",".join(sources)}
                    out.append({
                        "schema_version": SCHEMA_VERSION, "evaluation_id": record["evaluation_id"],
                        "model_id": record["model_info"]["id"], "evaluation_name": sr.task.task,
                        "evaluation_result_id": result_id, "sample_id": f"{prompt.id}#{j}",
                        "interaction_type": "single_turn",
                        "input": {"raw": prompt_text, "reference": reference},
                        "output": {"raw": [output]},
                        "answer_attribution": [{"turn_idx": 0, "source": "output.raw",
                                                "extracted_value": output,
                                                "extraction_method": "simpletrace extraction" if extraction
                                                else "simpletrace full match",
                                                "is_terminal": True}],
                        "evaluation": {"score": float(correct), "is_correct": correct},
                        "metadata": {k: "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
                                     for k, v in meta.items()}})
    return out


#: the instance-level file beside a record `<name>.json`
INSTANCES_SUFFIX = "_samples.jsonl"


def write_eee(report: Report, out: Path, retrieved: float | None = None) -> list[Path]:
    """Write the records into `out/eee/` at their `datastore_path`, each with its instance-level lines
    (`instance_records`) beside it in `<uuid>_samples.jsonl` when it has any, which the record names in
    `detailed_evaluation_results`; the paths written."""
    folder = out / EEE_DIR
    paths = []
    masked = lru_cache(maxsize=None)(_masked)  # the same prompts recur for every model and revision
    for record, results in _records(report, retrieved):
        where = datastore_path(record)
        lines = instance_records(record, results, masked)
        if lines:
            record["detailed_evaluation_results"] = {"format": "jsonl", "total_rows": len(lines),
                                                     "file_path": where[:-len(".json")] + INSTANCES_SUFFIX}
        path = folder / where
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
        paths.append(path)
        if lines:
            samples = folder / record["detailed_evaluation_results"]["file_path"]
            write_atomic(samples, "".join(json_line(x) for x in lines))
            paths.append(samples)
    return paths
