"""leaderboard.html (`report/leaderboard_page.py`): columns read from their names, text escaped, undefined
shown as '-', and in headless Chromium: no script error, a click on a head sorts, the selects filter."""
from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from propme_metrics.report.assemble import build_report
from propme_metrics.report.leaderboard_page import describe_column, page_view, render_page
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
    assert [c.name for c in view.columns] == ["propme_a_x_pm_fmr_generic", "propme_b_pm_nvr_specific",
                                              "propme_b_prefix_fmr_rare", "propme_b_prefix_als"]
    assert view.corpora == ["a_x", "b"] and view.settings == ["generic", "specific", "prefix"]
    low = view.rows[0].cells
    assert (low[0].text, low[0].ends) == ("0.1", ("0.05", "0.2"))
    assert (low[0].bar.left, low[0].bar.width, low[0].bar.mark) == (5.0, 15.0, 10.0)  # PM on a 0..1 scale
    assert low[3].bar.mark == pytest.approx(100 * 12 / 30)  # ALS: scaled to the largest value shown
    undef = view.rows[3].cells
    assert (undef[0].text, undef[0].sort, undef[0].bar) == ("-", "", None)  # undefined: '-', never 0
    rows = [dict(r, propme_b_index="idx-1" if r["model"] != "m-undef" else None) for r in _rows()]
    text = page_view(rows, [*COLUMNS, "propme_b_index"], COMPARISONS)
    assert text.columns[-1].kind == "text" and text.columns[0].kind == "num"
    assert [r.cells[-1].text for r in text.rows] == ["idx-1", "idx-1", "idx-1", "-"]  # text as text, never a number
    page = render_page(_rows(), COLUMNS, COMPARISONS)
    assert XSS not in page and html_lib.escape(XSS, quote=True) in page
    assert page.count('href="report.html#pm"') == len(VALUES)
    assert 'href="report.html' not in render_page(_rows(), COLUMNS, COMPARISONS, report_href=None)
    assert "http:" not in page and "https:" not in page and " src=" not in page  # nothing from the network


def test_report_writes_the_page(tmp_path):
    runs = [write_run(tmp_path / "s1", DFM, "stage1", stage1_settings(), date=DATE1).parent,
            write_run(tmp_path / "s3", DFM, "stage3", reference_settings(), date=DATE2).parent]
    rep = build_report(runs, tmp_path / "report", bootstrap=100, plots=False)
    page = (tmp_path / "report" / "leaderboard.html").read_text(encoding="utf-8")
    assert page.count(f"<td data-v=\"{DFM}\"") == 2 and "stage1" in page and "stage3" in page
    assert 'data-setting="specific"' in page and "PM FMR" in page
    assert "leaderboard.html" in json.loads((rep.out / "propme-report-files.json").read_text())["files"]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run_in_browser(page: str, probe: str, tmp_path: Path) -> dict:
    """The page with an error catcher first and `probe` last, run by headless Chromium; the probe's JSON."""
    catcher = ("<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push("
               "String(e.message))});var __ce=console.error;console.error=function(){window.__errors.push("
               "Array.prototype.join.call(arguments,' '));__ce.apply(console,arguments)};</script>")
    page = page.replace("<head>", "<head>" + catcher, 1).replace("</body>", "<script>" + probe + "</script></body>")
    path = tmp_path / "probed.html"
    path.write_text(page, encoding="utf-8")
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", path.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(html_lib.unescape(found.group(1)))


PROBE = """
function models() { return Array.prototype.map.call(document.querySelectorAll("#board tbody tr"),
  function (tr) { return tr.cells[0].getAttribute("data-v"); }); }
function shownHeads() { return Array.prototype.filter.call(document.querySelectorAll("#board th[data-corpus]"),
  function (th) { return th.offsetParent !== null; }).map(function (th) { return th.getAttribute("title"); }); }
function shownComparisons() { return Array.prototype.filter.call(document.querySelectorAll("#compare tbody tr"),
  function (tr) { return tr.offsetParent !== null; }).length; }
var out = {initial: models()};
var pm = document.querySelector('#board th[title="propme_a_x_pm_fmr_generic"]');
pm.click(); out.asc = models();
pm.click(); out.desc = models();
document.querySelector('#board th[data-col="0"]').click(); out.byName = models();
var corpus = document.getElementById("corpus-filter"), setting = document.getElementById("setting-filter");
corpus.value = "b"; corpus.dispatchEvent(new Event("change"));
out.corpusB = shownHeads(); out.corpusBComparisons = shownComparisons();
setting.value = "prefix"; setting.dispatchEvent(new Event("change")); out.bPrefix = shownHeads();
corpus.value = ""; corpus.dispatchEvent(new Event("change"));
setting.value = ""; setting.dispatchEvent(new Event("change")); out.reset = shownHeads();
out.errors = window.__errors;
var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
"""


def test_sort_and_filter_in_a_browser(tmp_path):
    if _chromium() is None:
        pytest.skip("no Chromium: install Debian's chromium package (the CI script does)")
    result = _run_in_browser(render_page(_rows(), COLUMNS, COMPARISONS), PROBE, tmp_path)
    assert result["errors"] == []
    assert result["initial"] == list(VALUES)
    # the independent expectation: PM FMR generic ascending, the undefined one last either way
    by_pm = sorted((v[0], m) for m, v in VALUES.items() if v[0] is not None)
    assert result["asc"] == [m for _, m in by_pm] + ["m-undef"]
    assert result["desc"] == [m for _, m in reversed(by_pm)] + ["m-undef"]
    assert result["byName"] == sorted(VALUES)
    assert result["corpusB"] == ["propme_b_pm_nvr_specific", "propme_b_prefix_fmr_rare", "propme_b_prefix_als"]
    assert result["corpusBComparisons"] == 1
    assert result["bPrefix"] == ["propme_b_prefix_fmr_rare", "propme_b_prefix_als"]
    assert len(result["reset"]) == 4


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
