"""One interval specification (resamples, seed, confidence) for every interval, and labels written
from its confidence level instead of a fixed "95%"."""
from __future__ import annotations

import numpy as np
import pytest

from propme_metrics.metrics import registry
from propme_metrics.metrics.compare import Comparisons
from propme_metrics.metrics.likelihood import bootstrap_documents
from propme_metrics.metrics.pm import (
    CONFIDENCE,
    DEFAULT_BOOTSTRAP,
    IntervalSpec,
    PromptStat,
    metric_interval,
    percent,
    wilson_interval,
)
from propme_metrics.report.leaderboard_page import render_page
from propme_metrics.report.writers import comparison_heads


@pytest.mark.parametrize(("confidence", "text"), [(0.95, "95%"), (0.9, "90%"), (0.995, "99.5%"), (0.5, "50%")])
def test_percent(confidence, text):
    assert percent(confidence) == text
    assert IntervalSpec(confidence=confidence).percent == text


def test_defaults_and_no_bootstrap():
    spec = IntervalSpec()
    assert (spec.resamples, spec.seed, spec.confidence) == (DEFAULT_BOOTSTRAP, 0, CONFIDENCE) and spec.bootstrap
    assert not IntervalSpec(0).bootstrap
    stats = [PromptStat(1.0, 2.0), PromptStat(0.0, 3.0), PromptStat(2.0, 2.0)]
    iv = metric_interval(registry.metric("nvr"), stats, IntervalSpec(0))
    assert iv.estimate == pytest.approx(3 / 7) and iv.low is None and iv.method == ""


def test_the_confidence_reaches_every_interval():
    stats = [PromptStat(float(i < 30), 1.0) for i in range(100)]  # a proportion: 30 of 100
    for confidence in (0.8, 0.95):
        iv = metric_interval(registry.metric("fmr"), stats, IntervalSpec(100, 0, confidence))
        assert (iv.low, iv.high) == pytest.approx(wilson_interval(30, 100, confidence))
        assert iv.confidence == confidence
    narrow = metric_interval(registry.metric("nvr"), stats, IntervalSpec(2_000, 1, 0.5))
    wide = metric_interval(registry.metric("nvr"), stats, IntervalSpec(2_000, 1, 0.99))
    assert wide.low < narrow.low < 0.3 < narrow.high < wide.high
    est = bootstrap_documents({"x": np.arange(20.0)}, {"x": np.mean}, IntervalSpec(2_000, 3, 0.5))["x"]
    wider = bootstrap_documents({"x": np.arange(20.0)}, {"x": np.mean}, IntervalSpec(2_000, 3, 0.99))["x"]
    assert wider.low < est.low < 9.5 < est.high < wider.high


def test_labels_follow_the_confidence():
    assert "A - B [90%]" in comparison_heads(Comparisons(confidence=0.9))
    assert "A - B [95%]" in comparison_heads(Comparisons())
    page = render_page([{"model": "m", "revision": ""}], ["model", "revision"], confidence=0.9)
    assert "value's 90% interval" in page and "95%" not in page
