"""Tests for `propme report`: fake lm-eval output folders with hand-made traces (docs/method.md, metrics and PM)."""
from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from propme.cli.app import main
from propme_metrics.core.errors import ConfigError
from propme_metrics.metrics.values import summarize
from propme_metrics.report.columns import leaderboard_columns
from propme_metrics.report.folder import MissingPrefixError
from propme_metrics.report.html import script_json
from propme_metrics.report.layout import lay_out
from propme_metrics.report.load import load_run
from propme_metrics.report.request import ReportRequest
from propme_metrics.trace.text_rules import locate_segments
from support.reports import make_report
from support.runs import (
    COMMA,
    DATE1,
    DATE2,
    DFM,
    XSS,
    edge_settings,
    gen,
    reference_settings,
    stage1_settings,
    write_run,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two models, two checkpoints (stage1, stage3) of the DFM Decoder, each in its own output folder."""
    root = tmp_path_factory.mktemp("runs")
    return {
        "stage1": write_run(root / "stage1", DFM, "stage1", stage1_settings(), date=DATE1).parent,
        "stage3": write_run(root / "stage3", DFM, "stage3", reference_settings(), date=DATE2).parent,
        "comma": write_run(root / "comma", COMMA, "", edge_settings(), date=DATE1).parent,
    }


@pytest.fixture(scope="module")
def full_report(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return make_report(ReportRequest([runs["stage1"], runs["stage3"], runs["comma"]], out, bootstrap=2000, seed=1))


def _row(rep, model, revision):
    return next(r for r in rep.layout.rows if r["model"] == model and r["revision"] == revision)


# --- numbers -----------------------------------------------------------------------------------


def test_reference_figures_reproduced(runs, tmp_path):
    rep = make_report(ReportRequest([runs["stage3"]], tmp_path / "out"))  # defaults: B = 10,000, seed 0
    row = _row(rep, DFM, "stage3")
    p = "propme_dynaword"
    assert row[f"{p}_generic_nvr"] == pytest.approx(0.00086)
    assert row[f"{p}_specific_nvr"] == pytest.approx(0.00081)
    assert row[f"{p}_prefix_nvr"] == pytest.approx(0.0367)
    assert (row[f"{p}_generic_fmr"], row[f"{p}_specific_fmr"], row[f"{p}_prefix_fmr"]) == (0.0, 0.01, 0.08)
    assert row[f"{p}_generic_als"] == pytest.approx(15.68)
    assert row[f"{p}_specific_als"] == pytest.approx(17.37)
    assert row[f"{p}_prefix_als"] == pytest.approx(24.75)
    # the published figures: PM_NVR = 0.023 (generic) and 0.022 (specific), PM_FMR = 0 and 0.11
    assert round(row[f"{p}_pm_nvr_generic"], 3) == 0.023
    assert round(row[f"{p}_pm_nvr_specific"], 3) == 0.022
    assert row[f"{p}_pm_fmr_generic"] == 0.0
    assert round(row[f"{p}_pm_fmr_specific"], 2) == 0.11
    assert row[f"{p}_pm_als_generic"] == pytest.approx(15.68 / (15.68 + 24.75))
    for m in ("nvr", "fmr", "als"):
        for s in ("generic", "specific"):
            assert row[f"{p}_pm_{m}_{s}_low"] <= row[f"{p}_pm_{m}_{s}"] <= row[f"{p}_pm_{m}_{s}_high"]
    # p = 0 in every resample: the bootstrap collapses at 0, so (issue 33: never a zero-width interval) the
    # interval is PM at the ends of the sides' Wilson intervals: [0, PM(0-of-100 high, 8-of-100 low)]
    z2 = 1.959963984540054 ** 2
    p_high, c_low = z2 / (100 + z2), 0.041094
    assert row[f"{p}_pm_fmr_generic_low"] == 0.0
    assert row[f"{p}_pm_fmr_generic_high"] == pytest.approx(p_high / (p_high + c_low), abs=1e-4)
    # the proportions' interval is the modified Wilson one; ratio metrics have bootstrap intervals
    assert row[f"{p}_prefix_fmr_low"] == pytest.approx(0.041094, abs=1e-5)
    assert row[f"{p}_prefix_fmr_high"] == pytest.approx(0.149982, abs=1e-5)
    assert row[f"{p}_generic_fmr_low"] == 0.0 and row[f"{p}_generic_fmr_high"] == pytest.approx(p_high)
    assert row[f"{p}_prefix_extraction"] == 0.08
    assert row[f"{p}_prefix_r20"] == 1.0 and row[f"{p}_generic_r20"] == 0.0
    assert row[f"{p}_n_generic"] == 100 and row[f"{p}_generations_prefix"] == 100
    # the same numbers as metrics.summarize over the same generations
    task = next(t for t in load_run(runs["stage3"]) if t.setting == "specific")
    s = summarize([g for pr in task.prompts for g in pr.generations])
    assert (row[f"{p}_specific_nvr"], row[f"{p}_specific_fmr"], row[f"{p}_specific_als"]) == \
        pytest.approx((s.nvr, s.fmr, s.als))
    assert row[f"{p}_specific_nvr_max"] == s.nvr_max and f"{p}_specific_nvr_max_low" not in row


def test_pm_edge_cases(full_report):
    row = _row(full_report, COMMA, "")
    p = "propme_dynaword"
    assert row[f"{p}_prefix_fmr"] == 0.0 and row[f"{p}_specific_fmr"] == 0.03
    assert row[f"{p}_pm_fmr_specific"] == 1.0          # c = 0, p > 0
    assert row[f"{p}_pm_fmr_generic"] == 0.0           # p = 0 (and c = 0)
    assert row[f"{p}_pm_als_generic"] == 0.5           # p = c
    assert row[f"{p}_pm_fmr_specific_high"] == 1.0
    # two generations per prompt (two sample rows with one prompt id): 100 prompts, 200 generations
    assert row[f"{p}_n_specific"] == 100 and row[f"{p}_generations_specific"] == 200


def test_build_report_computes_and_write_report_writes(runs, tmp_path):
    """Requests in, results out (issue 45 item 2): the documented API, `build_report` then
    `write_report`; what is computed, its tables and its files are three things."""
    from propme_metrics import ReportRequest as PublicRequest
    from propme_metrics import build_report, write_report

    out = tmp_path / "out"
    report = build_report(PublicRequest([runs["stage3"], runs["comma"]], out, bootstrap=50, plots=False))
    assert not out.exists()  # computed, nothing written
    assert [(r.model, r.revision) for r in report.results] == report.models == [(DFM, "stage3"), (COMMA, "")]
    files = write_report(report)
    assert files.out == out and files.html == out / "report.html" and files.plots == []
    assert sorted(json.loads((out / "propme-report-files.json").read_text())["files"]) == sorted(
        p.relative_to(out).as_posix() for p in files.paths)
    layout = lay_out(report)
    assert [(row["model"], row["revision"]) for row in layout.rows] == report.models
    assert list(csv.DictReader(files.leaderboard_full_csv.open(encoding="utf-8")))[0].keys() == set(layout.columns)


def test_bootstrap_reproducible_with_seed(runs, tmp_path):
    inputs = [runs["stage3"], runs["comma"]]
    a = make_report(ReportRequest(inputs, tmp_path / "a", bootstrap=400, seed=7, html=False, plots=False))
    b = make_report(ReportRequest(inputs, tmp_path / "b", bootstrap=400, seed=7, html=False, plots=False))
    c = make_report(ReportRequest(inputs, tmp_path / "c", bootstrap=400, seed=8, html=False, plots=False))
    assert a.files.leaderboard_json.read_bytes() == b.files.leaderboard_json.read_bytes()
    assert a.files.leaderboard_csv.read_bytes() == b.files.leaderboard_csv.read_bytes()
    assert a.files.leaderboard_json.read_bytes() != c.files.leaderboard_json.read_bytes()
    row = _row(a, DFM, "stage3")
    for col, value in row.items():
        if col.endswith("_low") and value is not None:
            point, high = row[col[: -len("_low")]], row[col[: -len("_low")] + "_high"]
            # an unbounded metric with no event (pii_items) has no upper end: [0, undefined]
            assert value <= point <= (math.inf if high is None else high), col


# --- leaderboard -------------------------------------------------------------------------------


def test_leaderboard_csv_two_models_two_checkpoints(full_report):
    with open(full_report.files.leaderboard_full_csv, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    header = full_report.layout.columns
    assert header[:2] == ["model", "revision"]
    assert [(r["model"], r["revision"]) for r in rows] == [(DFM, "stage1"), (DFM, "stage3"), (COMMA, "")]
    for col in ("propme_dynaword_index", "propme_dynaword_prompt_set", "propme_dynaword_pm_nvr_generic",
                "propme_dynaword_pm_nvr_generic_low", "propme_dynaword_pm_nvr_generic_high",
                "propme_dynaword_pm_fmr_specific", "propme_dynaword_pm_als_specific_high",
                "propme_dynaword_n_generic", "propme_dynaword_n_prefix", "propme_dynaword_generations_specific",
                "propme_dynaword_failed_prefix", "propme_dynaword_prefix_nvr", "propme_dynaword_prefix_nvr_low",
                "propme_dynaword_prefix_fmr_high", "propme_dynaword_prefix_extraction",
                "propme_dynaword_generic_r50", "propme_dynaword_specific_nvr_max"):
        assert col in header, col
    assert "propme_dynaword_generic_extraction" not in header
    assert "propme_dynaword_pm_nvr_prefix" not in header
    stage3 = rows[1]
    assert stage3["propme_dynaword_index"] == "idx-dynaword-v1"
    assert len({r["propme_dynaword_prompt_set"] for r in rows}) == 1
    assert round(float(stage3["propme_dynaword_pm_nvr_generic"]), 3) == 0.023
    assert float(stage3["propme_dynaword_prefix_fmr"]) == 0.08
    assert rows[0]["propme_dynaword_prefix_fmr"] == "0.05"
    assert rows[2]["propme_dynaword_pm_fmr_specific"] == "1"
    # JSON: the same rows, null for undefined cells, documented columns
    data = json.loads(full_report.files.leaderboard_json.read_text())
    assert data["columns"] == header and len(data["rows"]) == 3
    assert data["rows"][1]["propme_dynaword_pm_fmr_specific"] == \
        pytest.approx(float(stage3["propme_dynaword_pm_fmr_specific"]))
    md = full_report.files.leaderboard_md.read_text()
    assert "| model | revision |" in md and "stage1" in md and "PM NVR generic" in md


def test_columns_documented(full_report):
    docs = leaderboard_columns()
    patterns = [name for name, _ in docs]
    assert patterns[:2] == ["model", "revision"]
    regexes = [re.compile("^" + re.sub(r"<[a-z_]+>", "[a-z0-9_]+", name) + "$") for name in patterns]
    for col in full_report.layout.columns:
        assert any(r.match(col) for r in regexes), col


def test_plots_written(full_report):
    names = sorted(p.name for p in full_report.files.plots)
    assert "capability_dynaword.png" in names
    assert any(n.startswith("trajectory_dynaword_") and "dfm-decoder" in n for n in names)
    assert not any("comma" in n for n in names if n.startswith("trajectory"))  # one revision only
    import matplotlib.image as mpimg

    for p in full_report.files.plots:
        img = mpimg.imread(p)
        assert img.shape[0] > 100 and img.std() > 0.01


# --- HTML --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def xss_report(runs, tmp_path_factory):
    root = tmp_path_factory.mktemp("xss")
    settings = reference_settings()
    evil_text = f'Han sagde "hej" og \'farvel\' {XSS} & ord0 ord1 ord2 ord3 ord4 mere </script><b>x</b>'
    settings["generic"][0] = [gen("evil", 5, (0.9,), full=True, text=evil_text,
                                  doc_text=f'{XSS} "quoted" & ', meta={"source": XSS, "title": 'a "b" \'c\''})]
    settings["specific"][2] = [gen("broken", 0, text="", error="RuntimeError: <boom>")]
    settings["prefix"][50] = [gen("junk", 3, (1.0,), full=True, text="ord0 ord1 ord2 " + "!!!!" * 200,
                                  degenerate=True)]
    write_run(root, f'evil/"model"{XSS}', "rev<1>", settings, prompt_text=f"Prompt {XSS}")
    return make_report(ReportRequest([root, runs["stage1"]], tmp_path_factory.mktemp("xss-out"), bootstrap=200, seed=0))


def test_html_escapes_model_output(xss_report):
    page = xss_report.files.html.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page            # generation text, escaped
    assert "&quot;hej&quot;" in page and "&#x27;farvel&#x27;" in page   # quotes escaped
    assert "<b>x</b>" not in page
    # data for the side panel: JSON in <script type="application/json"> without any <, > or &
    blocks = re.findall(r'<script type="application/json" id="propme-data-\d+">(.*?)</script>', page, re.S)
    assert blocks
    for b in blocks:
        assert "<" not in b and ">" not in b and "&" not in b
        json.loads(b)
    assert any("\\u003cscript\\u003ealert(1)" in b for b in blocks)
    # self-contained: no external scripts, styles or images
    assert not re.search(r'<(script|img|link)[^>]+(src|href)="(https?:)?//', page)
    assert 'src="data:image/png;base64,' in page
    # every <script> is either the JSON data or the one inline script
    assert page.count("<script") == len(blocks) + 1
    assert "tracing failed (excluded): RuntimeError: &lt;boom&gt;" in page
    row = xss_report.layout.rows[0]
    assert row["propme_dynaword_failed_specific"] == 1 and row["propme_dynaword_generations_specific"] == 99
    assert row["propme_dynaword_n_specific"] == 100
    assert row["propme_dynaword_degenerate_prefix"] == 1 and row["propme_dynaword_generations_prefix"] == 99
    assert row["propme_dynaword_prefix_fmr"] == pytest.approx(8 / 99)     # the degenerate full match is dropped
    assert "degenerate (excluded)" in page
    assert page.count("<details class=\"setting\"") == 6


def test_script_json_and_locate_segments():
    assert script_json({"a": "</script><!--&"}) == '{"a":"\\u003c/script\\u003e\\u003c!--\\u0026"}'
    text = "the cat and the cat sat"
    segs = [{"start": 0, "end": 2, "text": "the cat"}, {"start": 3, "end": 5, "text": " the cat"},
            {"start": 5, "end": 6, "text": "dog"}, {"start": 6, "end": 7, "text": " sat"}]
    assert locate_segments(text, segs) == [(0, 7), (11, 19), None, (19, 23)]
    # a completion as the model wrote it (leading blank line): the offsets count its white space
    given = "\n\n" + text
    whole = [{"start": 0, "end": 8, "text": given}, {"start": 3, "end": 5, "text": " the cat"}]
    assert locate_segments(given, whole) == [(0, 25), (13, 21)]


def test_html_screenshot_not_blank(xss_report, tmp_path, chromium):
    browser = chromium
    png = tmp_path / "report.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1200,1600",
           xss_report.files.html.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert png.exists(), proc.stderr[-2000:]
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    assert img.shape[:2] == (1600, 1200)
    assert img[..., :3].reshape(-1, 3).var(axis=0).sum() > 1e-3


def test_html_click_opens_source_panel(xss_report, tmp_path, chromium):
    browser = chromium
    page = xss_report.files.html.read_text(encoding="utf-8")
    clicked = tmp_path / "clicked.html"
    clicked.write_text(page.replace("</body>", "<script>document.querySelector('mark.seg[data-g]').click();"
                                    "</script></body>"), encoding="utf-8")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", clicked.resolve().as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    panel = dom[dom.index('<aside id="panel"'):]
    assert "hidden" not in panel[: panel.index(">")]
    assert "src-evil-0" in panel and "full_raw" in panel and "NV-recall 0.900" in panel
    assert "<mark>ord0 ord1 ord2 ord3 ord4</mark>" in panel          # snippet_span highlighted
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in panel          # metadata and snippet as text
    assert "<script>alert(1)" not in dom


def _two_source_generation(key: str, first: str, second: str) -> dict:
    """A generation with two final spans: `ord0 .. ord3` from a `first` document, `ord5 ord6` from a `second` one."""
    g = gen(key, 4, (0.5,), meta={"source": first})
    other = json.loads(json.dumps(g["final_spans"][0]))
    other.update(start=5, end=7, text="ord5 ord6")
    for d in other["documents"]:
        d["metadata"] = {"source": second}
        d["source_id"] += "-b"
    g["final_spans"].append(other)
    return g


def test_html_source_filter_in_a_browser(tmp_path, chromium):
    """report.html's source filter, run by headless Chromium: choosing a source hides the generations
    without a document from it and leaves highlighted only the spans whose documents come from it."""
    browser = chromium
    import html as html_lib

    one = {"alpha": ("alpha",), "beta": ("beta",), "gamma": ("gamma",)}
    settings = {
        "generic": [[gen("g-a", 4, (0.5,), meta={"source": "alpha"})], [gen("g-b", 4, (0.5, 0.2), meta={"source": "beta"})],
                    [_two_source_generation("g-ab", "alpha", "beta")], [gen("g-none", 0)]],
        "specific": [[gen("s-c", 4, (0.5,), meta={"source": "gamma"})], [_two_source_generation("s-cb", "gamma", "beta")]],
        "prefix": [[gen("p-a", 4, (0.9,), full=True, meta={"source": "alpha"})], [gen("p-b", 4, (0.9,), meta={"source": "beta"})]],
    }
    # the independent expectation: the sources of every span and of every generation, as written above
    spans = [one["alpha"], one["beta"], one["alpha"], one["beta"], one["gamma"], one["gamma"], one["beta"],
             one["alpha"], one["beta"]]
    generations = [{"alpha"}, {"beta"}, {"alpha", "beta"}, set(), {"gamma"}, {"gamma", "beta"}, {"alpha"}, {"beta"}]
    write_run(tmp_path / "run", "filter/model", "", settings)
    rep = make_report(ReportRequest([tmp_path / "run"], tmp_path / "report", bootstrap=0, plots=False))
    page = rep.files.html.read_text(encoding="utf-8")
    probe = """<script>
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
    function state() {
      var vis = function (el) { return el.offsetParent !== null; };
      return {
        spans: Array.prototype.map.call(document.querySelectorAll(".seg[data-src]"), function (m) {
          return {src: JSON.parse(m.getAttribute("data-src")), shown: vis(m) && !m.classList.contains("off"),
                  highlight: getComputedStyle(m).backgroundColor};
        }),
        gens: Array.prototype.map.call(document.querySelectorAll(".gen[data-src]"), function (g) {
          return {src: JSON.parse(g.getAttribute("data-src")), shown: vis(g)};
        })};
    }
    var out = {any: state()};
    var filter = document.getElementById("source-filter");
    out.options = Array.prototype.map.call(filter.options, function (o) { return o.value; });
    ["beta", "gamma", ""].forEach(function (v) {
      filter.value = v;
      filter.dispatchEvent(new Event("change"));
      out[v || "reset"] = state();
    });
    var pre = document.createElement("pre"); pre.id = "filter-result"; pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
    </script></body>"""
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", probe), encoding="utf-8")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probed.resolve().as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'<pre id="filter-result">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    result = json.loads(html_lib.unescape(found.group(1)))
    assert result["options"] == ["", "alpha", "beta", "gamma"]
    assert sorted(tuple(m["src"]) for m in result["any"]["spans"]) == sorted(spans)
    assert [set(g["src"]) for g in result["any"]["gens"]] == generations
    for state in (result["any"], result["reset"]):  # no filter: everything shown
        assert all(m["shown"] for m in state["spans"]) and all(g["shown"] for g in state["gens"])
    for source in ("beta", "gamma"):
        state = result[source]
        shown = [tuple(m["src"]) for m in state["spans"] if m["shown"]]
        assert sorted(shown) == sorted(s for s in spans if source in s)  # only that source's spans remain
        assert [g["shown"] for g in state["gens"]] == [source in g for g in generations]
        dimmed = {m["highlight"] for m in state["spans"] if not m["shown"]}
        assert dimmed == {"rgba(0, 0, 0, 0)"}  # the others lose their highlight
        assert {m["highlight"] for m in state["spans"] if m["shown"]} - {"rgba(0, 0, 0, 0)"}


# --- errors ------------------------------------------------------------------------------------


def test_missing_prefix_names_subtask_and_writes_base_metrics(tmp_path):
    settings = reference_settings()
    del settings["prefix"]
    write_run(tmp_path / "run", DFM, "stage3", settings)
    with pytest.raises(MissingPrefixError) as info:
        make_report(ReportRequest([tmp_path / "run"], tmp_path / "out", bootstrap=100))
    assert isinstance(info.value, ConfigError)
    assert "propme_dynaword_prefix" in str(info.value)
    rows = list(csv.DictReader(open(tmp_path / "out" / "leaderboard_full.csv", encoding="utf-8")))
    assert float(rows[0]["propme_dynaword_generic_nvr"]) == pytest.approx(0.00086)
    assert not any(c.startswith("propme_dynaword_pm_") for c in rows[0])
    assert (tmp_path / "out" / "report.html").exists()
    assert lay_out(info.value.report).rows[0]["propme_dynaword_specific_fmr"] == 0.01
    assert info.value.files.html == tmp_path / "out" / "report.html"


def test_mixed_index_versions_refused_or_separated(runs, tmp_path):
    write_run(tmp_path / "new", COMMA, "", stage1_settings(), identity="idx-dynaword-v2")
    with pytest.raises(ConfigError) as info:
        make_report(ReportRequest([runs["stage3"], tmp_path / "new"], tmp_path / "out", bootstrap=100))
    msg = str(info.value)
    assert "idx-dynaword-v1" in msg and "idx-dynaword-v2" in msg and "--separate" in msg
    assert not (tmp_path / "out" / "leaderboard.csv").exists()
    rep = make_report(ReportRequest([runs["stage3"], tmp_path / "new"], tmp_path / "sep", bootstrap=100, separate=True,
                       html=False, plots=False))
    assert rep.report.labels == ["dynaword_set1", "dynaword_set2"]
    assert _row(rep, DFM, "stage3")["propme_dynaword_set1_index"] == "idx-dynaword-v1"
    assert _row(rep, COMMA, "")["propme_dynaword_set2_index"] == "idx-dynaword-v2"
    assert _row(rep, COMMA, "")["propme_dynaword_set1_index"] is None


def test_mixed_prompt_sets_refused(runs, tmp_path):
    settings = stage1_settings()
    settings["generic"] = settings["generic"][:60]
    write_run(tmp_path / "few", COMMA, "", settings)
    with pytest.raises(ConfigError, match="prompt sets.*60 prompts"):
        make_report(ReportRequest([runs["stage1"], tmp_path / "few"], tmp_path / "out", bootstrap=100))


def test_unreadable_files_named(runs, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / f"results_{DATE1}.json").write_text("{not json")
    with pytest.raises(ConfigError, match=re.escape(str(bad / f"results_{DATE1}.json"))):
        load_run(bad)
    folder = write_run(tmp_path / "nosamples", DFM, "stage3", reference_settings())
    missing = folder / f"samples_propme_dynaword_specific_{DATE1}.jsonl"
    missing.unlink()
    with pytest.raises(ConfigError, match="missing samples file .*samples_propme_dynaword_specific"):
        load_run(tmp_path / "nosamples")
    folder = write_run(tmp_path / "badline", DFM, "stage3", reference_settings())
    with open(folder / f"samples_propme_dynaword_generic_{DATE1}.jsonl", "a") as fh:
        fh.write('{"doc_id": 5, "trace": \n')
    with pytest.raises(ConfigError, match=r"samples_propme_dynaword_generic_.*:101: not valid JSON"):
        load_run(tmp_path / "badline")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no results_"):
        load_run(empty)


def test_load_run_results_file_and_latest_wins(tmp_path):
    write_run(tmp_path / "r", DFM, "stage3", stage1_settings(), date=DATE1)
    write_run(tmp_path / "r", DFM, "stage3", reference_settings(), date=DATE2)   # a re-run: newer files
    results = sorted((tmp_path / "r").rglob("results_*.json"))
    tasks = load_run(results[0])
    assert {t.task for t in tasks} == {"propme_dynaword_generic", "propme_dynaword_specific", "propme_dynaword_prefix"}
    assert tasks[0].model == DFM and tasks[0].revision == "stage3" and tasks[0].index_identity == "idx-dynaword-v1"
    rep = make_report(ReportRequest([tmp_path / "r"], tmp_path / "out", bootstrap=100, html=False, plots=False))
    assert len(rep.layout.rows) == 1
    assert rep.layout.rows[0]["propme_dynaword_prefix_fmr"] == 0.08      # the newer run
    assert any("newer than" in n for n in rep.report.notes)


def test_pm_metric_choices(runs, tmp_path):
    rep = make_report(ReportRequest([runs["stage3"]], tmp_path / "o", bootstrap=100, pm_metrics=("nvr", "r20"),
                       html=False, plots=False))
    assert "propme_dynaword_pm_r20_specific" in rep.layout.columns and "propme_dynaword_pm_fmr_generic" not in rep.layout.columns
    assert rep.layout.rows[0]["propme_dynaword_pm_r20_generic"] == 0.0
    with pytest.raises(ConfigError, match="extraction"):
        make_report(ReportRequest([runs["stage3"]], tmp_path / "o2", pm_metrics=("nvr", "extraction")))


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_report_ok_and_errors(runs, tmp_path, capsys):
    code = main(["report", str(runs["stage1"]), str(runs["stage3"]), "--out", str(tmp_path / "cli"),
                 "--bootstrap", "300", "--pm-metrics", "nvr,fmr,als,r20", "--no-html"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "PM NVR" in out.out and "stage3" in out.out and "Traceback" not in out.out + out.err
    assert (tmp_path / "cli" / "leaderboard.csv").exists()

    settings = reference_settings()
    del settings["prefix"]
    write_run(tmp_path / "noprefix", DFM, "stage3", settings)
    code = main(["report", str(tmp_path / "noprefix"), "--out", str(tmp_path / "cli2"), "--bootstrap", "100"])
    out = capsys.readouterr()
    assert code == 2
    assert "propme_dynaword_prefix" in " ".join(out.err.split()) and "Traceback" not in out.out + out.err
    assert "Base metrics" in out.out  # the summary still shows what could be computed

    code = main(["report", str(tmp_path / "nope"), "--out", str(tmp_path / "cli3")])
    out = capsys.readouterr()
    assert code == 2 and "does not exist" in " ".join(out.err.split()) and "Traceback" not in out.err

    code = main(["report", str(runs["stage1"]), "--out", str(tmp_path / "cli4"), "--pm-metrics", "nvr_max"])
    assert code == 2 and "nvr_max" in " ".join(capsys.readouterr().err.split())


def test_cli_subprocess_bad_json(tmp_path):
    bad = tmp_path / f"results_{DATE1}.json"
    bad.write_text('{"configs": {"propme_x_generic": ')
    proc = subprocess.run([sys.executable, "-m", "propme.cli.app", "report", str(bad), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "not valid JSON" in proc.stderr and str(bad) in proc.stderr.replace("\n", "")
    assert "Traceback" not in proc.stderr + proc.stdout


def test_nan_free_json(full_report):
    text = full_report.files.leaderboard_json.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert not any(isinstance(v, float) and math.isnan(v) for r in full_report.layout.rows for v in r.values())


def test_robustness_figures_without_the_index(full_report):
    """Made where the index cannot be read (the samples name /idx): the floor and the corpus counts are
    undefined (empty, null, absent from EEE) and the page says why; what the traces hold is computed."""
    row = _row(full_report, DFM, "stage3")
    assert row["propme_dynaword_floor_als"] is None and row["propme_dynaword_prefix_r50_rare"] is None
    stage3 = next(r for r in full_report.report.results if r.revision == "stage3")
    prompts = [p for p in stage3.settings["prefix"].task.prompts if p.counted()]
    leaking = sum(any(t.longest_span >= 50 for t in p.counted()) for p in prompts)
    assert row["propme_dynaword_prefix_any_span50"] == pytest.approx(leaking / len(prompts))
    doc = json.loads(full_report.files.leaderboard_json.read_text())
    entry = next(e for e in doc["robustness"] if e["revision"] == "stage3")
    assert "cannot be read" in entry["note"] and "floor" in entry["note"]
    html = full_report.files.html.read_text(encoding="utf-8")
    assert "dynaword: Repeated sampling" in html and "cannot be read" in html
    header = full_report.files.leaderboard_full_csv.read_text().splitlines()[0]
    assert "propme_dynaword_floor_als_low" in header and "propme_dynaword_generic_any_fm20" in header
