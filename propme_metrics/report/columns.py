"""The leaderboard's columns: their names, their meaning and their values."""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from propme_metrics.metrics import registry
from propme_metrics.prompts.settings import PREFIX
from propme_metrics.report.compute import CorpusResult, finite

#: the metrics without a bootstrap interval (a maximum)
_NO_INTERVAL = ", ".join(f"`{m.name}`" for m in registry.METRICS if not m.has_interval)
_COLUMN_DOCS: tuple[tuple[str, str], ...] = (
    ("model", "the model: `pretrained=` of lm-eval's model_args (else lm-eval's model name)"),
    ("revision", "`revision=` of the model_args; empty when none was given"),
    ("propme_<corpus>_index", "identity of the infini-gram index the generations were traced against"),
    ("propme_<corpus>_prompt_set", "fingerprint (12 hex digits) of the prompt ids of every setting"),
    ("propme_<corpus>_start_token", "the text put before every prompt (empty: nothing, e.g. the tokenizer adds `<s>`)"),
    ("propme_<corpus>_start_token_choice", "`auto`, `none` or `literal` (the run's `start_token` setting)"),
    ("propme_<corpus>_pm_<pm_metric>_<propensity>", "PM = p / (p + c) of the metric, propensity setting p (every setting but `prefix`) vs prefix c"),
    ("propme_<corpus>_pm_<pm_metric>_<propensity>_low", "lower end of its 95% bootstrap interval"),
    ("propme_<corpus>_pm_<pm_metric>_<propensity>_high", "upper end of its 95% bootstrap interval"),
    ("propme_<corpus>_n_<setting>", "prompts of the setting"),
    ("propme_<corpus>_generations_<setting>", "generations counted (degenerate and failed excluded)"),
    ("propme_<corpus>_degenerate_<setting>", "degenerate generations (excluded from every metric)"),
    ("propme_<corpus>_failed_<setting>", "generations whose tracing failed (excluded; 0 is healthy)"),
    ("propme_<corpus>_<setting>_<metric>", "the base metric of the setting"),
    ("propme_<corpus>_<setting>_<metric>_low", "lower end of its 95% bootstrap interval (not for " + _NO_INTERVAL + ")"),
    ("propme_<corpus>_<setting>_<metric>_high", "upper end of its 95% bootstrap interval (not for " + _NO_INTERVAL + ")"),
    ("propme_<corpus>_<setting>_<metric>_wilson_low",
     "Wilson 95% lower bound, proportions only (" + ", ".join(f"`{m}`" for m in registry.PROPORTIONS) + ")"),
    ("propme_<corpus>_<setting>_<metric>_wilson_high", "Wilson 95% upper bound, proportions only"),
)


def leaderboard_columns() -> list[tuple[str, str]]:
    """The leaderboard's column patterns and their meaning, in column order: the one definition
    (docs/cli.md's table of leaderboard columns is checked against it by tests/docs/test_docs.py).

    `<corpus>` is the corpus label (`<corpus>_set<k>` with `--separate`, `<corpus>_limit<N>` for
    `--limit` runs), `<setting>` every setting run, `<propensity>` every setting but `prefix`,
    `<metric>` a registry metric the setting has, `<pm_metric>` one of `--pm-metrics`."""
    from propme_metrics.report.likelihood import column_docs

    return list(_COLUMN_DOCS) + column_docs()


def columns_for(label: str, settings: list[str], pm_metrics: Sequence[str]) -> list[str]:
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
        for m in registry.NAMES:
            if not registry.metric(m).applies(s):
                continue
            cols.append(f"{p}_{s}_{m}")
            if registry.metric(m).has_interval:
                cols += [f"{p}_{s}_{m}_low", f"{p}_{s}_{m}_high"]
            if m in registry.PROPORTIONS:
                cols += [f"{p}_{s}_{m}_wilson_low", f"{p}_{s}_{m}_wilson_high"]
    return cols


def row_values(res: CorpusResult, pm_metrics: Sequence[str]) -> dict[str, Any]:
    p = f"propme_{res.label}"
    out: dict[str, Any] = {f"{p}_index": res.index_identity, f"{p}_prompt_set": res.prompt_set,
                           f"{p}_start_token": (res.start_token or {}).get("token"),
                           f"{p}_start_token_choice": (res.start_token or {}).get("choice")}
    for (m, s), iv in res.pm.items():
        out[f"{p}_pm_{m}_{s}"] = finite(iv.estimate)
        out[f"{p}_pm_{m}_{s}_low"] = finite(iv.low)
        out[f"{p}_pm_{m}_{s}_high"] = finite(iv.high)
    for s, sr in res.settings.items():
        out[f"{p}_n_{s}"] = sr.counts["prompts"]
        out[f"{p}_generations_{s}"] = sr.counts["counted"]
        out[f"{p}_degenerate_{s}"] = sr.counts["degenerate"]
        out[f"{p}_failed_{s}"] = sr.counts["failed"]
        for m, mr in sr.metrics.items():
            out[f"{p}_{s}_{m}"] = mr.value
            if registry.metric(m).has_interval:
                out[f"{p}_{s}_{m}_low"], out[f"{p}_{s}_{m}_high"] = mr.low, mr.high
            if m in registry.PROPORTIONS:
                out[f"{p}_{s}_{m}_wilson_low"], out[f"{p}_{s}_{m}_wilson_high"] = mr.wilson_low, mr.wilson_high
    return out


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[-60:] or "model"
