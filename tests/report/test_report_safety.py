"""`propme report` on hostile or incomplete input: undefined is not zero, --limit runs stay apart,
damaged samples files are one message, and nothing written can inject HTML or spreadsheet formulas."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from propme_metrics.cli.app import main
from propme_metrics.report.build import build_report
from propme_metrics.report.compute import IncompleteReportError
from support.runs import DATE1, DATE2, DFM, gen, setting_prompts, write_run


def small_settings(n: int = 8) -> dict[str, list[list[dict]]]:
    return {"generic": setting_prompts("generic", n, [(n, 10)], {0: 0.2}, set()),
            "prefix": setting_prompts("prefix", n, [(n, 12)], {0: 0.5, 1: 0.4}, {0})}


def csv_row(path: Path) -> dict[str, str]:
    return next(csv.DictReader(path.open(encoding="utf-8")))


def samples_file(run: Path, setting: str) -> Path:
    return next(run.rglob(f"samples_propme_dynaword_{setting}_*.jsonl"))


def test_nothing_counted_is_empty_not_zero_and_exits_2(tmp_path, capsys):
    settings = small_settings()
    settings["generic"] = [[gen(f"generic-{i}#0", error="ValueError: boom")] for i in range(8)]
    run = write_run(tmp_path / "run", DFM, "", settings).parent
    out = tmp_path / "rep"
    with pytest.raises(IncompleteReportError) as info:
        build_report([run], out, bootstrap=50)
    assert "propme_dynaword_generic" in str(info.value)
    row = csv_row(out / "leaderboard.csv")
    p = "propme_dynaword"
    for col in (f"{p}_pm_fmr_generic", f"{p}_pm_nvr_generic", f"{p}_generic_fmr", f"{p}_generic_nvr",
                f"{p}_generic_als", f"{p}_generic_nvr_max"):
        assert row[col] == "", col
    assert row[f"{p}_failed_generic"] == "8" and row[f"{p}_generations_generic"] == "0"
    assert float(row[f"{p}_prefix_fmr"]) == pytest.approx(1 / 8)  # the other setting is still reported
    doc = json.loads((out / "leaderboard.json").read_text())
    assert doc["rows"][0][f"{p}_pm_fmr_generic"] is None and doc["rows"][0][f"{p}_generic_fmr"] is None
    md = (out / "leaderboard.md").read_text()
    assert "no generation of propme_dynaword_generic was counted" in md and "not 0" in md
    assert "undefined" in (out / "report.html").read_text()
    assert main(["report", str(run), "--out", str(tmp_path / "rep2"), "--bootstrap", "50"]) == 2
    assert "nothing was counted in propme_dynaword_generic" in capsys.readouterr().err


def with_limit(run: Path, limit) -> Path:
    for results in run.rglob("results_*.json"):
        data = json.loads(results.read_text())
        data["config"]["limit"] = limit
        results.write_text(json.dumps(data))
    return run


def test_limit_run_never_replaces_the_full_run(tmp_path):
    full = write_run(tmp_path / "full", DFM, "", small_settings(8), date=DATE1).parent
    limited = with_limit(write_run(tmp_path / "lim", DFM, "", small_settings(2), date=DATE2).parent, 2)
    alone = build_report([full], tmp_path / "alone", bootstrap=0, plots=False, html=False)
    rep = build_report([full, limited], tmp_path / "both", bootstrap=0, plots=False, html=False)
    row = rep.rows[0]
    assert row["propme_dynaword_n_generic"] == 8
    assert row["propme_dynaword_pm_nvr_generic"] == alone.rows[0]["propme_dynaword_pm_nvr_generic"]
    assert row["propme_dynaword_limit2_n_generic"] == 2  # reported apart, and marked
    assert any("--limit 2" in n and "not comparable" in n for n in rep.notes)
    md = (tmp_path / "both" / "leaderboard.md").read_text()
    assert "## dynaword_limit2" in md


def test_bad_limit_is_one_message(tmp_path):
    run = with_limit(write_run(tmp_path / "run", DFM, "", small_settings(2)).parent, "lots")
    with pytest.raises(Exception, match="config.limit"):
        build_report([run], tmp_path / "rep", bootstrap=0, plots=False, html=False)


def test_nan_in_a_samples_file_is_one_message(tmp_path, capsys):
    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    f = samples_file(run, "generic")
    f.write_text(f.read_text().replace('"nv_recall": 0.2', '"nv_recall": NaN'))
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert "nv_recall is not a finite number" in err and "line 1" in err


def test_lone_surrogates_in_samples_give_a_full_report(tmp_path):
    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    f = samples_file(run, "generic")
    f.write_text(f.read_text().replace("Indledning", "Indl\\ud800edning").replace('"id": "generic-000"',
                                                                               '"id": "generic-000\\udfff"'))
    rep = build_report([run], tmp_path / "rep", bootstrap=0)
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert "Indl\ufffdedning" in page and rep.rows[0]["propme_dynaword_n_generic"] == 8


def test_model_names_cannot_inject_html_or_formulas(tmp_path):
    model = "=HYPERLINK(\"http://x\")<img src=x onerror=alert(1)>"
    run = write_run(tmp_path / "run", model, "", small_settings()).parent
    build_report([run], tmp_path / "rep", bootstrap=0)
    md = (tmp_path / "rep" / "leaderboard.md").read_text()
    assert "<img" not in md and "&lt;img" in md
    row = csv_row(tmp_path / "rep" / "leaderboard.csv")
    assert row["model"].startswith("'=")


def test_retraced_results_are_fed_back_into_the_report(tmp_path, capsys):
    """README's recovery path: failed traces redone by `propme trace --input samples_...` replace the failures."""
    settings = small_settings()
    settings["generic"] = [[gen(f"generic-{i}#0", error="ValueError: boom")] for i in range(8)]
    run = write_run(tmp_path / "run", DFM, "", settings).parent
    good = small_settings()["generic"]
    results = tmp_path / "retrace.jsonl"
    results.write_text("".join(json.dumps({**g[0], "key": f"generic-{i:03d}#0"}) + "\n" for i, g in enumerate(good)))
    summary = tmp_path / "retrace.json"
    summary.write_text(json.dumps({"input": {"path": str(samples_file(run, "generic")), "format": "lm-eval-samples"},
                                   "index": {"identity": "idx-dynaword-v1"}, "results": str(results)}))
    reference = write_run(tmp_path / "ref", DFM, "", small_settings()).parent
    expected = build_report([reference], tmp_path / "expected", bootstrap=0, plots=False, html=False)
    rep = build_report([run], tmp_path / "rep", bootstrap=0, plots=False, html=False, retraced=[summary])
    assert rep.rows[0]["propme_dynaword_failed_generic"] == 0
    assert rep.rows[0]["propme_dynaword_generic_nvr"] == expected.rows[0]["propme_dynaword_generic_nvr"]
    assert any("8 generation(s) taken from the re-trace" in n for n in rep.notes)
    other = tmp_path / "other.json"
    other.write_text(summary.read_text().replace("idx-dynaword-v1", "idx-other"))
    assert main(["report", str(run), "--out", str(tmp_path / "r2"), "--bootstrap", "0", "--no-html",
                 "--retraced", str(other)]) == 2
    assert "traced against" in capsys.readouterr().err


