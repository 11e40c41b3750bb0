"""`propme report` on hostile or incomplete input: undefined is not zero, --limit runs stay apart,
damaged samples files are one message, and nothing written can inject HTML or spreadsheet formulas."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from propme.cli.app import main
from propme_metrics.report.folder import IncompleteReportError, MissingPrefixError
from propme_metrics.report.request import ReportRequest
from support.reports import make_report
from support.runs import DATE1, DATE2, DFM, add_likelihood_task, gen, setting_prompts, write_run


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
        make_report(ReportRequest([run], out, bootstrap=50))
    assert "propme_dynaword_generic" in str(info.value)
    row = csv_row(out / "leaderboard_full.csv")
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
    alone = make_report(ReportRequest([full], tmp_path / "alone", bootstrap=0, plots=False, html=False))
    rep = make_report(ReportRequest([full, limited], tmp_path / "both", bootstrap=0, plots=False, html=False))
    row = rep.layout.rows[0]
    assert row["propme_dynaword_n_generic"] == 8
    assert row["propme_dynaword_pm_nvr_generic"] == alone.layout.rows[0]["propme_dynaword_pm_nvr_generic"]
    assert row["propme_dynaword_limit2_n_generic"] == 2  # reported apart, and marked
    assert any("--limit 2" in n and "not comparable" in n for n in rep.report.notes)
    md = (tmp_path / "both" / "leaderboard.md").read_text()
    assert "## dynaword_limit2" in md


def test_bad_limit_is_one_message(tmp_path):
    run = with_limit(write_run(tmp_path / "run", DFM, "", small_settings(2)).parent, "lots")
    with pytest.raises(Exception, match="config.limit"):
        make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0, plots=False, html=False))


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
    rep = make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0))
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert "Indl\ufffdedning" in page and rep.layout.rows[0]["propme_dynaword_n_generic"] == 8


def test_model_names_cannot_inject_html_or_formulas(tmp_path):
    model = "=HYPERLINK(\"http://x\")<img src=x onerror=alert(1)>"
    run = write_run(tmp_path / "run", model, "", small_settings()).parent
    make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0))
    md = (tmp_path / "rep" / "leaderboard.md").read_text()
    assert "<img" not in md and "&lt;img" in md
    row = csv_row(tmp_path / "rep" / "leaderboard.csv")
    assert row["model"].startswith("'=")


@pytest.mark.parametrize("model", [r"org/$\undefinedmacro{x}$", "org/$x^2$ and $y$", "org/*bold* [a](javascript:x) `c` ~s~ _it_ my_model"])
def test_model_names_are_drawn_and_written_as_written(tmp_path, capsys, monkeypatch, model):
    """A model name that looks like mathtext or Markdown: the report (plots and page included) is
    written, exit 0, and every output shows the name as written, never as a formula or markup."""
    from markdown_it import MarkdownIt
    from matplotlib.text import Text

    import propme_metrics.report.plots as plots_module

    real_save, seen = plots_module.save, []

    def checked(fig, path):  # every text naming the model or revision is drawn as text, not mathtext
        for t in fig.findobj(Text):
            if "org/" in t.get_text() or "rev" in t.get_text():
                seen.append(t.get_text())
                assert t._preprocess_math(t.get_text())[1] is False, t.get_text()
        real_save(fig, path)

    monkeypatch.setattr(plots_module, "save", checked)
    first = write_run(tmp_path / "a", model, "", small_settings()).parent
    second = write_run(tmp_path / "b", model, "rev$1$", small_settings()).parent
    assert main(["report", str(first), str(second), "--out", str(tmp_path / "rep"), "--bootstrap", "0"]) == 0
    assert seen
    names = {p.name for p in (tmp_path / "rep").iterdir()}
    assert "report.html" in names and any(n.startswith("capability_") for n in names)
    rendered = MarkdownIt("commonmark").enable("table").render((tmp_path / "rep" / "leaderboard.md").read_text())
    for markup in ("<em>bold</em>", "<em>it</em>", "<a href", "<code>c</code>", "<s>s</s>", "<del>"):
        assert markup not in rendered
    assert model.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in rendered


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
    expected = make_report(ReportRequest([reference], tmp_path / "expected", bootstrap=0, plots=False, html=False))
    rep = make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0, plots=False, html=False, retraced=[summary]))
    assert rep.layout.rows[0]["propme_dynaword_failed_generic"] == 0
    assert rep.layout.rows[0]["propme_dynaword_generic_nvr"] == expected.layout.rows[0]["propme_dynaword_generic_nvr"]
    assert any("8 generation(s) taken from the re-trace" in n for n in rep.report.notes)
    other = tmp_path / "other.json"
    other.write_text(summary.read_text().replace("idx-dynaword-v1", "idx-other"))
    assert main(["report", str(run), "--out", str(tmp_path / "r2"), "--bootstrap", "0", "--no-html",
                 "--retraced", str(other)]) == 2
    assert "traced against" in capsys.readouterr().err


def test_a_report_over_an_earlier_one_leaves_no_stale_plot_and_keeps_user_files(tmp_path):
    out = tmp_path / "rep"
    first = write_run(tmp_path / "a", DFM, "", small_settings(), corpus="dynaword").parent
    make_report(ReportRequest([first], out, bootstrap=10))
    assert (out / "capability_dynaword.png").is_file()
    (out / "my-notes.md").write_text("mine")
    (out / "capability_other.png").write_text("a plot the user made")
    second = write_run(tmp_path / "b", DFM, "", small_settings(), corpus="common_pile").parent
    report = make_report(ReportRequest([second], out, bootstrap=10))
    names = sorted(p.name for p in out.iterdir())
    assert "capability_dynaword.png" not in names  # the earlier report's plot is gone
    assert "capability_common_pile.png" in names
    assert (out / "my-notes.md").read_text() == "mine" and (out / "capability_other.png").is_file()
    recorded = json.loads((out / "propme-report-files.json").read_text())["files"]
    assert {p.relative_to(out).as_posix() for p in report.files.paths} <= set(recorded)  # the page and eee/ records too
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
    row = csv_row(out / "leaderboard_full.csv")
    assert row["propme_dynaword_prefix_nvr"] == "" and row["propme_dynaword_pm_nvr_generic"] == ""


def test_nvr_without_document_entries_is_undefined_not_zero(tmp_path):
    settings = small_settings(4)
    settings["generic"] = [[gen(f"generic-{i}#0", seg_len=10)] for i in range(4)]  # spans, no documents
    run = write_run(tmp_path / "run", DFM, "", settings).parent
    report = make_report(ReportRequest([run], tmp_path / "rep", bootstrap=20))
    generic = report.report.results[0].settings["generic"].metrics
    assert generic["nvr"].estimate is None and generic["nvr_hits"].estimate is None
    assert generic["als"].estimate == 10  # the defined metrics are still there
    row = csv_row(tmp_path / "rep" / "leaderboard_full.csv")
    assert row["propme_dynaword_generic_nvr"] == "" and row["propme_dynaword_generic_nvr_low"] == ""
    doc = json.loads((tmp_path / "rep" / "leaderboard.json").read_text())
    assert doc["rows"][0]["propme_dynaword_generic_nvr"] is None


def test_a_carriage_return_in_a_model_name_never_splits_a_csv_row(tmp_path):
    model = "org/model\r=cmd|' /C calc'!A0"
    run = write_run(tmp_path / "run", model, "", small_settings(4)).parent
    make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0))
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
    with pytest.raises(ConfigError, match="other tracing options than the run: mode 'text'"):
        make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0, plots=False, html=False, retraced=[summary]))
    rep = make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0, plots=False, html=False, retraced=[summary],
                       retraced_other_trace_options=True))
    assert any("not checked against the run's" in n for n in rep.report.notes)
    same = _retrace_of(tmp_path, run, mixed)  # the run's own settings: accepted without asking
    assert make_report(ReportRequest([run], tmp_path / "rep2", bootstrap=0, plots=False, html=False, retraced=[same]))


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
        make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0))


# --- runs that cannot share a PM: other tracing options, a chat template ------------------------


def _two_runs_in_one_folder(tmp_path: Path) -> tuple[Path, Path]:
    """An --output_path folder holding a full run and a later run of the prefix setting alone."""
    from propme_metrics.trace.result import TraceConfig

    root = tmp_path / "out"
    first = write_run(root, DFM, "", small_settings())
    second = write_run(root, DFM, "", {"prefix": small_settings()["prefix"]}, date=DATE2)
    mixed = TraceConfig().to_dict()
    for setting in ("generic", "prefix"):
        _with_trace_config(next(first.glob(f"samples_propme_dynaword_{setting}_{DATE1}.jsonl")), mixed)
    return root, second


def test_runs_with_other_tracing_settings_in_one_folder_are_refused_or_reported_apart(tmp_path, capsys):
    from propme_metrics.trace.result import TraceConfig

    root, second = _two_runs_in_one_folder(tmp_path)
    _with_trace_config(next(second.glob(f"samples_propme_dynaword_prefix_{DATE2}.jsonl")),
                       {**TraceConfig().to_dict(), "mode": "text"})
    assert main(["report", str(root), "--out", str(tmp_path / "rep"), "--bootstrap", "0", "--no-html"]) == 2
    err = capsys.readouterr().err
    assert "different tracing options" in err and "'text'" in err and "--separate" in err
    assert not (tmp_path / "rep").exists()
    with pytest.raises(MissingPrefixError) as caught:  # reported apart: the generic run has no prefix of its own
        make_report(ReportRequest([root], tmp_path / "apart", bootstrap=0, plots=False, html=False, separate=True))
    rep = caught.value.report  # what was computed (the files are in caught.value.files)
    assert rep.labels == ["dynaword_set1", "dynaword_set2"]
    by_label = {r.label: r for r in rep.results}
    assert set(by_label["dynaword_set2"].settings) == {"prefix"}  # the text-mode prefix stands alone
    assert set(by_label["dynaword_set1"].settings) == {"generic"} and not by_label["dynaword_set1"].pm


def test_the_same_tracing_settings_in_one_folder_still_pair(tmp_path):
    from propme_metrics.trace.result import TraceConfig

    root, second = _two_runs_in_one_folder(tmp_path)
    _with_trace_config(next(second.glob(f"samples_propme_dynaword_prefix_{DATE2}.jsonl")), TraceConfig().to_dict())
    rep = make_report(ReportRequest([root], tmp_path / "rep", bootstrap=0, plots=False, html=False))
    assert rep.report.labels == ["dynaword"] and rep.report.results[0].pm


def test_a_chat_template_run_never_pairs_with_a_plain_run(tmp_path, capsys):
    root, second = _two_runs_in_one_folder(tmp_path)
    results = second / f"results_{DATE2}.json"
    data = json.loads(results.read_text())
    data.update(chat_template="{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}",
                chat_template_sha="ab" * 32, fewshot_as_multiturn=False)
    results.write_text(json.dumps(data))
    assert main(["report", str(root), "--out", str(tmp_path / "rep"), "--bootstrap", "0", "--no-html"]) == 2
    assert "with and without a chat template" in capsys.readouterr().err
    with pytest.raises(MissingPrefixError) as caught:
        make_report(ReportRequest([root], tmp_path / "apart", bootstrap=0, plots=False, html=False, separate=True))
    rep = caught.value.report
    assert len(rep.labels) == 2
    assert any("prompts: lm-eval's chat template (sha256 abababababab)" in n for n in rep.notes)
    assert any("prompts: plain prompts (no chat template)" in n for n in rep.notes)
    md = (tmp_path / "apart" / "leaderboard.md").read_text()
    assert "chat template (sha256 abababababab)" in md


# --- a failed or killed report leaves one whole report ---------------------------------------------


def _files(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` (the eee/ records too) by its path inside it, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_report_failing_while_writing_leaves_the_earlier_report_whole(tmp_path, monkeypatch):
    import propme_metrics.report.html as html_module

    out = tmp_path / "rep"
    first = write_run(tmp_path / "a", DFM, "", small_settings()).parent
    make_report(ReportRequest([first], out, bootstrap=0))
    before = _files(out)
    assert "report.html" in before and any(name.startswith("eee/") for name in before)
    second = write_run(tmp_path / "b", "other/model", "", small_settings()).parent
    monkeypatch.setattr(html_module, "render", lambda *a, **k: 1 / 0)  # fails after the leaderboard and plots
    with pytest.raises(ZeroDivisionError):
        make_report(ReportRequest([second], out, bootstrap=0))
    assert _files(out) == before  # the earlier report, whole and alone


def test_a_sigkilled_report_leaves_nothing_a_rerun_keeps(tmp_path):
    """A real SIGKILL while a plot is half-written: the rerun removes everything it left (and a
    PropMe 0.2 report's hidden `.<plot>.*.tmp`), and writes the whole report."""
    import os
    import signal

    import propme_metrics.report.plots as plots
    from propme_metrics.core.files import atomic_output
    from support.forked import run_forked

    out = tmp_path / "rep"
    run = write_run(tmp_path / "a", DFM, "", small_settings()).parent
    make_report(ReportRequest([run], out, bootstrap=0, html=False))
    (out / ".capability_dynaword.png.k2j4h_x8.tmp").write_bytes(b"half a plot")  # left by PropMe 0.2

    def killed_while_plotting():  # in a forked child: the first plot half-written, then SIGKILL
        def killed(fig, path):
            with atomic_output(path, "wb") as fh:
                fh.write(b"half")
                os.kill(os.getpid(), signal.SIGKILL)

        plots.save = killed
        make_report(ReportRequest([run], out, bootstrap=0))

    child = run_forked(killed_while_plotting)
    assert child.returncode == -signal.SIGKILL, child.output
    left = {p.relative_to(out).as_posix() for p in out.rglob("*")}
    assert any(".tmp" in name for name in left)  # the kill left a temporary behind
    report = make_report(ReportRequest([run], out, bootstrap=0))
    names = set(_files(out))
    assert names == {p.relative_to(out).as_posix() for p in report.files.paths} | {"propme-report-files.json"}, names
    assert not any(name.startswith(".") for name in os.listdir(out))


# --- the likelihood subtask, predict-only runs, --output_path out.json ------------------------------


def test_a_log_probability_a_rounding_error_below_zero_is_reported(tmp_path):
    run = write_run(tmp_path / "run", DFM, "", small_settings())
    add_likelihood_task(run, [-1e-17, -0.0, -3.0, -80.0, -1e-300])
    rep = make_report(ReportRequest([run.parent], tmp_path / "rep", bootstrap=0, html=False))
    (lik,) = rep.report.likelihood
    assert lik.curve[1].estimate == pytest.approx(2 / 5 + 1 / 5)  # the three near-certain documents of five


def test_a_run_of_the_likelihood_subtask_alone_is_reported(tmp_path, capsys):
    run = write_run(tmp_path / "run", DFM, "", {})
    add_likelihood_task(run, [-0.1, -5.0, -60.0, -1e-17])
    assert main(["report", str(run.parent), "--out", str(tmp_path / "rep"), "--bootstrap", "0"]) == 0, \
        capsys.readouterr().err
    md = (tmp_path / "rep" / "leaderboard.md").read_text()
    assert "probabilistic extraction" in md
    row = csv_row(tmp_path / "rep" / "leaderboard_full.csv")  # the likelihood columns are not headline columns
    assert row["model"] == DFM and any(k.endswith("prefix_likelihood_n_prefix") or "likelihood" in k for k in row)


def _as_predict_only(samples: Path) -> None:
    """The samples file as `lm_eval --predict_only` writes it: metric `bypass`, no PropMe item."""
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    for row in rows:
        for key in row["metrics"]:
            row.pop(key)
        row["metrics"], row["bypass"] = ["bypass"], None
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_predict_only_run_is_reported_after_retracing(tmp_path, capsys):
    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    whole = make_report(ReportRequest([run], tmp_path / "whole", bootstrap=0, plots=False, html=False))
    _as_predict_only(samples_file(run, "generic"))
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert "--predict_only" in err and "propme trace --input" in err and "--retraced" in err
    assert "--log_samples" not in err
    summary = _retrace_of(tmp_path, run, None)  # what `propme trace --input` of that file gives
    rep = make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0, plots=False, html=False, retraced=[summary]))
    assert rep.layout.rows == whole.layout.rows
    assert any("8 generation(s) taken from the re-trace" in n for n in rep.report.notes)


