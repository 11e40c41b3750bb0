"""The contamination check's result laid out: the flagged items' spans located in their source
documents (checked against the planted corpus), report.html's section linking each span to those
documents through the generations' source panel, and the Every Eval Ever records' contamination
results (schema-valid, values recomputed by hand from the items)."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import jsonschema
import pytest

from propme_metrics.contamination.assess import check_tasks
from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.rule import ContaminationRule
from propme_metrics.contamination.runs import BenchmarkRun
from propme_metrics.index.reader import open_index
from propme_metrics.metrics.pm import WILSON, IntervalSpec, wilson_interval
from propme_metrics.report.contamination_views import DATA_BLOCK, contamination_document, html_section
from propme_metrics.report.request import ReportRequest
from propme_metrics.trace.text_rules import normalize_text
from support.corpora import make_index, write_jsonl
from support.reports import make_report
from support.runs import COMMA, DATE1, DFM, stage1_settings, write_run

SCHEMAS = Path(__file__).parent.parent / "data" / "every_eval_ever"
ITEMS = 16
HOSTILE = "<script>alert('x')</script> & \"quoted\""
MODEL = f"{DFM}@stage1"   #: the label of the benchmark's model in the check


def _words(rng: random.Random, n: int) -> str:
    syllables = ["ka", "lo", "mir", "ten", "su", "vor", "ba", "dri", "pel", "nu", "gos", "fa", "ri", "mon", "te"]
    return " ".join("".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))) for _ in range(n))


@pytest.fixture(scope="module")
def world(tmp_path_factory, gpt2_dir):
    """16 items, the even ones planted verbatim in a corpus document (item 0 with markup in its
    question); 0/1 `acc` values drawn at random, of a run by DFM at revision stage1."""
    rng = random.Random(5)
    root = tmp_path_factory.mktemp("contam-out")
    items, docs = [], []
    for i in range(ITEMS):
        question = _words(rng, 16) + (f" {HOSTILE}" if i == 0 else "")
        answer = _words(rng, 4)
        item = BenchmarkItem("quiz", i, question, answer, f"{question} {answer}",
                             {MODEL: {"acc": float(rng.random() < 0.5)}})
        items.append(item)
        if i % 2 == 0:
            docs.append({"id": f"doc-{i}", "text": f"{_words(rng, 12)} {item.joined} {_words(rng, 12)}",
                         "source": "planted"})
    docs += [{"id": f"filler-{j}", "text": _words(rng, 50), "source": "filler"} for j in range(10)]
    write_jsonl(root / "corpus.jsonl", docs)
    make_index(root / "corpus.jsonl", root / "index", gpt2_dir)
    index = open_index(root / "index")
    run = BenchmarkRun(DFM, "stage1", f"pretrained={DFM},revision=stage1,dtype=float32",
                       root / f"samples_quiz_{DATE1}.jsonl", {"acc": True})
    result = check_tasks(index, [("quiz", items)], ContaminationRule(), intervals=IntervalSpec(300, 2),
                         runs={"quiz": {MODEL: run}})
    return {"root": root, "items": items, "docs": {d["id"]: d["text"] for d in docs}, "index": index,
            "result": result}


def _count(index, docs: dict[str, str], ids: list[int]) -> int:
    """Occurrences of a token sequence in the encoded documents, by brute force."""
    n = 0
    for text in docs.values():
        enc = index.encode(text)
        n += sum(enc[i:i + len(ids)] == ids for i in range(len(enc) - len(ids) + 1))
    return n


def test_flagged_spans_are_found_in_their_source_documents(world):
    result, index = world["result"], world["index"]
    flagged = result.flagged["quiz"]
    assert [f.result.item.doc_id for f in flagged] == list(range(0, ITEMS, 2))  # the planted items, in order
    for f in flagged:
        m = f.result.matches["joined"]
        assert f.spans, f.result.item.doc_id
        for s in f.spans:
            a, b = s.tokens
            assert a <= s.match[0] < s.match[1] <= b and s.match[1] - s.match[0] >= result.rule.k
            assert s.chars == (m.offsets[a][0], m.offsets[b - 1][1])
            assert s.count == _count(index, world["docs"], [int(x) for x in m.ids[s.match[0]:s.match[1]]])
            assert s.documents and len(s.documents) <= min(s.count, 3)
            own = f"doc-{f.result.item.doc_id}"
            assert own in {d.source_id for d in s.documents}
            for d in s.documents:
                # the corpus text of that document holds the span, and the snippet marks it
                assert s.text.strip() in normalize_text(world["docs"][d.source_id])
                lo, hi = d.snippet_span
                assert d.snippet[lo:hi].strip() == s.text.strip()
                assert d.metadata["id"] == d.source_id


def _marks(page: str) -> list[tuple[str, int]]:
    return [(g, int(s)) for g, s in re.findall(rf"data-b='{DATA_BLOCK}' data-g='(\d+)' data-s='(\d+)'", page)]


def test_html_spans_open_their_documents(world):
    result = world["result"]
    page = html_section(result, docs_per_span=2, snippet_chars=40)
    block_text = re.search(rf"<script type='application/json' id='propme-data-{DATA_BLOCK}'>(.*?)</script>",
                           page, re.S).group(1)
    assert "<" not in block_text and ">" not in block_text and "&" not in block_text
    block = json.loads(block_text)
    marks = _marks(page)
    assert len(marks) == sum(len(f.spans) for f in result.flagged["quiz"])
    flagged = {str(k): f for k, f in enumerate(result.flagged["quiz"])}
    for gid, k in marks:
        span, expected = block[gid]["spans"][k], flagged[gid].spans[k]
        assert block[gid]["title"] == f"quiz · doc {flagged[gid].result.item.doc_id}"
        assert span["text"] == expected.text and span["n_docs"] == len(expected.documents)
        assert span["label"] == f"span found in the corpus ({expected.count} occurrence(s))"
        assert 1 <= len(span["docs"]) <= 2
        for d, want in zip(span["docs"], expected.documents):
            assert d["source_id"] == want.source_id
            lo, hi = d["span"]
            assert d["snippet"][lo:hi].strip() == expected.text.strip()
            assert len(d["snippet"]) <= len(expected.text) + 2 * 40 + 2   # trimmed to the context asked for
    # item 0's markup is shown as text, in the item and in the panel's data
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page


def test_report_html_and_document_carry_the_section(world, tmp_path):
    run = write_run(tmp_path / "propme", DFM, "stage1", stage1_settings()).parent
    rep = make_report(ReportRequest([run], tmp_path / "report", bootstrap=0, plots=False, contamination=world["result"]))
    page = rep.files.html.read_text(encoding="utf-8")
    assert "quiz: flagged items" in page and len(_marks(page)) >= ITEMS // 2
    assert page.count(f"id='propme-data-{DATA_BLOCK}'") == 1
    doc = contamination_document(world["result"])
    share = doc["tasks"]["quiz"]["share"]
    assert doc["tasks"]["quiz"]["contaminated"] == ITEMS // 2 and share["method"] == WILSON
    assert (share["low"], share["high"]) == pytest.approx(wilson_interval(ITEMS // 2, ITEMS))


@pytest.fixture(scope="module")
def validator():
    schema = json.loads((SCHEMAS / "eval.schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(schema)


def _by_id(record: dict) -> dict[str, dict]:
    return {r["metric_config"]["metric_id"]: r for r in record["evaluation_results"]}


def test_eee_records_hold_the_contamination_figures(world, tmp_path, validator):
    run = write_run(tmp_path / "propme", DFM, "stage1", stage1_settings()).parent
    rep = make_report(ReportRequest([run], tmp_path / "report", bootstrap=100, plots=False, html=False,
                       contamination=world["result"]))
    (path,) = [p for p in rep.files.eee if p.suffix == ".json"]
    record = json.loads(path.read_text(encoding="utf-8"))
    errors = sorted(validator.iter_errors(record), key=str)
    assert not errors, f"{errors[0].message} at {list(errors[0].absolute_path)}"
    results = _by_id(record)
    assert any(k.startswith("propme.dynaword.") for k in results)   # the PropMe results are still there
    flagged = [it.doc_id % 2 == 0 for it in world["items"]]
    acc = [it.metrics[MODEL]["acc"] for it in world["items"]]
    dirty = [a for a, f in zip(acc, flagged) if f]
    clean = [a for a, f in zip(acc, flagged) if not f]

    share = results["propme.contamination.quiz.contaminated_share"]
    assert share["score_details"]["score"] == pytest.approx(0.5)
    ci = share["score_details"]["uncertainty"]["confidence_interval"]
    assert (ci["lower"], ci["upper"]) == pytest.approx(wilson_interval(ITEMS // 2, ITEMS))
    assert ci["method"] == WILSON and share["score_details"]["uncertainty"]["num_samples"] == ITEMS
    assert share["metric_config"]["lower_is_better"] is True
    params = share["metric_config"]["metric_parameters"]
    assert (params["rule_k"], params["rule_min_coverage"], params["rule_field"]) == (8, 0.7, "joined")
    assert share["source_data"]["additional_details"]["index_identity"] == world["result"].index_identity

    for part, values in (("all", acc), ("clean", clean), ("contaminated", dirty)):
        r = results[f"propme.contamination.quiz.acc.{part}"]
        assert r["score_details"]["score"] == pytest.approx(sum(values) / len(values))
        ci = r["score_details"]["uncertainty"]["confidence_interval"]
        assert (ci["lower"], ci["upper"]) == pytest.approx(wilson_interval(int(sum(values)), len(values)))
        assert r["score_details"]["uncertainty"]["num_samples"] == len(values)
        assert r["metric_config"]["lower_is_better"] is False   # lm-eval's higher_is_better for acc
    diff = results["propme.contamination.quiz.acc.difference"]
    assert diff["score_details"]["score"] == pytest.approx(sum(dirty) / len(dirty) - sum(clean) / len(clean))
    unc = diff["score_details"]["uncertainty"]
    assert unc["confidence_interval"]["lower"] <= diff["score_details"]["score"] <= unc["confidence_interval"]["upper"]
    assert unc["num_bootstrap_samples"] == 300 and diff["metric_config"]["min_score"] == -1.0


def test_a_benchmark_model_without_propme_runs_gets_its_own_record(world, tmp_path, validator):
    """The benchmark was run by another model than the PropMe tasks: its figures are not given to
    the PropMe model's record, but to a record of their own."""
    import dataclasses

    run = BenchmarkRun(COMMA, "", f"pretrained={COMMA}", tmp_path / f"samples_quiz_{DATE1}.jsonl", {"acc": True})
    other = dataclasses.replace(world["result"], runs={"quiz": {MODEL: run}})
    run = write_run(tmp_path / "propme", DFM, "stage1", stage1_settings()).parent
    rep = make_report(ReportRequest([run], tmp_path / "report", bootstrap=0, plots=False, html=False, contamination=other))
    records = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in rep.files.eee if p.suffix == ".json"}
    assert len(records) == 2
    for record in records.values():
        assert not list(validator.iter_errors(record))
        ids = set(_by_id(record))
        if record["model_info"]["id"] == COMMA:
            assert ids and all(i.startswith("propme.contamination.quiz.") for i in ids)
        else:
            assert not any(i.startswith("propme.contamination.") for i in ids)


