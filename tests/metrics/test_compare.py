"""Paired comparisons of models on shared prompts (metrics/compare.py, docs/method.md ranking)."""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from propme_metrics.metrics import registry
from propme_metrics.metrics.compare import (
    COMPARISON_FIELDS,
    Arm,
    ComparisonRow,
    compare_arms,
    pairing_problem,
    rank,
    select_pairs,
)
from propme_metrics.metrics.difference import BOUNDS, PAIRED, UNPAIRED, Difference, metric_difference, pm_difference
from propme_metrics.metrics.pm import IntervalSpec, expanded_alpha, joint_ratios, metric_interval, resample_indices
from propme_metrics.metrics.ratio import Ratio

FMR, NVR = registry.metric("fmr"), registry.metric("nvr")


def _shares(flags) -> list[Ratio]:
    return [Ratio(float(f), 1.0) for f in flags]


def test_paired_difference_is_the_bootstrap_of_joint_resamples():
    # per prompt NVR sums over document entries; B is A minus a little on every prompt: shared difficulty
    rng = np.random.default_rng(5)
    den = rng.integers(1, 5, 60).astype(float)
    a = [Ratio(float(x), d) for x, d in zip(rng.uniform(0, 1, 60) * den, den)]
    b = [Ratio(max(0.0, s.numerator - 0.05 * s.denominator), s.denominator) for s in a]
    iv = metric_difference(NVR, a, b, True, IntervalSpec(2_000, 3))
    # the same draws by hand: one index row per resample applied to both models
    na, da = np.array([s.numerator for s in a]), np.array([s.denominator for s in a])
    nb = np.array([s.numerator for s in b])
    diffs = np.concatenate([na[i].sum(1) / da[i].sum(1) - nb[i].sum(1) / da[i].sum(1)
                            for i in resample_indices(60, 2_000, np.random.default_rng(3))])
    # the expanded percentile tails: Phi(-sqrt(n / (n - 1)) t_(0.975, n - 1)), t_(0.975, 59) = 2.000995 (tables)
    tail = NormalDist().cdf(-math.sqrt(60 / 59) * 2.000995)
    low, high = np.quantile(diffs, [tail, 1 - tail])
    assert iv.estimate == pytest.approx(na.sum() / da.sum() - nb.sum() / da.sum())
    assert (iv.low, iv.high, iv.method, iv.resamples) == (pytest.approx(low, rel=1e-4), pytest.approx(high, rel=1e-4),
                                                          PAIRED, 2_000)
    # pairing cancels the prompts' own spread: the unpaired interval of the same data is much wider
    unpaired = metric_difference(NVR, a, b, False, IntervalSpec(2_000, 3))
    assert unpaired.method == UNPAIRED
    assert (unpaired.high - unpaired.low) > 3 * (iv.high - iv.low)
    assert iv.low > 0  # a small shift on every prompt is found


def test_identical_models_get_a_nonzero_width_interval_not_significant():
    a = _shares([0] * 100)
    iv = metric_difference(FMR, a, list(a), True, IntervalSpec(500, 0))
    # every resample gives 0: the difference of the two models' own (modified Wilson) intervals instead
    own = metric_interval(FMR, a, IntervalSpec(500, 0))
    assert iv.method == BOUNDS and (iv.low, iv.high) == (-own.high, own.high) and iv.high > 0.03


def test_pm_difference_undefined_when_a_side_is():
    empty = [Ratio(0.0, 0.0)] * 10
    some = [Ratio(0.5, 2.0)] * 10
    iv = pm_difference(NVR, (empty, some), (some, some), True, IntervalSpec(200, 0))
    assert iv.estimate is None and iv.low is None and iv.high is None


def _arm(model: str, revision: str, prefix_hits: int, generic_hits: int, ids: str = "p", identity: str = "idx") -> Arm:
    def units(setting: str, hits: int) -> list[tuple[str, dict[str, Ratio]]]:
        return [(f"{ids}{setting}{i}", {m.name: Ratio(float(i < hits), 1.0) for m in registry.for_setting(setting)
                                        if m.has_interval}) for i in range(100)]
    return Arm(model, revision, "dyna", identity, {"generic": units("generic", generic_hits),
                                                   "prefix": units("prefix", prefix_hits)})


