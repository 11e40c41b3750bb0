"""The document-start token (issue 11): resolved from the model's tokenizer, recorded, and checked
at the level of the token ids that reach the model through the real `lm_eval`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from propme_metrics.core.errors import ConfigError
from propme_metrics.prompts.start import model_tokenizer_spec, resolve_start_token
from propme_tasks import hooks
from support.lmeval import samples_file, sidecar

SPY = str(Path(__file__).parents[1] / "support" / "lmeval_spy.py")


@pytest.fixture(scope="session")
def llama_style_dir(tmp_path_factory) -> Path:
    """A Llama-style tokenizer that adds <s> by itself (SentencePiece-like BPE), built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from propme.demo.synthetic import generate_corpus

    out = tmp_path_factory.mktemp("llama-style")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    letters = sorted(set("abcdefghijklmnopqrstuvwxyzæøåABCDEFGHIJKLMNOPQRSTUVWXYZÆØÅ.,!?"))
    tok.train_from_iterator([r["text"] for r in generate_corpus(60, seed=3)],
                            trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"],
                                                initial_alphabet=letters, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=2048)
    fast.save_pretrained(out)
    return out


# --- resolving the start token ----------------------------------------------------------------

def test_model_tokenizer_keys_follow_lm_eval_loaders():
    spec = model_tokenizer_spec({"pretrained": "org/model", "revision": "step100", "dtype": "float32"})
    assert (spec.name, spec.source_key, spec.revision) == ("org/model", "pretrained", "step100")
    # tokenizer= overrides pretrained= (HF and vLLM); vLLM's tokenizer_revision wins over revision
    spec = model_tokenizer_spec({"pretrained": "org/model", "tokenizer": "org/tok", "revision": "a",
                                 "tokenizer_revision": "b", "add_bos_token": "True", "trust_remote_code": False})
    assert (spec.name, spec.source_key, spec.revision, spec.add_bos_token) == ("org/tok", "tokenizer", "b", True)
    assert dict(spec.kwargs) == {"add_bos_token": True, "trust_remote_code": False}
    assert model_tokenizer_spec({"pretrained": object(), "version": 1.0}) is None
    assert model_tokenizer_spec({"revision": 7}) is None


def test_auto_none_literal(gpt2_dir, llama_style_dir):
    gpt2 = resolve_start_token("auto", {"pretrained": str(gpt2_dir)})
    assert (gpt2.choice, gpt2.token, gpt2.added_by_tokenizer) == ("auto", "<|endoftext|>", None)
    assert gpt2.apply("Hej") == "<|endoftext|>Hej" and gpt2.tokenizer == str(gpt2_dir)
    llama = resolve_start_token(None, {"pretrained": "unused/elsewhere", "tokenizer": str(llama_style_dir)})
    assert (llama.token, llama.added_by_tokenizer) == ("", "<s>")
    # with add_bos_token=False in the model arguments lm-eval turns the tokenizer's <s> off: PropMe adds it
    off = resolve_start_token("auto", {"pretrained": str(llama_style_dir), "add_bos_token": False})
    assert (off.token, off.added_by_tokenizer) == ("<s>", None)
    assert resolve_start_token("none", {}).token == ""
    lit = resolve_start_token("<|doc|>", {})
    assert (lit.choice, lit.token) == ("literal", "<|doc|>")


def test_auto_errors_say_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="needs to know the model's tokenizer") as err:
        resolve_start_token("auto", {"corpus": "demo"})
    assert "start_token" in str(err.value) and "tokenizer" in str(err.value)
    with pytest.raises(ConfigError, match="start_token auto needs the model's tokenizer") as err:
        resolve_start_token("auto", {"pretrained": "no-such-org/no-such-model-propme"})
    assert "none" in str(err.value)
    with pytest.raises(ConfigError, match="no tokenizer folder"):
        resolve_start_token("auto", {"pretrained": str(tmp_path / "missing")})


