"""The contamination check with its shards on Ray (issue 34): the same items, coverage, longest
matches and sources as the local search, and the same contamination files.

Uses the local 2-CPU cluster and the 4-shard index of test_ray.py (slow, as every Ray test)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from propme_metrics.contamination.check import KgramCounts, apply_rule, match_items
from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.match import CorpusMatcher
from propme_metrics.contamination.rule import ContaminationRule
from propme_metrics.index.reader import open_index


def _items(records) -> list[BenchmarkItem]:
    """Items copied from documents, the same with words reversed, and text found nowhere."""
    items = []
    for i, r in enumerate(records[:30]):
        words = r["text"].split()[:40]
        if i % 3 == 1:
            words = words[::-1]
        elif i % 3 == 2:
            words = [f"zq{i}x{j}" for j in range(len(words))]
        question, answer = " ".join(words[:30]), " ".join(words[30:])
        items.append(BenchmarkItem("t", i, question, answer, f"{question} {answer}"))
    return items


def test_contamination_on_ray_equals_local(ray_cluster, corpus_and_local, tmp_path, monkeypatch):  # noqa: F811
    import propme_metrics.contamination.match as match
    from propme_metrics.contamination.assess import check_tasks
    from propme_metrics.report.contamination_views import write_outputs
    from propme_metrics.trace.ray_search import ray_search

    monkeypatch.setattr(match, "WORKER_CHUNK", 4)  # several jobs for the driver threads
    _, local, records = corpus_and_local
    index = open_index(local)
    items = _items(records)
    rule = ContaminationRule()
    local_matcher = CorpusMatcher(index)
    expected = apply_rule("t", match_items(items, local_matcher), rule, KgramCounts(local_matcher))
    search = ray_search(index, actors=2)
    try:
        assert [list(g.positions) for g in search.shards] == [[0, 1], [2, 3]]
        for workers in (1, 3):
            matcher = CorpusMatcher(index, workers=workers, search=search)
            got = apply_rule("t", match_items(items, matcher), rule, KgramCounts(matcher))
            for a, b in zip(expected.items, got.items):
                assert a.to_dict(rule) == b.to_dict(rule)
                assert all(np.array_equal(a.matches[f].lengths, b.matches[f].lengths) for f in a.matches)
        write_outputs(tmp_path / "ray", check_tasks(index, [("t", items)], rule, 2, search=search))
    finally:
        search.close()
    write_outputs(tmp_path / "local", check_tasks(index, [("t", items)], rule, 1))
    for name in ("contamination.csv", "contamination.md"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    assert (tmp_path / "ray" / "contamination_items.jsonl").read_bytes() == \
        (tmp_path / "local" / "contamination_items.jsonl").read_bytes()
    flagged = [json.loads(line)["contaminated"] for line in (tmp_path / "local" / "contamination_items.jsonl").open()]
    assert 0 < sum(flagged) < len(flagged)  # the comparison covers both verdicts


def test_actors_must_be_positive(cli_run, corpus_and_local, tmp_path):  # noqa: F811
    code, _, err = cli_run("contamination", "--tasks", "x", "--index", corpus_and_local[1], "--ray", "--actors", "0",
                           "--out", tmp_path / "c")
    assert code == 2 and "--actors" in err


@pytest.mark.parametrize("actors", [0, -1])
def test_ray_search_refuses_no_actors(corpus_and_local, actors):  # noqa: F811
    from propme_metrics.core.errors import ConfigError
    from propme_metrics.trace.ray_search import ray_search

    with pytest.raises(ConfigError, match="--actors"):
        ray_search(open_index(corpus_and_local[1]), actors=actors)
