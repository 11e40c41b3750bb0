"""lm-eval's own checks of a contributed task (the `BaseTasks` tests of its tests/test_tasks.py), run
over every PropMe subtask: the default groups of dynaword, common_pile, dolma3 and demo and the published
groups, all on one small index with prompt files built here.

What lm-eval checks, in PropMe's words: the dataset loads; the split flags are booleans and a split
that is claimed is named; decontamination is off or has a query; the prompt (`doc_to_text`) is text
that does not end in white space when lm-eval would put white space after it (`target_delimiter`);
targets are readable; requests can be built for the whole task and one per document. PropMe adds
what is true of its own tasks: they are test-only, the prompt is the document-start token and the
prompt exactly (a prefix prompt is a document's first 50 index tokens, white space at its end
included), nothing is put between prompt and generation, and every request is one generation.
"""
from __future__ import annotations

import json
from itertools import islice

import pytest

from propme_metrics.index.reader import Index
from propme_metrics.prompts.prompt_set import build_prompt_set, write_prompt_set
from propme_metrics.prompts.settings import PREFIX, PREFIX_TOKENS, SETTINGS
from propme_tasks import task_manager
from support.corpora import make_index, write_jsonl

CORPORA = {"dynaword": "da", "common_pile": "en", "dolma3": "en", "demo": "da"}
PUBLISHED = ("dynaword", "common_pile", "dolma3")
GROUPS = [f"propme_{c}" for c in CORPORA] + [f"propme_{c}_published" for c in PUBLISHED]
#: every setting's subtask and the prefix documents scored by likelihood, in every group
SUBTASKS = sorted(f"{g}_{s}" for g in GROUPS for s in (*SETTINGS, "likelihood"))
LIMIT = 10  # documents each check reads (lm-eval's `limit` fixture)


@pytest.fixture(scope="module")
def verse_index(tmp_path_factory, gpt2_dir, synthetic_records):
    """An index of the synthetic documents set as short lines (a newline every five words), so that
    some prefix prompts end in a newline, as prompts of real documents (lists, verse, headings) do."""
    root = tmp_path_factory.mktemp("verse")
    records = []
    for rec in synthetic_records[:40]:
        words = rec["text"].split()
        records.append({**rec, "text": "\n".join(" ".join(words[i:i + 5]) for i in range(0, len(words), 5))})
    make_index(write_jsonl(root / "corpus.jsonl", records), root / "index", gpt2_dir, cpus=1)
    return root / "index"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory, verse_index, gpt2_dir):
    """Every PropMe subtask, built by lm-eval's TaskManager on one small index (GPT-2 tokenizer), with
    prompt files of LIMIT prompts per prompted setting and language."""
    root = tmp_path_factory.mktemp("conformance")
    index = Index(verse_index)
    prefix = write_prompt_set(build_prompt_set(index, PREFIX, n=LIMIT, seed=42), root / "prefix.jsonl")
    metadata = {"tokenizer": str(gpt2_dir), "cache_dir": str(root / "cache"), "prompt_free_generations": LIMIT}
    for corpus, language in CORPORA.items():
        metadata[f"{corpus}_index"] = str(verse_index)
        metadata[f"{corpus}_{PREFIX}_prompts"] = str(prefix)
        for setting in ("generic", "specific"):
            path = root / f"{setting}-{language}.jsonl"
            if not path.exists():
                write_prompt_set(build_prompt_set(index, setting, n=LIMIT, seed=42, language=language), path)
            metadata[f"{corpus}_{setting}_prompts"] = str(path)
    return task_manager(metadata=metadata).load(GROUPS)["tasks"]


@pytest.fixture(params=SUBTASKS)
def task(request, tasks):
    return tasks[request.param]


def _scored_by_likelihood(task) -> bool:
    return task.config.task.endswith("_likelihood")


def _docs(task) -> list[dict]:
    return list(islice(task.test_docs() if task.has_test_docs() else task.validation_docs(), LIMIT))


def test_every_subtask_is_checked(tasks):
    assert sorted(tasks) == SUBTASKS


def test_download(task):
    task.download()
    assert task.dataset is not None and len(task.dataset["test"]) >= LIMIT


def test_splits(task):
    flags = (task.has_training_docs(), task.has_validation_docs(), task.has_test_docs())
    assert all(flag in (True, False) for flag in flags)
    for flag, split in zip(flags, ("training_split", "validation_split", "test_split")):
        if flag:
            assert task.config[split] is not None, split
    assert flags == (False, False, True)  # PropMe's tasks are test-only: there is nothing to train on


def test_decontamination(task):
    assert task.should_decontaminate() in (True, False)
    if task.should_decontaminate():
        assert task.config.doc_to_decontamination_query is not None


def test_doc_to_text(task):
    delimiter = task.config.target_delimiter
    assert delimiter == ""  # nothing is put between a prompt and the model's generation
    index = Index(task.config.metadata[f"{task.config.metadata['corpus']}_index"])
    for doc in _docs(task):
        text = task.doc_to_text(doc)
        assert isinstance(text, str)
        # lm-eval's rule: no prompt ending in white space when white space is put after it
        assert not (delimiter.isspace() and text and text[-1].isspace())
        assert text == doc["start_token"] + doc["prompt"] == doc["model_prompt"]
        if task.config.metadata["setting"] == PREFIX:  # exactly a document's first 50 tokens
            source = index.document(int(json.loads(doc["source_doc"])["doc_ix"]))
            assert doc["prompt"] == index.decode(source.token_ids[:PREFIX_TOKENS].tolist())


def test_some_prefix_prompts_end_in_white_space(tasks):
    """Why `target_delimiter` must be "": with lm-eval's default " " these prompts fail its rule."""
    ends = [doc["prompt"][-1].isspace() for doc in tasks["propme_demo_prefix"].test_docs()]
    assert any(ends) and not all(ends)


def test_doc_to_target(task):
    for doc in _docs(task):
        target = task.doc_to_target(doc)
        assert isinstance(target, str)
        assert bool(target) == (task.config.metadata["setting"] == PREFIX)  # the true continuation


def test_build_all_requests(task):
    task.build_all_requests(rank=0, limit=LIMIT, world_size=1)
    assert task.instances is not None and len(task.instances) == LIMIT
    expected = "loglikelihood" if _scored_by_likelihood(task) else "generate_until"
    assert all(i.request_type == expected for i in task.instances)


def test_construct_requests(task):
    docs = _docs(task)
    requests = [task.construct_requests(doc=doc, ctx=task.doc_to_text(doc)) for doc in docs]
    assert len(requests) == len(docs) == LIMIT
    for doc, req in zip(docs, requests):
        prompt, second = req.arguments
        assert prompt == doc["model_prompt"]
        if _scored_by_likelihood(task):  # (context, the true continuation), nothing between them
            assert second == task.doc_to_target(doc) and second
        else:
            assert second == task.config.generation_kwargs
