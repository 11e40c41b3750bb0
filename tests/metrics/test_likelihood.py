"""(n, p)-discoverability (metrics.likelihood): the formula against hand-computed values and an
exact-arithmetic oracle, the settings' validation, and the bootstrap over documents."""
from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics import registry
from propme_metrics.metrics.likelihood import (
    DocumentLikelihood,
    bootstrap_documents,
    check_n,
    check_p,
    discoverable,
    extraction_probability,
    min_probability,
)
from propme_metrics.metrics.pm import PERCENTILE, WILSON, IntervalSpec, wilson_interval


def test_worked_example_of_the_method_docs():
    logp = math.log(0.01)
    assert extraction_probability(logp, 100) == pytest.approx(0.63397, abs=1e-5)   # 1 - 0.99^100
    assert extraction_probability(logp, 10) == pytest.approx(0.09562, abs=1e-5)    # 1 - 0.99^10
    assert discoverable(logp, 100, 0.5) and not discoverable(logp, 10, 0.5)
    assert discoverable(logp, 10, 0.09) and not discoverable(logp, 100, 0.64)
    # the smallest discoverable P at n = 100, p = 0.5 is 1 - 0.5^(1/100) = 0.00691
    assert min_probability(100, 0.5) == pytest.approx(0.0069075, abs=1e-7)
    assert discoverable(math.log(0.00692), 100) and not discoverable(math.log(0.00690), 100)


def test_certain_and_tiny_probabilities():
    assert extraction_probability(0.0, 1) == 1.0 and discoverable(0.0, 1, 0.999)
    # P = e^-70 ~ 4e-31: 1 - (1 - P)^n is n * P to full precision (the naive formula gives 0)
    assert extraction_probability(-70.0, 10_000) == pytest.approx(10_000 * math.exp(-70.0), rel=1e-9)
    assert 1 - (1 - math.exp(-70.0)) ** 10_000 == 0.0


def test_log_probability_a_rounding_error_below_zero_is_certain():
    """-1e-17 (a sum of token log-probabilities that rounds just below 0) is P = 1 - 1e-17: extracted
    almost surely, never a math domain error."""
    for logp in (-1e-17, -5e-324, -1e-300):
        assert extraction_probability(logp, 1) == pytest.approx(1.0) and discoverable(logp, 1, 0.999)
    assert extraction_probability(-1e-17, 1) == pytest.approx(1.0 - 1e-17, abs=1e-30)


@settings(max_examples=300, deadline=None)
@given(st.floats(-60.0, -1e-30) | st.floats(-1e-6, -1e-30), st.integers(1, 100_000), st.floats(0.001, 0.999))
def test_discoverable_equals_exact_arithmetic(logp, n, p):
    with localcontext() as ctx:
        ctx.prec = 120
        big_p = Decimal(logp).exp()
        exact = 1 - (1 - big_p) ** n
        assert float(exact) == pytest.approx(extraction_probability(logp, n), rel=1e-9, abs=1e-300)
        if abs(exact - Decimal(p)) > Decimal(1e-12):  # away from the boundary, the verdicts agree
            assert discoverable(logp, n, p) == (exact >= Decimal(p))


def test_registry_values_of_one_document():
    doc = DocumentLikelihood("d", math.log(0.01), greedy=False, target_tokens=50, boundary_clean=True)
    values = {m.name: m.contribution(registry.Document(doc, 0.5)) for m in registry.LIKELIHOOD_METRICS}
    assert values == {"greedy_extraction": 0.0, "discoverable@1": 0.0, "discoverable@10": 0.0,
                      "discoverable@100": 1.0, "discoverable@1000": 1.0, "discoverable@10000": 1.0,
                      "log10_p_median": pytest.approx(-2.0)}
    assert registry.metric("discoverable@10").value(doc, 0.09) == 1.0  # p is a parameter: value builds the Document


@pytest.mark.parametrize("raw", [0, 1, 1.5, -0.1, "x", None, True, float("nan")])
def test_bad_p_is_refused(raw):
    with pytest.raises(ConfigError, match="between 0 and 1"):
        check_p(raw)


@pytest.mark.parametrize("raw", [[], [0], [-1, 10], [1.5], "a,b", "", [True]])
def test_bad_n_is_refused(raw):
    with pytest.raises(ConfigError, match="positive whole numbers"):
        check_n(raw)


def test_n_grid_parsing():
    assert check_n("100, 1,10") == (1, 10, 100) and check_n([10, 10.0, "3"]) == (3, 10)
    assert check_p("0.25") == 0.25


def test_document_record_round_trip_and_damage():
    doc = DocumentLikelihood("d", -3.5, True, 12, False)
    assert DocumentLikelihood.from_dict(doc.to_dict()) == doc
    for bad in ({"id": "d", "logp": 1.0, "greedy": True}, {"id": "d", "logp": float("nan"), "greedy": True},
                {"id": "d", "logp": float("-inf"), "greedy": True}, {"id": "d", "greedy": True}):
        with pytest.raises((KeyError, ValueError)):
            DocumentLikelihood.from_dict(bad)


def test_bootstrap_over_documents():
    rng = np.random.default_rng(3)
    shares = (rng.random(200) < 0.3).astype(float)
    logs = rng.normal(-5, 2, 200)
    est = bootstrap_documents({"s": shares, "m": logs}, {"s": np.mean, "m": np.median}, IntervalSpec(2000, 1))
    assert est["s"].estimate == pytest.approx(shares.mean()) and est["m"].estimate == pytest.approx(np.median(logs))
    for e in est.values():
        assert e.low < e.estimate < e.high
    # the interval of a share is about +-1.96 standard errors
    se = math.sqrt(shares.mean() * (1 - shares.mean()) / 200)
    assert est["s"].high - est["s"].low == pytest.approx(2 * 1.96 * se, rel=0.2)
    again = bootstrap_documents({"s": shares, "m": logs}, {"s": np.mean, "m": np.median}, IntervalSpec(2000, 1))
    assert again == est
    assert est["s"].method == WILSON and est["m"].method == PERCENTILE and est["m"].resamples == 2000
    # no resamples: a share keeps its Wilson interval (no bootstrap behind it), a median has none
    point = bootstrap_documents({"s": shares, "m": logs}, {"s": np.mean, "m": np.median}, IntervalSpec(0))
    assert point["s"] == est["s"] and point["m"].low is None and point["m"].high is None


def test_no_interval_over_documents_has_zero_width():
    """Ten documents all extracted (or all with one log-probability) do not make a certain figure."""
    spec = IntervalSpec(1000, 0)
    const = bootstrap_documents({"s": np.ones(10), "z": np.zeros(10), "m": np.full(10, -0.11)},
                                {"s": np.mean, "z": np.mean, "m": np.median}, spec)
    low, high = wilson_interval(10, 10)
    assert (const["s"].low, const["s"].estimate, const["s"].high) == (low, 1.0, high) and low < 1.0
    assert const["z"].estimate == 0.0 and const["z"].low == 0.0 and const["z"].high > 0.2
    assert const["m"].estimate == pytest.approx(-0.11) and const["m"].low is None and const["m"].high is None
    assert const["m"].method == ""
