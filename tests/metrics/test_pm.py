"""Tests for the propensity transform and its intervals (docs/method.md, PM)."""

import math

import pytest

import propme_metrics.metrics.pm as pm_module
from propme_metrics.metrics.pm import (
    Interval,
    IntervalSpec,
    PromptStat,
    bootstrap_metric,
    bootstrap_pm,
    pm,
    ratio,
    wilson_interval,
)


def _fmr_stats(full_matches: int, prompts: int = 100) -> list[PromptStat]:
    """One greedy generation per prompt: `full_matches` of them with a full match."""
    return [PromptStat(1.0, 1.0)] * full_matches + [PromptStat(0.0, 1.0)] * (prompts - full_matches)


PREFIX = _fmr_stats(8)  # FMR 0.08
SPECIFIC = _fmr_stats(1)  # FMR 0.01
GENERIC = _fmr_stats(0)  # FMR 0.00

# NVR stats: per prompt, the summed NV-recall over its retrieved documents / documents.
NVR_SETTING = [PromptStat(0.01 * (i % 5), 10.0) for i in range(80)]
NVR_PREFIX = [PromptStat(0.5 * (i % 3), 12.0) for i in range(100)]


def _contains(interval: Interval) -> bool:
    return interval.low <= interval.estimate <= interval.high


# --- PM ------------------------------------------------------------------------------------


@pytest.mark.parametrize("x", [1e-6, 0.00086, 0.5, 1.0, 24.75])
def test_pm_vectors(x):
    assert pm(0.0, x) == 0.0
    assert pm(x, x) == 0.5
    assert pm(x, 0.0) == 1.0


def test_pm_zero_zero_is_zero():
    assert pm(0.0, 0.0) == 0.0


def test_pm_undefined_where_a_side_is():
    # issue 33: a side with nothing to compute it from (None) makes PM undefined, never 0
    assert pm(None, 0.5) is None and pm(0.0, None) is None and pm(None, None) is None


def test_pm_spec_vector():
    assert round(pm(0.00086, 0.0367), 4) == 0.0229


def test_pm_reference_figures():
    # the published figures (docs/method.md), DFM Decoder on Dynaword: NVR and FMR under generic/specific vs prefix.
    assert round(pm(0.00086, 0.0367), 3) == 0.023
    assert round(pm(0.00081, 0.0367), 3) == 0.022
    assert pm(0.00, 0.08) == 0.0
    assert round(pm(0.01, 0.08), 3) == 0.111
    assert round(pm(0.01, 0.08), 2) == 0.11


def test_pm_rejects_negative_values():
    with pytest.raises(ValueError):
        pm(-0.1, 0.5)
    with pytest.raises(ValueError):
        pm(0.1, -0.5)


# --- Wilson --------------------------------------------------------------------------------


def test_wilson_eight_of_hundred():
    # z = 1.959964, z^2 = 3.841459, denom = 1 + z^2/100 = 1.0384146
    # center = (0.08 + z^2/200) / denom = 0.0955378
    # half = z / denom * sqrt(0.08 * 0.92 / 100 + z^2 / 40000) = 1.887460 * 0.0288450 = 0.054444
    low, high = wilson_interval(8, 100)
    assert low == pytest.approx(0.041094, abs=1e-5)
    assert high == pytest.approx(0.149982, abs=1e-5)


def test_modified_wilson_near_the_edges():
    # Brown, Cai & DasGupta: for 1..3 successes of n > 50 the lower bound is the one-sided Poisson bound,
    # the lambda with P(Poisson(lambda) >= x) = 0.05, over n. x = 1: 1 - exp(-l) = 0.05, l = -ln(0.95).
    assert wilson_interval(1, 100)[0] == pytest.approx(-math.log(0.95) / 100, rel=1e-9)
    # x = 2: 1 - exp(-l) (1 + l) = 0.05, solved here by Newton's method
    lam = 0.3
    for _ in range(50):
        lam -= (1 - math.exp(-lam) * (1 + lam) - 0.05) / (lam * math.exp(-lam))
    assert wilson_interval(2, 100)[0] == pytest.approx(lam / 100, rel=1e-7)
    assert wilson_interval(99, 100)[1] == pytest.approx(1 + math.log(0.95) / 100, rel=1e-9)
    # x = 4 > 3: plain Wilson (the lower bound solves (p - 0.04)^2 = z^2 p (1 - p) / n below 0.04)
    low, _ = wilson_interval(4, 100)
    z = 1.959963984540054
    assert (low - 0.04) ** 2 == pytest.approx(z * z * low * (1 - low) / 100, rel=1e-9) and low < 0.04
    # zero events: [0, the Wilson upper bound > 0], never [0, 0]
    assert wilson_interval(0, 100) == (0.0, pytest.approx(z * z / (100 + z * z)))


