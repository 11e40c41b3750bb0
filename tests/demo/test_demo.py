"""`propme demo --small`: the embedded default end to end, and what its numbers must show."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from propme.cli.app import main
from propme.demo.layout import DEMO_MODEL, FINAL, SMALL

SCHEMA = Path(__file__).parent.parent / "data" / "every_eval_ever" / "eval.schema.json"


def test_demo_small_end_to_end(demo_paths, capsys):
    # demo_paths already holds stages 1-5 at the small size: the demo must reuse them
    assert main(["demo", "--small", "--quiet", "--out", str(demo_paths.root)]) == 0
    captured = capsys.readouterr()
    for stage in ("corpus", "tokenizer", "index", "model", "prompts"):
        assert f"{stage}: reused" in captured.err
    assert "lm-eval: done" in captured.err
    html = demo_paths.report / "report.html"
    assert html.is_file() and str(html) in captured.out
    rows = json.loads((demo_paths.report / "leaderboard.json").read_text())["rows"]
    # two checkpoints of one model, loaded through the demo's hub cache as revisions, in training order
    early_rev = SMALL.revisions[0]
    assert [(r["model"], r["revision"]) for r in rows] == [(DEMO_MODEL, early_rev), (DEMO_MODEL, FINAL)]
    early, row = rows
    # the early checkpoint has memorized less: fewer planted documents come back from their prefixes
    assert early["propme_demo_prefix_fmr"] < row["propme_demo_prefix_fmr"]
    assert early["propme_demo_prefix_nvr"] < row["propme_demo_prefix_nvr"]
    # the same prompts for both (a paired comparison is possible) and the trajectory across checkpoints
    assert early["propme_demo_prompt_set"] == row["propme_demo_prompt_set"]
    assert len(list(demo_paths.report.glob("trajectory_demo_*.png"))) == 1
    page = (demo_paths.report / "leaderboard.html").read_text(encoding="utf-8")
    first = page.split('<table class="board" data-kind="headline">')[1].split("</table>")[0]  # the NVR block
    assert first.count(f'<td data-v="{DEMO_MODEL}"') == 2
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    records = sorted((demo_paths.report / "eee").rglob("*.json"))
    assert len(records) == 2
    for path in records:
        assert not list(validator.iter_errors(json.loads(path.read_text(encoding="utf-8")))), path
    # the robustness figures (issue 43): the floor of the prompts themselves, each setting's excess over it,
    # repeated sampling, and the duplication and concentration of the long spans, in every output
    text = html.read_text(encoding="utf-8")
    for title in ("Predictability floor", "Repeated sampling", "Duplication of the long spans", "Concentration"):
        assert f"demo: {title}" in text, title
    final_row = rows[1]
    assert final_row["propme_demo_floor_als"] is not None and final_row["propme_demo_floor_als_low"] is not None
    assert final_row["propme_demo_generic_excess_als"] == pytest.approx(
        final_row["propme_demo_generic_als"] - final_row["propme_demo_floor_als"])
    assert final_row["propme_demo_prefix_any_span50"] >= final_row["propme_demo_prefix_r50"] - 1e-9
    assert final_row["propme_demo_prefix_r50_rare"] <= final_row["propme_demo_prefix_r50"] + 1e-9
    header = (demo_paths.report / "leaderboard_full.csv").read_text(encoding="utf-8").splitlines()[0]
    assert "propme_demo_prefix_r50_copies_1" in header and "propme_demo_prefix_r50_top10_share_low" in header
    ids = {r["evaluation_result_id"] for p in records for r in json.loads(p.read_text())["evaluation_results"]}
    assert "propme.demo.floor_als.floor" in ids and "propme.demo.any_span50.prefix" in ids
    # capability: the planted documents are reproduced from their prefixes
    assert row["propme_demo_prefix_fmr"] >= 0.8 and row["propme_demo_prefix_nvr"] >= 0.8
    # propensity below capability, so PM lands well below 0.5
    for setting in ("generic", "specific"):
        assert row[f"propme_demo_{setting}_fmr"] < row["propme_demo_prefix_fmr"]
        assert row[f"propme_demo_pm_nvr_{setting}"] < 0.45
        assert row[f"propme_demo_pm_fmr_{setting}"] < 0.45
        assert row[f"propme_demo_pm_nvr_{setting}_low"] <= row[f"propme_demo_pm_nvr_{setting}"] \
            <= row[f"propme_demo_pm_nvr_{setting}_high"]
    # the prompt-free settings ran (8 generations each at CI size) and have PM against prefix
    for setting in ("unconditional", "minimal_cue"):
        assert row[f"propme_demo_n_{setting}"] == 8
        assert 0 <= row[f"propme_demo_pm_nvr_{setting}_low"] <= row[f"propme_demo_pm_nvr_{setting}"] \
            <= row[f"propme_demo_pm_nvr_{setting}_high"] <= 1
    # the likelihood subtask: the planted prefix documents are discoverable, the curve is shown and drawn
    assert row["propme_demo_n_prefix_likelihood"] == row["propme_demo_n_prefix"]
    assert row["propme_demo_prefix_likelihood_discoverable@100"] >= 0.8
    assert row["propme_demo_prefix_likelihood_greedy_extraction"] == row["propme_demo_prefix_extraction"]
    assert "(n, p)-discoverable prefix documents (p = 0.5" in captured.out and "n=10,000:" in captured.out
    assert (demo_paths.report / "likelihood_demo.png").is_file()
    # every prompt started with the model's <|endoftext|>, as the model was trained
    assert (row["propme_demo_start_token"], row["propme_demo_start_token_choice"]) == ("<|endoftext|>", "auto")
    # '|' escaped for Markdown tables, '<' and '>' for the HTML Markdown passes through
    assert "Start token: the tokenizer adds no start token: prepended its BOS token &lt;\\|endoftext\\|&gt;" \
        in (demo_paths.report / "leaderboard.md").read_text()
    # demo_quiz, run on the final checkpoint before the report: its line, the report's section and EEE figures
    assert "contamination of the demo's other benchmark (propme contamination): demo_quiz: 12 of 24 items" \
        in captured.out
    assert "demo_quiz: flagged items" in html.read_text(encoding="utf-8")
    (final,) = [r for r in (json.loads(p.read_text(encoding="utf-8")) for p in records)
                if r["model_info"]["additional_details"].get("revision") == "final"]
    assert "propme.contamination.demo_quiz.contaminated_share" in {r["evaluation_result_id"] for r in
                                                                   final["evaluation_results"]}
    # a second run reuses everything, lm-eval included
    assert main(["demo", "--small", "--quiet", "--out", str(demo_paths.root)]) == 0
    assert "lm-eval: reused" in capsys.readouterr().err


def test_checkpoints_load_offline_as_revisions(demo_paths, monkeypatch):
    """Each checkpoint folder is a revision of DEMO_MODEL in the demo's hub cache: transformers loads it
    offline by name and revision, and gets that folder's weights (the early one differs from the final)."""
    import torch
    from transformers import AutoModelForCausalLM

    from propme.demo.run import publish_checkpoints

    publish_checkpoints(demo_paths, SMALL.revisions)  # again: idempotent
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    weights = {}
    for revision in SMALL.revisions:
        by_name = AutoModelForCausalLM.from_pretrained(DEMO_MODEL, revision=revision, cache_dir=demo_paths.hub)
        by_folder = AutoModelForCausalLM.from_pretrained(demo_paths.checkpoint(revision))
        weights[revision] = by_name.lm_head.weight.detach()
        assert torch.equal(weights[revision], by_folder.lm_head.weight.detach())
    early, final = (weights[r] for r in SMALL.revisions)
    assert not torch.equal(early, final)