def test_a_report_over_an_earlier_one_leaves_no_stale_plot_and_keeps_user_files(tmp_path):
    out = tmp_path / "rep"
    first = write_run(tmp_path / "a", DFM, "", small_settings(), corpus="dynaword").parent
    build_report([first], out, bootstrap=10)
    assert (out / "capability_dynaword.png").is_file()
    (out / "my-notes.md").write_text("mine")
    (out / "capability_other.png").write_text("a plot the user made")
    second = write_run(tmp_path / "b", DFM, "", small_settings(), corpus="common_pile").parent
    report = build_report([second], out, bootstrap=10)
    names = sorted(p.name for p in out.iterdir())
    assert "capability_dynaword.png" not in names  # the earlier report's plot is gone
    assert "capability_common_pile.png" in names
    assert (out / "my-notes.md").read_text() == "mine" and (out / "capability_other.png").is_file()
    recorded = json.loads((out / "propme-report-files.json").read_text())["files"]
    assert {p.name for p in report.paths} <= set(recorded)  # the page and eee/ records are recorded too
    assert {n.split("/")[0] for n in recorded} | {"my-notes.md", "capability_other.png", "propme-report-files.json"} \
        == set(names)


def test_every_setting_failed_writes_the_whole_report_and_exits_2(tmp_path, capsys):
    failed = {s: [[gen(f"{s}-{i}#0", error="ValueError: boom")] for i in range(4)] for s in ("generic", "prefix")}
    good = write_run(tmp_path / "run", DFM, "", small_settings(4), date=DATE1)
    write_run(tmp_path / "run", DFM, "", failed, date=DATE2)  # a newer, all-failed run beside a good one
    out = tmp_path / "rep"
    assert main(["report", str(good.parent), "--out", str(out), "--bootstrap", "20"]) == 2
    err = capsys.readouterr().err
    assert "nothing was counted" in err and "bug" not in err
    assert (out / "report.html").is_file() and (out / "capability_dynaword.png").is_file()
    row = csv_row(out / "leaderboard.csv")
    assert row["propme_dynaword_prefix_nvr"] == "" and row["propme_dynaword_pm_nvr_generic"] == ""


