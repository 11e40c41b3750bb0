"""One `IntervalSpec` through a whole report: at confidence 0.9 every file, the terminal summary and the
contamination section say 90% and carry 0.9, and none says 95% (issue 45 item 3)."""
from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path

import pytest
from rich.console import Console

from propme_metrics.contamination.assess import check_tasks
from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.rule import ContaminationRule
from propme_metrics.contamination.runs import BenchmarkRun
from propme_metrics.core.errors import ConfigError
from propme_metrics.index.reader import open_index
from propme_metrics.metrics.pm import PLAIN_PERCENTILE, IntervalSpec, wilson_interval
from propme_metrics.report.console import print_summary
from propme_metrics.report.contamination_views import write_outputs
from propme_metrics.report.request import ReportRequest
from support.corpora import make_index, write_jsonl
from support.reports import make_report
from support.runs import COMMA, DATE1, DFM, reference_settings, stage1_settings, write_run

TEXT_SUFFIXES = {".json", ".jsonl", ".csv", ".md", ".html"}
#: a 95% label (not a CSS position such as `left:1.95%`)
LABEL_95 = re.compile(r"(?<![\d.])95 ?%")


def _contamination(root: Path, gpt2_dir: Path, spec: IntervalSpec):
    """Twelve quiz items of DFM at stage1, the even ones planted in the corpus; a graded `score` beside
    the 0/1 `acc`, so that both Wilson and bootstrap intervals are made."""
    rng = random.Random(1)
    words = ["ka", "lo", "mir", "ten", "su", "vor", "ba", "dri", "pel", "nu", "gos", "fa"]

    def text(n: int) -> str:
        return " ".join(rng.choice(words) + rng.choice(words) for _ in range(n))

    items, docs = [], []
    for i in range(12):
        question, answer = text(14), text(3)
        item = BenchmarkItem("quiz", i, question, answer, f"{question} {answer}",
                             {f"{DFM}@stage1": {"acc": float(i % 3 == 0), "score": rng.random()}})
        items.append(item)
        if i % 2 == 0:
            docs.append({"id": f"doc-{i}", "text": f"{text(8)} {item.joined} {text(8)}", "source": "planted"})
    docs += [{"id": f"filler-{j}", "text": text(40), "source": "filler"} for j in range(6)]
    write_jsonl(root / "corpus.jsonl", docs)
    make_index(root / "corpus.jsonl", root / "index", gpt2_dir)
    run = BenchmarkRun(DFM, "stage1", f"pretrained={DFM},revision=stage1,dtype=float32",
                       root / f"samples_quiz_{DATE1}.jsonl", {"acc": True, "score": True})
    return check_tasks(open_index(root / "index"), [("quiz", items)], ContaminationRule(), intervals=spec,
                       runs={"quiz": {f"{DFM}@stage1": run}})


@pytest.fixture(scope="module")
def at_90(tmp_path_factory, gpt2_dir):
    root = tmp_path_factory.mktemp("confidence")
    spec = IntervalSpec(200, 3, 0.9)
    runs = [write_run(root / "s1", DFM, "stage1", stage1_settings()).parent,
            write_run(root / "c", COMMA, "", reference_settings()).parent]
    contamination = _contamination(root, gpt2_dir, spec)
    write_outputs(root / "contamination", contamination)
    report = make_report(ReportRequest(runs, root / "report", spec.resamples, spec.seed, contamination=contamination,
                          confidence=spec.confidence))
    buf = io.StringIO()
    print_summary(report.report, report.files, Console(file=buf, width=400, color_system=None))
    return root, report, buf.getvalue()


def _texts(root: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in sorted(root.rglob("*")) if p.suffix in TEXT_SUFFIXES}


def test_no_label_says_95_percent(at_90):
    root, report, terminal = at_90
    texts = _texts(root)
    assert {p.name for p in texts} >= {"leaderboard.md", "leaderboard.json", "leaderboard.csv", "comparisons.json",
                                       "report.html", "leaderboard.html", "contamination.md", "contamination.json"}
    assert any(p.parent.name != "report" and p.suffix == ".json" and "eee" in p.parts for p in texts)
    for path, text in {**texts, Path("terminal"): terminal}.items():
        assert not LABEL_95.search(text), (path, LABEL_95.search(text))
    for name in ("leaderboard.md", "report.html", "leaderboard.html", "contamination.md"):
        assert "90%" in next(t for p, t in texts.items() if p.name == name), name
    assert "90%" in terminal


def test_every_recorded_confidence_is_the_specs(at_90):
    root, report, _ = at_90
    out = report.files.out
    assert json.loads((out / "leaderboard.json").read_text())["confidence"] == 0.9
    rows = json.loads((out / "comparisons.json").read_text())
    assert rows and {r["confidence"] for r in rows} == {0.9}
    assert json.loads((root / "contamination" / "contamination.json").read_text())["confidence"] == 0.9
    levels = set()
    for path in (out / "eee").rglob("*.json"):
        for result in json.loads(path.read_text())["evaluation_results"]:
            ci = result["score_details"].get("uncertainty", {}).get("confidence_interval")
            if ci:
                levels.add(ci["confidence_level"])
    assert levels == {0.9}
    # the contamination share's Wilson interval is computed at 0.9 too, not only labelled so
    share = report.report.contamination.summaries["quiz"].share
    assert (share.low, share.high) == pytest.approx(wilson_interval(share.units // 2, share.units, 0.9))


def test_the_bootstrap_method_is_the_specs(tmp_path):
    run = write_run(tmp_path / "s1", DFM, "stage1", stage1_settings()).parent
    report = make_report(ReportRequest([run], tmp_path / "report", 200, 3, plots=False, html=False))
    methods = {mr.method for sr in report.report.results[0].settings.values() for mr in sr.metrics.values()}
    assert "bootstrap-expanded-percentile" in methods
    plain = IntervalSpec(200, 3, method=PLAIN_PERCENTILE)
    assert plain.paired(True) == "paired-bootstrap-percentile"
    with pytest.raises(ConfigError):
        IntervalSpec(method="bca")
    with pytest.raises(ConfigError):
        make_report(ReportRequest([run], tmp_path / "bad", 200, 3, confidence=1.0))
    assert not (tmp_path / "bad").exists()