def test_wilson_edges():
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    assert wilson_interval(0, 100)[0] == 0.0
    assert wilson_interval(100, 100)[1] == 1.0
    low90, high90 = wilson_interval(8, 100, confidence=0.90)
    low95, high95 = wilson_interval(8, 100)
    assert low95 < low90 < 0.08 < high90 < high95
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


# --- ratios and bootstrap ------------------------------------------------------------------


def test_ratio_is_ratio_of_sums():
    # NVR style: prompt 1 has 3 documents with recalls summing to 0.6, prompt 2 has 1 with 0.2.
    assert ratio([PromptStat(0.6, 3), PromptStat(0.2, 1)]) == pytest.approx(0.2)
    # issue 33: nothing to divide by is undefined (None), not 0 (the old rule gave 0.0)
    assert ratio([PromptStat(0.0, 0.0)]) is None
    assert ratio([]) is None
    assert ratio(PREFIX) == pytest.approx(0.08)


def test_prompt_stat_rejects_negative():
    with pytest.raises(ValueError):
        PromptStat(-1.0, 1.0)


def test_bootstrap_metric_contains_ratio():
    stats = [PromptStat(float(i % 7), 1.0 + i % 3) for i in range(60)]
    interval = bootstrap_metric(stats, IntervalSpec(2_000))
    assert interval.estimate == ratio(stats)
    assert _contains(interval)
    assert interval.low < interval.high
    fmr = bootstrap_metric(PREFIX)
    assert fmr.estimate == pytest.approx(0.08)
    assert _contains(fmr)


def test_bootstrap_chunking_does_not_change_draws(monkeypatch):
    whole = bootstrap_pm(NVR_SETTING, NVR_PREFIX, IntervalSpec(1_000))
    monkeypatch.setattr(pm_module, "_CHUNK_ENTRIES", 7 * len(NVR_PREFIX))  # 7-iteration chunks
    assert bootstrap_pm(NVR_SETTING, NVR_PREFIX, IntervalSpec(1_000)) == whole


def test_intervals_sharing_draws_sum_each_values_array_once(monkeypatch):
    """The intervals of one leak table share their draws and their denominators: each distinct values
    array is resampled once, and every interval is the one fresh draws would give."""
    stats = [[PromptStat(float(i % k == 0) * (i % 7) / 3, float(i % 5)) for i in range(300)] for k in (2, 3, 4)]
    fresh = []
    for s in stats:
        monkeypatch.setattr(pm_module, "_CHUNK_ENTRIES", 7 * len(s))  # several chunks: never the shared draws
        fresh.append(bootstrap_metric(s, IntervalSpec(1_000, seed=5)))
    monkeypatch.undo()
    pm_module._one_chunk_of_draws.cache_clear()
    summed = []
    real = pm_module._SharedDraws.sums
    monkeypatch.setattr(pm_module._SharedDraws, "sums", lambda self, v: summed.append(v.tobytes()) or real(self, v))
    assert [bootstrap_metric(s, IntervalSpec(1_000, seed=5)) for s in stats] == fresh
    assert len(summed) == 6 and len(set(summed)) == 4   # three numerators, one shared denominator
    assert len(pm_module._one_chunk_of_draws(300, 1_000, 5)._memo) == 4


def test_bootstrap_metric_of_nothing_is_undefined():
    assert bootstrap_metric([]) == Interval(None)
    assert bootstrap_metric([PromptStat(0.0, 0.0)] * 5) == Interval(None)