def test_compare_arms_rows_ranks_and_significance():
    a, b, c = _arm("m", "r1", 50, 40), _arm("m", "r2", 50, 40), _arm("other", "", 2, 0)
    out = compare_arms([a, b, c], ["fmr"], IntervalSpec(1_000, 0))
    rows = {(r.model_a, r.revision_a, r.model_b, r.revision_b, r.setting, r.metric): r for r in out.rows}
    ab = rows[("m", "r1", "m", "r2", "prefix", "fmr")]
    assert ab.difference.estimate == 0 and not ab.significant and ab.paired
    ac = rows[("m", "r1", "other", "", "prefix", "fmr")]
    assert ac.difference.estimate == pytest.approx(0.48) and ac.significant and ac.difference.low > 0
    assert ac.difference.method == PAIRED
    # ranks: `other` leaks least (rank 1); r1 and r2 are not different from each other: they share rank 2
    assert (ac.rank_a, ac.rank_b) == (2, 1) and (ab.rank_a, ab.rank_b) == (2, 2)
    pm_rows = [r for r in out.rows if r.metric == "pm_fmr"]
    assert {r.setting for r in pm_rows} == {"generic"} and len(pm_rows) == 3
    # PM of r1 and r2: 0.4 / (0.4 + 0.5), the same; other: PM 0 from 2 prefix events, withheld: not compared
    assert rows[("m", "r1", "m", "r2", "generic", "pm_fmr")].value_a == pytest.approx(0.4 / 0.9)
    assert rows[("m", "r1", "m", "r2", "generic", "pm_fmr")].difference.estimate == 0
    withheld = rows[("m", "r1", "other", "", "generic", "pm_fmr")]
    assert (withheld.difference.estimate, withheld.difference.low, withheld.difference.p_value,
            withheld.significant) == (None, None, None, False)
    assert withheld.withheld.startswith("PM of other withheld (capability (prefix) side has 2 prompt(s) with an event")
    assert not out.refused
    assert set(ac.to_dict()) == set(COMPARISON_FIELDS) >= {"model_a", "model_b", "corpus", "setting", "metric", "diff",
                                                            "low", "high", "significant", "method"}
    assert list(ac.to_dict()) == list(COMPARISON_FIELDS)


def test_unpairable_runs_are_refused_with_why():
    a = _arm("m", "", 5, 1)
    assert "different generic prompt sets" in pairing_problem(a, _arm("n", "", 5, 1, ids="q"))
    assert "different indexes" in pairing_problem(a, _arm("n", "", 5, 1, identity="other"))
    out = compare_arms([a, _arm("n", "", 5, 1, identity="other")], ["fmr"], IntervalSpec(100, 0))
    assert not out.rows and len(out.refused) == 1


def test_select_pairs():
    arms = [_arm("m", "r1", 1, 1), _arm("x", "", 1, 1), _arm("m", "r2", 1, 1), _arm("m", "r3", 1, 1)]
    names = [(x.name, y.name) for x, y in select_pairs(arms, "consecutive")]
    assert names == [("m@r1", "m@r2"), ("m@r2", "m@r3")]
    assert len(select_pairs(arms, "all")) == 6
    with pytest.raises(ValueError):
        select_pairs(arms, "some")


def test_rank_counts_only_significant_differences():
    def row(a, b, diff, sig):
        low, high = (diff - 0.05, diff + 0.05) if sig else (diff - 1, diff + 1)
        return ComparisonRow(a, "", b, "", "c", "s", "fmr", None, None, Difference(diff, low, high, PAIRED), True, 10)
    # x < y significantly, y ~ z, x ~ z: x rank 1, y rank 2 (one model below), z rank 1 (none significantly below)
    rows = [row("x", "y", -0.3, True), row("y", "z", 0.1, False), row("x", "z", -0.2, False)]
    rank(rows)
    assert [(r.rank_a, r.rank_b) for r in rows] == [(1, 2), (2, 1), (1, 1)]


def test_comparison_expansion_counts_the_prompts_where_a_model_has_an_event():
    # 100 shared prompts, events on 8 of them: the difference moves only with those 8 units
    a = _shares([1, 1, 1, 1, 0, 0, 0, 0] + [0] * 92)
    b = _shares([0, 0, 1, 0, 1, 1, 0, 0] + [0] * 92)
    iv = metric_difference(FMR, a, b, True, IntervalSpec(2_000, 1))
    ra, rb = joint_ratios([a, b], 2_000, np.random.default_rng(1))
    tail = expanded_alpha(0.95, 6)  # prompts 0-5 carry an event in A or B
    assert tail < expanded_alpha(0.95, 100) / 2
    low, high = np.quantile(ra - rb, [tail, 1 - tail])
    assert (iv.low, iv.high) == (pytest.approx(low), pytest.approx(high))


# --- comparisons that survive many tests (Benjamini-Hochberg) -------------------------------------------

