"""leaderboard.html (`report/leaderboard_page.py`): columns read from their names, text escaped, undefined
shown as '-' and withheld as its own mark, a headline view per corpus with a legend per metric, the rest and
the comparisons not significant behind toggles, and in headless Chromium: no script error, a click on a
head sorts, the selects filter, the headline of four propensity settings fits the window."""
from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from propme_metrics.metrics import registry
from propme_metrics.prompts.settings import SETTINGS
from propme_metrics.report.columns import headline_view_for
from propme_metrics.report.leaderboard_page import describe_column, page_view, render_page
from propme_metrics.report.request import ReportRequest
from support.reports import make_report
from support.runs import DATE1, DATE2, DFM, XSS, reference_settings, stage1_settings, write_run

COLUMNS = ["model", "revision", "propme_a_x_pm_fmr_generic", "propme_a_x_pm_fmr_generic_low",
           "propme_a_x_pm_fmr_generic_high", "propme_b_pm_nvr_specific", "propme_b_prefix_fmr_rare",
           "propme_b_prefix_fmr_rare_low", "propme_b_prefix_fmr_rare_high", "propme_b_prefix_als"]
#: model -> (PM FMR generic on corpus a_x with interval, PM NVR specific on b, prefix FMR-rare on b, prefix ALS on b)
VALUES = {"m-low": (0.1, 0.05, 0.2, 0.3, 0.5, 12.0), "m-high": (0.7, 0.5, 0.9, None, 0.1, 30.0),
          XSS: (0.4, 0.2, 0.6, 0.6, 0.2, 20.0), "m-undef": (None, None, None, 0.1, None, None)}


def _rows() -> list[dict]:
    rows = []
    for model, (pm, lo, hi, nvr, rare, als) in VALUES.items():
        rows.append({"model": model, "revision": "r1" if model == "m-low" else "",
                     "propme_a_x_pm_fmr_generic": pm, "propme_a_x_pm_fmr_generic_low": lo,
                     "propme_a_x_pm_fmr_generic_high": hi, "propme_b_pm_nvr_specific": nvr,
                     "propme_b_prefix_fmr_rare": rare, "propme_b_prefix_fmr_rare_low": None if rare is None else 0.0,
                     "propme_b_prefix_fmr_rare_high": None if rare is None else 0.7, "propme_b_prefix_als": als})
    return rows


COMPARISONS = [
    {"model_a": "m-high", "model_b": "m-low", "corpus": "a_x", "setting": "generic", "metric": "pm_fmr",
     "diff": 0.6, "low": 0.3, "high": 0.8, "significant": True, "method": "paired_bootstrap"},
    {"model_a": XSS, "model_b": "m-low", "corpus": "b", "setting": "specific", "metric": "pm_nvr",
     "diff": 0.3, "low": -0.1, "high": 0.5, "significant": False, "method": "paired_bootstrap"},
]


def test_columns_are_read_from_their_names():
    pm = describe_column("propme_a_x_pm_fmr_rare_minimal_cue")
    assert (pm.corpus, pm.setting, pm.metric, pm.pm) == ("a_x", "minimal_cue", "fmr_rare", True)
    base = describe_column("propme_dyna_word_prefix_fmr_rare")
    assert (base.corpus, base.setting, base.metric, base.pm) == ("dyna_word", "prefix", "fmr_rare", False)
    assert describe_column("propme_b_n_prefix") is None and describe_column("model") is None


