"""PropMe's figures inside lm-eval's results (`propme_tasks.lmeval_results`): stderr by the report's
interval rule, PM in a corpus group's row, helper entries out of the table, the sidecar."""
from __future__ import annotations

import json
import math
from statistics import NormalDist
from types import SimpleNamespace

import pytest

from propme_metrics.metrics import registry
from propme_metrics.metrics.pm import IntervalSpec, bootstrap_metric, metric_interval, pm, pm_interval, wilson_interval
from propme_metrics.metrics.ratio import Ratio
from propme_tasks.lmeval_results import RunFigures, pm_key
from propme_tasks.task import PropMeTask

Z = NormalDist().inv_cdf(0.975)


class Leaf(PropMeTask):
    """A PropMe task as the wrappers read it: its name and metadata only."""

    def __init__(self, name: str, setting: str, **meta):  # noqa: D107 - no lm-eval task is built
        self._config = SimpleNamespace(task=name, metadata={"corpus": "demo", "setting": setting, **meta})


def _raw(fmr: list[tuple[float, float]], nvr: list[tuple[float, float]], failed: int = 0) -> dict:
    """raw_metrics as lm-eval collects them: one item per document and metric."""
    n = len(fmr)
    return {("trace", "none"): [{"prompt_id": f"p{i}", "failed": failed if i == 0 else 0} for i in range(n)],
            ("fmr", "none"): [registry.RATIO.sample_item((s, d)) for s, d in fmr],
            ("nvr", "none"): [registry.RATIO.sample_item((s, d)) for s, d in nvr],
            ("nvr_max", "none"): [registry.MAXIMUM.sample_item((0.5, 1.0)) for _ in range(n)]}


def _agg(raw: dict) -> dict:
    """What lm-eval's own aggregation leaves for PropMe's metrics: values, and N/A stderrs."""
    agg = {}
    for (metric, f), items in raw.items():
        if metric == "trace":
            agg[f"{metric},{f}"] = sum(i["failed"] for i in items)
        elif metric == "nvr_max":
            agg[f"{metric},{f}"] = 0.5
        else:
            n = sum(i.pair[1] for i in items if i is not None)
            agg[f"{metric},{f}"] = sum(i.pair[0] for i in items if i is not None) / n if n else math.nan
        agg[f"{metric}_stderr,{f}"] = "N/A"
    return agg


def test_stderr_is_the_half_width_of_the_reports_interval_and_helpers_leave():
    fmr = [(1.0, 1.0)] * 3 + [(0.0, 1.0)] * 7
    nvr = [(0.9, 2.0), (0.0, 1.0), (0.4, 1.0), (0.0, 3.0), (0.2, 1.0), (0.0, 1.0), (0.7, 2.0), (0.0, 1.0),
           (0.1, 1.0), (0.0, 1.0)]
    raw, run = _raw(fmr, nvr, failed=2), RunFigures()
    agg = run.task(Leaf("propme_demo_generic", "generic"), raw, _agg(raw), 100000)
    low, high = wilson_interval(3, 10)
    assert agg["fmr_stderr,none"] == pytest.approx((high - low) / (2 * Z))
    iv = bootstrap_metric([Ratio(*p) for p in nvr], IntervalSpec())
    assert agg["nvr_stderr,none"] == pytest.approx((iv.high - iv.low) / (2 * Z))
    assert agg["nvr_max_stderr,none"] == "N/A"  # a maximum has no interval
    assert not any(k.startswith("trace") for k in agg)
    figures = run.sidecar({"propme_demo_generic": agg})["tasks"]["propme_demo_generic"]
    assert figures["tracing_failures"] == 2
    assert figures["metrics"]["fmr"]["method"] == "wilson-modified"
    assert figures["metrics"]["nvr"]["method"] == "bootstrap-expanded-percentile"
    # lm-eval's --bootstrap_iters 0 asks for no stderr: PropMe's stay N/A, the intervals are still written
    raw = _raw(fmr, nvr)
    assert run.task(Leaf("propme_demo_generic", "generic"), raw, _agg(raw), 0)["fmr_stderr,none"] == "N/A"


