"""The hooks of the likelihood subtask `propme_<corpus>_likelihood` (old name `propme_<corpus>_prefix_likelihood`: an alias for one release) (task_configs/_likelihood_template_yaml).

The documents are the `prefix` setting's: the same prompt file, or the same seed and selection
(`hooks.load_prompts` with setting `prefix`), one request per document. lm-eval scores the
`loglikelihood` of the pair (context, continuation) = (start token + the first 50 index tokens'
text, the next 50 index tokens' text), nothing put between them: lm-eval 0.4.13 builds a
loglikelihood request as (doc_to_text, doc_to_target) and uses target_delimiter only for
multiple choice; the template sets it to "" all the same.

lm-eval's HF backend encodes context + continuation together and takes the tokens after the
context's own encoding as the continuation (trailing white space of the context moves to the
continuation first). `target_tokens` recounts that split with the model's tokenizer, and
`boundary_clean` says whether the whole text's first tokens are exactly the context's tokens
(else one token straddles the boundary and the scored tokens are not exactly z's).
"""
from __future__ import annotations

import statistics
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics import registry
from propme_metrics.metrics.likelihood import (
    DISCOVERABLE_N,
    DISCOVERABLE_P,
    N_KEY,
    P_KEY,
    DocumentLikelihood,
)
from propme_metrics.prompts.settings import CONTINUATION_TOKENS, PREFIX, PREFIX_TOKENS, SUBTASK_SUFFIX, task_name
from propme_metrics.trace.task_document import TaskDocument

from . import hooks
from .schema import Key, parse_value
from .schema import (
    read_options as read_settings,  # load_documents' old name: lm-eval copies its source into results files
)


def split_counts(tok, context: str, target: str) -> tuple[int, bool]:
    """(tokens of `target`, clean boundary) as lm-eval's causal `_encode_pair` splits context + target."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, target = context[:-spaces], context[-spaces:] + target
    whole = tok.encode(context + target, add_special_tokens=False)
    head = tok.encode(context, add_special_tokens=False)
    return len(whole) - len(head), not spaces and whole[:len(head)] == head


def _model_tokenizer(meta: dict[str, Any]):
    """The model's tokenizer as lm-eval loads it (from --model_args in the metadata), or None if unknown."""
    from propme_metrics.index.tokenizer import load_tokenizer
    from propme_metrics.prompts.start import model_tokenizer_spec

    try:
        spec = model_tokenizer_spec(meta)
        if spec is None:
            return None
        return load_tokenizer(spec.name, spec.revision, require_fast=False, **dict(spec.kwargs))
    except ConfigError as exc:
        raise hooks.TaskConfigError(f"the likelihood subtask counts z's tokens with the model's tokenizer: "
                                    f"{exc.message}") from None


def model_max_length(meta: dict[str, Any], tok) -> int | None:
    """The context length lm-eval's HF backend gives the model: `max_length` (or vLLM's
    `max_model_len`) from the model arguments, else lm-eval's own reading of the model's config
    (`resolve_max_length`); None when the model's config cannot be read here."""
    for key in ("max_length", "max_model_len"):
        if meta.get(key) not in (None, ""):
            return parse_value(Key(key, int, None, 1, 10 ** 9), meta[key], f"model argument {key}")
    name = meta.get("pretrained")
    if not isinstance(name, str) or not name.strip():
        return None
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name, revision=meta.get("revision") or None,
                                            trust_remote_code=bool(meta.get("trust_remote_code")))
    except (OSError, ValueError):
        return None  # lm-eval will say what is wrong with the model when it loads it
    try:
        from lm_eval.models.utils import resolve_max_length
    except ImportError:  # lm-eval 0.4.12: HFLM.max_length reads the top-level config, then the tokenizer
        from lm_eval.models.huggingface import TOKENIZER_INFINITY

        found = [getattr(config, a) for a in ("n_positions", "max_position_embeddings", "n_ctx") if hasattr(config, a)]
        limit = found[0] if found else getattr(tok, "model_max_length", None)
        return HFLM._DEFAULT_MAX_LENGTH if limit in (None, TOKENIZER_INFINITY) else int(limit)
    return resolve_max_length(config, tok, default=HFLM._DEFAULT_MAX_LENGTH)