def _brute_bh(p_values: list[float], alpha: float) -> list[bool]:
    """The step-up procedure as Benjamini and Hochberg (1995) state it: reject the k smallest p-values,
    k the largest rank with p_(k) <= k alpha / m."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    k = max((rank for rank, i in enumerate(order, 1) if p_values[i] <= rank * alpha / m), default=0)
    rejected = set(order[:k])
    return [i in rejected for i in range(m)]


def test_bootstrap_p_value_counts_both_tails():
    from propme_metrics.metrics.difference import bootstrap_p_value

    s = np.array([-0.1] * 3 + [0.0] * 2 + [0.2] * 95)  # 5 of 100 resamples at or below 0
    assert bootstrap_p_value(s) == pytest.approx(2 * (5 + 1) / 101)
    assert bootstrap_p_value(-s) == pytest.approx(2 * 6 / 101)      # symmetric
    assert bootstrap_p_value(np.zeros(50)) == 1.0                    # no difference: never below 1
    assert bootstrap_p_value(np.full(9, 0.3)) == pytest.approx(2 / 10)  # never 0
    assert bootstrap_p_value(np.array([np.nan, np.nan])) is None


def test_adjusted_flags_are_benjamini_hochberg_over_every_row():
    from propme_metrics.metrics.compare import ADJUSTMENT, Comparisons, adjust

    rng = np.random.default_rng(4)
    p = [float(x) for x in np.concatenate([rng.uniform(0, 0.004, 5), rng.uniform(0, 1, 40), [0.03, 0.045]])]
    # the row's own flag where its p-value is below 5% (an interval that excludes 0), else an interval about 0
    rows = [ComparisonRow("a", "", "b", "", "c", "generic", f"m{i}", 0.1, 0.0,
                          Difference(0.1, *((0.05, 0.15) if q < 0.05 else (-0.05, 0.25)), PAIRED, p_value=q),
                          paired=True, units=100)
            for i, q in enumerate(p)]
    rows.append(ComparisonRow("a", "", "b", "", "c", "generic", "nvr", None, 0.0, Difference(None), True, 0))
    comparisons = Comparisons(rows=rows)
    adjust(comparisons)
    expected = _brute_bh(p, 0.05)
    assert [r.significant_adjusted for r in rows[:-1]] == expected
    assert sum(expected) < sum(q < 0.05 for q in p)  # some rows flagged on their own do not survive
    assert all(r.adjustment == ADJUSTMENT and r.adjusted_over == len(p) for r in rows[:-1])
    assert comparisons.tests == len(p)
    undefined = rows[-1]  # no p-value: not counted, not flagged
    assert undefined.p_adjusted is None and not undefined.significant_adjusted and undefined.adjustment == ""
    # the adjusted p-values: min over j >= rank of m p_(j) / j, at most 1
    m, order = len(p), sorted(range(len(p)), key=lambda i: p[i])
    for pos, i in enumerate(order):
        want = min(1.0, min(m * p[j] / (k + 1) for k, j in enumerate(order) if k >= pos))
        assert rows[i].p_adjusted == pytest.approx(want)


def test_an_adjusted_flag_needs_the_rows_own_flag():
    from propme_metrics.metrics.compare import Comparisons, adjust

    # a tiny p-value whose (bounds) interval includes 0: not significant, so not significant after adjustment
    row = ComparisonRow("a", "", "b", "", "c", "generic", "fmr", 0.0, 0.0,
                        Difference(0.0, -0.01, 0.02, BOUNDS, p_value=0.001), True, 100)
    adjust(Comparisons(rows=[row]))
    assert row.p_adjusted == pytest.approx(0.001) and not row.significant_adjusted


def test_compared_arms_carry_p_values_and_adjusted_flags():
    # model A: 40 generic hits of 100 prompts on every metric; B: none (a clear difference everywhere);
    # two revisions of A alike (no difference anywhere)
    a, b, c = _arm("A", "r1", 50, 40), _arm("A", "r2", 50, 40), _arm("B", "", 50, 0)
    out = compare_arms([a, b, c], [], IntervalSpec(500, 0))
    ac = next(r for r in out.rows if (r.revision_a, r.model_b, r.setting, r.metric) == ("r1", "B", "generic", "fmr"))
    assert ac.significant and ac.significant_adjusted and ac.difference.p_value == pytest.approx(2 / 501)
    ab = next(r for r in out.rows if (r.revision_a, r.revision_b, r.setting, r.metric) == ("r1", "r2", "generic", "fmr"))
    assert not ab.significant and not ab.significant_adjusted and ab.difference.p_value == 1.0
    assert all(r.adjusted_over == out.tests for r in out.rows if r.difference.p_value is not None)
    assert out.tests == len(out.rows) and all(r.p_adjusted >= r.difference.p_value for r in out.rows)