def test_nvr_without_document_entries_is_undefined_not_zero(tmp_path):
    settings = small_settings(4)
    settings["generic"] = [[gen(f"generic-{i}#0", seg_len=10)] for i in range(4)]  # spans, no documents
    run = write_run(tmp_path / "run", DFM, "", settings).parent
    report = build_report([run], tmp_path / "rep", bootstrap=20)
    generic = report.results[0].settings["generic"].metrics
    assert generic["nvr"].value is None and generic["nvr_hits"].value is None
    assert generic["als"].value == 10  # the defined metrics are still there
    row = csv_row(tmp_path / "rep" / "leaderboard.csv")
    assert row["propme_dynaword_generic_nvr"] == "" and row["propme_dynaword_generic_nvr_low"] == ""
    doc = json.loads((tmp_path / "rep" / "leaderboard.json").read_text())
    assert doc["rows"][0]["propme_dynaword_generic_nvr"] is None


def test_a_carriage_return_in_a_model_name_never_splits_a_csv_row(tmp_path):
    model = "org/model\r=cmd|' /C calc'!A0"
    run = write_run(tmp_path / "run", model, "", small_settings(4)).parent
    build_report([run], tmp_path / "rep", bootstrap=0)
    with open(tmp_path / "rep" / "leaderboard.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert len(rows) == 2 and rows[1][0] == model and len(rows[1]) == len(rows[0])
    raw = (tmp_path / "rep" / "leaderboard.csv").read_bytes()
    assert not any(line.startswith(b"=") for line in raw.replace(b"\r\n", b"\n").split(b"\n"))


def _retrace_of(tmp_path: Path, run: Path, config: dict | None) -> Path:
    good = small_settings()["generic"]
    results = tmp_path / "retrace.jsonl"
    results.write_text("".join(json.dumps({**g[0], "key": f"generic-{i:03d}#0"}) + "\n" for i, g in enumerate(good)))
    summary = tmp_path / "retrace.json"
    summary.write_text(json.dumps({"input": {"path": str(samples_file(run, "generic")), "format": "lm-eval-samples"},
                                   "index": {"identity": "idx-dynaword-v1"}, "results": str(results),
                                   **({"config": config} if config is not None else {})}))
    return summary


def _with_trace_config(samples: Path, config: dict) -> None:
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    for row in rows:
        row["doc"]["trace_config"] = json.dumps(config, sort_keys=True)
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_retrace_with_other_tracing_settings_is_refused_unless_asked_for(tmp_path):
    from propme_metrics.core.errors import ConfigError
    from propme_metrics.trace.result import TraceConfig

    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    mixed = TraceConfig().to_dict()
    _with_trace_config(samples_file(run, "generic"), mixed)
    summary = _retrace_of(tmp_path, run, {**mixed, "mode": "text"})
    with pytest.raises(ConfigError, match="other tracing settings than the run: mode 'text'"):
        build_report([run], tmp_path / "rep", bootstrap=0, plots=False, html=False, retraced=[summary])
    rep = build_report([run], tmp_path / "rep", bootstrap=0, plots=False, html=False, retraced=[summary],
                       retraced_other_settings=True)
    assert any("not checked against the run's" in n for n in rep.notes)
    same = _retrace_of(tmp_path, run, mixed)  # the run's own settings: accepted without asking
    assert build_report([run], tmp_path / "rep2", bootstrap=0, plots=False, html=False, retraced=[same])


def test_the_same_retrace_twice_says_so(tmp_path, capsys):
    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    summary = _retrace_of(tmp_path, run, None)
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--bootstrap", "0", "--no-html",
                 "--retraced", str(summary), "--retraced", str(summary)]) == 2
    err = capsys.readouterr().err
    assert "is given twice" in err and "not a samples file" not in err


def test_rows_of_another_setting_in_a_samples_file_are_refused(tmp_path):
    from propme_metrics.core.errors import ConfigError

    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    generic = samples_file(run, "generic")
    rows = [json.loads(line) for line in generic.read_text().splitlines()]
    for row in rows:
        row["doc"]["setting"] = row["trace"]["setting"] = "prefix"
    generic.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match="line 1: the row says setting 'prefix', but its task "
                                          "propme_dynaword_generic is the generic setting"):
        build_report([run], tmp_path / "rep", bootstrap=0)