def test_view_values_bars_and_escaping():
    view = page_view(_rows(), COLUMNS, COMPARISONS)
    assert [v.corpus for v in view.corpora] == ["a_x", "b"]
    a, b = (v.headline for v in view.corpora)  # per corpus a block per metric, in column order
    assert [(x.label, [c.name for c in x.table.columns]) for x in a] == [("FMR", ["propme_a_x_pm_fmr_generic"])]
    assert [(x.label, [c.name for c in x.table.columns]) for x in b] == [
        ("NVR", ["propme_b_pm_nvr_specific"]), ("FMR (rare)", ["propme_b_prefix_fmr_rare"]), ("ALS", ["propme_b_prefix_als"])]
    assert view.settings == ["generic", "specific", "prefix"]
    low = [x.table.rows[0].cells[0] for x in (*a, *b)]
    assert (low[0].text, low[0].ends) == ("0.1", ("0.05", "0.2"))
    assert (low[0].bar.left, low[0].bar.width, low[0].bar.mark) == (5.0, 15.0, 10.0)  # PM on a 0..1 scale
    assert low[3].bar.mark == pytest.approx(100 * 12 / 30)  # ALS: scaled to the largest value shown
    undef = a[0].table.rows[3].cells
    assert (undef[0].text, undef[0].sort, undef[0].bar) == ("-", "", None)  # undefined: '-', never 0
    rows = [dict(r, propme_b_index="idx-1" if r["model"] != "m-undef" else None) for r in _rows()]
    blocks = page_view(rows, [*COLUMNS, "propme_b_index"], COMPARISONS).corpora[1].headline
    text = blocks[-1].table
    assert blocks[-1].label == "other" and text.columns[0].kind == "text" and blocks[0].table.columns[0].kind == "num"
    assert [r.cells[0].text for r in text.rows] == ["idx-1", "idx-1", "idx-1", "-"]  # text as text, never a number
    page = render_page(_rows(), COLUMNS, COMPARISONS)
    assert XSS not in page and html_lib.escape(XSS, quote=True) in page
    assert page.count('href="report.html#pm"') == 2 * len(VALUES)  # from each corpus' first block
    assert 'href="report.html' not in render_page(_rows(), COLUMNS, COMPARISONS, report_href=None)
    assert "http:" not in page and "https:" not in page and " src=" not in page  # nothing from the network


def test_withheld_is_its_own_mark_and_every_metric_has_its_legend_line():
    why = "capability (prefix) side has 2 prompt(s) with an event, fewer than 5: too few to carry a ratio"
    rows = [dict(r, propme_a_x_pm_fmr_generic_withheld=why if r["model"] == "m-high" else None) for r in _rows()]
    view = page_view(rows, COLUMNS, COMPARISONS)
    cells = {r.model: r.cells[0] for r in view.corpora[0].headline[0].table.rows}
    assert (cells["m-high"].text, cells["m-high"].sort, cells["m-high"].bar, cells["m-high"].title) == (
        "withheld", "", None, why)  # not its value 0.7, not undefined's '-'
    assert cells["m-undef"].text == "-" and cells["m-low"].text == "0.1"
    assert view.corpora[0].withheld == [f"m-high: PM FMR generic: {why}"]
    page = render_page(rows, COLUMNS, COMPARISONS)
    assert "- = undefined: nothing to compute it from" in page and "withheld = PM withheld: its capability" in page
    # one line per metric shown, in the registry's own words, and PM's
    assert [x.label for x in view.corpora[1].headline] == ["NVR", "FMR (rare)", "ALS"]
    for x in view.corpora[1].headline:
        spec = next(m for m in registry.METRICS if m.label == x.label)
        assert x.legend == spec.description and f"<b>{x.label}</b>: {html_lib.escape(x.legend, quote=True)}" in page
    assert "PM = p / (p + c) of a metric" in page


def test_columns_beyond_the_headline_and_comparisons_not_significant_are_behind_toggles():
    rows = [dict(r, propme_b_generic_fmr=0.2, propme_b_generic_fmr_low=0.1, propme_b_generic_fmr_high=0.3,
                 propme_b_pm_als_generic=0.4) for r in _rows()]
    view = page_view(rows, COLUMNS, COMPARISONS)
    more = dict(view.corpora[1].more)
    assert list(more) == ["PM", "base metrics"]
    assert [c.head for c in more["PM"].columns] == ["PM ALS"] and [c.head for c in more["base metrics"].columns] == ["FMR"]
    assert [(r.model, r.setting, r.cells[0].text) for r in more["base metrics"].rows][:2] == [
        ("m-low", "generic", "0.2"), ("m-high", "generic", "0.2")]
    assert [label for label, _ in view.corpora[1].more_legend] == ["PM", "FMR", "ALS"]
    assert [c.metric for c in view.significant] == ["PM FMR"] and [c.metric for c in view.other_comparisons] == ["PM NVR"]
    page = render_page(rows, COLUMNS, COMPARISONS)
    folded = page.split("<details")
    assert len(folded) == 3 and 'id="compare-rest"' in folded[2] and 'id="compare"' not in folded[2]
    assert "every PM and base metric of b" in folded[1]


