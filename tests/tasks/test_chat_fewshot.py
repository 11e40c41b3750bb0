"""Chat templates, few-shot runs and system instructions through the stock `lm_eval` (CPU, offline)."""
from __future__ import annotations

import json
import shutil

import pytest

from support.lmeval import demo_metadata, run_lm_eval, samples_file

#: a minimal chat template: the model's own start (BOS), one line per turn, the assistant turn opened
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def chat_model(demo_paths, tmp_path_factory):
    """The demo model with a tokenizer that has a chat template."""
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("chat") / "model"
    shutil.copytree(demo_paths.model, out)
    tok = AutoTokenizer.from_pretrained(str(out))
    tok.chat_template = TEMPLATE
    tok.save_pretrained(str(out))
    return out


def _args(model) -> list[str]:
    return ["--model", "hf", "--model_args", f"pretrained={model},dtype=float32", "--device", "cpu",
            "--batch_size", "8", "--gen_kwargs", "max_gen_toks=8", "--limit", "3"]


def _rows(out, task) -> list[dict]:
    return [json.loads(line) for line in samples_file(out, task).open(encoding="utf-8")]


def test_generic_and_specific_are_user_turns_under_a_chat_template(chat_model, demo_paths, tmp_path):
    out = tmp_path / "runs"
    proc = run_lm_eval([*_args(chat_model), "--apply_chat_template", "--system_instruction", "Be brief.",
                        "--tasks", "propme_demo_generic,propme_demo_specific", "--metadata", demo_metadata(demo_paths),
                        "--log_samples", "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for task in ("propme_demo_generic", "propme_demo_specific"):
        rows = _rows(out, task)
        assert len(rows) == 3
        for row in rows:
            doc, context = row["doc"], row["arguments"]["gen_args_0"]["arg_0"]
            # exactly the template around the prompt: one start token (the template's), no PropMe start inside the turn
            assert context == f"<|endoftext|><|system|>Be brief.\n<|user|>{doc['prompt']}\n<|assistant|>"
            assert doc["chat_template"] is True and doc["model_prompt"] == doc["prompt"] and doc["start_token"] == ""
            assert isinstance(row["trace"], dict)  # traced as usual
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    assert results["chat_template"] == TEMPLATE and results["chat_template_sha"]


@pytest.mark.parametrize("task", ["propme_demo_prefix", "propme_demo_unconditional", "propme_demo_likelihood"])
def test_raw_text_settings_are_refused_under_a_chat_template(chat_model, demo_paths, tmp_path, task):
    proc = run_lm_eval([*_args(chat_model), "--apply_chat_template", "--tasks", task,
                        "--metadata", demo_metadata(demo_paths)], tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert f"PropMe: {task} is not defined under --apply_chat_template" in output
    assert "--tasks propme_demo_generic,propme_demo_specific" in output
    assert "Traceback" not in output and "Running generate_until" not in output and "Running loglikelihood" not in output


def test_few_shot_leaves_prompts_unchanged(demo_paths, tmp_path):
    """`--num_fewshot 2` reaches the other tasks of a run; PropMe's keep their own prompts, 0-shot."""
    out = tmp_path / "runs"
    proc = run_lm_eval([*_args(demo_paths.model), "--num_fewshot", "2",
                        "--tasks", "propme_demo_prefix,propme_demo_likelihood",
                        "--metadata", demo_metadata(demo_paths), "--log_samples", "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "num_fewshot has been set to 0 for propme_demo_prefix in its config" in proc.stderr
    for row in _rows(out, "propme_demo_prefix"):
        assert row["arguments"]["gen_args_0"]["arg_0"] == "<|endoftext|>" + row["doc"]["prompt"]
        assert row["doc"]["chat_template"] is False
    for row in _rows(out, "propme_demo_likelihood"):
        assert row["arguments"]["gen_args_0"]["arg_0"] == "<|endoftext|>" + row["doc"]["prompt"]
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    assert results["n-shot"] == {"propme_demo_prefix": 0, "propme_demo_likelihood": 0}


def test_system_instruction_without_chat_template_is_refused(demo_paths, tmp_path):
    proc = run_lm_eval([*_args(demo_paths.model), "--system_instruction", "Be brief.", "--tasks", "propme_demo_generic",
                        "--metadata", demo_metadata(demo_paths)], tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "PropMe: propme_demo_generic: --system_instruction without" in output
    assert "Traceback" not in output and "Running generate_until" not in output
