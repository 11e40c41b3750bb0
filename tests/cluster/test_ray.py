"""PropMe on Ray: builds equal local builds file by file, Ray tracing equals local tracing, a killed
build task is recovered, and Ray stays optional (never imported by PropMe, one message when absent).

The Ray tests start a local 2-CPU cluster once per module and are skipped, with the reason, when
Ray is not installed or cannot start here.
"""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from propme_metrics.index.manifest import MANIFEST_NAME, IndexManifest
from propme_metrics.index.sources import CorpusSource
from propme_metrics.trace.ray_search import shard_groups
from propme_metrics.trace.tracer import Tracer
from support.corpora import write_jsonl

SHARDS = 4  # the shards of conftest.corpus_and_local's index


def tree_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def assert_same_index(ray_index: Path, local: Path) -> None:
    """Every file byte-identical except the manifest, whose content matches but for the run record."""
    names = tree_files(local)
    assert tree_files(ray_index) == names
    for name in names:
        if name != MANIFEST_NAME:
            assert filecmp.cmp(local / name, ray_index / name, shallow=False), name
    a, b = IndexManifest.read(local).to_dict(), IndexManifest.read(ray_index).to_dict()
    assert a["build"]["params_hash"] == b["build"]["params_hash"]
    assert "ray" in b["build"]
    for data in (a, b):
        data.pop("build"), data.pop("created")
    assert a == b


def test_shard_groups_cover_every_shard_once():
    for n in range(1, 12):
        for k in range(1, 14):
            groups = shard_groups(n, k)
            assert [p for g in groups for p in g] == list(range(n))
            assert len(groups) == min(n, k) and all(len(g) >= 1 for g in groups)
            assert max(map(len, groups)) - min(map(len, groups)) <= 1


def test_ray_build_equals_local_build(ray_cluster, corpus_and_local, gpt2_dir, tmp_path):
    from propme_metrics.index.format import ray_parts_dir as parts_dir
    from propme_metrics.index.ray_build import build_index_on_ray

    corpus, local, _ = corpus_and_local
    out = tmp_path / "ray-index"
    manifest = build_index_on_ray(CorpusSource(str(corpus)), out, tokenizer=str(gpt2_dir), num_shards=SHARDS,
                                  memory_per_task=512 * 2**20, progress=False, check_space=False)
    assert manifest.complete and manifest.build["ray"]["tasks"] == SHARDS
    assert_same_index(out, local)
    assert not parts_dir(out).exists()
    # the same command again finds the finished index
    again = build_index_on_ray(CorpusSource(str(corpus)), out, tokenizer=str(gpt2_dir), num_shards=SHARDS,
                               progress=False, check_space=False)
    assert again.created == manifest.created


def test_force_ray_build_keeps_the_old_index_until_the_join_is_done(ray_cluster, corpus_and_local, gpt2_dir,
                                                                     tmp_path, monkeypatch):
    """Replacing an index on Ray swaps it atomically, as a local build does: a join interrupted
    before the swap leaves the old index whole, and the next run finishes the replacement."""
    import propme_metrics.index.join as join_module
    from propme_metrics.index.ray_build import build_index_on_ray

    corpus, local, records = corpus_and_local
    out = tmp_path / "ray-index"
    shutil.copytree(local, out)
    before = {name: (out / name).read_bytes() for name in tree_files(out)}
    other = write_jsonl(tmp_path / "other.jsonl", records[:80])
    real = join_module.checksum_files

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(join_module, "checksum_files", interrupted)  # the driver's join only
    with pytest.raises(KeyboardInterrupt):
        build_index_on_ray(CorpusSource(str(other)), out, tokenizer=str(gpt2_dir), num_shards=SHARDS, force=True,
                           memory_per_task=512 * 2**20, progress=False, check_space=False)
    assert {name: (out / name).read_bytes() for name in tree_files(out)} == before
    monkeypatch.setattr(join_module, "checksum_files", real)
    manifest = build_index_on_ray(CorpusSource(str(other)), out, tokenizer=str(gpt2_dir), num_shards=SHARDS,
                                  force=True, memory_per_task=512 * 2**20, progress=False, check_space=False)
    assert manifest.total_documents == 80 and IndexManifest.read(out).total_documents == 80


class DiesOnce(CorpusSource):
    """A corpus whose reader kills its own process (SIGKILL, as the OOM killer would) the first
    time any task reaches document 100; the marker file makes the retry live."""

    marker: str = ""

    def __iter__(self):
        for i, doc in enumerate(super().__iter__()):
            if i == 100 and not os.path.exists(self.marker):
                Path(self.marker).write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            yield doc


def test_killed_task_is_retried_and_the_index_is_the_same(ray_cluster, corpus_and_local, gpt2_dir, tmp_path):
    from propme_metrics.index.ray_build import build_index_on_ray

    corpus, local, _ = corpus_and_local
    source = DiesOnce(str(corpus))
    source.marker = str(tmp_path / "killed")
    out = tmp_path / "ray-index"
    build_index_on_ray(source, out, tokenizer=str(gpt2_dir), num_shards=SHARDS, memory_per_task=512 * 2**20,
                       progress=False, check_space=False)
    assert (tmp_path / "killed").is_file()  # a task really died
    assert int((tmp_path / "killed").read_text()) != os.getpid()
    assert_same_index(out, local)


