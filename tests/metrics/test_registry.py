"""The metric registry is the one definition: the task YAML and docs/method.md's metric table must equal it."""
from __future__ import annotations

import importlib
import math
import re
from pathlib import Path

import pytest
import yaml

from propme_metrics.metrics import registry
from propme_metrics.report.columns import leaderboard_columns

ROOT = Path(__file__).resolve().parents[2]


class _Loader(yaml.SafeLoader):
    """Reads lm-eval's `!function module.name` tags as the dotted name."""


_Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def _yaml_metrics() -> list[dict]:
    data = yaml.load((ROOT / "task_configs" / "_default_template_yaml").read_text(), Loader=_Loader)
    return data["metric_list"]


def test_yaml_metric_list_equals_registry():
    entries = _yaml_metrics()
    expected = [(m.name, m.pooling.hook, m.higher_is_better) for m in registry.METRICS]
    expected.append((registry.TRACE_DIAGNOSTIC[0], "propme_tasks.hooks.agg_trace_failures", False))
    assert [(e["metric"], e["aggregation"], e["higher_is_better"]) for e in entries] == expected


def test_docs_metric_table_equals_registry():
    text = (ROOT / "docs" / "method.md").read_text()
    table = text[text.index("| metric | label | meaning | pooled as |"):]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(tuple(c.strip() for c in line.strip("|").split("|"))[:3])  # the fourth: how it is pooled
    expected = [(f"`{m.name}`", m.label, m.description) for m in registry.METRICS]
    expected.append((f"`{registry.TRACE_DIAGNOSTIC[0]}`", "", registry.TRACE_DIAGNOSTIC[1]))
    assert rows == expected


def test_registry_is_consistent():
    names = [m.name for m in registry.METRICS]
    assert len(set(names)) == len(names) and all(re.fullmatch(r"[a-z0-9_]+", n) for n in names)
    assert set(registry.DEFAULT_PM_METRICS) <= set(registry.PM_METRICS)
    for view in registry.VIEWS.values():
        assert set(view) <= set(names)
    # a max is not a ratio over prompts, and a prefix-only metric has no propensity side: no PM for either
    assert all(not m.pm for m in registry.METRICS if not m.has_interval or m.settings)
    assert registry.for_setting("generic") == tuple(m for m in registry.METRICS if m.name != "extraction")
    assert registry.for_setting("prefix") == registry.METRICS


def test_leaderboard_documents_every_proportion():
    # the proportions' interval is the `_low`/`_high` one (modified Wilson) since issue 33
    wilson = dict(leaderboard_columns())["propme_<corpus>_<setting>_<metric>_low"]
    for name in registry.PROPORTIONS:
        assert f"`{name}`" in wilson


def test_likelihood_template_metric_list_equals_registry():
    data = yaml.load((ROOT / "task_configs" / "_likelihood_template_yaml").read_text(), Loader=_Loader)
    expected = [(m.name, m.pooling.hook, m.higher_is_better) for m in registry.LIKELIHOOD_METRICS]
    expected.append((registry.LIKELIHOOD_DIAGNOSTIC[0], "propme_tasks.likelihood.agg_documents", False))
    assert [(e["metric"], e["aggregation"], e["higher_is_better"]) for e in data["metric_list"]] == expected
    assert data["output_type"] == "loglikelihood" and data["target_delimiter"] == ""


def test_likelihood_metrics_are_consistent():
    from propme_metrics.metrics.likelihood import DISCOVERABLE_N

    names = [m.name for m in registry.LIKELIHOOD_METRICS]
    assert len(set(names)) == len(names) and all(re.fullmatch(r"[a-z0-9_@]+", n) for n in names)
    assert not set(names) & set(registry.NAMES)  # one name, one meaning
    assert [m.n for m in registry.LIKELIHOOD_METRICS if m.n] == list(DISCOVERABLE_N)
    assert set(registry.LIKELIHOOD_LEADERBOARD) <= set(names)
    assert {m.pooling for m in registry.LIKELIHOOD_METRICS} == {registry.MEAN, registry.MEDIAN}


def test_one_table_and_one_lookup_hold_both_units():
    assert registry.REGISTRY == (*registry.METRICS, *registry.LIKELIHOOD_METRICS)
    assert {m.unit for m in registry.REGISTRY} == {registry.Generation, registry.Document}
    assert len(registry.BY_NAME) == len(registry.REGISTRY)  # one name, one metric, whichever its unit
    assert all(registry.metric(m.name) is m for m in registry.REGISTRY)
    assert registry.METRICS == registry.of_unit(registry.Generation)
    assert {m.pooling for m in registry.METRICS} == {registry.RATIO, registry.MAXIMUM}
    assert not any(m.pm for m in registry.LIKELIHOOD_METRICS)


def test_each_pooling_names_its_lm_eval_aggregation():
    # PropMe's hooks are propme_tasks.hooks.agg_<pooling name>; the likelihood subtask's mean is
    # lm-eval's own, its median the likelihood hooks' (the names the task YAML has always used)
    from propme_tasks import hooks

    for pooling in (registry.RATIO, registry.MAXIMUM):
        assert pooling.hook == f"propme_tasks.hooks.agg_{pooling.name}"
        assert callable(getattr(hooks, f"agg_{pooling.name}"))
    assert registry.MEAN.hook == "mean"
    module, name = registry.MEDIAN.hook.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name)([1.0, 3.0, 10.0]) == registry.MEDIAN([1.0, 3.0, 10.0])
    assert [p.has_interval for p in (registry.RATIO, registry.MAXIMUM, registry.MEAN, registry.MEDIAN)] == \
        [True, False, True, True]


def test_poolings_are_callables_over_contributions():
    pairs = [(1.0, 2.0), (0.0, 2.0), (3.0, 0.0)]
    assert registry.RATIO(pairs) == 1.0 and registry.MAXIMUM(pairs) == 3.0
    assert registry.RATIO([(1.0, 0.0)]) is None and registry.MAXIMUM([]) is None  # undefined, never 0
    assert registry.MEAN([0.0, 1.0, 1.0]) == 2 / 3 and registry.MEDIAN([5.0, 1.0, 2.0, 100.0]) == 3.5
    assert registry.MEAN([]) is None and registry.MEDIAN([]) is None
    nvr = registry.metric("nvr")
    assert nvr.value_of(pairs) == nvr.pooled(*nvr.pool(pairs)) == 4 / 4
    assert math.isclose(registry.metric("log10_p_median").value_of([-2.0, -1.0, -4.0]), -2.0)


def test_metric_aggregation_is_a_deprecated_alias_of_pooling():
    with pytest.warns(DeprecationWarning, match="pooling"):
        assert registry.metric("nvr_max").aggregation is registry.MAXIMUM