def test_bootstrap_metric_zero_events_is_not_zero_width():
    # issue 33: no event in 100 prompts used to give [0, 0]; the bound is 1 - 0.025^(1/100) (exact at 0 of 100)
    iv = bootstrap_metric([PromptStat(0.0, 3.0)] * 100)
    assert (iv.estimate, iv.low, iv.method) == (0.0, 0.0, "zero-events-bound")
    assert iv.high == pytest.approx(1 - 0.025 ** (1 / 100)) and 0.03 < iv.high < 0.04
    assert bootstrap_metric([PromptStat(0.0, 1.0)] * 10, unit_max=None).high is None  # unbounded: no bound


def test_bootstrap_metric_of_one_value_in_every_unit_is_never_zero_width():
    # issue 44 item 19: NVR 1 in each of 100 prompts gave [1, 1]; the no-event bound, mirrored: at most a
    # share u = 1 - 0.025^(1/100) of the units can differ, so [1 - u, 1], and [v (1 - u), v + (1 - v) u] between
    u = 1 - 0.025 ** (1 / 100)
    top = bootstrap_metric([PromptStat(2.0, 2.0)] * 100, IntervalSpec(500))
    assert (top.estimate, top.high, top.method) == (1.0, 1.0, "uniform-units-bound")
    assert top.low == pytest.approx(1 - u) and top.low < 1
    mid = bootstrap_metric([PromptStat(0.5, 1.0)] * 50 + [PromptStat(1.0, 2.0)] * 50, IntervalSpec(500))
    assert (mid.low, mid.high) == (pytest.approx(0.5 * (1 - u)), pytest.approx(0.5 + 0.5 * u))
    # unbounded (ALS 16 in every prompt): a lower end below 16, the upper end undefined as with no event
    als = bootstrap_metric([PromptStat(16.0, 1.0)] * 100, IntervalSpec(500), unit_max=None)
    assert als.low == pytest.approx(16 * (1 - u)) and als.high is None
    # the bound at 0 is the zero-events bound itself: one rule
    zero = bootstrap_metric([PromptStat(0.0, 1.0)] * 100)
    assert (zero.low, zero.high) == (0.0, pytest.approx(u))
    # two values: the bootstrap moves, as before
    assert bootstrap_metric([PromptStat(1.0, 1.0)] * 99 + [PromptStat(0.5, 1.0)], IntervalSpec(500)).method == \
        "bootstrap-expanded-percentile"


def test_bootstrap_metric_leaves_out_undefined_resamples():
    # two prompts of 20 have document entries: a resample without them has no denominator and is left out
    stats = [PromptStat(0.5, 2.0), PromptStat(1.0, 2.0)] + [PromptStat(0.0, 0.0)] * 18
    iv = bootstrap_metric(stats, IntervalSpec(2_000))
    assert iv.estimate == 0.375 and iv.method == "bootstrap-expanded-percentile"
    assert (iv.low, iv.high) == (0.25, 0.5)  # only the defined resamples: 0.25, 0.375 or 0.5
    # one prompt holds every document entry: resampling cannot vary it, so [0, the largest NV-recall]
    one = bootstrap_metric([PromptStat(0.5, 2.0)] + [PromptStat(0.0, 0.0)] * 19, IntervalSpec(500))
    assert (one.estimate, one.low, one.high, one.method) == (0.25, 0.0, 1.0, "one-unit-bound")


def test_bootstrap_pm_reference_fmr():
    specific = bootstrap_pm(SPECIFIC, PREFIX)
    assert round(specific.estimate, 3) == 0.111
    assert _contains(specific)
    # With 1 full match in 100 prompts, about a third of resamples hold none: the low end is 0.
    assert specific.low == 0.0 and specific.high > specific.estimate
    # p = 0 in every resample: the percentile interval collapses at 0 ...
    collapsed = bootstrap_pm(GENERIC, PREFIX)
    assert (collapsed.estimate, collapsed.low, collapsed.high) == (0.0, 0.0, 0.0)
    # ... so with the sides' intervals it is PM at their ends instead: [PM(0, c high), PM(p high, c low)]
    sides = (Interval(0.0, 0.0, 0.036), Interval(0.08, 0.04, 0.15))
    propagated = bootstrap_pm(GENERIC, PREFIX, sides=sides)
    assert propagated.method == "bounds-propagated"
    assert (propagated.low, propagated.high) == (0.0, pytest.approx(0.036 / (0.036 + 0.04)))


