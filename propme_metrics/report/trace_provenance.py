"""Which data leaks in a user's own generations (`propme trace`): the report's leak analysis
(`metrics.provenance_analysis`: by source and by duplication) run on the traced generations, unchanged.

The generations become one task of the report's kind. Generations whose keys share the part before
the first '#' (the samples of one prompt: lm-eval's `<prompt>#<sample>.<j>`, a JSONL list field's
`<key>#<j>`) are one resampling unit, as a prompt is in `propme report`; every other generation is its
own unit. When the input gives true continuations (prefix prompts), the extraction rate by corpus
count of the continuation is computed too. Degenerate and failed generations are left out, as in
the report.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from propme_metrics.metrics.pm import IntervalSpec
from propme_metrics.metrics.provenance_analysis import CorpusLeaks, corpus_leaks
from propme_metrics.metrics.robustness import Robustness, corpus_robustness
from propme_metrics.metrics.runs import RunTask, TracedPrompt
from propme_metrics.metrics.values import Contributions, contributions, counts_for_metrics
from propme_metrics.prompts.settings import PREFIX
from propme_metrics.trace.inputs import TraceInput
from propme_metrics.trace.result import TraceResult

#: the setting name the leak tables show for generations that are not prefix continuations
TRACED = "traced"


def _unit_key(key: str) -> str:
    return key.split("#", 1)[0]


def traced_task(inputs: Sequence[TraceInput], results: Sequence[TraceResult], index_path: str | Path,
                index_identity: str, rare_max_count: int,
                values: Sequence[Contributions | None] | None = None) -> RunTask:
    """The traced generations as one task of the report's kind (setting `prefix` when every generation
    has a true continuation, else `traced`), grouped into units as the module docstring says.
    `values`: the generations' contributions when already computed (`Summary.per_generation`, with
    `rare_max_count`), else they are computed here."""
    prefix = bool(inputs) and all(g.continuation for g in inputs)
    setting = PREFIX if prefix else TRACED
    prompts: dict[str, TracedPrompt] = {}
    for i, (g, r) in enumerate(zip(inputs, results)):
        unit = _unit_key(r.key)
        p = prompts.setdefault(unit, TracedPrompt(id=unit, prompt="", continuation=g.continuation or "",
                                                  index_path=str(index_path)))
        p.generations.append(r)
        known = values[i] if values is not None else None
        p.values.append(None if not counts_for_metrics(r) else known if known is not None else
                        contributions(r, rare_max_count=rare_max_count))
    task = RunTask(task="propme trace", corpus="", setting=setting, model="", revision="", model_args="",
                   metadata={}, index_identity=index_identity, results={}, prompts=list(prompts.values()),
                   results_path=Path(), samples_path=Path(), date_id="", rare_max_count=rare_max_count)
    return task


def trace_leaks(task: RunTask, bootstrap: int, seed: int) -> CorpusLeaks:
    """The leak analysis of the traced task (`traced_task`; one entry under `settings`); `bootstrap`
    resamples with `seed` (the command's options) make its intervals."""
    return corpus_leaks({task.setting: task}, IntervalSpec(bootstrap, seed))


def trace_robustness(task: RunTask, index, bootstrap: int, seed: int) -> Robustness:
    """The robustness figures of the traced task (`metrics.robustness`: repeated sampling, the long
    spans' duplication and concentration; no floor, the input holding no propensity prompts)."""
    return corpus_robustness({task.setting: task}, index, IntervalSpec(bootstrap, seed))


def leaks_record(leaks: CorpusLeaks) -> dict:
    """SUMMARY.json's `leaks`: the source field, the corpus size, why parts are missing, and the setting's tables."""
    (setting_leaks,) = leaks.settings.values()
    return {"source_field": leaks.source_field, "corpus_tokens": leaks.corpus_tokens, "note": leaks.note,
            **setting_leaks.to_dict()}