def test_a_withheld_pm_is_not_compared_and_the_page_says_why():
    withheld = {"model_a": "m-high", "model_b": "m-low", "revision_a": "", "revision_b": "r1", "corpus": "b",
                "setting": "specific", "metric": "pm_fmr", "diff": None, "low": None, "high": None,
                "significant": False, "method": "", "withheld": "PM of m-high withheld (too few)"}
    view = page_view(_rows(), COLUMNS, [*COMPARISONS, withheld])
    assert len(view.comparisons) == len(COMPARISONS)
    assert view.not_compared == ["m-high vs m-low @ r1 on b: PM FMR specific not compared: PM of m-high withheld (too few)"]
    assert "PM FMR specific not compared" in render_page(_rows(), COLUMNS, [*COMPARISONS, withheld])


def test_report_writes_the_page(tmp_path):
    runs = [write_run(tmp_path / "s1", DFM, "stage1", stage1_settings(), date=DATE1).parent,
            write_run(tmp_path / "s3", DFM, "stage3", reference_settings(), date=DATE2).parent]
    rep = make_report(ReportRequest(runs, tmp_path / "report", bootstrap=100, plots=False))
    page = (tmp_path / "report" / "leaderboard.html").read_text(encoding="utf-8")
    headline = page.split('<section class="corpus"')[1].split("<details")[0]
    assert headline.count(f"<td data-v=\"{DFM}\"") == 2 * 4 and "stage1" in headline and "stage3" in headline
    # the headline view: capability and PM of NVR, FMR, FMR (rare) per propensity setting, prefix extraction
    heads = re.findall(r'title="(propme_[^"]+)"', headline)
    view = headline_view_for("dynaword", ["generic", "specific", "prefix"], rep.report.pm_metrics)
    assert heads == [c for c in view if not c.endswith(("_low", "_high"))]
    assert heads == [f"propme_dynaword_{c}" for m in ("nvr", "fmr", "fmr_rare")
                     for c in (f"prefix_{m}", f"pm_{m}_generic", f"pm_{m}_specific")] + ["propme_dynaword_prefix_extraction"]
    more = page.split('<details class="more">')[1].split("</details>")[0]
    assert more.count('data-kind="more"') == 2 and 'data-setting="specific"' in more and "PM ALS" in more
    assert "leaderboard.html" in json.loads((rep.files.out / "propme-report-files.json").read_text())["files"]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run_in_browser(page: str, probe: str, tmp_path: Path, width: int = 1000) -> dict:
    """The page with an error catcher first and `probe` last, run by headless Chromium; the probe's JSON."""
    catcher = ("<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push("
               "String(e.message))});var __ce=console.error;console.error=function(){window.__errors.push("
               "Array.prototype.join.call(arguments,' '));__ce.apply(console,arguments)};</script>")
    page = page.replace("<head>", "<head>" + catcher, 1).replace("</body>", "<script>" + probe + "</script></body>")
    path = tmp_path / "probed.html"
    path.write_text(page, encoding="utf-8")
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900", "--dump-dom", path.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(html_lib.unescape(found.group(1)))


PROBE = """
function models(t) { return Array.prototype.map.call(t.querySelectorAll("tbody tr"),
  function (tr) { return tr.cells[0].getAttribute("data-v"); }); }
function shown(sel) { return Array.prototype.filter.call(document.querySelectorAll(sel),
  function (el) { return el.checkVisibility(); }); }  // false inside a closed <details> or a hidden element
function shownHeads() { return shown("table.board[data-kind=headline] th[data-corpus]").map(
  function (th) { return th.getAttribute("title"); }); }
var boards = document.querySelectorAll("table.board[data-kind=headline]");
var a = boards[0];  // corpus a_x: its one block, PM FMR
var out = {initial: models(a), tables: boards.length};
var pm = a.querySelector('th[title="propme_a_x_pm_fmr_generic"]');
pm.click(); out.asc = models(a);
pm.click(); out.desc = models(a);
a.querySelector('th[data-col="0"]').click(); out.byName = models(a);
out.foldedComparisons = shown(".compare tbody tr").length; out.more = shown("table.board[data-kind=more]").length;
document.querySelectorAll("details").forEach(function (d) { d.open = true; });
out.openComparisons = shown(".compare tbody tr").length; out.openMore = shown("table.board[data-kind=more]").length;
var corpus = document.getElementById("corpus-filter"), setting = document.getElementById("setting-filter");
corpus.value = "b"; corpus.dispatchEvent(new Event("change"));
out.corpusB = shownHeads(); out.corpusBComparisons = shown(".compare tbody tr").length;
setting.value = "prefix"; setting.dispatchEvent(new Event("change")); out.bPrefix = shownHeads();
out.bPrefixMoreRows = shown("table.board[data-kind=more] tbody tr").map(function (tr) { return tr.cells[2].textContent; });
corpus.value = ""; corpus.dispatchEvent(new Event("change"));
setting.value = ""; setting.dispatchEvent(new Event("change")); out.reset = shownHeads();
out.overflow = Array.prototype.map.call(document.querySelectorAll("section.corpus > .scroll"),
  function (d) { return d.scrollWidth - d.clientWidth; });
out.errors = window.__errors;
var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
"""


