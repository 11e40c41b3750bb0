"""The shipped task YAML (issue 11): every corpus group has the five settings, the prompt-free ones
sample, and the published groups carry the published final configuration."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lm_eval.tasks._yaml_loader import load_yaml

from propme_tasks import hooks
from propme_tasks.custom import LIKELIHOOD_TASK_VERSION, TASK_VERSION
from propme_tasks.discovery import tasks_path

SETTINGS = ("generic", "specific", "prefix", "unconditional", "minimal_cue")
LANGUAGES = {"dynaword": "da", "common_pile": "en", "dolma3": "en", "demo": "da"}
SAMPLED = {"until": [], "do_sample": True, "temperature": 0.7, "top_p": 0.95, "max_gen_toks": 256}
GREEDY = {"until": [], "do_sample": False, "max_gen_toks": 256}
#: the published groups' own version (raised with TASK_VERSION whenever results change)
PUBLISHED_VERSION = 5.0


def _load(path: Path) -> dict:
    return load_yaml(path, resolve_func=False, recursive=True)


@pytest.mark.parametrize("corpus", sorted(LANGUAGES))
def test_default_groups(corpus):
    folder = Path(tasks_path(), corpus)
    group = _load(folder / f"_propme_{corpus}.yaml")
    assert group["group"] == f"propme_{corpus}"
    assert group["task"] == [f"propme_{corpus}_{s}" for s in SETTINGS] + [f"propme_{corpus}_likelihood"]
    assert group["metadata"] == {"version": TASK_VERSION}
    for setting in SETTINGS:
        cfg = _load(folder / f"propme_{corpus}_{setting}.yaml")
        assert cfg["task"] == f"propme_{corpus}_{setting}" and cfg["doc_to_text"] == "model_prompt"
        assert cfg["target_delimiter"] == ""  # nothing between prompt and generation
        assert cfg["metadata"] == {"version": TASK_VERSION, "corpus": corpus, "setting": setting,
                                   "language": LANGUAGES[corpus]}
        expected = SAMPLED if setting in ("unconditional", "minimal_cue") else GREEDY
        assert cfg["generation_kwargs"] == expected, (corpus, setting)


@pytest.mark.parametrize("corpus", ["dynaword", "common_pile", "dolma3"])
def test_published_groups(corpus):
    folder = Path(tasks_path(), corpus)
    group = _load(folder / f"_propme_{corpus}_published.yaml")
    assert group["group"] == f"propme_{corpus}_published"
    assert group["task"] == [f"propme_{corpus}_published_{s}" for s in SETTINGS] + \
        [f"propme_{corpus}_published_likelihood"]
    default = _load(folder / f"propme_{corpus}_generic.yaml")
    for setting in SETTINGS:
        cfg = _load(folder / f"propme_{corpus}_published_{setting}.yaml")
        assert cfg["generation_kwargs"] == SAMPLED
        assert cfg["metadata"] == {"version": PUBLISHED_VERSION, "corpus": corpus, "setting": setting,
                                   "language": LANGUAGES[corpus], "n_prompts": 1000, "generations_per_prompt": 10,
                                   "prompt_free_generations": 1000, "prompt_seed": 42, "max_prompt_tokens": 256,
                                   "trace_mode": "mixed"}
        # the same template otherwise: hooks, metrics, output type
        for key in ("custom_dataset", "process_results", "metric_list", "output_type", "doc_to_text", "target_delimiter"):
            assert str(cfg[key]) == str(default[key]), key


@pytest.mark.parametrize("corpus", sorted(LANGUAGES))
def test_likelihood_subtasks(corpus):
    """The sixth subtask: the prefix documents scored by likelihood, its own template."""
    folder = Path(tasks_path(), corpus)
    template = _load(Path(tasks_path(), "_likelihood_template_yaml"))
    names = [f"propme_{corpus}_likelihood"] + ([] if corpus == "demo" else [f"propme_{corpus}_published_likelihood"])
    for name in names:
        cfg = _load(folder / f"{name}.yaml")
        assert cfg["task"] == name and cfg["output_type"] == "loglikelihood" and cfg["target_delimiter"] == ""
        assert (cfg["doc_to_text"], cfg["doc_to_target"]) == ("model_prompt", "continuation")
        assert cfg["metric_list"] == template["metric_list"] and "generation_kwargs" not in cfg
        expected = {"version": LIKELIHOOD_TASK_VERSION, "corpus": corpus, "setting": "prefix", "measure": "likelihood",
                    "language": LANGUAGES[corpus]}
        if "published" in name:  # the published prefix documents: 1,000 drawn with seed 42
            prefix = _load(folder / f"propme_{corpus}_published_prefix.yaml")["metadata"]
            expected |= {k: prefix[k] for k in ("n_prompts", "prompt_seed", "max_prompt_tokens")}
        assert cfg["metadata"] == expected
        # the old name, an alias for one release: the same subtask, its metadata whole (an include's
        # `metadata:` would replace the included one)
        old = name.replace("_likelihood", "_prefix_likelihood")
        alias = yaml.safe_load((folder / f"{old}.yaml").read_text(encoding="utf-8"))
        assert alias == {"include": f"{name}.yaml", "task": old, "metadata": expected}
        assert {k: v for k, v in _load(folder / f"{old}.yaml").items() if k != "task"} == \
            {k: v for k, v in _load(folder / f"{name}.yaml").items() if k != "task"}


def test_no_subtask_name_begins_with_another():
    """Tools find a task's samples file by `samples_<task>_*.jsonl` (Every Eval Ever's lm-eval converter):
    no task that a group runs may begin with another task's name and an underscore."""
    names = set()
    for group in Path(tasks_path()).glob("*/_propme_*.yaml"):
        names |= set(_load(group)["task"])
    assert len(names) > 40
    clashes = [(a, b) for a in names for b in names if a != b and b.startswith(f"{a}_")]
    assert clashes == []


def test_published_metadata_reaches_the_loader(demo_paths, tmp_path, monkeypatch):
    """The published keys work on any index (here the demo's, with fewer prompts than 1,000)."""
    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    meta = _load(Path(tasks_path(), "dynaword", "propme_dynaword_published_prefix.yaml"))["metadata"]
    meta = dict(meta, corpus="demo", demo_index=str(demo_paths.index), n_prompts=3, max_prompt_tokens=20,
                pretrained=str(demo_paths.model))
    docs = hooks.load_prompts(**meta)["test"]
    assert len(docs) == 3 * 10 and sorted(set(docs["sample_ix"])) == list(range(10))
    assert '"mode": "mixed"' in docs[0]["trace_config"]
    from propme_metrics.index.reader import Index
    from propme_metrics.prompts.prompt_set import build_prompt_set

    index = Index(demo_paths.index)
    original = {r.id: r.prompt for r in build_prompt_set(index, "prefix", n=3, seed=42).records}
    for doc in docs:  # left-truncated to the last 20 index tokens, like vLLM's truncate_prompt_tokens
        ids = index.encode(original[doc["id"]])
        assert len(ids) > 20 and doc["prompt"] == index.decode(ids[-20:])
        assert doc["model_prompt"] == "<|endoftext|>" + doc["prompt"]
    free = hooks.load_prompts(**dict(meta, setting="minimal_cue", prompt_free_generations=7))["test"]
    assert len(free) == 7 and set(free["sample_ix"]) == {0}  # one generation per record, not 10
