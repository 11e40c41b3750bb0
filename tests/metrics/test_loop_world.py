"""From outside: a tiny GPT-2 trained here on planted documents, one of them a corpus line repeated,
repeats that line five times; `propme trace` finds it a loop span, leaves it out of FMR and NVR and
counts it apart, while a planted document's reproduction stays a full match."""
from __future__ import annotations

import json
import random

import pytest

from propme_metrics.metrics.loops import is_periodic

pytestmark = pytest.mark.slow  # trains a model


@pytest.fixture(scope="module")
def loop_world(tmp_path_factory):
    from propme.demo.synthetic import document_text, sentence, train_memorizing_model, train_tokenizer
    from support.corpora import make_index, write_jsonl

    root = tmp_path_factory.mktemp("loops")
    rng = random.Random(11)
    line = sentence(rng, "da")
    planted = [document_text(rng, ("da", "en")[i % 2], 6) for i in range(3)]
    looping = "\n".join([line] * 9)  # a page that repeats one line, as tables of contents and notices do
    records = [{"id": f"planted-{i}", "text": t} for i, t in enumerate(planted)]
    records += [{"id": "loop", "text": looping}, {"id": "once", "text": document_text(rng, "da", 2) + "\n" + line}]
    records += [{"id": f"bg-{i}", "text": document_text(rng, ("da", "en")[i % 2], 2)} for i in range(30)]
    corpus = write_jsonl(root / "corpus.jsonl", records)
    tok = train_tokenizer([r["text"] for r in records], root / "tokenizer")
    make_index(corpus, root / "index", tok)
    train_memorizing_model([*planted, looping], tok, root / "model", steps=300)
    return root, line, planted


def _generate(model_dir, prompt: str, new_tokens: int) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    ids = [tok.eos_token_id] + tok(prompt)["input_ids"]  # the document-start token, as in training
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=tok.eos_token_id)
    return tok.decode(out[0, len(ids):], skip_special_tokens=True)


def test_a_generation_repeating_a_corpus_line_five_times_is_a_loop(loop_world, tmp_path, cli_run):
    root, line, planted = loop_world
    looped = _generate(root / "model", "\n".join([line] * 4), 200)
    assert looped.count(line) == 5, looped        # the model goes on with the page: five more copies of the line
    assert is_periodic(looped)
    head = " ".join(planted[0].split()[:12])
    copied = _generate(root / "model", head, 40)
    assert planted[0].startswith(head + copied)   # a planted document reproduced verbatim
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"completion": t}) + "\n" for t in (looped, copied)), encoding="utf-8")
    code, _, err = cli_run("trace", "--index", root / "index", "--input", gens, "--out", tmp_path / "r.jsonl",
                           "--summary", tmp_path / "s.json", "--quiet", "--bootstrap", "0")
    assert code == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    traces = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    # the traces themselves are untouched: the looping generation is a full match of a long span ...
    assert traces[0]["full_match"] and traces[0]["longest_span"] >= 20
    loop_entries = [d["nv_recall"] for s in traces[0]["final_spans"] for d in s["documents"]]
    assert loop_entries and max(loop_entries) > 0.5
    # ... which the metrics leave out and count apart
    assert summary["n_loops"] == 1 and summary["loops"] == pytest.approx(1 / 2)
    assert summary["fmr"] == pytest.approx(1 / 2)     # the copied document only
    assert traces[1]["full_match"]
    other = [d["nv_recall"] for s in traces[1]["final_spans"] for d in s["documents"]]
    left = [s for s in traces[0]["final_spans"] if not _is_loop(s)]
    kept = [d["nv_recall"] for s in left for d in s["documents"]]
    assert summary["nvr"] == pytest.approx(sum(other + kept) / len(other + kept))
    longest = max((s["end"] - s["start"] for s in left), default=0)
    assert summary["als"] == pytest.approx((traces[1]["longest_span"] + longest) / 2)


def _is_loop(span: dict) -> bool:
    return span["end"] - span["start"] >= 20 and is_periodic(span["text"])
