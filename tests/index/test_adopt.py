"""`propme index adopt`: indexes written by infini-gram's own indexer (built here, offline), adopted
read-only, give the traces of PropMe's own build of the same corpus; damage is refused with the file named."""
from __future__ import annotations

import os
import random
import shutil
import stat
from pathlib import Path

import pytest

from propme.demo.synthetic import generate_corpus
from propme_metrics.core.checksums import file_digest
from propme_metrics.index.build import build_index
from propme_metrics.index.format import unwrap_metadata
from propme_metrics.index.manifest import IndexManifest
from propme_metrics.index.reader import open_index
from propme_metrics.index.source_counts import index_source_counts, source_of
from propme_metrics.index.sources import CorpusSource
from propme_metrics.testing import infini_gram_index, word_level_tokenizer, write_jsonl
from propme_metrics.trace.tracer import Tracer


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A folder with one .jsonl file of 90 generated documents {id, source, text}."""
    folder = tmp_path_factory.mktemp("ig-corpus") / "corpus"
    records = [{"id": r["id"], "source": r["source"], "text": r["text"]} for r in generate_corpus(90, seed=3)]
    write_jsonl(folder / "docs.jsonl", records)
    return folder


@pytest.fixture(scope="module")
def ig_two(corpus, tmp_path_factory) -> Path:
    """infini-gram's 2-shard 16-bit index of the corpus, with metadata and unigrams, made read-only."""
    out = infini_gram_index(corpus, tmp_path_factory.mktemp("ig2") / "ig", shards=2, metadata=True, unigram=True)
    _read_only(out)
    return out


@pytest.fixture(scope="module")
def ig_wide(corpus, tmp_path_factory) -> Path:
    """infini-gram's 1-shard 32-bit index of the corpus without metadata or unigrams, read-only."""
    out = infini_gram_index(corpus, tmp_path_factory.mktemp("ig4") / "ig", shards=1, token_dtype="u32",
                            metadata=False, unigram=False)
    _read_only(out)
    return out


def _read_only(folder: Path) -> None:
    for p in [folder, *folder.iterdir()]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _snapshot(folder: Path) -> dict:
    """Every entry of the folder: name, mode, size, mtime and content digest."""
    return {p.name: (p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns, file_digest(p) if p.is_file() else None)
            for p in sorted([folder, *folder.iterdir()])}


def _own(corpus: Path, out: Path, gpt2_dir: Path, keep_fields=("id", "source"), **kwargs) -> Path:
    build_index(CorpusSource(str(corpus), keep_fields=list(keep_fields)), out, tokenizer=str(gpt2_dir),
                progress=False, check_space=False, **kwargs)
    return out


