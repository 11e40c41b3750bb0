"""The functions PropMe's task YAML names: dataset loader, per-sample tracing, aggregations.

lm-eval passes the task's merged metadata (YAML `metadata:` + `--metadata` + `--model_args`) to
`load_prompts` only, so the loader validates the configuration before any generation and copies
what scoring needs (index path, tracing parameters) into every document. It also resolves the
document-start token (`propme_metrics.prompts.start`) from the model arguments: the model is given
`model_prompt` = start token + prompt, and each document records the choice.

`process_results` hands lm-eval items that are traced later, in bulk, by the task's first
aggregation (`propme_tasks.deferred`), with `trace_workers` processes; with one worker, or in a
distributed run, it traces each prompt's generations itself.
"""
from __future__ import annotations

import json
import os
from dataclasses import fields
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError, PropMeError
from propme_metrics.core.files import DEFAULT_CACHE_DIR
from propme_metrics.core.switches import FALSE_WORDS, TRUE_WORDS, parse_bool
from propme_metrics.metrics import registry
from propme_metrics.metrics.leaks import RARE_MAX_COUNT, RARE_MAX_COUNT_KEY
from propme_metrics.metrics.values import contributions, counts_for_metrics, pool
from propme_metrics.prompts.settings import DEFAULT_N_PROMPTS, DEFAULT_PROMPT_SEED, PROMPT_FREE_SETTINGS
from propme_metrics.trace.inputs import generation_key
from propme_metrics.trace.pii import leaks
from propme_metrics.trace.result import TraceConfig, TraceResult
from propme_metrics.trace.tracer import Tracer
from propme_tasks import deferred

#: How to build an index for each shipped corpus, quoted in error messages.
BUILD_HINTS = {
    "dynaword": "propme index build danish-foundation-models/danish-dynaword "
                "--revision 9e230b35e31a510e5ab909112ad5bfc9463b2c23 "
                "--exclude-sources depbank,jvj,nordjyllandnews,synne --out DIR",
    "common_pile": "propme index build common-pile/comma_v0.1_training_dataset --out DIR",
}
TRACE_KEYS = {f.name for f in fields(TraceConfig)}
#: where the shards are searched: `trace_backend` ('local' or 'ray'), `trace_ray_address`, `trace_ray_actors`
BACKEND_KEYS = {"backend", "ray_address", "ray_actors"}
#: how many generations are traced at once: `trace_workers`
RUN_KEYS = {"workers"}


class TaskConfigError(ConfigError):
    """A PropMe task's configuration cannot be used: raised while lm-eval builds the task, before
    any generation. An ordinary exception for Python callers; the `lm_eval` command prints it as one
    paragraph without a traceback (`propme_tasks.discovery.install`)."""


def _setting(meta: dict[str, Any], key: str, default: Any = None) -> tuple[Any, str]:
    """A configuration value from --metadata/YAML first, then PROPME_<KEY>; returns (value, where)."""
    env = f"PROPME_{key.upper()}"
    if meta.get(key) not in (None, ""):
        return meta[key], f"metadata key {key!r}"
    if os.environ.get(env):
        return os.environ[env], f"environment variable {env}"
    return default, ""