def test_the_folder_of_an_output_path_ending_in_json_is_reported(tmp_path):
    run = write_run(tmp_path / "run", DFM, "", small_settings())
    (run / f"results_{DATE1}.json").rename(run / f"out_{DATE1}.json")  # lm_eval --output_path run/out.json
    rep = make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0, plots=False, html=False))
    assert rep.report.labels == ["dynaword"] and rep.report.results[0].pm


def test_generations_too_short_to_show_extraction_are_not_counted_as_failures(tmp_path):
    """max_gen_toks below the continuation's length: a generation that copies the continuation as
    far as it goes cannot show extraction (not counted, said in the notes; undefined when none is
    long enough), while a short generation that already differs is a real 0."""
    cont = "og de levede lykkeligt"  # every prefix prompt's true continuation in these runs
    short = [[gen(f"prefix-{i:03d}", 2, (0.5,), text="og de", extracted=False)] for i in range(6)]
    settings = {"generic": small_settings(6)["generic"], "prefix": short}
    run = write_run(tmp_path / "short", DFM, "", settings).parent
    rep = make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0, plots=False, html=False))
    assert rep.report.results[0].settings["prefix"].metrics["extraction"].estimate is None  # undefined, not 0
    assert any("6 of 6 generations stopped inside the true continuation" in n and "undefined" in n
               for n in rep.report.notes)
    mixed = short[:3] + [[gen(f"prefix-{i:03d}", 2, (0.5,), text="og så", extracted=False)] for i in range(3, 5)] \
        + [[gen("prefix-005", 2, (0.5,), text=cont + " til deres dages ende", extracted=True)]]
    run = write_run(tmp_path / "mixed", DFM, "", {**settings, "prefix": mixed}).parent
    rep = make_report(ReportRequest([run], tmp_path / "rep2", bootstrap=0, plots=False, html=False))
    assert rep.report.results[0].settings["prefix"].metrics["extraction"].estimate == pytest.approx(1 / 3)
    assert any("3 of 6 generations stopped inside" in n for n in rep.report.notes)