def test_clicking_a_contaminated_span_opens_its_documents(world, tmp_path, chromium):
    """report.html in headless Chromium: a click on a flagged item's span opens the source panel on
    the document that holds it, the span marked in its snippet."""
    import html
    import subprocess

    run = write_run(tmp_path / "propme", DFM, "stage1", stage1_settings()).parent
    rep = make_report(ReportRequest([run], tmp_path / "report", bootstrap=0, plots=False, contamination=world["result"]))
    page = rep.files.html.read_text(encoding="utf-8")
    clicked = tmp_path / "clicked.html"
    clicked.write_text(page.replace("</body>", f"<script>document.querySelector(\"mark.seg[data-b='{DATA_BLOCK}']\")"
                                    ".click();</script></body>"), encoding="utf-8")
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", clicked.resolve().as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    panel = dom[dom.index('<aside id="panel"'):]
    assert "hidden" not in panel[: panel.index(">")]
    first = world["result"].flagged["quiz"][0]
    span = first.spans[0]
    assert "quiz · doc 0" in panel and f"span found in the corpus ({span.count} occurrence(s)), tokens" in panel
    assert f"<span class=\"src\">{span.documents[0].source_id}</span>" in panel
    lo, hi = span.documents[0].snippet_span
    assert f"<mark>{html.escape(span.documents[0].snippet[lo:hi], quote=False)}</mark>" in panel  # text, not markup
    assert "<script>alert" not in dom


