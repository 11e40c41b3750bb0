"""Every Eval Ever records (`report/eee.py`): valid against the official schema 0.3.0 files kept in
tests/data/every_eval_ever (MIT, with their licence), one per model and revision, hand-computed values
and intervals, undefined values left out (never 0)."""
from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import jsonschema
import pytest

from propme_metrics.metrics import difference, pm
from propme_metrics.metrics.pm import PERCENTILE, WILSON, wilson_interval
from propme_metrics.report.eee import INTERVAL_METHODS
from propme_metrics.report.folder import IncompleteReportError
from propme_metrics.report.request import ReportRequest
from support.reports import make_report
from support.runs import (
    COMMA,
    DATE1,
    DATE2,
    DFM,
    add_likelihood_task,
    gen,
    reference_settings,
    setting_prompts,
    stage1_settings,
    write_run,
)

SCHEMAS = Path(__file__).parent.parent / "data" / "every_eval_ever"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads((SCHEMAS / "eval.schema.json").read_text(encoding="utf-8"))
    assert schema["version"] == "0.3.0"
    return jsonschema.Draft7Validator(schema)


def _edge() -> dict:
    """Comma-like: two generations per prompt, no full match in generic or prefix (0 of 200 each)."""
    return {"generic": setting_prompts("generic", 100, [(100, 10)], {3: 0.3}, set(), repeats=2),
            "specific": setting_prompts("specific", 100, [(100, 12)], {4: 0.6}, {4, 5, 6}, repeats=2),
            "prefix": setting_prompts("prefix", 100, [(100, 10)], {7: 0.9}, set(), repeats=2)}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("eee")
    runs = [write_run(root / "stage1", DFM, "stage1", stage1_settings(), date=DATE1).parent,
            write_run(root / "stage3", DFM, "stage3", reference_settings(), date=DATE2).parent,
            write_run(root / "comma", COMMA, "", _edge(), date=DATE1).parent]
    add_likelihood_task(runs[1] / DFM.replace("/", "__"), LOGPS, date=DATE2)  # stage3 also ran the likelihood subtask
    return make_report(ReportRequest(runs, root / "report", bootstrap=300, seed=1, plots=False, html=False))


#: stage3's likelihood documents: log P(z) of each (greedy above -1)
LOGPS = [-0.05, -0.5, -2.0, -4.0, -7.0, -12.0, -30.0, -80.0]


def _records(out: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted((out / "eee").rglob("*.json"))}


def _result(record: dict, metric_id: str) -> dict:
    (found,) = [r for r in record["evaluation_results"] if r["metric_config"]["metric_id"] == metric_id]
    return found


def test_one_valid_record_per_model_and_revision(report, validator):
    records = _records(report.files.out)
    assert len(records) == 3
    for name, record in records.items():
        errors = sorted(validator.iter_errors(record), key=str)
        assert not errors, f"{name}: {errors[0].message} at {list(errors[0].absolute_path)}"
        ids = [r["evaluation_result_id"] for r in record["evaluation_results"]]
        assert len(ids) == len(set(ids))
    who = sorted((r["model_info"]["id"], r["model_info"]["additional_details"].get("revision", ""))
                 for r in records.values())
    assert who == sorted([(DFM, "stage1"), (DFM, "stage3"), (COMMA, "")])
    dfm = next(r for r in records.values() if r["model_info"].get("additional_details", {}).get("revision") == "stage3")
    assert dfm["model_info"]["developer"] == "danish-foundation-models"
    # the files are recorded, so a later report into the same folder replaces them and nothing else
    written = json.loads((report.files.out / "propme-report-files.json").read_text())["files"]
    assert sorted(p.relative_to(report.files.out).as_posix() for p in report.files.eee if p.suffix == ".json") == \
        sorted(f for f in written if f.startswith("eee/") and f.endswith(".json"))
    assert len({p for p in written if p.endswith(".json") and p.startswith("eee/")}) == len(records)
    # the data repository's layout: data/propme/<developer>/<model>/<uuid>.json, a hub id's owner and name
    dfm_paths = [p for p in report.files.eee if p.suffix == ".json" and "/dfm-decoder-open-v0-7b-pt/" in p.as_posix()]
    assert len(dfm_paths) == 2 and all(p.parent.parent.name == "danish-foundation-models" for p in dfm_paths)