def test_a_prompts_rows_are_one_unit():
    """Several generations per prompt are rows of one prompt id: the bootstrap resamples prompts."""
    raw = _raw([(1.0, 1.0), (0.0, 1.0), (1.0, 1.0), (1.0, 1.0)], [(0.5, 1.0), (0.0, 1.0), (1.0, 1.0), (0.3, 1.0)])
    raw[("trace", "none")] = [{"prompt_id": p, "failed": 0} for p in ("a", "a", "b", "b")]
    run = RunFigures()
    run.task(Leaf("propme_demo_generic", "generic"), raw, _agg(raw), 100)
    assert run.tasks["propme_demo_generic"].units["nvr"] == [Ratio(0.5, 2.0), Ratio(1.3, 2.0)]


def test_the_group_row_holds_pm_against_the_prefix_subtask_and_undefined_stays_nan():
    run = RunFigures()
    prefix = [(1.0, 1.0)] * 8 + [(0.0, 1.0)] * 2
    generic = [(1.0, 1.0)] * 2 + [(0.0, 1.0)] * 8
    leaves = {"propme_demo_prefix": (Leaf("propme_demo_prefix", "prefix"), prefix, prefix),
              "propme_demo_generic": (Leaf("propme_demo_generic", "generic"), generic, [(0.0, 0.0)] * 10)}
    metrics = {}
    for name, (leaf, fmr, nvr) in leaves.items():
        raw = _raw(fmr, nvr)
        metrics[name] = {**run.task(leaf, raw, _agg(raw), 100000), "sample_len": 10}
    group = SimpleNamespace(name="propme_demo", alias=None, get_all_tasks=lambda: [v[0] for v in leaves.values()])
    row = run.group(group, metrics)
    key = pm_key("fmr", "generic")
    assert row[f"{key},none"] == pytest.approx(pm(0.2, 0.8))
    iv = pm_interval([Ratio(*p) for p in generic], [Ratio(*p) for p in prefix], IntervalSpec(),
                     (metric_interval(registry.metric("fmr"), [Ratio(*p) for p in generic],
                                                     IntervalSpec()),
                      metric_interval(registry.metric("fmr"), [Ratio(*p) for p in prefix],
                                                     IntervalSpec())))
    assert row[f"{key}_stderr,none"] == pytest.approx((iv.high - iv.low) / (2 * Z))
    nvr = pm_key("nvr", "generic")  # the propensity side has no document entry: NVR and its PM undefined
    assert math.isnan(row[f"{nvr},none"]) and row[f"{nvr}_stderr,none"] == "N/A"
    assert row["sample_len"] == 20 and row["alias"] == "propme_demo"
    side = run.sidecar({**metrics, "propme_demo": row})
    assert side["groups"]["propme_demo"][key]["capability_task"] == "propme_demo_prefix"
    assert side["groups"]["propme_demo"][nvr]["value"] is None
    json.dumps(side, allow_nan=False)  # no NaN in the sidecar: undefined is null there


def test_withheld_pm_keeps_its_value_and_says_so():
    run = RunFigures()
    prefix = [(1.0, 1.0)] * 2 + [(0.0, 1.0)] * 8   # two prompts with an event: too few to carry PM
    generic = [(1.0, 1.0)] * 3 + [(0.0, 1.0)] * 7
    metrics = {}
    leaves = [Leaf("propme_demo_prefix", "prefix"), Leaf("propme_demo_generic", "generic")]
    for leaf, fmr in zip(leaves, (prefix, generic)):
        raw = _raw(fmr, fmr)
        metrics[leaf.config.task] = {**run.task(leaf, raw, _agg(raw), 100000), "sample_len": 10}
    row = run.group(SimpleNamespace(name="propme_demo", alias=None, get_all_tasks=lambda: leaves), metrics)
    assert row[f"{pm_key('fmr', 'generic')},none"] == pytest.approx(pm(0.3, 0.2))
    withheld = run.sidecar({**metrics, "propme_demo": row})["groups"]["propme_demo"][pm_key("fmr", "generic")]
    assert "fewer than 5" in withheld["withheld"]
