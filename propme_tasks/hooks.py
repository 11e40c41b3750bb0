"""The functions PropMe's task YAML names: dataset loader, per-sample tracing, aggregations.

lm-eval passes the task's merged metadata (YAML `metadata:` + `--metadata` + `--model_args`) to
`load_prompts` only, so the loader validates the configuration before any generation and copies
what scoring needs (index path, tracing parameters) into every document. It also resolves the
document-start token (`propme_metrics.prompts.start`) from the model arguments: the model is given
`model_prompt` = start token + prompt, and each document records the choice.

The task class traces every generation of a task in bulk before lm-eval scores it (`trace_task`,
`propme_tasks.deferred`, with `trace_workers` processes), and `process_results` turns each prompt's
traces into its items: a number per metric in the logged sample.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache, wraps
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import PropMeError
from propme_metrics.metrics import registry
from propme_metrics.metrics.provenance import RARE_MAX_COUNT, RARE_MAX_COUNT_KEY
from propme_metrics.metrics.values import contributions, counts_for_metrics, pool
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS, Setting
from propme_metrics.trace.inputs import generation_key
from propme_metrics.trace.pii import leaks
from propme_metrics.trace.result import TraceConfig, TraceResult
from propme_metrics.trace.task_document import RayBackend, TaskDocument
from propme_metrics.trace.tracer import Tracer
from propme_tasks import deferred
from propme_tasks.schema import TaskConfigError, TaskOptions, read_options
from propme_tasks.schema import (
    read_options as read_settings,  # load_prompts' old name: lm-eval copies its source into results files
)

__all__ = ["TaskConfigError", "load_prompts", "process_results", "agg_ratio", "agg_max", "agg_trace_failures"]

#: How to build an index for each shipped corpus, quoted in error messages.
BUILD_HINTS = {
    "dynaword": "propme index build danish-foundation-models/danish-dynaword "
                "--revision 9e230b35e31a510e5ab909112ad5bfc9463b2c23 "
                "--exclude-sources depbank,jvj,nordjyllandnews,synne --out DIR",
    "common_pile": "propme index build common-pile/comma_v0.1_training_dataset --out DIR",
    "dolma3": "propme index adopt IG_DIR --tokenizer TOKENIZER --out DIR (IG_DIR: an infini-gram index of "
              "allenai/dolma3_mix-6T, revision 689a3ea2d8217e64d73a5058913fa43ad15e81aa)",
}


#: datasets built before the model loaded (`propme_tasks.preflight`), by loader and metadata, each
#: handed once to lm-eval's own build of the same task
_AHEAD: dict[str, dict[str, Any]] = {}
#: how the loaders are being called: ahead of the model (and whether to keep what they build), nesting
#: depth (a loader calling another), and the command the user runs (its options name the hints)
_STATE: dict[str, Any] = {"ahead": False, "keep": True, "depth": 0, "command": "lm_eval"}


@contextmanager
def building_ahead(keep: bool = True) -> Iterator[None]:
    """Loaders called inside build ahead of the model; with `keep`, what they build is handed over."""
    before = _STATE["ahead"], _STATE["keep"]
    _STATE["ahead"], _STATE["keep"] = True, keep
    try:
        yield
    finally:
        _STATE["ahead"], _STATE["keep"] = before


@contextmanager
def command(name: str) -> Iterator[None]:
    """The command the user runs, for the hints of the messages (`lm_eval validate` has no --metadata)."""
    before, _STATE["command"] = _STATE["command"], name
    try:
        yield
    finally:
        _STATE["command"] = before


def handed_over(loader: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A `custom_dataset` loader whose dataset, when built ahead of the model, is not built again."""
    @wraps(loader)
    def load(**meta: Any) -> dict[str, Any]:
        key = f"{loader.__qualname__}:{json.dumps(meta, sort_keys=True, default=str)}"
        if _STATE["depth"]:
            return loader(**meta)
        if not _STATE["ahead"] and key in _AHEAD:
            return dict(_AHEAD.pop(key))
        _STATE["depth"] += 1
        try:
            built = loader(**meta)
        finally:
            _STATE["depth"] -= 1
        if _STATE["ahead"] and _STATE["keep"]:
            _AHEAD[key] = dict(built)
        return built

    return load


def _corpus_option(meta: dict[str, Any], key: str, default: Any = None) -> tuple[Any, str]:
    """A corpus-named option (`<corpus>_index`, a prompt file) from metadata first, then
    PROPME_<KEY>; returns (value, where). Every other key is read by `schema.read_options`."""
    env = f"PROPME_{key.upper()}"
    if meta.get(key) not in (None, ""):
        return meta[key], f"metadata key {key!r}"
    if os.environ.get(env):
        return os.environ[env], f"environment variable {env}"
    return default, ""