def _with_index(tmp_path: Path, runs: list[Path]) -> None:
    """Point every run at a real small index of sources `retsinformation` and `news` (the traces'
    documents name `retsinformation`), so the report ranks sources and draws the sources plot."""
    from support.corpora import make_index, word_level_tokenizer, write_jsonl

    records = [{"id": f"d{i}", "source": ("retsinformation", "news")[i % 2],
                "text": " ".join(f"w{(i * 7 + j) % 50}" for j in range(40))} for i in range(30)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    manifest = make_index(corpus, tmp_path / "index", word_level_tokenizer(tmp_path / "tok", 50))
    for run in runs:
        for f in run.iterdir():
            f.write_text(f.read_text().replace('"/idx"', json.dumps(str(tmp_path / "index")))
                         .replace('"idx-dynaword-v1"', json.dumps(manifest.identity)))


def test_a_report_without_bootstrap_intervals_writes_every_table_plot_and_record(tmp_path, capsys):
    """--bootstrap 0 (issue 44 item 9: exit 70 in the sources plot): the ratio metrics and PM have no
    interval, and every file takes that: the plots draw no bar, the tables and records no bounds."""
    runs = [write_run(tmp_path / "runs", DFM, "step1", small_settings()),
            write_run(tmp_path / "runs", DFM, "step2", small_settings(), date=DATE2)]
    add_likelihood_task(runs[0], [-0.1, -5.0, -60.0])
    _with_index(tmp_path, runs)
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "runs"), "--out", str(out), "--bootstrap", "0"]) == 0, \
        capsys.readouterr().err
    written = {p.name for p in out.iterdir()}
    assert {"sources_dynaword.png", "duplication_dynaword.png", "capability_dynaword.png", "likelihood_dynaword.png",
            "report.html", "leaderboard.html", "leaderboard.md"} <= written, written
    assert any(n.startswith("trajectory_dynaword_") for n in written)
    doc = json.loads((out / "leaderboard.json").read_text())
    assert doc["bootstrap"] == 0
    row = doc["rows"][0]
    p = "propme_dynaword"
    assert row[f"{p}_prefix_nvr"] == pytest.approx(0.9 / 8) and row[f"{p}_prefix_nvr_low"] is None
    assert row[f"{p}_pm_fmr_generic"] is not None and row[f"{p}_pm_fmr_generic_low"] is None
    assert row[f"{p}_prefix_fmr_low"] is not None  # proportions keep their Wilson interval
    (leaks,) = [e for e in doc["leaks"] if e["revision"] == "step1"]
    (top,) = leaks["settings"]["prefix"]["top_sources"]
    assert top["source"] == "retsinformation" and top["enrichment_full"]["low"] is None
    records = [json.loads(r.read_text()) for r in (out / "eee").rglob("*.json")]
    assert len(records) == 2
    for record in records:  # an interval is given whole or not at all
        for result in record["evaluation_results"]:
            ci = result["score_details"].get("uncertainty", {}).get("confidence_interval")
            assert ci is None or (ci["lower"] is not None and ci["upper"] is not None), result


