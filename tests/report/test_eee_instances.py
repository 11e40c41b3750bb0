"""Every Eval Ever instance-level lines (`report/eee.instance_records`): valid against the official
instance_level_eval schema 0.3.0, one per counted generation, tied to the result its `is_correct`
counts (the setting's FMR; for prefix prompts the extraction), so its mean is that result; personal
data masked."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from propme_metrics.report.request import ReportRequest
from support.reports import make_report
from support.runs import DFM, gen, setting_prompts, write_run

SCHEMAS = Path(__file__).parent.parent / "data" / "every_eval_ever"
EMAIL = "hans.jensen@example.dk"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("eee-instances")
    settings = {"generic": setting_prompts("generic", 10, [(10, 6)], {0: 0.4}, {1, 2}, repeats=2),
                "prefix": setting_prompts("prefix", 10, [(10, 8)], {3: 0.9}, {0, 1, 2, 3}),
                "specific": setting_prompts("specific", 4, [(4, 5)], {}, set())}
    # a degenerate and a failed generation count in no metric; a generation that leaks an e-mail address
    settings["specific"].append([gen("s-deg", 3, degenerate=True), gen("s-err", 0, error="boom")])
    settings["specific"].append([gen("s-pii", 3, text=f"Skriv til {EMAIL} i dag.")])
    run = write_run(root / "run", DFM, "stage3", settings).parent
    return make_report(ReportRequest([run], root / "report", bootstrap=0, plots=False, html=False))


def _lines(report) -> tuple[dict, list[dict]]:
    (record_path,) = [p for p in report.files.eee if p.suffix == ".json"]
    (samples_path,) = [p for p in report.files.eee if p.name.endswith("_samples.jsonl")]
    assert samples_path.name == record_path.stem + "_samples.jsonl"
    record = json.loads(record_path.read_text(encoding="utf-8"))
    return record, [json.loads(x) for x in samples_path.read_text(encoding="utf-8").splitlines()]


def test_lines_validate_and_tie_to_the_fmr_results(report):
    schema = json.loads((SCHEMAS / "instance_level_eval.schema.json").read_text(encoding="utf-8"))
    assert schema["version"] == "0.3.0"
    validator = jsonschema.Draft7Validator(schema)
    record, lines = _lines(report)
    for line in lines:
        errors = sorted(validator.iter_errors(line), key=str)
        assert not errors, f"{errors[0].message} at {list(errors[0].absolute_path)}"
        assert line["evaluation_id"] == record["evaluation_id"] and line["model_id"] == DFM
    # generic 10 x 2, prefix 10, specific 4 + the leaking one; the degenerate and failed ones left out
    per_setting = {s: [x for x in lines if x["metadata"]["setting"] == s] for s in ("generic", "prefix", "specific")}
    assert {s: len(v) for s, v in per_setting.items()} == {"generic": 20, "prefix": 10, "specific": 5}
    assert not any(x["sample_id"].startswith(("s-deg", "s-err")) or "boom" in json.dumps(x) for x in lines)
    results = {r["evaluation_result_id"]: r for r in record["evaluation_results"]}
    for setting, rows in per_setting.items():
        # a prefix line counts the document's extraction (what the prefix setting measures), the others FMR
        result_id = f"propme.dynaword.{'extraction' if setting == 'prefix' else 'fmr'}.{setting}"
        assert {x["evaluation_result_id"] for x in rows} == {result_id}
        assert all(x["evaluation"]["score"] == float(x["evaluation"]["is_correct"]) for x in rows)
        share = sum(x["evaluation"]["is_correct"] for x in rows) / len(rows)
        assert share == pytest.approx(results[result_id]["score_details"]["score"])
    # by hand: full matches in generic prompts 1 and 2 (both generations), prefix prompts 0-3
    assert sum(x["evaluation"]["is_correct"] for x in per_setting["generic"]) == 4
    assert sum(x["evaluation"]["is_correct"] for x in per_setting["prefix"]) == 4
    assert len({x["sample_id"] for x in lines}) == len(lines)


def test_trace_summary_and_masked_personal_data(report):
    _, lines = _lines(report)
    leaking = next(x for x in lines if "Skriv til" in x["output"]["raw"][0])
    assert EMAIL not in json.dumps(leaking) and "@" in leaking["output"]["raw"][0]
    first = next(x for x in lines if x["metadata"]["setting"] == "prefix" and x["evaluation"]["is_correct"])
    meta = first["metadata"]
    assert meta["full_match"] == "true" and meta["final_spans"] == "1" and meta["longest_span_tokens"] == "8"
    assert meta["source_ids"].startswith("src-")
    assert first["input"]["reference"] == ["og de levede lykkeligt"]   # the prefix prompt's true continuation


def test_a_prefix_line_is_correct_when_the_document_was_extracted(tmp_path):
    """A prefix generation can match a window verbatim without reproducing the document's own next
    50 tokens, and the reverse: its line follows the extraction (issue 44, item 5)."""
    prompts = [[gen("p-0#0", 10, (0.9,), full=True, extracted=False)],
               [gen("p-1#0", 10, (0.9,), full=False, extracted=True)],
               [gen("p-2#0", 10, (0.9,), full=True, extracted=True)]]
    settings = {"prefix": prompts, "generic": setting_prompts("generic", 3, [(3, 4)], {}, set())}
    run = write_run(tmp_path / "run", DFM, "stage3", settings).parent
    report = make_report(ReportRequest([run], tmp_path / "report", bootstrap=0, plots=False, html=False))
    record, lines = _lines(report)
    prefix = {x["sample_id"]: x for x in lines if x["metadata"]["setting"] == "prefix"}
    assert sorted((x["metadata"]["full_match"], x["evaluation"]["is_correct"]) for x in prefix.values()) == \
        [("false", True), ("true", False), ("true", True)]
    extraction = next(r for r in record["evaluation_results"]
                      if r["evaluation_result_id"] == "propme.dynaword.extraction.prefix")
    assert extraction["score_details"]["score"] == pytest.approx(2 / 3)
    assert {x["evaluation_result_id"] for x in prefix.values()} == {"propme.dynaword.extraction.prefix"}