def trace_backend(meta: dict[str, Any] | TaskOptions) -> RayBackend | None:
    """The search backend the metadata asks for: None (local) or a Ray cluster."""
    options = meta if isinstance(meta, TaskOptions) else read_options(meta)
    if options["trace_backend"] == "local":
        return None
    return RayBackend(options["trace_ray_address"], options["trace_ray_actors"] or None)


@handed_over
def load_prompts(**meta: Any):
    """`custom_dataset` hook: validate index, prompts and start token; return {'test': Dataset}."""
    import datasets

    from propme_metrics.prompts.prompt_free import check_generations_fit, prompt_free_records

    corpus, setting, language = meta.get("corpus"), meta.get("setting"), meta.get("language")
    if not corpus or not setting:
        raise TaskConfigError("a PropMe task YAML must set metadata 'corpus' and 'setting'")
    options = read_settings(meta)  # every key checked once, before anything is opened or built
    index_key = f"{corpus}_index"
    index_path, where = _corpus_option(meta, index_key)
    if index_path is None:
        hint = BUILD_HINTS.get(corpus, "propme index build SOURCE --out DIR")
        given = (f"set PROPME_{index_key.upper()}=DIR ({_STATE['command']} takes no --metadata)"
                 if _STATE["command"] == "lm_eval validate" else
                 f"pass --metadata '{{\"{index_key}\": \"/path/to/index\"}}' or set PROPME_{index_key.upper()}")
        raise TaskConfigError(f"no index for corpus '{corpus}': {given}. Build one with: {hint}")
    backend = trace_backend(options)
    try:
        # the tracer opens the index and checks its tokenizer now: nothing may fail after generation
        index = _tracer(str(Path(index_path).absolute()), options.trace, backend).index
    except PropMeError as exc:
        raise TaskConfigError(f"the index given by {where} ({index_path}) cannot be used: {exc}") from None
    start = start_token(meta, options)
    seed, max_tokens, repeats = options["prompt_seed"], options["max_prompt_tokens"], options["generations_per_prompt"]
    if setting in PROMPT_FREE_SETTINGS:
        if meta.get(f"{corpus}_{setting}_prompts"):
            raise TaskConfigError(f"{setting} is prompt-free: it takes no prompt file "
                                  f"({corpus}_{setting}_prompts); set prompt_free_generations instead")
        if setting == Setting.UNCONDITIONAL and not start.token and not start.added_by_tokenizer:
            raise TaskConfigError(f"{corpus}/unconditional gives the model only the start token, but nothing is "
                                  f"put before the prompts ({start.note}), so the prompt would be empty: "
                                  "use start_token auto or a literal")
        try:
            records = prompt_free_records(setting, options["prompt_free_generations"], seed, language)
        except PropMeError as exc:
            raise TaskConfigError(f"{corpus}/{setting}: {exc}") from None
        repeats = 1  # each record is one generation (the resampling unit of prompt-free settings)
    else:
        try:  # sized before the prompt set is built
            check_generations_fit(options["n_prompts"] * repeats,
                                  "n_prompts x generations_per_prompt")
        except PropMeError as exc:
            raise TaskConfigError(f"{corpus}/{setting}: {exc}") from None
        records = _prompt_set(meta, options, index, corpus, setting, language).records
    # fmr_rare's threshold is logged with every document so the report reads the run's value; whether
    # the prompt went through the model's chat template is set by `propme_tasks.task`
    shared = TaskDocument(corpus=corpus, setting=setting, index_path=str(index.path),
                          index_identity=index.manifest.identity, trace=options.trace, backend=backend,
                          trace_workers=options["trace_workers"], start_token=start.token,
                          start_token_choice=start.choice, start_token_note=start.note,
                          pii_show=options["pii_show"], rare_max_count=options[RARE_MAX_COUNT_KEY])
    rows = []
    for rec in records:
        prompt = _truncated(index, rec.prompt, max_tokens)
        for j in range(repeats):
            rows.append(replace(
                shared, id=rec.id, sample_ix=j, prompt=prompt, model_prompt=start.apply(prompt),
                domain=rec.domain or "", language=rec.language or "", continuation=rec.continuation or "",
                source_doc=json.dumps(rec.source_doc, ensure_ascii=False) if rec.source_doc else "",
                prompt_longest_span=rec.longest_span).to_row())
    return {"test": datasets.Dataset.from_list(rows)}


