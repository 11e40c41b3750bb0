"""Tests for the propensity transform and its intervals (docs/method.md, PM)."""

import math

import pytest

import propme_metrics.metrics.pm as pm_module
from propme_metrics.metrics.pm import (
    Interval,
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
    assert ratio([PromptStat(0.0, 0.0)]) == 0.0
    assert ratio([]) == 0.0
    assert ratio(PREFIX) == pytest.approx(0.08)


def test_prompt_stat_rejects_negative():
    with pytest.raises(ValueError):
        PromptStat(-1.0, 1.0)


def test_bootstrap_metric_contains_ratio():
    stats = [PromptStat(float(i % 7), 1.0 + i % 3) for i in range(60)]
    interval = bootstrap_metric(stats, iters=2_000)
    assert interval.estimate == ratio(stats)
    assert _contains(interval)
    assert interval.low < interval.high
    fmr = bootstrap_metric(PREFIX)
    assert fmr.estimate == pytest.approx(0.08)
    assert _contains(fmr)


def test_bootstrap_chunking_does_not_change_draws(monkeypatch):
    whole = bootstrap_pm(NVR_SETTING, NVR_PREFIX, iters=1_000)
    monkeypatch.setattr(pm_module, "_CHUNK_ENTRIES", 7 * len(NVR_PREFIX))  # 7-iteration chunks
    assert bootstrap_pm(NVR_SETTING, NVR_PREFIX, iters=1_000) == whole


def test_bootstrap_metric_needs_prompts():
    with pytest.raises(ValueError):
        bootstrap_metric([])


def test_bootstrap_pm_reference_fmr():
    specific = bootstrap_pm(SPECIFIC, PREFIX)
    assert round(specific.estimate, 3) == 0.111
    assert _contains(specific)
    # With 1 full match in 100 prompts, about a third of resamples hold none: the low end is 0.
    assert specific.low == 0.0 and specific.high > specific.estimate
    assert bootstrap_pm(GENERIC, PREFIX) == Interval(0.0, 0.0, 0.0)


def test_bootstrap_pm_is_seeded():
    first = bootstrap_pm(NVR_SETTING, NVR_PREFIX, iters=2_000, seed=7)
    assert bootstrap_pm(NVR_SETTING, NVR_PREFIX, iters=2_000, seed=7) == first
    assert bootstrap_pm(NVR_SETTING, NVR_PREFIX, iters=2_000, seed=8) != first
    assert bootstrap_pm(SPECIFIC, PREFIX, seed=3) == bootstrap_pm(SPECIFIC, PREFIX, seed=3)


def test_bootstrap_pm_edges():
    same = bootstrap_pm(PREFIX, PREFIX, iters=2_000)
    assert same.estimate == 0.5 and _contains(same)
    # c = 0: every resample of a setting with half its prompts matching has p > 0, so PM is 1.
    assert bootstrap_pm(_fmr_stats(50), GENERIC, iters=2_000) == Interval(1.0, 1.0, 1.0)


def test_bootstrap_pm_nvr_settings_of_different_sizes():
    interval = bootstrap_pm(NVR_SETTING, NVR_PREFIX, iters=2_000)
    assert interval.estimate == pytest.approx(pm(ratio(NVR_SETTING), ratio(NVR_PREFIX)))
    assert _contains(interval)
    assert 0.0 < interval.low < interval.high < 1.0


def test_interval_to_dict():
    assert Interval(0.5, 0.25, 0.75).to_dict() == {"estimate": 0.5, "low": 0.25, "high": 0.75}