def test_loader_records_the_start_token(demo_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    base = {"corpus": "demo", "language": "da", "demo_index": str(demo_paths.index),
            "pretrained": str(demo_paths.model)}
    prefix = hooks.load_prompts(**base, setting="prefix", demo_prefix_prompts=str(demo_paths.prompts("prefix")))["test"]
    for row in prefix:
        assert row["model_prompt"] == "<|endoftext|>" + row["prompt"]
        assert (row["start_token"], row["start_token_choice"]) == ("<|endoftext|>", "auto")
        assert "BOS" in row["start_token_note"]
    uncond = hooks.load_prompts(**base, setting="unconditional", prompt_free_generations=5)["test"]
    assert uncond["model_prompt"] == ["<|endoftext|>"] * 5 and len(set(uncond["id"])) == 5
    monkeypatch.setenv("PROPME_START_TOKEN", "none")
    plain = hooks.load_prompts(**base, setting="prefix", demo_prefix_prompts=str(demo_paths.prompts("prefix")))["test"]
    assert plain["model_prompt"] == plain["prompt"] and set(plain["start_token_choice"]) == {"none"}
    with pytest.raises(hooks.TaskConfigError, match="the prompt would be empty"):
        hooks.load_prompts(**base, setting="unconditional")
    # metadata wins over the environment
    lit = hooks.load_prompts(**base, setting="minimal_cue", start_token="§", prompt_free_generations=3)["test"]
    assert all(p.startswith("§") and p[1:2].isupper() for p in lit["model_prompt"])


# --- what reaches the model, through the real lm_eval ---------------------------------------------

def _spy_lm_eval(ids_file: Path, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PROPME_CACHE_DIR=str(tmp_path / "cache"))
    for key in [k for k in env if k.startswith("PROPME_") and k != "PROPME_CACHE_DIR"]:
        env.pop(key)
    return subprocess.run([sys.executable, SPY, str(ids_file), *args], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=900)


def _results(out: Path) -> dict:
    return json.loads(next(out.rglob("results_*.json")).read_text())["results"]


def _run_demo_model(demo_paths, tmp_path, name: str, tasks: str, **metadata) -> tuple[dict, list[list[int]], Path]:
    ids_file, out = tmp_path / f"{name}-ids.jsonl", tmp_path / f"{name}-runs"
    meta = {"demo_index": str(demo_paths.index), "demo_prefix_prompts": str(demo_paths.prompts("prefix")),
            "prompt_free_generations": 6, **metadata}
    proc = _spy_lm_eval(ids_file, ["--model", "hf", "--model_args", f"pretrained={demo_paths.model},dtype=float32",
                                   "--device", "cpu", "--batch_size", "8", "--tasks", tasks,
                                   "--gen_kwargs", "max_gen_toks=96", "--metadata", json.dumps(meta),
                                   "--log_samples", "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _results(out), [json.loads(line) for line in ids_file.open()], out


def test_gpt2_style_model_gets_one_endoftext_and_recalls(demo_paths, tmp_path):
    """The demo model was trained on documents each after <|endoftext|>: by default every prompt gets
    exactly one, and the prefix attack works; with start_token none it loses its power."""
    from transformers import AutoTokenizer

    eot = AutoTokenizer.from_pretrained(demo_paths.model).convert_tokens_to_ids("<|endoftext|>")
    assert eot is not None
    results, ids, out = _run_demo_model(demo_paths, tmp_path, "auto",
                                        "propme_demo_prefix,propme_demo_unconditional,propme_demo_minimal_cue")
    n_prefix = sum(1 for _ in open(demo_paths.prompts("prefix")))
    assert len(ids) == n_prefix + 6 + 6
    for row in ids:
        assert row[0] == eot and (len(row) == 1 or row[1] != eot), row[:4]
    assert sum(row == [eot] for row in ids) == 6  # unconditional: the start token alone
    from propme_metrics.prompts.prompt_free import cue_words

    tok = AutoTokenizer.from_pretrained(demo_paths.model)
    cues = {w[:1].upper() + w[1:] for w, _ in cue_words("da")}
    assert sum(tok.decode(row[1:]) in cues for row in ids) == 6  # minimal_cue: start token + one word
    with_start = results["propme_demo_prefix"]["fmr,none"]
    assert with_start >= 0.8
    for setting in ("unconditional", "minimal_cue"):
        assert sidecar(out)["tasks"][f"propme_demo_{setting}"]["tracing_failures"] == 0
        samples = [json.loads(line) for line in samples_file(out, f"propme_demo_{setting}").open()]
        assert len(samples) == 6
        assert all(s["trace"]["generations"][0]["text"] == s["resps"][0][0] for s in samples)  # traced as written
        assert samples[0]["arguments"]["gen_args_0"]["arg_1"]["do_sample"] is True

    results, ids, _ = _run_demo_model(demo_paths, tmp_path, "none", "propme_demo_prefix", start_token="none")
    assert all(row[0] != eot for row in ids)
    without = results["propme_demo_prefix"]["fmr,none"]
    print(f"prefix FMR of the demo model: {with_start:.3f} with <|endoftext|>, {without:.3f} with start_token none")
    assert without <= with_start - 0.3


def test_llama_style_tokenizer_gets_one_bos_not_two(demo_paths, llama_style_dir, tmp_path):
    """--model_args tokenizer= overrides the tokenizer in the pretrained= folder, for lm-eval and for
    PropMe alike: the demo model (its own tokenizer is GPT-2-style) runs with the Llama-style one."""
    ids_file, out = tmp_path / "llama-ids.jsonl", tmp_path / "llama-runs"
    meta = {"demo_index": str(demo_paths.index), "demo_generic_prompts": str(demo_paths.prompts("generic")),
            "demo_prefix_prompts": str(demo_paths.prompts("prefix")), "prompt_free_generations": 2}
    proc = _spy_lm_eval(ids_file, ["--model", "hf", "--model_args",
                                   f"pretrained={demo_paths.model},tokenizer={llama_style_dir},dtype=float32",
                                   "--device", "cpu", "--batch_size", "4", "--limit", "2",
                                   "--tasks", "propme_demo_generic,propme_demo_prefix,propme_demo_unconditional",
                                   "--gen_kwargs", "max_gen_toks=8", "--metadata", json.dumps(meta),
                                   "--log_samples", "--output_path", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids = [json.loads(line) for line in ids_file.open()]
    assert len(ids) == 6
    for row in ids:
        assert row[0] == 1 and (len(row) == 1 or row[1] != 1), row[:4]
    assert sum(row == [1] for row in ids) == 2  # unconditional: <s> alone, added by the tokenizer
    doc = json.loads(samples_file(out, "propme_demo_generic").open().readline())["doc"]
    assert doc["start_token"] == "" and doc["model_prompt"] == doc["prompt"]
    assert "adds <s> by itself" in doc["start_token_note"]
    # the ids are the Llama-style tokenizer's encoding of the bare prompt (nothing of <|endoftext|>)
    from transformers import AutoTokenizer

    llama = AutoTokenizer.from_pretrained(llama_style_dir)
    assert llama(doc["prompt"])["input_ids"] in ids


def test_report_resamples_prompt_free_settings_by_generation(tmp_path):
    from propme_metrics.metrics.runs import RunTask, TracedPrompt

    def values(fmr: float) -> dict:
        return {"fmr": (fmr, 1.0), "als": (3.0, 1.0), "fmr_normalized": (fmr, 1.0), "r20": (0.0, 1.0),
                "r50": (0.0, 1.0), "nvr_above_half": (0.0, 1.0), "nvr": (0.0, 1.0), "nvr_hits": (0.0, 0.0),
                "nvr_max": (0.0, 1.0), "extraction": (0.0, 0.0)}

    prompts = [TracedPrompt(id="a", prompt="", values=[values(1.0), values(0.0), None]),
               TracedPrompt(id="b", prompt="", values=[values(1.0)])]
    task = dict(task="t", corpus="c", model="m", revision="", model_args="", metadata={}, index_identity="i",
                results={}, prompts=prompts, results_path=tmp_path, samples_path=tmp_path, date_id="d")
    free, prompted = RunTask(setting="unconditional", **task), RunTask(setting="generic", **task)
    assert [(s.numerator, s.denominator) for s in free.stats("fmr")] == [(1, 1), (0, 1), (1, 1)]
    assert [(s.numerator, s.denominator) for s in prompted.stats("fmr")] == [(1, 2), (1, 1)]