def test_a_graded_benchmark_metric_gets_bounds_the_official_validator_accepts(world, tmp_path):
    """A per-sample metric with graded values (a Brier score) is a continuous score: the schema lets
    its bounds be null, `every_eval_ever`'s validator does not (issue 44, item 4). PropMe knows no
    range for an arbitrary lm-eval metric, so it writes the schema's unbounded ones."""
    from support.eee_validator import official_validate

    rng = random.Random(11)
    items = [BenchmarkItem("quiz", it.doc_id, it.question, it.answer, it.joined,
                           {MODEL: {"acc": it.metrics[MODEL]["acc"], "brier": round(rng.random() * 0.6, 3)}}) for it in world["items"]]
    result = check_tasks(world["index"], [("quiz", items)], ContaminationRule(), intervals=IntervalSpec(100, 2),
                         runs=world["result"].runs)
    run = write_run(tmp_path / "propme", DFM, "stage1", stage1_settings()).parent
    rep = make_report(ReportRequest([run], tmp_path / "report", bootstrap=50, plots=False, html=False, contamination=result))
    (path,) = [p for p in rep.files.eee if p.suffix == ".json"]
    results = _by_id(json.loads(path.read_text(encoding="utf-8")))
    for part in ("all", "clean", "contaminated", "difference"):
        config = results[f"propme.contamination.quiz.brier.{part}"]["metric_config"]
        assert config["score_type"] == "continuous"
        assert (config["min_score"], config["max_score"]) == ("-Infinity", "Infinity")
    assert results["propme.contamination.quiz.acc.all"]["metric_config"]["max_score"] == 1.0
    code, found = official_validate([path])
    assert code == 0, found