def test_values_intervals_and_metadata(report):
    records = _records(report.files.out)
    stage3 = next(r for r in records.values() if r["model_info"]["additional_details"].get("revision") == "stage3")
    # prefix FMR: 8 full matches in 100 prefix prompts (one generation each), Wilson interval over 100
    fmr = _result(stage3, "propme.dynaword.fmr.prefix")
    assert fmr["score_details"]["score"] == pytest.approx(0.08)
    ci = fmr["score_details"]["uncertainty"]["confidence_interval"]
    assert (ci["lower"], ci["upper"]) == pytest.approx(wilson_interval(8, 100, 0.95))
    assert ci["method"] == WILSON and ci["confidence_level"] == 0.95
    assert fmr["score_details"]["uncertainty"]["num_samples"] == 100
    assert fmr["metric_config"]["lower_is_better"] is True
    assert (fmr["metric_config"]["min_score"], fmr["metric_config"]["max_score"]) == (0.0, 1.0)
    assert fmr["evaluation_name"] == "propme_dynaword_prefix"
    source = fmr["source_data"]["additional_details"]
    assert source["index_identity"] == "idx-dynaword-v1" and len(source["prompt_set"]) == 12
    # ALS: sum of longest spans / generations = (75 * 25 + 25 * 24) / 100, bootstrap over 100 prompts, unbounded
    als = _result(stage3, "propme.dynaword.als.prefix")
    assert als["score_details"]["score"] == pytest.approx((75 * 25 + 25 * 24) / 100)
    unc = als["score_details"]["uncertainty"]
    assert unc["confidence_interval"]["method"] == PERCENTILE
    assert unc["num_bootstrap_samples"] == 300 and unc["num_samples"] == 100
    assert als["metric_config"]["max_score"] == "Infinity" and als["metric_config"]["metric_unit"] == "tokens"
    lo, hi = unc["confidence_interval"]["lower"], unc["confidence_interval"]["upper"]
    assert 24 <= lo <= als["score_details"]["score"] <= hi <= 25
    # PM FMR specific: p = 1/100, c = 8/100 -> 1/9
    pm = _result(stage3, "propme.dynaword.pm_fmr.specific")
    assert pm["score_details"]["score"] == pytest.approx(1 / 9)
    assert pm["metric_config"]["metric_parameters"] == {"base_metric": "fmr", "propensity_setting": "specific",
                                                        "capability_setting": "prefix"}
    assert pm["score_details"]["uncertainty"]["confidence_interval"]["method"] == PERCENTILE


def test_zero_events_keep_a_wilson_interval_over_generations(report):
    comma = next(r for r in _records(report.files.out).values() if r["model_info"]["id"] == COMMA)
    fmr = _result(comma, "propme.dynaword.fmr.generic")
    assert fmr["score_details"]["score"] == 0
    unc = fmr["score_details"]["uncertainty"]
    assert unc["num_samples"] == 200  # two generations per prompt: Wilson counts generations
    upper = wilson_interval(0, 200, 0.95)[1]
    assert upper > 0 and unc["confidence_interval"]["upper"] == pytest.approx(upper)


def test_undefined_values_are_left_out(tmp_path, validator):
    settings = {"generic": [[gen(f"generic-{i}#0", error="ValueError: boom")] for i in range(8)],
                "prefix": setting_prompts("prefix", 8, [(8, 12)], {0: 0.5, 1: 0.4}, {0})}
    run = write_run(tmp_path / "run", DFM, "", settings).parent
    with pytest.raises(IncompleteReportError):
        make_report(ReportRequest([run], tmp_path / "rep", bootstrap=50, plots=False, html=False))
    (record,) = _records(tmp_path / "rep").values()
    assert not list(validator.iter_errors(record))
    ids = {r["evaluation_result_id"] for r in record["evaluation_results"]}
    assert not [i for i in ids if i.endswith(".generic")]  # nothing counted: no metric and no PM, never 0
    assert "propme.dynaword.fmr.prefix" in ids
    assert _result(record, "propme.dynaword.fmr.prefix")["score_details"]["score"] == pytest.approx(1 / 8)


def test_a_later_report_replaces_the_records(tmp_path):
    one = write_run(tmp_path / "s1", DFM, "stage1", stage1_settings(), date=DATE1).parent
    two = write_run(tmp_path / "s3", DFM, "stage3", reference_settings(), date=DATE2).parent
    out = tmp_path / "report"
    (out / "eee").mkdir(parents=True)
    mine = out / "eee" / "notes.txt"  # a file PropMe did not write stays
    mine.write_text("mine")
    make_report(ReportRequest([one, two], out, bootstrap=0, plots=False, html=False))
    assert len(_records(out)) == 2
    make_report(ReportRequest([two], out, bootstrap=0, plots=False, html=False))
    (record,) = _records(out).values()  # the stage1 record of the earlier report is gone
    assert record["model_info"]["additional_details"]["revision"] == "stage3"
    assert mine.read_text() == "mine"
    # --bootstrap 0: no bootstrap interval, so ALS has no uncertainty; proportions keep their Wilson interval
    assert "uncertainty" not in _result(record, "propme.dynaword.als.prefix")["score_details"]
    assert _result(record, "propme.dynaword.fmr.prefix")["score_details"]["uncertainty"]["num_samples"] == 100