def test_sort_and_filter_in_a_browser(tmp_path):
    if _chromium() is None:
        pytest.skip("no Chromium: install Debian's chromium package (the CI script does)")
    rows = [dict(r, propme_b_generic_fmr=0.2, propme_b_prefix_fmr=0.1) for r in _rows()]
    result = _run_in_browser(render_page(rows, COLUMNS, COMPARISONS), PROBE, tmp_path)
    assert result["errors"] == []
    assert result["tables"] == 1 + 3 and result["initial"] == list(VALUES)
    # the independent expectation: PM FMR generic ascending, the undefined one last either way
    by_pm = sorted((v[0], m) for m, v in VALUES.items() if v[0] is not None)
    assert result["asc"] == [m for _, m in by_pm] + ["m-undef"]
    assert result["desc"] == [m for _, m in reversed(by_pm)] + ["m-undef"]
    assert result["byName"] == sorted(VALUES)
    # folded: the significant comparison and no table behind a toggle; opened: all of them
    assert (result["foldedComparisons"], result["more"]) == (1, 0)
    assert (result["openComparisons"], result["openMore"]) == (2, 1)
    assert result["corpusB"] == ["propme_b_pm_nvr_specific", "propme_b_prefix_fmr_rare", "propme_b_prefix_als"]
    assert result["corpusBComparisons"] == 1
    assert result["bPrefix"] == ["propme_b_prefix_fmr_rare", "propme_b_prefix_als"]
    assert result["bPrefixMoreRows"] == ["prefix"] * len(VALUES)
    assert len(result["reset"]) == 4


def test_the_headline_of_four_propensity_settings_fits_the_window(tmp_path):
    """All four propensity settings and the default PM metrics: the headline view needs no sideways scroll
    in a 1000-pixel window (the page of every headline column needed about three)."""
    if _chromium() is None:
        pytest.skip("no Chromium: install Debian's chromium package (the CI script does)")
    columns = ["model", "revision", *headline_columns_of_all_settings()]
    rows = []
    for k in range(4):
        row = {"model": f"organisation-{k}/a-rather-long-model-name-7b", "revision": f"step{k}000"}
        for c in columns[2:]:
            row[c] = 0.1 + 0.2 * k if not c.endswith(("_low", "_high")) else (0.05 if c.endswith("_low") else 0.9)
        rows.append(row)
    probe = PROBE.split("var boards")[0] + """var out = {overflow: Array.prototype.map.call(
  document.querySelectorAll("section.corpus > .scroll"), function (d) { return d.scrollWidth - d.clientWidth; }),
  errors: window.__errors, width: window.innerWidth};
var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);"""
    result = _run_in_browser(render_page(rows, columns), probe, tmp_path)
    assert result["errors"] == [] and result["width"] == 1000
    assert result["overflow"] == [0] * 4  # NVR, FMR, FMR (rare), extraction


def headline_columns_of_all_settings() -> list[str]:
    return headline_view_for("dynaword", list(SETTINGS), registry.DEFAULT_PM_METRICS)


def test_screenshot_not_blank(tmp_path):
    if _chromium() is None:
        pytest.skip("no Chromium: install Debian's chromium package (the CI script does)")
    page = tmp_path / "leaderboard.html"
    page.write_text(render_page(_rows(), COLUMNS, COMPARISONS), encoding="utf-8")
    png = tmp_path / "page.png"
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1000,700",
           page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert png.exists(), proc.stderr[-2000:]
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    assert img.shape[:2] == (700, 1000) and img[..., :3].reshape(-1, 3).var(axis=0).sum() > 1e-3