def test_nvr_1_in_every_prompt_has_an_interval_of_width_at_both_ends(tmp_path):
    """Issue 44 item 19: NVR 1 over 100 prompts read `1 [1, 1]`; every interval has width at either end,
    in the records and as the tables write it (Wilson at 100,000 of 100,000 generations as well)."""
    from propme_metrics.report.cells import fmt_interval

    settings = {"generic": setting_prompts("generic", 100, [(100, 10)], {i: 1.0 for i in range(100)}, set()),
                "prefix": setting_prompts("prefix", 100, [(100, 12)], {i: 1.0 for i in range(100)}, set(range(100)))}
    run = write_run(tmp_path / "run", DFM, "", settings).parent
    make_report(ReportRequest([run], tmp_path / "rep", bootstrap=200, plots=False, html=False))
    row = json.loads((tmp_path / "rep" / "leaderboard.json").read_text())["rows"][0]
    for setting in ("generic", "prefix"):
        value, low, high = (row[f"propme_dynaword_{setting}_nvr{end}"] for end in ("", "_low", "_high"))
        assert value == 1.0 and low == pytest.approx(0.025 ** (1 / 100)) and high == 1.0
        assert row[f"propme_dynaword_{setting}_als_low"] < row[f"propme_dynaword_{setting}_als"]
    md = (tmp_path / "rep" / "leaderboard.md").read_text()
    assert "1 [1, 1]" not in md and "1 [0.964, 1]" in md
    assert fmt_interval(1.0, 1 - 3.7e-5, 1.0, "fmr") == "1 [0.99996, 1]"


