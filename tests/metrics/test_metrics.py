"""Metrics over hand-made traces (docs/method.md, metrics): ALS, FMR, NVR and companions, filters, extraction."""
from __future__ import annotations

import math

import pytest

from propme_metrics.metrics.values import contributions, counts_for_metrics, summarize
from propme_metrics.trace.result import FinalSpan, Span, TracedDocument, TraceResult
from propme_metrics.trace.text_rules import continuation_reproduced, is_degenerate


def doc(nv: float, match: str = "partial", doc_ix: int = 0) -> TracedDocument:
    return TracedDocument(shard=0, doc_ix=doc_ix, source_id="d", metadata={"id": "d"}, match=match, nv_recall=nv,
                          nv_matched_words=0, nv_reference_words=10, nv_candidate_words=50, snippet="",
                          snippet_span=(0, 0))


def result(key: str, finals=(), degenerate=False, error=None, extracted=None) -> TraceResult:
    """finals: ((start, end), [documents]) per final span."""
    return TraceResult(key=key, text="x", n_tokens=100, degenerate=degenerate,
                       spans=[Span(s, e, 1, -1.0, kept=True) for (s, e), _ in finals],
                       final_spans=[FinalSpan(s, e, "", 1, list(docs)) for (s, e), docs in finals],
                       extracted=extracted, error=error)


@pytest.fixture
def results() -> list[TraceResult]:
    return [
        # longest final span 60; a raw full match and a high NV-recall; document 7 serves two spans
        result("a", finals=[((0, 60), [doc(1.0, "full_raw", 7), doc(0.0)]), ((50, 70), [doc(0.5, "partial", 7)])],
               extracted=True),
        # span 25 (R20 only), normalized full match only
        result("b", finals=[((0, 25), [doc(0.2, "full_normalized")])], extracted=False),
        # nothing found
        result("c"),
        # degenerate: dropped from every metric, however good it looks
        result("d", finals=[((0, 90), [doc(1.0, "full_raw")])], degenerate=True),
        # failed: excluded and counted
        result("e", error="ValueError: boom"),
    ]


def test_summary_values(results):
    s = summarize(results)
    assert (s.n_generations, s.n_counted, s.n_degenerate, s.n_failed) == (5, 3, 1, 1)
    assert s.als == pytest.approx((60 + 25 + 0) / 3)  # longest final span per generation
    assert s.fmr == pytest.approx(1 / 3)
    assert s.fmr_normalized == pytest.approx(1 / 3)  # full_normalized entries only, as published
    # NVR: mean over the 4 document entries (document 7 counts once per span), not over generations
    assert s.nvr == pytest.approx((1.0 + 0.0 + 0.5 + 0.2) / 4)
    assert s.nvr_hits == pytest.approx((1.0 + 0.5 + 0.2) / 3)
    assert s.nvr_max == 1.0
    assert s.nvr_above_half == pytest.approx(1 / 3)  # 0.5 itself is not above one half
    assert s.r20 == pytest.approx(2 / 3) and s.r50 == pytest.approx(1 / 3)
    assert s.extraction == pytest.approx(0.5)


def test_summary_keeps_degenerate_on_request(results):
    s = summarize(results, drop_degenerate=False)
    assert s.n_counted == 4 and s.n_degenerate == 1
    assert s.als == pytest.approx((60 + 25 + 0 + 90) / 4)
    assert s.fmr == pytest.approx(2 / 4)


def test_summary_of_nothing():
    s = summarize([])
    assert s.n_generations == 0 and all(v is None for v in s.metrics.values())  # undefined, never 0
    s = summarize([result("x")])  # counted, but no document entry: NVR has no denominator
    assert s.nvr is None and s.nvr_hits is None and s.nvr_max == 0.0 and s.als == 0.0 and s.extraction is None