def _int_setting(meta: dict[str, Any], key: str, default: int, minimum: int = 1) -> int:
    """An integer setting (metadata or PROPME_<KEY>), or one message naming it."""
    raw, where = _setting(meta, key, default)
    try:
        value = _typed(raw, int)
    except ValueError:
        raise TaskConfigError(f"{where or key} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise TaskConfigError(f"{where or key} must be at least {minimum}, not {value}")
    return value


def _check_path(value: Any, where: str, what: str) -> None:
    """A path setting must be text (a number or a list from --metadata JSON is a mistake, not a path)."""
    if not isinstance(value, (str, os.PathLike)):
        raise TaskConfigError(f"{where} must be the path of {what} (a string), not {value!r}")


def _typed(raw: Any, kind: type) -> Any:
    """`raw` (a metadata value or an environment string) as `kind`; ValueError for booleans, NaN,
    infinities, fractional integers and anything else that is not plainly a value of that kind."""
    import math

    if isinstance(raw, bool) or raw is None or isinstance(raw, (list, dict)):
        raise ValueError(f"{raw!r} is not a {kind.__name__}")
    if kind is str:
        return str(raw)
    if kind is int:
        if isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError(f"{raw!r} is not an integer")
            return int(raw)
        return int(str(raw).strip())
    value = kind(str(raw).strip()) if isinstance(raw, str) else kind(raw)
    if kind is float and not math.isfinite(value):
        raise ValueError(f"{raw!r} is not a finite number")
    return value


def _bool_setting(meta: dict[str, Any], key: str) -> bool:
    """A yes/no setting (metadata or PROPME_<KEY>, `core.switches.parse_bool`); unset is false."""
    raw, where = _setting(meta, key, False)
    try:
        return parse_bool(raw)
    except ValueError:
        raise TaskConfigError(f"{where or key} must be true or false ({', '.join(TRUE_WORDS)} / "
                              f"{', '.join(FALSE_WORDS)}), not {raw!r}") from None


def trace_config(meta: dict[str, Any]) -> TraceConfig:
    """TraceConfig from `trace_<field>` metadata keys or PROPME_TRACE_<FIELD> variables."""
    valid = TRACE_KEYS | BACKEND_KEYS | RUN_KEYS
    unknown = [k for k in meta if k.startswith("trace_") and k[6:] not in valid]
    if unknown:
        raise TaskConfigError(f"unknown tracing parameter(s) {unknown}; valid: "
                              + ", ".join(f"trace_{k}" for k in sorted(valid)))
    values = {}
    try:
        for f in fields(TraceConfig):
            raw, where = _setting(meta, f"trace_{f.name}")
            if raw is not None:
                kind = type(getattr(TraceConfig(), f.name))
                try:
                    values[f.name] = _typed(raw, kind)
                except (TypeError, ValueError):
                    what = {int: "an integer", float: "a finite number"}.get(kind, f"a {kind.__name__}")
                    raise TaskConfigError(f"bad tracing parameters: {where} must be {what}, not {raw!r}") from None
        return TraceConfig(**values)
    except (TypeError, ValueError) as exc:
        raise TaskConfigError(f"bad tracing parameters: {exc}") from None


def trace_backend(meta: dict[str, Any]) -> str:
    """The search backend: "" (local) or the JSON of {"backend": "ray", "address": ..., "actors": ...}."""
    backend, where = _setting(meta, "trace_backend", "local")
    if backend not in ("local", "ray"):
        raise TaskConfigError(f"{where} must be 'local' or 'ray', not {backend!r}")
    if backend == "local":
        return ""
    address, _ = _setting(meta, "trace_ray_address")
    actors = _int_setting(meta, "trace_ray_actors", 0, minimum=0) or None
    return json.dumps({"backend": "ray", "address": address, "actors": actors}, sort_keys=True)


def load_prompts(**meta: Any):
    """`custom_dataset` hook: validate index, prompts and start token; return {'test': Dataset}."""
    import datasets

    from propme_metrics.prompts.prompt_free import check_generations_fit, prompt_free_records

    corpus, setting, language = meta.get("corpus"), meta.get("setting"), meta.get("language")
    if not corpus or not setting:
        raise TaskConfigError("a PropMe task YAML must set metadata 'corpus' and 'setting'")
    index_key = f"{corpus}_index"
    index_path, where = _setting(meta, index_key)
    if index_path is None:
        hint = BUILD_HINTS.get(corpus, "propme index build SOURCE --out DIR")
        raise TaskConfigError(
            f"no index for corpus '{corpus}': pass --metadata '{{\"{index_key}\": \"/path/to/index\"}}' "
            f"or set PROPME_{index_key.upper()}. Build one with: {hint}")
    _check_path(index_path, where, "an index folder")
    config = trace_config(meta)
    config_json = json.dumps(config.to_dict(), sort_keys=True)
    backend_json = trace_backend(meta)
    workers = _int_setting(meta, "trace_workers", deferred.default_trace_workers())
    try:
        # the tracer opens the index and checks its tokenizer now: nothing may fail after generation
        index = _doc_tracer({"index_path": str(Path(index_path).absolute()), "trace_config": config_json,
                             "trace_backend": backend_json}).index
    except PropMeError as exc:
        raise TaskConfigError(f"the index given by {where} ({index_path}) cannot be used: {exc}") from None
    start = start_token(meta)
    seed = _int_setting(meta, "prompt_seed", DEFAULT_PROMPT_SEED, minimum=0)
    max_tokens = _int_setting(meta, "max_prompt_tokens", 0, minimum=0)
    repeats = _int_setting(meta, "generations_per_prompt", 1)  # checked before any prompt set is built
    if setting in PROMPT_FREE_SETTINGS:
        if meta.get(f"{corpus}_{setting}_prompts"):
            raise TaskConfigError(f"{setting} is prompt-free: it takes no prompt file "
                                  f"({corpus}_{setting}_prompts); set prompt_free_generations instead")
        if setting == "unconditional" and not start.token and not start.added_by_tokenizer:
            raise TaskConfigError(f"{corpus}/unconditional gives the model only the start token, but nothing is "
                                  f"put before the prompts ({start.note}), so the prompt would be empty: "
                                  "use start_token auto or a literal")
        try:
            records = prompt_free_records(setting, _int_setting(meta, "prompt_free_generations", DEFAULT_N_PROMPTS), seed, language)
        except PropMeError as exc:
            raise TaskConfigError(f"{corpus}/{setting}: {exc}") from None
        repeats = 1  # each record is one generation (the resampling unit of prompt-free settings)
    else:
        try:  # sized before the prompt set is built
            check_generations_fit(_int_setting(meta, "n_prompts", DEFAULT_N_PROMPTS) * repeats,
                                  "n_prompts x generations_per_prompt")
        except PropMeError as exc:
            raise TaskConfigError(f"{corpus}/{setting}: {exc}") from None
        records = _prompt_set(meta, index, corpus, setting, language, seed).records
    shared = {"corpus": corpus, "index_path": str(index.path), "index_identity": index.manifest.identity,
              "trace_config": config_json, "trace_backend": backend_json, "trace_workers": workers,
              "start_token": start.token,
              "start_token_choice": start.choice, "start_token_note": start.note,
              "pii_show": _bool_setting(meta, "pii_show"),
              # fmr_rare's threshold, logged with every document so the report reads the run's value
              RARE_MAX_COUNT_KEY: _int_setting(meta, RARE_MAX_COUNT_KEY, RARE_MAX_COUNT)}
    rows = []
    for rec in records:
        prompt = _truncated(index, rec.prompt, max_tokens)
        for j in range(repeats):
            rows.append({"id": rec.id, "sample_ix": j, "prompt": prompt, "model_prompt": start.apply(prompt),
                         "setting": setting, "domain": rec.domain or "", "language": rec.language or "",
                         "continuation": rec.continuation or "",
                         "source_doc": json.dumps(rec.source_doc, ensure_ascii=False) if rec.source_doc else "",
                         "prompt_longest_span": rec.longest_span, **shared})
    return {"test": datasets.Dataset.from_list(rows)}


def start_token(meta: dict[str, Any]):
    """The run's StartToken from `start_token` (metadata or PROPME_START_TOKEN; default auto)."""
    from propme_metrics.prompts.start import resolve_start_token

    choice, where = _setting(meta, "start_token")
    try:
        return resolve_start_token(choice, meta)
    except PropMeError as exc:
        raise TaskConfigError(f"{where or 'start_token (default auto)'}: {exc}") from None


def _truncated(index, prompt: str, max_tokens: int) -> str:
    """The prompt cut to its last `max_tokens` index tokens (0: unchanged), like vLLM's truncate_prompt_tokens."""
    if not max_tokens:
        return prompt
    ids = index.encode(prompt)
    return index.decode(ids[-max_tokens:]) if len(ids) > max_tokens else prompt


def _prompt_set(meta: dict[str, Any], index, corpus: str, setting: str, language: str | None, seed: int):
    """The prompt set of a prompted setting: the configured file, the cache, or built and cached."""
    from propme_metrics.prompts.build import build_prompt_set, cache_tag, load_prompt_set, write_prompt_set

    n = _int_setting(meta, "n_prompts", DEFAULT_N_PROMPTS)
    prompt_key = f"{corpus}_{setting}_prompts"
    prompt_file, pwhere = _setting(meta, prompt_key)
    if prompt_file is not None:
        _check_path(prompt_file, pwhere, "a prompt file")
    cache_dir, cwhere = _setting(meta, "cache_dir", DEFAULT_CACHE_DIR)
    _check_path(cache_dir, cwhere, "the prompt cache folder")
    cache = None
    try:
        if prompt_file is not None:
            return load_prompt_set(prompt_file, index=index, setting=setting)
        cache = Path(cache_dir) / "prompts"
        cache.mkdir(parents=True, exist_ok=True)
        prompt_file = cache / f"{index.manifest.identity}-{setting}-{language}-n{n}-seed{seed}-{cache_tag(setting, language)}.jsonl"
        pwhere = "the prompt cache"
        if prompt_file.exists():
            return load_prompt_set(prompt_file, index=index, setting=setting)
        prompt_set = build_prompt_set(index, setting, n=n, seed=seed, language=language)
        write_prompt_set(prompt_set, prompt_file)
        return prompt_set
    except PropMeError as exc:
        raise TaskConfigError(f"prompt set for {corpus}/{setting} ({pwhere}: {prompt_file}): {exc}") from None
    except OSError as exc:
        if prompt_file is None:  # the cache folder itself cannot be made
            raise TaskConfigError(f"cannot create the prompt cache {cache} (metadata key 'cache_dir' or "
                                  f"PROPME_CACHE_DIR): {exc.strerror or exc}; point it at a writable folder") from None
        raise TaskConfigError(f"cannot read or write the prompt set {prompt_file} ({pwhere}): {exc}") from None


def _doc_tracer(doc: dict[str, Any]) -> Tracer:
    """The tracer a document names (local unless its `trace_backend` says otherwise)."""
    backend = doc.get("trace_backend") or ""
    if backend:
        return _tracer(doc["index_path"], doc["trace_config"], backend)
    return _tracer(doc["index_path"], doc["trace_config"])


@lru_cache(maxsize=8)
def _tracer(index_path: str, config_json: str, backend_json: str = "") -> Tracer:
    """One tracer per process and configuration (each accelerate rank opens its own); with the Ray
    backend its shards are held by actors on the cluster."""
    config = TraceConfig(**json.loads(config_json))
    backend = json.loads(backend_json) if backend_json else {"backend": "local"}
    if backend["backend"] == "ray":
        from propme_metrics.trace.ray_search import ray_tracer

        return ray_tracer(index_path, config, address=backend.get("address"), actors=backend.get("actors"))
    return Tracer(index_path, config)


def process_results(doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """One item per metric of the YAML for this prompt's generations, traced now or by the task's
    first aggregation (`propme_tasks.deferred`; the same items either way).

    Items of the registry's metrics are (numerator, denominator) pairs that `agg_ratio` pools over
    the whole task (`max` metrics: the largest value, `agg_max`), so lm-eval's table shows the same
    numbers as `propme trace` and `propme report`: sums divided once, never a mean of per-prompt means.
    """
    generations = results[0] if results and isinstance(results[0], list) else results
    tracer = _doc_tracer(doc)
    setting = doc.get("setting")
    continuation = doc.get("continuation") or None if setting == "prefix" else None
    jobs = [(str(text), generation_key(doc["id"], doc.get("sample_ix", 0), j, len(generations)), continuation)
            for j, text in enumerate(generations)]
    workers = doc.get("trace_workers") or deferred.default_trace_workers()
    if workers > 1 and not deferred.distributed():
        names = ["trace", *(m.name for m in registry.for_setting(setting))]
        return deferred.pending_items(tracer, jobs, partial(_items, doc), names, workers)
    return _items(doc, [tracer.safe_trace_one(*job) for job in jobs])


def _items(doc: dict[str, Any], traces: list[TraceResult]) -> dict[str, Any]:
    """The items of one prompt from its generations' traces: `trace` (the full record) first, then
    the setting's metrics in registry order."""
    setting = doc.get("setting")
    personal = [leaks(t) for t in traces]
    records = []
    for t, p in zip(traces, personal):
        # personal data the generation reproduced from the corpus; values masked unless pii_show
        records.append({**t.to_dict(), "pii": p.to_dict(show=bool(doc.get("pii_show")))})
    items: dict[str, Any] = {
        "trace": {
            "prompt_id": doc["id"], "setting": setting, "index_identity": doc.get("index_identity"),
            "failed": sum(t.error is not None for t in traces),
            "top_sources": _top_sources(traces),
            "generations": records,
        },
    }
    metrics = registry.for_setting(setting)
    rare = doc.get(RARE_MAX_COUNT_KEY) or RARE_MAX_COUNT
    counted = [contributions(t, metrics, p, rare) for t, p in zip(traces, personal) if counts_for_metrics(t)]
    for m in metrics:
        items[m.name] = m.aggregation.sample_item(pool(m, counted))
    return items


def _top_sources(traces: list[TraceResult], k: int = 5) -> list[dict[str, Any]]:
    docs = [d for t in traces for d in t.documents]
    docs.sort(key=lambda d: (-d.nv_recall, d.match != "full_raw", d.doc_ix))
    return [{"source_id": d.source_id, "match": d.match, "nv_recall": d.nv_recall} for d in docs[:k]]


def agg_ratio(items: list[dict[str, float]]) -> float:
    """Sum of numerators over sum of denominators, pooled over the task; NaN when nothing was
    counted (undefined, not 0). Each aggregation first traces the task's pending prompts."""
    deferred.trace_pending(items)
    value = registry.RATIO.corpus_value(items)
    return float("nan") if value is None else value


def agg_max(items: list[dict[str, float | None]]) -> float:
    """Largest value over counted prompts; NaN when nothing was counted."""
    deferred.trace_pending(items)
    value = registry.MAXIMUM.corpus_value(items)
    return float("nan") if value is None else value


def agg_trace_failures(items: list[dict[str, Any]]) -> int:
    """Generations whose tracing failed (0 is healthy); redo them with `propme trace` on the samples file."""
    deferred.trace_pending(items)
    return sum(i["failed"] for i in items)