def test_a_second_report_into_one_folder_is_refused_while_the_first_writes(tmp_path, monkeypatch, capsys):
    """Issue 44 item 6: two reports into one --out shared the staging folder (both failed, or one
    finished beside the other's files). A second writer stops at once with exit 2, as `propme trace`
    and `propme index build` do; the first report is whole, and the lock is gone afterwards."""
    import threading

    import propme_metrics.report.folder as folder

    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    other = write_run(tmp_path / "other", DFM, "", small_settings(4)).parent
    out = tmp_path / "rep"
    real_write_plots, second = folder.write_plots, {}

    def while_writing(report, into):  # the first report is writing: a second one starts (another thread)
        def run_second():
            second["code"] = main(["report", str(other), "--out", str(out), "--bootstrap", "0", "--no-html"])
            second["err"] = capsys.readouterr().err
        thread = threading.Thread(target=run_second)
        thread.start()
        thread.join()
        return real_write_plots(report, into)

    monkeypatch.setattr(folder, "write_plots", while_writing)
    assert main(["report", str(run), "--out", str(out), "--bootstrap", "0"]) == 0
    assert second["code"] == 2 and "another `propme report` is writing" in second["err"], second
    assert csv_row(out / "leaderboard_full.csv")["propme_dynaword_n_prefix"] == "8"  # the first report's
    assert not any(p.name.endswith("propme-report-lock") for p in tmp_path.iterdir())
    monkeypatch.setattr(folder, "write_plots", real_write_plots)
    assert main(["report", str(other), "--out", str(out), "--bootstrap", "0", "--no-html"]) == 0  # free again
    assert csv_row(out / "leaderboard_full.csv")["propme_dynaword_n_prefix"] == "4"


