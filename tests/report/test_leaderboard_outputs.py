"""Issue 33 in the report's outputs: PM undefined in every output, the headline leaderboard.csv beside
leaderboard_full.csv, PM withheld with its reason, paired comparisons and `propme compare`."""
from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from propme.cli.app import main
from propme_metrics.metrics import registry
from propme_metrics.metrics.difference import metric_difference, pm_difference
from propme_metrics.metrics.pm import IntervalSpec, metric_interval, pm_interval
from propme_metrics.metrics.ratio import Ratio
from propme_metrics.report.cells import mark_legend
from propme_metrics.report.columns import headline_column_docs, headline_columns
from propme_metrics.report.console import print_summary
from propme_metrics.report.request import ReportRequest
from propme_metrics.report.writers import _csv_cell, shown_comparisons
from support.reports import make_report
from support.runs import COMMA, DATE1, DATE2, DFM, gen, reference_settings, setting_prompts, stage1_settings, write_run

ROOT = Path(__file__).resolve().parents[2]
P = "propme_dynaword"


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _md_table_cell(md: str, header: str, row_start: str) -> str:
    """The cell under `header` of the first Markdown table row starting with `row_start`."""
    lines = md.splitlines()
    for i, line in enumerate(lines):
        heads = [c.strip() for c in line.strip("|").split("|")]
        if header in heads:
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip("|").split("|")]
                if row.startswith(row_start):
                    return cells[heads.index(header)]
    raise AssertionError(f"no {header!r} cell in a row starting {row_start!r}")


# --- PM undefined in every output ------------------------------------------------------------------

@pytest.fixture(scope="module")
def no_documents_report(tmp_path_factory):
    """Generic generations with spans but no document entry: NVR generic, and PM NVR generic, undefined."""
    root = tmp_path_factory.mktemp("nodocs")
    settings_ = {"generic": [[gen(f"generic-{i}#0", seg_len=10)] for i in range(8)],
                 "prefix": setting_prompts("prefix", 8, [(8, 12)], {0: 0.5, 1: 0.4}, {0})}
    run = write_run(root / "run", DFM, "", settings_).parent
    return make_report(ReportRequest([run], root / "rep", bootstrap=200))


def test_pm_undefined_in_json_csv_markdown_and_terminal(no_documents_report):
    rep = no_documents_report
    assert rep.report.results[0].pm[("nvr", "generic")].estimate is None
    doc = json.loads(rep.files.leaderboard_json.read_text())
    for suffix in ("", "_low", "_high"):
        assert doc["rows"][0][f"{P}_pm_nvr_generic{suffix}"] is None
        assert _csv(rep.files.leaderboard_full_csv)[0][f"{P}_pm_nvr_generic{suffix}"] == ""
        assert _csv(rep.files.leaderboard_csv)[0][f"{P}_pm_nvr_generic{suffix}"] == ""
    # the defined PM beside it is written: undefined is per value, not per row
    assert doc["rows"][0][f"{P}_pm_als_generic"] == pytest.approx(10 / (10 + 12))
    assert _md_table_cell(rep.files.leaderboard_md.read_text(), "PM NVR generic", f"| {DFM}") == "-"
    buf = io.StringIO()
    print_summary(rep.report, rep.files, Console(file=buf, width=250, color_system=None))
    row = next(line for line in buf.getvalue().splitlines() if "generic" in line and DFM[:15] in line)
    cells = [c.strip() for c in re.split(r"[│|┃]", row) if c.strip()]
    nvr_column = 2 + list(rep.report.pm_metrics).index("nvr")
    assert cells[nvr_column] == "-", cells


