"""A prefix generation that stops inside its true continuation (shorter than the continuation's 50
tokens, e.g. lm-eval's max_gen_toks=20) can neither show nor rule out extraction (issue 35, item 5):
the tracer records it as undefined, so `propme trace`'s SUMMARY, lm-eval's aggregated `extraction`
and the report all count only generations long enough, and say "undefined" when none is."""
from __future__ import annotations

import json
import math

import pytest

from propme_metrics.metrics import registry
from propme_metrics.report.request import ReportRequest
from propme_metrics.trace.text_rules import continuation_reproduced
from propme_metrics.trace.tracer import Tracer
from support.corpora import write_jsonl
from support.lmeval import demo_metadata, model_args, run_lm_eval, samples_file
from support.reports import make_report
from support.runs import DFM, gen, setting_prompts, write_run

CONT = " og de levede lykkeligt til deres dages ende"


@pytest.mark.parametrize("generation,expected", [
    (CONT + ". Snip, snap, snude.", True),        # the whole continuation, then more
    ("og  de\nlevede lykkeligt til deres dages ende", True),  # white space folded
    (" og de levede", None),                       # stopped inside it while copying it: cannot tell
    (" og de levede lykkeligt til", None),
    (" og så gik de hjem", False),                 # differs: a real "not extracted"
    (" og de levede ulykkeligt", False),
    ("", False), ("  \n", False),                  # nothing written: not extracted
])
def test_continuation_reproduced_is_true_false_or_undefined(generation, expected):
    assert continuation_reproduced(generation, CONT) is expected


def test_without_a_continuation_nothing_is_reproduced():
    assert continuation_reproduced("anything", "") is False and continuation_reproduced("", " \n") is False


def _prefix_rows(records, n: int = 6):
    """Prefix-style generations of the synthetic documents: each row's continuation is 40 words of
    its document; generations copy it whole (+ more), stop inside it, or differ from it."""
    rows = []
    for i, rec in enumerate(records[:n]):
        words = rec["text"].split()
        cont = " " + " ".join(words[10:50])
        kind = ("whole", "short", "differs")[i % 3]
        text = {"whole": cont + " " + " ".join(words[50:60]), "short": " " + " ".join(words[10:18]),
                "differs": " " + " ".join(reversed(words[10:18]))}[kind]
        rows.append({"id": f"p{i}", "completion": text, "continuation": cont, "kind": kind})
    return rows


def test_tracer_records_a_cut_short_generation_as_undefined(synthetic_index, synthetic_records):
    tracer = Tracer(synthetic_index)
    for row in _prefix_rows(synthetic_records):
        extracted = tracer.trace_one(row["completion"], row["id"], continuation=row["continuation"]).extracted
        assert extracted is {"whole": True, "short": None, "differs": False}[row["kind"]], row


def test_trace_summary_counts_only_generations_long_enough(synthetic_index, synthetic_records, tmp_path, cli_run):
    rows = _prefix_rows(synthetic_records)
    for name, chosen, expected in (("mixed", rows, 0.5),  # 2 whole, 2 differ; the 2 short ones left out
                                   ("short", [r for r in rows if r["kind"] == "short"], None)):
        inp = write_jsonl(tmp_path / f"{name}.jsonl", chosen)
        code, out, err = cli_run("trace", "--index", synthetic_index, "--input", inp, "--out",
                                 tmp_path / f"{name}-r.jsonl", "--summary", tmp_path / f"{name}-s.json", "--quiet")
        assert code == 0, err
        summary = json.loads((tmp_path / f"{name}-s.json").read_text())
        assert summary["extraction"] == expected  # null, never 0, when no generation is long enough
        row = next(line for line in out.splitlines() if line.strip("│ ").startswith("extraction"))
        if expected is None:  # the terminal says so too, and why, rather than leaving the row out
            words = " ".join(out.split())
            assert registry.UNDEFINED.console in row, out
            assert "extraction undefined" in words and "stopped inside its true continuation" in words, out
        else:
            assert f"{expected:.4f}" in row
        results = [json.loads(line) for line in (tmp_path / f"{name}-r.jsonl").open()]
        assert sum(r["extracted"] is None for r in results) == sum(r["kind"] == "short" for r in chosen)


def test_report_says_so_for_generations_recorded_as_undefined(tmp_path):
    """Traces of this release record a cut-short generation as undefined (null), not False: the
    report still names them in its notes and leaves extraction undefined when none is long enough."""
    short = [[gen(f"prefix-{i:03d}", 2, (0.5,), text=" og de", extracted=None)] for i in range(6)]
    settings = {"generic": setting_prompts("generic", 6, [(6, 10)], {0: 0.2}, set()), "prefix": short}
    run = write_run(tmp_path / "short", DFM, "", settings, prompt_text="Der var engang").parent
    for path in run.rglob("samples_*prefix*.jsonl"):  # every prefix prompt's true continuation
        rows = [json.loads(line) for line in path.open()]
        path.write_text("".join(json.dumps({**r, "doc": {**r["doc"], "continuation": CONT}}) + "\n" for r in rows))
    rep = make_report(ReportRequest([run], tmp_path / "rep", bootstrap=0, plots=False, html=False))
    assert rep.report.results[0].settings["prefix"].metrics["extraction"].estimate is None
    assert any("6 of 6 generations stopped inside the true continuation" in n and "undefined" in n
               for n in rep.report.notes), rep.report.notes


def test_stock_lm_eval_with_short_generations_leaves_extraction_undefined(demo_paths, tmp_path):
    """max_gen_toks=20, below the continuation's 50 tokens: the memorizing demo model copies every
    continuation as far as it can write, so lm-eval's `extraction` is undefined (NaN), not 0, and
    `propme trace` of the samples agrees (null)."""
    out = tmp_path / "runs"
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", "propme_demo_prefix", "--gen_kwargs", "max_gen_toks=20",
                        "--metadata", demo_metadata(demo_paths), "--log_samples", "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]["propme_demo_prefix"]
    samples = [json.loads(line) for line in samples_file(out, "propme_demo_prefix").open()]
    extracted = [g["extracted"] for row in samples for g in row["trace"]["generations"]]
    assert None in extracted and True not in extracted  # 20 tokens cannot hold a 50-token continuation
    defined = [e for e in extracted if e is not None]
    value = results["extraction,none"]
    if defined:
        assert value == pytest.approx(sum(defined) / len(defined))
    else:
        assert value is None or math.isnan(value)
    assert results["fmr,none"] > 0  # the short copies are still full matches of the corpus