def _generations(corpus: Path, n: int = 24) -> list[str]:
    """Texts that quote the corpus (whole, cut mid-word, glued to novel words) and some that do not."""
    import json

    docs = [json.loads(line)["text"] for line in (corpus / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    rng = random.Random(5)
    out = []
    for i in range(n):
        text = docs[rng.randrange(len(docs))]
        a = rng.randrange(len(text) // 2)
        quote = text[a:a + rng.randrange(40, 400)]
        out.append([quote, f"Zebra quux {quote} blorp", quote + " " + docs[i][:80], "nothing like it qwzx vvb"][i % 4])
    return out


def _traces(index: Path, texts: list[str]) -> list[dict]:
    return [r.to_dict() for r in Tracer(index).trace(texts)]


@pytest.fixture(scope="module")
def adopted_two(ig_two, gpt2_dir, tmp_path_factory) -> Path:
    from propme_metrics.index.adopt import adopt_index

    out = tmp_path_factory.mktemp("adopted2") / "index"
    adopt_index(ig_two, out, str(gpt2_dir), progress=False)
    return out


def test_adopting_a_read_only_folder_changes_nothing_in_it(ig_two, gpt2_dir, tmp_path, cli_run):
    before = _snapshot(ig_two)
    code, out, err = cli_run("index", "adopt", ig_two, "--tokenizer", gpt2_dir, "--out", tmp_path / "a", "--quiet")
    assert code == 0, err
    assert "2 shard(s)" in out and "tokenizer" in out and "suffix array" in out
    assert _snapshot(ig_two) == before
    manifest = IndexManifest.read(tmp_path / "a")
    assert manifest.adopted["from"] == [str(ig_two)] and manifest.adopted["computed"] == []
    assert {c["name"] for c in manifest.adopted["checks"]} >= {"token width", "documents", "unigram counts",
                                                                "suffix array", "tokenizer", "metadata", "checksums"}
    # the same command again is a no-op (the same index), still without writing into the folder
    code, _, err = cli_run("index", "adopt", ig_two, "--tokenizer", gpt2_dir, "--out", tmp_path / "a", "--quiet")
    assert code == 0, err
    assert IndexManifest.read(tmp_path / "a").created == manifest.created
    assert _snapshot(ig_two) == before


def test_adopted_traces_equal_propme_own_build(corpus, ig_two, adopted_two, gpt2_dir, tmp_path):
    own = _own(corpus, tmp_path / "own", gpt2_dir, num_shards=2)
    texts = _generations(corpus)
    adopted, built = _traces(adopted_two, texts), _traces(own, texts)
    assert sum(bool(t["final_spans"]) for t in built) >= len(texts) // 2  # the comparison has spans to compare
    for a, b in zip(adopted, built):
        assert a == b
    # the infini-gram metadata lines name the documents' sources as the own build does
    assert index_source_counts(adopted_two).sources == IndexManifest.read(own).source_counts


def test_propme_trace_on_an_adopted_index_writes_the_own_build_traces(corpus, adopted_two, tmp_path, gpt2_dir, cli_run):
    import json

    own = _own(corpus, tmp_path / "own", gpt2_dir, num_shards=2)
    inp = write_jsonl(tmp_path / "g.jsonl", [{"id": str(i), "completion": t} for i, t in enumerate(_generations(corpus, 8))])
    rows = {}
    for name, index in (("adopted", adopted_two), ("own", own)):
        code, _, err = cli_run("trace", "--index", index, "--input", inp, "--out", tmp_path / f"{name}.jsonl",
                               "--summary", tmp_path / f"{name}.json", "--quiet")
        assert code == 0, err
        rows[name] = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    assert len(rows["adopted"]) == 8 and rows["adopted"] == rows["own"]


def test_adopted_wide_index_without_metadata_computes_what_is_missing(corpus, ig_wide, gpt2_dir, tmp_path, cli_run):
    before = _snapshot(ig_wide)
    code, out, err = cli_run("index", "adopt", ig_wide, "--tokenizer", gpt2_dir, "--out", tmp_path / "a", "--quiet")
    assert code == 0, err
    assert _snapshot(ig_wide) == before
    manifest = IndexManifest.read(tmp_path / "a")
    assert manifest.token_width == 4
    assert manifest.adopted["computed"] == ["metadata.0", "metaoff.0", "unigram.0"]
    own = _own(corpus, tmp_path / "own", gpt2_dir, keep_fields=(), token_width=4)
    assert (tmp_path / "a" / "unigram.0").read_bytes() == (own / "unigram.0").read_bytes()
    texts = _generations(corpus, 12)
    assert _traces(tmp_path / "a", texts) == _traces(own, texts)
    code, out, _ = cli_run("index", "verify", tmp_path / "a", "--full")
    assert code == 0, out


def test_verify_and_info_work_on_an_adopted_index(adopted_two, ig_two, cli_run):
    code, out, _ = cli_run("index", "verify", adopted_two, "--full")
    assert code == 0 and "index verified" in out and "adopted infini-gram files by their sampled blocks" in out
    code, out, _ = cli_run("index", "info", adopted_two)
    assert code == 0 and "adopted from" in out and str(ig_two) in out


def test_info_on_an_infini_gram_folder_says_how_to_adopt_it(ig_two, cli_run):
    code, _, err = cli_run("index", "info", ig_two)
    assert code == 3 and "infini-gram's indexer" in err and "propme index adopt" in err


def _copy(ig: Path, dest: Path) -> Path:
    shutil.copytree(ig, dest)
    for p in [dest, *dest.iterdir()]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    return dest


@pytest.mark.parametrize("name", ["table.0", "tokenized.1", "offset.0", "metaoff.1"])
def test_a_truncated_shard_file_is_refused_at_adoption(ig_two, gpt2_dir, tmp_path, cli_run, name):
    ig = _copy(ig_two, tmp_path / "ig")
    with open(ig / name, "r+b") as fh:
        fh.truncate(os.path.getsize(ig / name) - 8)
    code, _, err = cli_run("index", "adopt", ig, "--tokenizer", gpt2_dir, "--out", tmp_path / "a", "--quiet")
    assert code == 3 and name in err, err
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("name", ["tokenized.0", "table.1"])
def test_a_flipped_byte_is_refused_at_opening_and_verify(ig_two, gpt2_dir, tmp_path, cli_run, name):
    ig = _copy(ig_two, tmp_path / "ig")
    code, _, err = cli_run("index", "adopt", ig, "--tokenizer", gpt2_dir, "--out", tmp_path / "a", "--quiet")
    assert code == 0, err
    with open(ig / name, "r+b") as fh:  # inside the first sampled block
        fh.seek(101)
        byte = fh.read(1)
        fh.seek(101)
        fh.write(bytes([byte[0] ^ 0x10]))
    code, _, err = cli_run("index", "verify", tmp_path / "a")
    assert code == 3 and name in err and "adopted" in err, err
    code, _, err = cli_run("trace", "--index", tmp_path / "a", "--input", tmp_path / "none.jsonl",
                           "--out", tmp_path / "r.jsonl")
    assert code in (2, 3) and "Traceback" not in err


def test_a_flipped_byte_in_a_sampled_suffix_pair_is_refused_at_adoption(ig_two, gpt2_dir, tmp_path, cli_run):
    ig = _copy(ig_two, tmp_path / "ig")
    data = bytearray((ig / "table.0").read_bytes())
    data[0:2], data[2:4] = data[2:4], data[0:2]  # the first two suffixes swapped: out of order
    (ig / "table.0").write_bytes(bytes(data))
    code, _, err = cli_run("index", "adopt", ig, "--tokenizer", gpt2_dir, "--out", tmp_path / "a", "--quiet")
    assert code == 3 and "table.0" in err and "out of order" in err, err


def test_a_moved_infini_gram_folder_is_named_when_the_index_opens(ig_two, gpt2_dir, tmp_path, cli_run):
    ig = _copy(ig_two, tmp_path / "ig")
    assert cli_run("index", "adopt", ig, "--tokenizer", gpt2_dir, "--out", tmp_path / "a", "--quiet")[0] == 0
    ig.rename(tmp_path / "elsewhere")
    code, _, err = cli_run("index", "info", tmp_path / "a")
    assert code == 3 and str(ig / "tokenized.0") in err and "propme index adopt" in err, err


def test_the_wrong_tokenizer_is_refused(ig_two, tmp_path, cli_run):
    small = word_level_tokenizer(tmp_path / "words", 300)
    code, _, err = cli_run("index", "adopt", ig_two, "--tokenizer", small, "--out", tmp_path / "a", "--quiet")
    assert code == 2 and "another tokenizer" in err, err
    assert not (tmp_path / "a").exists()


def test_a_tokenizer_of_the_same_size_that_numbers_pieces_otherwise_is_refused(ig_two, gpt2_dir, tmp_path, cli_run):
    """GPT-2's pieces and merges with every id but the last moved by 1,000: the ids fit, the texts do not."""
    import json

    data = json.loads((gpt2_dir / "tokenizer.json").read_text(encoding="utf-8"))
    last = max(data["model"]["vocab"].values())
    data["model"]["vocab"] = {p: i if i == last else (i + 1000) % last for p, i in data["model"]["vocab"].items()}
    other = tmp_path / "shifted"
    other.mkdir()
    (other / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    shutil.copy(gpt2_dir / "tokenizer_config.json", other / "tokenizer_config.json")
    code, _, err = cli_run("index", "adopt", ig_two, "--tokenizer", other, "--out", tmp_path / "a", "--quiet")
    assert code == 2 and "does not reproduce the tokens" in err, err
    assert not (tmp_path / "a").exists()


def test_a_source_field_no_document_has_is_refused(ig_two, gpt2_dir, tmp_path, cli_run):
    code, _, err = cli_run("index", "adopt", ig_two, "--tokenizer", gpt2_dir, "--out", tmp_path / "a",
                           "--source-field", "meta.pile_set_name", "--quiet")
    assert code == 2 and "meta.pile_set_name" in err and "id, source" in err, err


def test_the_folders_of_an_index_published_in_parts_make_one_index(corpus, ig_two, ig_wide, tmp_path_factory,
                                                                     gpt2_dir, cli_run):
    """Two folders of 16-bit shards (0, 1 and 0, 1 again) adopted together: 4 shards, the documents of both,
    and the traces of an own 4-shard build of the corpus twice over; a folder of other tokens is refused."""
    root = tmp_path_factory.mktemp("parts")
    code, _, err = cli_run("index", "adopt", ig_two, ig_two, "--tokenizer", gpt2_dir, "--out", root / "x", "--quiet")
    assert code == 2 and "twice" in err
    second = _copy(ig_two, root / "second")
    code, out, err = cli_run("index", "adopt", ig_two, second, "--tokenizer", gpt2_dir, "--out", root / "a", "--quiet")
    assert code == 0, err
    manifest = IndexManifest.read(root / "a")
    assert manifest.num_shards == 4 and manifest.total_documents == 180
    assert os.readlink(root / "a" / "tokenized.3") == str(second / "tokenized.1")
    twice = corpus.parent / "twice"
    twice.mkdir()
    text = (corpus / "docs.jsonl").read_text(encoding="utf-8")
    (twice / "docs.jsonl").write_text(text + text, encoding="utf-8")
    texts = _generations(corpus, 8)
    adopted = [len(t["final_spans"]) and t["final_spans"][0]["count"] for t in _traces(root / "a", texts)]
    own = [len(t["final_spans"]) and t["final_spans"][0]["count"]
           for t in _traces(_own(twice, root / "own", gpt2_dir, num_shards=4), texts)]
    assert adopted == own and any(adopted)
    code, _, err = cli_run("index", "adopt", ig_two, ig_wide, "--tokenizer", gpt2_dir, "--out", root / "b", "--quiet")
    assert code == 3 and "mix 16- and 32-bit" in err, err


def test_out_inside_the_infini_gram_folder_is_refused(ig_two, gpt2_dir, cli_run):
    code, _, err = cli_run("index", "adopt", ig_two, "--tokenizer", gpt2_dir, "--out", ig_two / "propme", "--quiet")
    assert code == 2 and "inside" in err, err


def test_infini_gram_metadata_lines_give_identity_and_nested_sources():
    line = {"path": "train/00.jsonl", "linenum": 7, "metadata": {"meta": {"pile_set_name": "ArXiv"}}}
    assert unwrap_metadata(line) == {"meta": {"pile_set_name": "ArXiv"}, "id": "train/00.jsonl:7"}
    assert source_of(unwrap_metadata(line), "meta.pile_set_name") == "ArXiv"
    assert source_of(unwrap_metadata(line), "source") == "unknown"
    own_id = {"path": "a.jsonl", "linenum": 0, "metadata": {"id": "doc-1", "source": "web"}}
    assert unwrap_metadata(own_id) == {"id": "doc-1", "source": "web"}
    assert source_of({"meta.x": "flat"}, "meta.x") == "flat"  # a dotted key that exists is taken as it is


def test_adopted_index_opens_like_an_own_one(adopted_two):
    index = open_index(adopted_two)
    doc = index.document(0, max_tokens=16)
    assert doc.meta["id"] and doc.meta["source"]
    assert index.count(index.encode(index.decode(doc.token_ids))) >= 1


# --- every command takes the adopted folder as --index ------------------------------------------------


@pytest.fixture(scope="module")
def own_two(corpus, gpt2_dir, tmp_path_factory) -> Path:
    return _own(corpus, tmp_path_factory.mktemp("own2") / "index", gpt2_dir, num_shards=2)


def _prompts(cli_run, index: Path, out: Path) -> list[dict]:
    import json

    code, _, err = cli_run("prompts", "build", "--index", index, "--setting", "prefix", "--n", "6", "--out", out,
                           "--quiet")
    assert code == 0, err
    identity = IndexManifest.read(index).identity
    return [json.loads(line.replace(identity, "IDENTITY")) for line in out.read_text(encoding="utf-8").splitlines()]


def test_prompts_build_on_an_adopted_index_equals_the_own_build(adopted_two, own_two, tmp_path, cli_run):
    adopted, built = _prompts(cli_run, adopted_two, tmp_path / "a.jsonl"), _prompts(cli_run, own_two, tmp_path / "b.jsonl")
    assert len(adopted) == 6 and adopted == built
    code, _, err = cli_run("tasks-new", "mycorpus", "--index", adopted_two, "--language", "en", "--out", tmp_path / "t")
    assert code == 0, err




def test_contamination_on_an_adopted_index_equals_the_own_build(corpus, adopted_two, own_two, tmp_path, cli_run):
    import json

    from contamination.test_contamination import MC_YAML  # the planted-items task of the contamination tests

    docs = [json.loads(line)["text"] for line in (corpus / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [{"question": docs[i][:200] if i % 2 == 0 else f"Novel question number {i} about zebras?",
             "choices": ["ja", "nej"], "gold": 0} for i in range(10)]
    folder = tmp_path / "tasks"
    (folder / "contam_mc.yaml").parent.mkdir()
    (folder / "contam_mc.yaml").write_text(MC_YAML.format(data=write_jsonl(folder / "mc.jsonl", rows)))
    found = {}
    for name, index in (("adopted", adopted_two), ("own", own_two)):
        code, _, err = cli_run("contamination", "--tasks", "contam_mc", "--include-path", folder, "--index", index,
                               "--out", tmp_path / name, "--quiet")
        assert code == 0, err
        found[name] = json.loads((tmp_path / name / "contamination.json").read_text())["tasks"]["contam_mc"]
    assert found["adopted"]["contaminated"] == 5
    assert found["adopted"] == found["own"]


def test_a_task_loads_an_adopted_index_from_its_metadata(adopted_two, gpt2_dir, tmp_path, monkeypatch, cli_run):
    from propme_tasks import hooks

    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err = cli_run("prompts", "build", "--index", adopted_two, "--setting", "prefix", "--n", "3",
                           "--out", tmp_path / "p.jsonl", "--quiet")
    assert code == 0, err
    ds = hooks.load_prompts(corpus="demo", setting="prefix", language=None, demo_index=str(adopted_two),
                            demo_prefix_prompts=str(tmp_path / "p.jsonl"), pretrained=str(gpt2_dir))["test"]
    assert len(ds) == 3 and set(ds["index_identity"]) == {IndexManifest.read(adopted_two).identity}
    items = hooks.process_results(ds[0], [[ds[0]["continuation"]]])
    assert items["trace"]["failed"] == 0 and items["fmr"] == 1.0


def test_report_reads_an_adopted_index_for_the_leaks_by_source(adopted_two, tmp_path, cli_run):
    from support.runs import DFM, stage1_settings, write_run

    identity = IndexManifest.read(adopted_two).identity
    folder = write_run(tmp_path / "run", DFM, "", stage1_settings(), identity=identity)
    for p in folder.iterdir():
        p.write_text(p.read_text(encoding="utf-8").replace('"/idx"', f'"{adopted_two}"'), encoding="utf-8")
    code, _, err = cli_run("report", tmp_path / "run", "--out", tmp_path / "r", "--bootstrap", 50)
    assert code == 0, err
    page = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "cannot be read here" not in page and "their share of the corpus is unknown" not in page