ratios = st.lists(st.builds(Ratio, st.sampled_from([0.0, 0.0, 1.0, 2.5]), st.sampled_from([0.0, 0.0, 1.0, 3.0])),
                  min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(p=ratios, c=ratios, metric=st.sampled_from(["nvr", "als", "fmr"]))
def test_no_number_comes_from_a_zero_denominator(p, c, metric):
    """Property: a pooled zero denominator gives None for a value, its interval, PM and a difference,
    and None is written as an empty CSV cell; a defined one gives finite numbers."""
    spec = registry.metric(metric)
    if metric in ("fmr", "nvr"):  # a share has one generation per counted unit; NV-recall is at most 1 a document
        p = [Ratio(min(r.numerator, r.denominator), r.denominator) for r in p]
        c = [Ratio(min(r.numerator, r.denominator), r.denominator) for r in c]
    pooled_p, pooled_c = sum(r.denominator for r in p), sum(r.denominator for r in c)
    iv = metric_interval(spec, p, IntervalSpec(50, 0))
    if not pooled_p:
        assert iv.estimate is None and iv.low is None and iv.high is None
        assert _csv_cell(iv.estimate) == ""
    else:
        assert iv.estimate is not None and iv.low is not None
    sides = (metric_interval(spec, p, IntervalSpec(50, 0)), metric_interval(spec, c, IntervalSpec(50, 0)))
    pm_iv = pm_interval(p, c, IntervalSpec(50, 0), sides)
    diff = metric_difference(spec, p, c, False, IntervalSpec(50, 0))
    pm_diff = pm_difference(spec, (p, c), (p[::-1], c[::-1]), True, IntervalSpec(50, 0))
    if not pooled_p or not pooled_c:
        for x in (pm_iv, pm_diff):
            assert (x.estimate, x.low, x.high) == (None, None, None)
        assert diff.estimate is None and diff.low is None
    else:
        assert 0.0 <= pm_iv.estimate <= 1.0 and pm_iv.low <= pm_iv.estimate <= pm_iv.high
        assert diff.estimate is not None


# --- headline and full leaderboards, PM withheld --------------------------------------------------------

@pytest.fixture(scope="module")
def three(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs3")
    runs = [write_run(root / "s1", DFM, "stage1", stage1_settings(), date=DATE1).parent,
            write_run(root / "s3", DFM, "stage3", reference_settings(), date=DATE2).parent,
            write_run(root / "c", COMMA, "", {s: v for s, v in reference_settings().items()}, date=DATE1).parent]
    # COMMA: prefix with no full match (capability 0 events) so its PM FMR is withheld
    ref = reference_settings()
    ref["prefix"] = setting_prompts("prefix", 100, [(100, 10)], {7: 0.9}, set())
    write_run(root / "c", COMMA, "", ref, date=DATE1)
    return runs, make_report(ReportRequest(runs, root / "rep", bootstrap=300, seed=2))


def test_headline_is_small_documented_and_the_full_set_is_beside_it(three):
    _, rep = three
    header = next(csv.reader(rep.files.leaderboard_csv.open(encoding="utf-8")))
    assert header == headline_columns(rep.report) == rep.layout.headline_columns
    assert len(header) <= 40
    for col in ("model", "revision", f"{P}_prefix_nvr", f"{P}_pm_nvr_generic", f"{P}_pm_nvr_generic_low",
                f"{P}_pm_fmr_specific_high", f"{P}_specific_fmr", f"{P}_pm_fmr_rare_generic", f"{P}_prefix_fmr_low",
                f"{P}_prefix_extraction_high", f"{P}_pm_withheld"):
        assert col in header, col
    full = next(csv.reader(rep.files.leaderboard_full_csv.open(encoding="utf-8")))
    assert full == rep.layout.columns and len(full) > 4 * len(header) and set(header) - set(full) == {f"{P}_pm_withheld"}
    # every headline pattern is documented in docs/cli.md, in order
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text[text.index("### Headline columns"):]
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", section.split("\n### ")[0], flags=re.M)
    assert rows == [(name, meaning) for name, meaning in headline_column_docs()]


def test_pm_withheld_where_the_capability_side_is_too_small(three):
    _, rep = three
    comma = next(r for r in rep.report.results if r.model == COMMA)
    iv = comma.pm[("fmr", "specific")]
    assert iv.estimate == 1.0 and "0 prompt(s) with an event" in iv.withheld  # prefix FMR 0: c has no event
    assert comma.pm[("als", "specific")].withheld is None  # every prefix prompt has a span
    head = next(r for r in _csv(rep.files.leaderboard_csv) if r["model"] == COMMA)
    # withheld has its own mark, never undefined's empty cell; its ends are empty
    assert head[f"{P}_pm_fmr_specific"] == "withheld" and head[f"{P}_pm_fmr_specific_low"] == ""
    assert "PM fmr specific" in head[f"{P}_pm_withheld"] and "fewer than 5" in head[f"{P}_pm_withheld"]
    assert head[f"{P}_prefix_fmr"] == "0" and float(head[f"{P}_specific_fmr"]) == 0.01  # the levels stay
    full = next(r for r in _csv(rep.files.leaderboard_full_csv) if r["model"] == COMMA)
    assert full[f"{P}_pm_fmr_specific"] == "1" and "fewer than 5" in full[f"{P}_pm_fmr_specific_withheld"]
    assert _md_table_cell(rep.files.leaderboard_md.read_text(), "PM FMR specific", f"| {COMMA}") == "withheld"
    stage3 = next(r for r in _csv(rep.files.leaderboard_csv) if r["revision"] == "stage3")
    assert stage3[f"{P}_pm_withheld"] == "" and round(float(stage3[f"{P}_pm_nvr_generic"]), 3) == 0.023


def test_withheld_and_undefined_each_have_a_legend_line(three, no_documents_report):
    _, rep = three
    legend = mark_legend()
    assert legend.startswith("- = undefined") and "withheld = PM withheld" in legend
    assert legend in rep.files.leaderboard_md.read_text()
    buf = io.StringIO()
    print_summary(rep.report, rep.files, Console(file=buf, width=250, color_system=None))
    assert " ".join(legend.split()) in " ".join(buf.getvalue().split())
    doc = json.loads(rep.files.leaderboard_json.read_text())
    assert doc["marks"]["undefined"].startswith("null = undefined") and "`..._withheld`" in doc["marks"]["withheld"]
    assert "withheld = PM withheld" in rep.files.leaderboard_html.read_text()


def test_a_withheld_pm_is_not_compared_and_every_output_says_why(three):
    """COMMA's PM FMR is withheld (prefix FMR 0): its comparisons carry no difference, no p-value, the reason."""
    _, rep = three
    rows = json.loads(rep.files.comparisons_json.read_text())
    comma = [r for r in rows if COMMA in (r["model_a"], r["model_b"]) and r["metric"] == "pm_fmr"]
    assert comma and all(r["diff"] is None and r["low"] is None and r["p_value"] is None and not r["significant"]
                         and f"PM of {COMMA} withheld (capability (prefix) side has 0 prompt(s)" in r["withheld"]
                         for r in comma)
    stages = [r for r in rows if COMMA not in (r["model_a"], r["model_b"]) and r["metric"] == "pm_fmr"]
    assert stages and all(r["withheld"] == "" and r["diff"] is not None for r in stages)
    assert rows[0]["adjusted_over"] == sum(r["p_value"] is not None for r in rows)
    line = (f"vs {COMMA} on dynaword: PM FMR generic, PM FMR (rare) generic, PM FMR20 generic, PM FMR specific, "
            f"PM FMR (rare) specific, PM FMR20 specific not compared: PM of {COMMA} withheld")
    assert line in rep.files.leaderboard_md.read_text()
    assert line in html.unescape(rep.files.leaderboard_html.read_text())
    buf = io.StringIO()
    print_summary(rep.report, rep.files, Console(file=buf, width=400, color_system=None))
    assert "not compared: " in buf.getvalue() and line in " ".join(buf.getvalue().split())
    shown = [r for r in shown_comparisons(rep.report.comparisons) if COMMA in (r.model_a, r.model_b)]
    assert shown and all(r.metric != "pm_fmr" for r in shown)


def test_interval_methods_written(three):
    _, rep = three
    doc = json.loads(rep.files.leaderboard_json.read_text())
    methods = next(m for m in doc["interval_methods"] if m["revision"] == "stage3")["methods"]
    assert methods[f"{P}_prefix_fmr"] == "wilson-modified"
    assert methods[f"{P}_prefix_nvr"] == "bootstrap-expanded-percentile"
    assert methods[f"{P}_pm_fmr_generic"] == "bounds-propagated"  # p = 0 in every resample


# --- paired comparisons --------------------------------------------------------------------------------

def test_comparisons_written_everywhere(three):
    _, rep = three
    rows = json.loads(rep.files.comparisons_json.read_text())
    assert {"model_a", "model_b", "corpus", "setting", "metric", "diff", "low", "high", "significant",
            "method"} <= set(rows[0])
    pairs = {(r["revision_a"], r["model_b"], r["revision_b"]) for r in rows}
    assert pairs == {("stage1", DFM, "stage3"), ("stage1", COMMA, ""), ("stage3", COMMA, "")}
    s1s3 = next(r for r in rows if (r["revision_a"], r["revision_b"], r["setting"], r["metric"])
                == ("stage1", "stage3", "prefix", "fmr"))
    assert s1s3["diff"] == pytest.approx(0.05 - 0.08) and s1s3["paired"]
    assert s1s3["low"] < s1s3["diff"] < s1s3["high"]
    assert len(_csv(rep.files.comparisons_csv)) == len(rows)
    md = rep.files.leaderboard_md.read_text()
    assert "## Paired comparisons" in md and "A - B [95%]" in md
    # two checkpoints and a second model: every row also carries the flag adjusted for the number of rows
    tested = [r for r in rows if r["p_value"] is not None]
    assert tested and all(r["adjustment"] == "benjamini-hochberg" and r["adjusted_over"] == len(tested)
                          and r["p_adjusted"] >= r["p_value"] for r in tested)
    assert all(r["significant"] or not r["significant_adjusted"] for r in rows)
    # 300 resamples: no p-value is below 2/301, too coarse for hundreds of rows to survive the adjustment
    assert sum(r["significant_adjusted"] for r in rows) <= sum(r["significant"] for r in rows)
    assert f"adjusting for the {len(tested)} comparisons" in md and "benjamini-hochberg" in md
    assert "| significant | significant (adjusted) |" in md
    page = rep.files.leaderboard_html.read_text()
    assert "significant (adjusted)" in page and f"benjamini-hochberg over {len(tested)} comparisons" in page
    buf = io.StringIO()
    print_summary(rep.report, rep.files, Console(file=buf, width=250, color_system=None))
    assert "Paired comparisons" in buf.getvalue()


def test_propme_compare_and_its_refusal(three, tmp_path, capsys):
    runs, _ = three
    assert main(["compare", str(runs[0]), str(runs[1]), "--out", str(tmp_path / "cmp"), "--bootstrap", "100"]) == 0
    out = capsys.readouterr().out
    assert "Paired comparisons" in out and (tmp_path / "cmp" / "comparisons.json").is_file()
    other = write_run(tmp_path / "other", COMMA, "", reference_settings(), prompt_prefix="x").parent
    assert main(["compare", str(runs[0]), str(other), "--out", str(tmp_path / "cmp2"), "--bootstrap", "100"]) == 2
    err = capsys.readouterr().err
    assert "nothing to compare on shared prompts" in err and "prompt sets" in err


def test_compare_of_a_smaller_prompt_set_for_one_setting_says_the_sets_differ(tmp_path, cli_run):
    """B ran 60 of A's 100 generic prompts and all of its prefix prompts: the prompt sets differ, said
    with their counts; B is reported whole (its PM from its own prefix run), nothing called missing."""
    a = write_run(tmp_path / "a", DFM, "", stage1_settings()).parent
    settings = stage1_settings()
    settings["generic"] = settings["generic"][:60]
    b = write_run(tmp_path / "b", COMMA, "", settings).parent
    code, _, err = cli_run("compare", a, b, "--out", tmp_path / "cmp", "--bootstrap", 100)
    assert code == 2 and "nothing to compare on shared prompts" in err
    assert "different generic prompt sets (100 and 60 prompts, 60 in common)" in " ".join(err.split())
    assert "missing" not in err
    rep = make_report(ReportRequest([a, b], tmp_path / "rep", bootstrap=50, plots=False, html=False, separate=True))
    pm = {r.model: r.pm for r in rep.report.results}
    assert set(pm) == {DFM, COMMA} and all(pm.values())