def test_build_error_in_a_task_is_one_message(ray_cluster, tmp_path, gpt2_dir, capsys):
    from propme.cli import app as cli

    corpus = write_jsonl(tmp_path / "few.jsonl", [{"id": "a", "text": "one document only"}])
    code = cli.main(["index", "build", str(corpus), "--out", str(tmp_path / "idx"), "--tokenizer", str(gpt2_dir),
                     "--shards", "2", "--ray", "--quiet", "--skip-space-check"])
    err = capsys.readouterr().err
    assert code == 2
    assert "shard 1" in err and "got no documents" in err and "Traceback" not in err
    code = cli.main(["index", "build", str(corpus), "--out", str(tmp_path / "idx"), "--tokenizer", str(gpt2_dir),
                     "--ray", "--shard-ids", "0", "--quiet"])
    assert code == 2 and "--shard-ids" in capsys.readouterr().err


def generations(records) -> list[str]:
    texts = [r["text"][:600] for r in records[:24:2]]                       # copies
    texts += [" ".join(r["text"].split()[5:60][::-1]) for r in records[1:20:3]]  # scrambled
    texts += ["", "Nothing in this sentence was ever written in the corpus, zyx."]
    return texts


def test_ray_tracing_equals_local_tracing(ray_cluster, corpus_and_local):
    from propme_metrics.trace.ray_search import ray_tracer

    _, local, records = corpus_and_local
    texts = generations(records)
    expected = [json.dumps(r.to_dict(), ensure_ascii=False) for r in Tracer(local).trace(texts)]
    tracer = ray_tracer(local, actors=2)
    try:
        assert [list(g.positions) for g in tracer.search.shards] == [[0, 1], [2, 3]]  # 2 actors x 2 shards
        for workers in (1, 3):
            got = [json.dumps(r.to_dict(), ensure_ascii=False) for r in tracer.trace(texts, workers=workers)]
            assert got == expected
    finally:
        tracer.close()
    assert any(json.loads(e)["full_match"] for e in expected)  # the comparison covers real matches


def test_cli_trace_on_ray(ray_cluster, corpus_and_local, tmp_path, capsys):
    from propme.cli import app as cli

    _, local, records = corpus_and_local
    rows = tmp_path / "gens.jsonl"
    write_jsonl(rows, [{"key": str(i), "completion": t} for i, t in enumerate(generations(records)[:6])])
    outs = {}
    for name, extra in (("local", []), ("ray", ["--ray", "--actors", "2", "--workers", "2"])):
        code = cli.main(["trace", "--index", str(local), "--input", str(rows), "--out", str(tmp_path / f"{name}.jsonl"),
                         "--summary", str(tmp_path / f"{name}.json"), "--quiet", *extra])
        assert code == 0, capsys.readouterr().err
        outs[name] = (tmp_path / f"{name}.jsonl").read_bytes()
    assert outs["ray"] == outs["local"]


def test_lm_eval_hook_on_ray_equals_local(ray_cluster, corpus_and_local):
    from propme_metrics.trace.result import TraceConfig
    from propme_tasks import hooks

    _, local, records = corpus_and_local
    doc = {"id": "p1", "setting": "generic", "index_path": str(local),
           "trace_config": json.dumps(TraceConfig().to_dict(), sort_keys=True)}
    gens = generations(records)[:4]
    on_ray = {**doc, "trace_backend": hooks.trace_backend({"trace_backend": "ray", "trace_ray_actors": "2"}).to_json()}
    assert json.loads(on_ray["trace_backend"]) == {"backend": "ray", "address": None, "actors": 2}
    assert hooks.process_results(on_ray, [gens]) == hooks.process_results(doc, [gens])
    # traced in bulk by the first aggregation, two driver threads keeping the actors busy
    ray_items = [hooks.process_results({**on_ray, "id": f"p{i}", "trace_workers": 2}, [gens[i:i + 2]])
                 for i in (0, 2)]
    assert hooks.agg_trace_failures([it["trace"] for it in ray_items]) == 0
    local_items = [hooks.process_results({**doc, "id": f"p{i}", "trace_workers": 1}, [gens[i:i + 2]]) for i in (0, 2)]
    assert ray_items == local_items
    with pytest.raises(hooks.TaskConfigError, match="'local' or 'ray'"):
        hooks.trace_backend({"trace_backend": "spark"})


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_propme_never_imports_ray():
    proc = _run_python("import sys; import propme.cli.app, propme_metrics.trace.tracer, propme_metrics.index.ray_build, propme_metrics.trace.ray_search, "
                       "propme_metrics.index.build, propme_tasks.hooks; print('ray' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_without_ray_the_flags_give_one_message(synthetic_index, tmp_path):
    hide = "import sys; sys.modules['ray'] = None; from propme.cli import app as cli; "
    write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "some text"}])
    build = _run_python(hide + f"sys.exit(cli.main(['index', 'build', {str(tmp_path / 'c.jsonl')!r}, '--out', "
                        f"{str(tmp_path / 'i')!r}, '--tokenizer', {str(synthetic_index / 'propme-tokenizer')!r}, "
                        "'--ray', '--quiet']))")
    write_jsonl(tmp_path / "g.jsonl", [{"completion": "some text"}])
    trace = _run_python(hide + f"sys.exit(cli.main(['trace', '--index', {str(synthetic_index)!r}, '--input', "
                        f"{str(tmp_path / 'g.jsonl')!r}, '--out', {str(tmp_path / 'o.jsonl')!r}, '--summary', "
                        f"{str(tmp_path / 's.json')!r}, '--ray', '--quiet']))")
    for proc in (build, trace):
        assert proc.returncode == 2, proc.stderr
        assert "needs Ray, which is not installed" in proc.stderr and 'pip install "propme[ray]"' in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "i").exists()