@pytest.mark.parametrize("record", [{"files": ["notes", "leaderboard.csv", "keep.txt"]},
                                    {"files": ["keep.txt", "../outside.txt"]}, {"files": "keep.txt"}, ["keep.txt"]])
def test_a_damaged_record_of_the_reports_files_is_treated_as_absent(tmp_path, record):
    """Issue 44 item 17: a propme-report-files.json naming a folder made every later report fail with
    "Is a directory". A damaged record (a folder in it, a name outside the folder, not PropMe's
    layout) is ignored whole: the report is written, and no file or folder it names is removed."""
    from propme_metrics.report.folder import WRITTEN_NAME

    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    out = tmp_path / "rep"
    (out / "notes").mkdir(parents=True)
    (out / "notes" / "mine.txt").write_text("user data")
    (out / "keep.txt").write_text("user data")
    (tmp_path / "outside.txt").write_text("user data")
    (out / WRITTEN_NAME).write_text(json.dumps(record))
    for _ in range(2):  # and the report after it, from the record this one wrote
        make_report(ReportRequest([run], out, bootstrap=0, plots=False, html=False))
        assert (out / "notes" / "mine.txt").read_text() == (out / "keep.txt").read_text() == "user data"
        assert (tmp_path / "outside.txt").exists() and (out / "leaderboard.csv").is_file()
    assert "keep.txt" not in json.loads((out / WRITTEN_NAME).read_text())["files"]


def test_a_folder_where_the_record_goes_is_one_message_and_kept(tmp_path, capsys):
    from propme_metrics.report.folder import WRITTEN_NAME

    run = write_run(tmp_path / "run", DFM, "", small_settings()).parent
    (tmp_path / "rep" / WRITTEN_NAME).mkdir(parents=True)
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--bootstrap", "0", "--no-html"]) == 2
    assert "is a folder, where PropMe keeps the list" in capsys.readouterr().err
    assert (tmp_path / "rep" / WRITTEN_NAME).is_dir()