def test_bootstrap_pm_undefined_side():
    # issue 33: a side without a denominator (NVR with no document entry) makes PM and its interval undefined
    assert bootstrap_pm([PromptStat(0.0, 0.0)] * 10, NVR_PREFIX) == Interval(None)
    assert bootstrap_pm(NVR_SETTING, [PromptStat(0.0, 0.0)] * 10) == Interval(None)


def test_bootstrap_pm_is_seeded():
    first = bootstrap_pm(NVR_SETTING, NVR_PREFIX, IntervalSpec(2_000, 7))
    assert bootstrap_pm(NVR_SETTING, NVR_PREFIX, IntervalSpec(2_000, 7)) == first
    assert bootstrap_pm(NVR_SETTING, NVR_PREFIX, IntervalSpec(2_000, 8)) != first
    assert bootstrap_pm(SPECIFIC, PREFIX, IntervalSpec(seed=3)) == bootstrap_pm(SPECIFIC, PREFIX, IntervalSpec(seed=3))


def test_bootstrap_pm_edges():
    same = bootstrap_pm(PREFIX, PREFIX, IntervalSpec(2_000))
    assert same.estimate == 0.5 and _contains(same)
    # c = 0: every resample of a setting with half its prompts matching has p > 0, so PM is 1.
    all_one = bootstrap_pm(_fmr_stats(50), GENERIC, IntervalSpec(2_000))
    assert (all_one.estimate, all_one.low, all_one.high) == (1.0, 1.0, 1.0)


def test_bootstrap_pm_nvr_settings_of_different_sizes():
    interval = bootstrap_pm(NVR_SETTING, NVR_PREFIX, IntervalSpec(2_000))
    assert interval.estimate == pytest.approx(pm(ratio(NVR_SETTING), ratio(NVR_PREFIX)))
    assert _contains(interval)
    assert 0.0 < interval.low < interval.high < 1.0


def test_interval_to_dict():
    assert Interval(0.5, 0.25, 0.75, "bootstrap-percentile", 0.95, 100).to_dict() == {
        "estimate": 0.5, "low": 0.25, "high": 0.75, "method": "bootstrap-percentile", "confidence": 0.95,
        "resamples": 100, "withheld": None}
    assert Interval(0.5, math.nan, None).to_dict()["low"] is None


def test_informative_units_count_positions_with_an_event_in_any_list():
    a = [PromptStat(0.0, 1.0), PromptStat(1.0, 1.0), PromptStat(0.0, 2.0), PromptStat(0.0, 0.0)]
    b = [PromptStat(0.0, 1.0), PromptStat(0.0, 1.0), PromptStat(0.5, 2.0), PromptStat(0.0, 0.0)]
    assert pm_module.informative_units(a) == 1
    assert pm_module.informative_units(a, b) == 2


def test_expanded_tail_matches_student_t_and_never_shrinks_below_two_units():
    # t_(0.975, 9) = 2.262157 (tables): the tail is Phi(-sqrt(10 / 9) t)
    from statistics import NormalDist
    assert pm_module.expanded_alpha(0.95, 10) == pytest.approx(NormalDist().cdf(-math.sqrt(10 / 9) * 2.262157), abs=2e-4)
    assert pm_module.expanded_alpha(0.95, 1) == pm_module.expanded_alpha(0.95, 2) < 1e-6



def test_ratio_bootstrap_expansion_counts_the_prompts_with_an_event():
    # 6 prompts of 100 carry an event: the interval's tails are those of 6 units, not 100
    import numpy as np
    stats = [PromptStat(0.5 * (i < 6), 3.0) for i in range(100)]
    iv = bootstrap_metric(stats, IntervalSpec(2_000, 4))
    samples = pm_module.joint_ratios([stats], 2_000, np.random.default_rng(4))[0]
    tail = pm_module.expanded_alpha(0.95, 6)
    assert tail < pm_module.expanded_alpha(0.95, 100) / 2
    assert (iv.low, iv.high) == tuple(pytest.approx(float(q)) for q in np.quantile(samples, [tail, 1 - tail]))