def check_fits(task: str, max_length: int | None, totals: list[int], targets: list[int]) -> None:
    """Refuse documents whose context + continuation the model cannot take whole: lm-eval would stop
    on a bare AssertionError (a continuation longer than the model's context) or cut the context
    from the left, scoring log P(z) under a shorter prefix than the method's (a silent, wrong number)."""
    if max_length is None or not totals:
        return
    longest, too_long = max(totals), sum(t > max_length + 1 or z > max_length for t, z in zip(totals, targets))
    if too_long:
        raise hooks.TaskConfigError(
            f"{task}: {too_long} of {len(totals)} prefix documents do not fit the model's context of "
            f"{max_length} tokens: the start token, the {PREFIX_TOKENS}-token prefix and the "
            f"{CONTINUATION_TOKENS}-token continuation take up to {longest} of the model's tokens, and lm-eval "
            "would cut the prefix from the left (or stop) rather than score it whole",
            f"give the model a context of at least {longest - 1} tokens (--model_args max_length=N, if the model "
            f"takes that many), or leave out {task}")


@hooks.handed_over
def load_documents(**meta: Any):
    """`custom_dataset` hook: the prefix documents (one row each) with p, z's model-token count and the split."""
    options = read_settings(meta)
    # the prefix setting's documents, once each: no repeats (a likelihood is not sampled)
    data = hooks.load_prompts(**dict(meta, setting=PREFIX, generations_per_prompt=1))["test"]
    tok = _model_tokenizer(meta)
    counts = [split_counts(tok, ctx, z) if tok is not None else (None, None)
              for ctx, z in zip(data["model_prompt"], data["continuation"])]
    if tok is not None:
        added = 1 if hooks.start_token(meta, options).added_by_tokenizer else 0
        totals = [len(tok.encode(ctx + z, add_special_tokens=False)) + added
                  for ctx, z in zip(data["model_prompt"], data["continuation"])]
        check_fits(task_name(str(meta.get("corpus")), SUBTASK_SUFFIX), model_max_length(meta, tok), totals,
                   [c[0] for c in counts])
    data = data.add_column("target_tokens", [c[0] for c in counts])
    data = data.add_column("boundary_clean", [c[1] for c in counts])
    data = data.add_column(P_KEY, [options[P_KEY]] * len(data))
    return {"test": data.add_column(N_KEY, [list(options[N_KEY])] * len(data))}


def _document(doc: dict[str, Any], results: list[Any]) -> DocumentLikelihood:
    """The document's record from lm-eval's results: one (loglikelihood, is_greedy) pair."""
    (pair,) = results
    logp, greedy = pair
    return DocumentLikelihood(str(doc["id"]), float(logp), bool(greedy), doc.get("target_tokens"),
                              doc.get("boundary_clean"))


def process_results(doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """One value per registry likelihood metric, and the document's record (the `likelihood` item)."""
    record = _document(doc, results)
    p = float(doc.get(P_KEY, DISCOVERABLE_P))
    items: dict[str, Any] = {m.name: m.value(record, p) for m in registry.LIKELIHOOD_METRICS}
    items[registry.LIKELIHOOD_DIAGNOSTIC[0]] = {**record.to_dict(), P_KEY: p, N_KEY: list(doc.get(N_KEY) or DISCOVERABLE_N),
                                                "index_identity": TaskDocument.from_row(doc).index_identity}
    return items


def agg_median(items: list[float]) -> float:
    """The median over documents (lm-eval's own `median` takes the upper middle of an even count); NaN when none."""
    return statistics.median(items) if items else float("nan")


def agg_documents(items: list[dict[str, Any]]) -> int:
    """Documents scored."""
    return len(items)
