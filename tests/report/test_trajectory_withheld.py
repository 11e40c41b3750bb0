"""The checkpoint plot (trajectory_<corpus>_<model>.png) draws a withheld PM as the tables show it:
not as a value on the line (no point, no interval), but as a hollow marker with a legend note."""
from __future__ import annotations

import math

import pytest

import propme_metrics.report.plots as plots_module
from propme_metrics.metrics.pm import Interval
from propme_metrics.report.request import ReportRequest
from support.reports import make_report
from support.runs import DATE2, DFM, reference_settings, setting_prompts, write_run


def test_trajectory_points_leave_a_withheld_pm_off_the_line():
    shown = Interval(0.25, 0.1, 0.5)
    withheld = Interval(0.4, 0.2, 0.9, withheld="capability (prefix) side has 2 prompt(s) with an event")
    line, hollow = plots_module.trajectory_points([shown, withheld, None])
    assert line[0] == pytest.approx((0.25, 0.15, 0.25))  # value, error below, error above
    assert math.isnan(line[1][0]) and line[1][1:] == (0.0, 0.0)  # withheld: no point, no error bar
    assert math.isnan(line[2][0])  # not computed: nothing at all
    assert math.isnan(hollow[0]) and hollow[1] == 0.4 and math.isnan(hollow[2])


def test_trajectory_plot_draws_withheld_pm_hollow(tmp_path, monkeypatch):
    # revision "early": 2 prefix full matches of 100 (fewer than 5: PM FMR withheld); "late": 8 (shown)
    early = reference_settings()
    early["prefix"] = setting_prompts("prefix", 100, [(75, 25), (25, 24)], {**{i: 0.4 for i in range(8)}, 8: 0.47},
                                      {0, 1})
    runs = [write_run(tmp_path / "early", DFM, "early", early).parent,
            write_run(tmp_path / "late", DFM, "late", reference_settings(), date=DATE2).parent]
    figures = {}
    real_save = plots_module.save

    def keep(fig, path):
        figures[path.name] = fig
        real_save(fig, path)

    monkeypatch.setattr(plots_module, "save", keep)
    rep = make_report(ReportRequest(runs, tmp_path / "rep", bootstrap=200, html=False))
    first, second = (r for r in rep.report.results if r.revision in ("early", "late"))
    assert first.revision == "early" and first.pm[("fmr", "specific")].withheld
    assert second.pm[("fmr", "specific")].withheld is None
    (name,) = [n for n in figures if n.startswith("trajectory_")]
    ax = figures[name].axes[0]
    line = {c.get_label(): c.lines[0].get_ydata() for c in ax.containers}
    # FMR specific: p = 1/100 (one specific full match), c = 2/100 early and 8/100 late, by hand
    early_pm, late_pm = 0.01 / (0.01 + 0.02), 0.01 / (0.01 + 0.08)
    assert math.isnan(line["PM FMR specific"][0]) and line["PM FMR specific"][1] == pytest.approx(late_pm)
    assert line["PM NVR generic"][0] == pytest.approx(first.pm[("nvr", "generic")].estimate)  # not withheld
    hollow = [ln for ln in ax.get_lines() if ln.get_markerfacecolor() == "none" and len(ln.get_xdata())]
    drawn = sorted((round(x), round(y, 9)) for ln in hollow for x, y in zip(ln.get_xdata(), ln.get_ydata())
                   if not math.isnan(y))  # (revision, value); x is dodged a little around the revision
    withheld = sorted((k, round(iv.estimate, 9)) for k, r in enumerate((first, second)) for iv in r.pm.values()
                      if iv.withheld)
    assert drawn == withheld and (0, round(early_pm, 9)) in drawn
    assert "hollow: PM withheld" in [t.get_text() for t in ax.get_legend().get_texts()]