def test_contributions_of_a_parsed_result(results):
    """Metrics read TraceResults only (a logged dict is parsed once, where runs are loaded): the
    round trip through the logged form gives the same contributions."""
    for r in results:
        assert contributions(TraceResult.from_dict(r.to_dict())) == contributions(r)
    v = contributions(results[0])
    assert v["als"][0] == 60 and v["nvr"][1] == 3 and v["nvr_hits"][1] == 2 and v["extraction"] == (1.0, 1.0)
    assert summarize([TraceResult.from_dict(r.to_dict()) for r in results]) == summarize(results)
    assert [counts_for_metrics(r) for r in results] == [True, True, True, False, False]


def test_is_degenerate():
    assert is_degenerate("!!!!" * 200)
    assert is_degenerate(" ".join(["12"] * 300))
    assert is_degenerate("- - - - " * 100 + "\n" * 50)
    prose = ("The council decided on the new bridge yesterday, and the editor of the local paper wrote a long "
             "report about it. Kommunen besluttede i går at bygge den nye bro over havnen i Ærøskøbing. ") * 3
    assert not is_degenerate(prose)
    assert not is_degenerate("hello " * 300)  # repetitive but made of letters: kept (both conditions must hold)
    assert not is_degenerate("")
    assert not is_degenerate("12 34")  # short: does not compress below 10%


def test_continuation_reproduced():
    assert continuation_reproduced(" the next fifty tokens follow here and more", " the next fifty tokens")
    assert continuation_reproduced("the  next\nfifty tokens", " the next fifty tokens")  # white space folded
    assert not continuation_reproduced(" the next fifty", " the next fifty tokens")
    assert not continuation_reproduced("something else entirely", "the next")
    assert not continuation_reproduced("anything", "")
    assert not continuation_reproduced("anything", "   ")


def test_summary_is_json_ready(results):
    import json

    data = summarize(results).to_dict()
    assert json.loads(json.dumps(data)) == data
    assert not any(isinstance(v, float) and math.isnan(v) for v in data.values())


@pytest.mark.parametrize("drop_degenerate", [True, False])
def test_the_leak_tables_reuse_the_summary_contributions(results, monkeypatch, drop_degenerate):
    """`propme trace` computes each generation's contributions once: the summary keeps them (None
    where a generation is not counted) and the leak tables' task takes them as they are, degenerate
    generations left out there whatever the summary counted."""
    import propme_metrics.report.trace_provenance as trace_provenance
    from propme_metrics.trace.inputs import TraceInput

    s = summarize(results, drop_degenerate=drop_degenerate)
    counted = [r.error is None and not (drop_degenerate and r.degenerate) for r in results]
    assert s.per_generation == [contributions(r) if c else None for r, c in zip(results, counted)]
    inputs = [TraceInput(key=r.key, text=r.text) for r in results]
    fresh = trace_provenance.traced_task(inputs, results, "index", "identity", 10)
    monkeypatch.setattr(trace_provenance, "contributions", lambda *a, **k: pytest.fail("computed again"))
    reused = trace_provenance.traced_task(inputs, results, "index", "identity", 10, s.per_generation)
    assert [p.values for p in reused.prompts] == [p.values for p in fresh.prompts]
    assert [v is None for p in reused.prompts for v in p.values] == [not counts_for_metrics(r) for r in results]


@pytest.mark.parametrize("extracted", [None, True, False])
def test_an_empty_completion_contributes_what_the_registry_says(extracted):
    """Empty completions (most of a study's) share one computation of their contributions: the same
    values the registry's functions give such a trace, and a fresh dict each time."""
    from propme_metrics.metrics.registry import METRICS, Generation
    from propme_metrics.trace.pii import PIILeaks

    empty = TraceResult(key="k", text="", n_tokens=0, degenerate=False, extracted=extracted)
    expected = {m.name: m.contribution(Generation(empty, PIILeaks(), 10)) for m in METRICS}
    got = contributions(empty, rare_max_count=10)
    assert got == expected and got is not contributions(empty, rare_max_count=10)
    assert got["extraction"] == ((0.0, 0.0) if extracted is None else (float(extracted), 1.0))
    assert contributions(empty, pii=PIILeaks(), rare_max_count=10) == expected