def start_token(meta: dict[str, Any], options: TaskOptions | None = None):
    """The run's StartToken from `start_token` (metadata or PROPME_START_TOKEN; default auto)."""
    from propme_metrics.prompts.start import resolve_start_token

    options = options or read_options(meta)
    try:
        return resolve_start_token(options["start_token"], meta)
    except PropMeError as exc:
        where = options.where("start_token") if options["start_token"] is not None else "start_token (default auto)"
        raise TaskConfigError(f"{where}: {exc}") from None


def _truncated(index, prompt: str, max_tokens: int) -> str:
    """The prompt cut to its last `max_tokens` index tokens (0: unchanged), like vLLM's truncate_prompt_tokens,
    starting on a whole character (a cut inside one moves forward: a token or three fewer)."""
    from propme_metrics.prompts.prompt_set import whole_character_cut

    if not max_tokens:
        return prompt
    ids = index.encode(prompt)
    if len(ids) <= max_tokens:
        return prompt
    return index.decode(ids[whole_character_cut(index.decode, ids, len(ids) - max_tokens, forward=True):])


def _prompt_set(meta: dict[str, Any], options: TaskOptions, index, corpus: str, setting: str, language: str | None):
    """The prompt set of a prompted setting: the configured file, the cache, or built and cached."""
    from propme_metrics.prompts.prompt_set import build_prompt_set, cache_tag, load_prompt_set, write_prompt_set

    n, seed, cache_dir = options["n_prompts"], options["prompt_seed"], options["cache_dir"]
    prompt_file, pwhere = _corpus_option(meta, f"{corpus}_{setting}_prompts")
    cache = None
    try:
        if prompt_file is not None:
            return load_prompt_set(prompt_file, index=index, setting=setting)
        cache = Path(cache_dir) / "prompts"
        cache.mkdir(parents=True, exist_ok=True)
        prompt_file = cache / f"{index.manifest.identity}-{setting}-{language}-n{n}-seed{seed}-{cache_tag(setting, language)}.jsonl"
        pwhere = "the prompt cache"
        if prompt_file.exists():
            prompt_set = load_prompt_set(prompt_file, index=index, setting=setting)
        else:  # as many as the index allows: refused only when it allows none
            prompt_set = build_prompt_set(index, setting, n=n, seed=seed, language=language, at_most=True,
                                          option="n_prompts")
            write_prompt_set(prompt_set, prompt_file)
        if len(prompt_set.records) < n:
            print(f"PropMe: {corpus}/{setting}: {len(prompt_set.records)} prompts, fewer than n_prompts {n}: "
                  f"{_shortfall(prompt_set.manifest)}; the run uses all {len(prompt_set.records)}",
                  file=sys.stderr, flush=True)
        return prompt_set
    except PropMeError as exc:
        raise TaskConfigError(f"prompt set for {corpus}/{setting} ({pwhere}: {prompt_file}): {exc}") from None
    except OSError as exc:
        if prompt_file is None:  # the cache folder itself cannot be made
            raise TaskConfigError(f"cannot create the prompt cache {cache} (metadata key 'cache_dir' or "
                                  f"PROPME_CACHE_DIR): {exc.strerror or exc}; point it at a writable folder") from None
        raise TaskConfigError(f"cannot read or write the prompt set {prompt_file} ({pwhere}): {exc}") from None


def _shortfall(manifest: dict[str, Any]) -> str:
    """Why a prompt set built from the index has fewer prompts than asked, from its manifest's counts."""
    counts = manifest.get("counts") or {}
    if "eligible_documents" in counts:
        return f"the index has {counts['eligible_documents']} documents long enough for a prefix prompt"
    return f"{counts.get('passed')} of {counts.get('candidates')} candidate prompts pass the overlap check"


def document_tracer(doc: TaskDocument) -> Tracer:
    """The tracer a document names (local unless its backend says otherwise)."""
    return _tracer(doc.index_path, doc.trace or TraceConfig(), doc.backend)


@lru_cache(maxsize=8)
def _tracer(index_path: str, config: TraceConfig, backend: RayBackend | None = None) -> Tracer:
    """One tracer per process and configuration (each accelerate rank opens its own); with the Ray
    backend its shards are held by actors on the cluster."""
    if backend is not None:
        from propme_metrics.trace.ray_search import ray_tracer

        return ray_tracer(index_path, config, address=backend.address, actors=backend.actors)
    return Tracer(index_path, config)


