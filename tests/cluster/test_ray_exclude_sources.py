"""`index build --ray --exclude-sources` reports what it left out and refuses a misspelt source, as
the local build does (issue 35, item 16), and its index equals the local build's."""
from __future__ import annotations

import json

from propme_metrics.index.manifest import IndexManifest
from support.corpora import write_jsonl

SOURCES = {"retsinformation": 5, "depbank": 3, "wiki": 4}


def _corpus(path):
    docs = [{"id": f"{s}-{i}", "source": s, "text": f"Document {i} of {s} tells of ferries, bridges and harbours."}
            for s, n in SOURCES.items() for i in range(n)]
    return write_jsonl(path, docs)


def _build(corpus, out, tok, *extra):
    return ["index", "build", corpus, "--out", out, "--tokenizer", tok, "--quiet", "--skip-space-check",
            "--shards", "2", *extra]


def test_ray_build_reports_and_checks_excluded_sources(ray_cluster, tmp_path, gpt2_dir, cli_run):
    corpus = _corpus(tmp_path / "c.jsonl")
    code, local_out, err = cli_run(*_build(corpus, tmp_path / "local", gpt2_dir, "--exclude-sources", "depbank"))
    assert code == 0, err
    code, out, err = cli_run(*_build(corpus, tmp_path / "ray", gpt2_dir, "--exclude-sources", "depbank", "--ray"))
    assert code == 0, err
    assert "left out by --exclude-sources: depbank (3 documents)" in out and "9 documents" in out
    ray_manifest, local_manifest = IndexManifest.read(tmp_path / "ray"), IndexManifest.read(tmp_path / "local")
    assert ray_manifest.build["excluded_documents"] == local_manifest.build["excluded_documents"] == {"depbank": 3}
    assert ray_manifest.total_documents == local_manifest.total_documents == 9
    sources = {m["source"] for line in (tmp_path / "ray").glob("metadata.*") for m in map(json.loads, line.open())}
    assert sources == {"retsinformation", "wiki"}

    code, _, err = cli_run(*_build(corpus, tmp_path / "ray2", gpt2_dir, "--exclude-sources", "depbnak,wiki", "--ray"))
    assert code == 2 and "'depbnak'" in err and "did you mean 'depbank'" in err, err
    assert not [p.name for p in tmp_path.iterdir() if "ray2" in p.name]  # nor its parts: nothing to resume