def test_the_official_validator_accepts_the_records_as_written(report):
    """`every_eval_ever validate` (its models, the data repository's layout, the companion samples
    file, the score-metadata rule the JSON schema alone does not enforce) passes every record and its
    lines where the report wrote them, with no error and no warning."""
    from support.eee_validator import official_validate

    code, found = official_validate(sorted(report.files.eee))
    assert code == 0 and len(found) == len(report.files.eee), {k: v[:3] for k, v in found.items() if v}
    for path in report.files.eee:
        assert path.relative_to(report.files.out / "eee").as_posix().startswith("data/propme/")


def test_every_interval_method_a_record_names_is_one_docs_cli_lists(report):
    """The records name their intervals' methods as docs/cli.md's table of interval methods lists them,
    which is `eee.INTERVAL_METHODS` (the one list); every kind of interval the fixture has is among them."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text[text.index("#### Interval methods"):].split("\n#### ")[0]
    assert re.findall(r"^\| `([^`]+)` \| (.+) \|$", section, flags=re.M) == list(INTERVAL_METHODS)
    named = {r["score_details"]["uncertainty"]["confidence_interval"]["method"]
             for record in _records(report.files.out).values() for r in record["evaluation_results"]
             if "uncertainty" in r["score_details"]}
    assert named <= {name for name, _ in INTERVAL_METHODS}
    assert {WILSON, PERCENTILE} <= named
    # every method an interval of a result can have: the metrics', PM's, the figures' (a floor's excess is
    # a difference: compare's unpaired bootstrap or bounds), contamination's and the likelihood's, by either
    # bootstrap method an IntervalSpec may name
    made = {pm.WILSON, pm.ZERO_EVENTS, pm.UNIFORM, pm.ONE_UNIT, pm.PROPAGATED, difference.BOUNDS,
            *pm.BOOTSTRAP_METHODS, *(pm.IntervalSpec(method=m).paired(False) for m in pm.BOOTSTRAP_METHODS)}
    assert {name for name, _ in INTERVAL_METHODS} == made


def test_the_likelihood_figures_are_in_the_record(report, validator):
    (record,) = [r for r in _records(report.files.out).values()
                 if r["model_info"]["additional_details"].get("revision") == "stage3"]
    assert not sorted(validator.iter_errors(record), key=str)
    greedy = _result(record, "propme.dynaword.greedy_extraction.prefix_likelihood")
    assert greedy["evaluation_name"] == "propme_dynaword_likelihood"
    assert greedy["score_details"]["score"] == pytest.approx(2 / 8)  # log P(z) above -1: the first two of eight
    ci = greedy["score_details"]["uncertainty"]
    assert ci["confidence_interval"]["method"] == pm.WILSON and ci["num_samples"] == len(LOGPS)  # a share
    assert (ci["confidence_interval"]["lower"], ci["confidence_interval"]["upper"]) == pytest.approx(pm.wilson_interval(2, 8))
    # (n, p)-discoverable at n = 100, p = 0.5 (the default): 1 - (1 - P)^100 >= 0.5 while P >= 1 - 0.5^(1/100)
    threshold = 1 - 0.5 ** (1 / 100)
    disc = _result(record, "propme.dynaword.discoverable@100.prefix_likelihood")
    assert disc["score_details"]["score"] == pytest.approx(sum(math.exp(lp) >= threshold for lp in LOGPS) / 8)
    assert disc["metric_config"]["metric_parameters"]["discoverable_n"] == 100
    median = _result(record, "propme.dynaword.log10_p_median.prefix_likelihood")
    assert median["score_details"]["score"] == pytest.approx(statistics.median(lp / math.log(10) for lp in LOGPS))
    assert (median["metric_config"]["min_score"], median["metric_config"]["max_score"]) == ("-Infinity", 0.0)
    mci = median["score_details"]["uncertainty"]
    assert mci["confidence_interval"]["method"] == PERCENTILE and mci["num_bootstrap_samples"] == 300
    others = [r for r in _records(report.files.out).values() if r["evaluation_id"] != record["evaluation_id"]]
    assert not any(".prefix_likelihood" in x["evaluation_result_id"] for r in others for x in r["evaluation_results"])