def _jobs(doc: dict[str, Any], results: list[Any]) -> tuple[TaskDocument, list[deferred.Job]]:
    """A prompt's document and its generations to trace, as lm-eval hands them to `process_results`."""
    generations = results[0] if results and isinstance(results[0], list) else results
    document = TaskDocument.from_row(doc)
    continuation = document.continuation or None if document.setting == PREFIX else None
    return document, [(str(text), generation_key(document.id, document.sample_ix, j, len(generations)), continuation)
                      for j, text in enumerate(generations)]


def trace_task(instances: list[Any]) -> None:
    """Trace every generation of a task in bulk before lm-eval scores it (`deferred.trace_ahead`):
    the task's instances after its filters, grouped per document and filter as lm-eval groups them
    for `process_results`, with each document's `trace_workers`."""
    by_doc: dict[int, list[Any]] = {}
    for inst in instances:
        by_doc.setdefault(inst.doc_id, []).append(inst)
    batches = []
    for group in by_doc.values():
        group.sort(key=lambda inst: inst.idx)
        for key in group[0].filtered_resps:
            document, jobs = _jobs(group[0].doc, [inst.filtered_resps[key] for inst in group])
            batches.append((document_tracer(document), jobs,
                            document.trace_workers or deferred.default_trace_workers()))
    deferred.trace_ahead(batches)


def process_results(doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """One item per metric of the YAML for this prompt's generations, from the traces the task's bulk
    step made (`trace_task`), or traced now when there are none (a caller outside lm-eval).

    Each metric's item is the prompt's own value, a number in the logged sample (None where it is
    undefined), carrying its (numerator, denominator) pair that `agg_ratio` pools over the whole task
    (`max` metrics: the largest value, `agg_max`), so lm-eval's table shows the same numbers as `propme
    trace` and `propme report`: sums divided once, never a mean of per-prompt means. The pairs are also
    kept in the `trace` item (`pooled`), which no tool takes for a score.
    """
    document, jobs = _jobs(doc, results)
    traces = deferred.take(jobs)
    if traces is None:
        tracer = document_tracer(document)
        traces = [tracer.safe_trace_one(*job) for job in jobs]
    return _items(document, traces)


def _items(doc: TaskDocument, traces: list[TraceResult]) -> dict[str, Any]:
    """The items of one prompt from its generations' traces: `trace` (the full record) first, then
    the setting's metrics in registry order."""
    setting = doc.setting or None
    personal = [leaks(t) for t in traces]
    records = []
    for t, p in zip(traces, personal):
        # personal data the generation reproduced from the corpus; values masked unless pii_show
        records.append({**t.to_dict(), "pii": p.to_dict(show=doc.pii_show)})
    items: dict[str, Any] = {
        "trace": {
            "prompt_id": doc.id, "setting": setting, "index_identity": doc.index_identity,
            "failed": sum(t.error is not None for t in traces),
            "top_sources": _top_sources(traces),
            "generations": records,
        },
    }
    metrics = registry.for_setting(setting)
    rare = doc.rare_max_count or RARE_MAX_COUNT
    counted = [contributions(t, metrics, p, rare) for t, p in zip(traces, personal) if counts_for_metrics(t)]
    pooled = {m.name: pool(m, counted) for m in metrics}
    items["trace"]["pooled"] = {m.name: m.pooling.pooled_record(pooled[m.name]) for m in metrics}
    for m in metrics:
        items[m.name] = m.pooling.sample_item(pooled[m.name])
    return items


def _top_sources(traces: list[TraceResult], k: int = 5) -> list[dict[str, Any]]:
    docs = [d for t in traces for d in t.documents]
    docs.sort(key=lambda d: (-d.nv_recall, d.match != "full_raw", d.doc_ix))
    return [{"source_id": d.source_id, "match": d.match, "nv_recall": d.nv_recall} for d in docs[:k]]


def agg_ratio(items: list[registry.PooledValue | None]) -> float:
    """Sum of numerators over sum of denominators, pooled over the task; NaN when nothing was
    counted (undefined, not 0)."""
    value = registry.RATIO.corpus_value(items)
    return float("nan") if value is None else value


def agg_max(items: list[registry.PooledValue | None]) -> float:
    """Largest value over counted prompts; NaN when nothing was counted."""
    value = registry.MAXIMUM.corpus_value(items)
    return float("nan") if value is None else value


def agg_trace_failures(items: list[dict[str, Any]]) -> int:
    """Generations whose tracing failed (0 is healthy); redo them with `propme trace` on the samples file."""
    return sum(i["failed"] for i in items)
