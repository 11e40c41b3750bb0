"""Builds never lose data: --out never swallows the corpus, symlinks work, a SIGKILL at any step
leaves the old or the new index (and a rerun finishes byte-identical to an uninterrupted build),
an edited corpus is rebuilt, and corrupted files are found. Tiny corpora: each build takes ~1 s."""
from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
from pathlib import Path

import pytest

import propme_metrics.index.build as build_module
from propme.cli import app as cli
from propme_metrics.core.errors import IndexFormatError
from propme_metrics.index.format import old_dir, staging_dir
from propme_metrics.index.manifest import MANIFEST_NAME
from propme_metrics.index.reader import open_index, verify_index
from support.corpora import word_level_tokenizer, write_jsonl
from support.forked import run_forked


def word_docs(n: int, seed: int, words: int = 40) -> list[dict]:
    rng = random.Random(seed)
    return [{"id": f"d{seed}-{i}", "text": " ".join(f"w{rng.randrange(100)}" for _ in range(words))}
            for i in range(n)]


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Path:
    return word_level_tokenizer(tmp_path_factory.mktemp("tok"), 100)


def build_args(corpus: Path, out: Path, tok: Path, *extra) -> list[str]:
    return ["index", "build", str(corpus), "--out", str(out), "--tokenizer", str(tok), "--shards", "2",
            "--cpus", "1", "--sa-builder", "rust", "--quiet", "--skip-space-check", *extra]


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too) with its bytes; the manifest without its run-specific
    fields (date, duration, corpus mtimes)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_dir():
            continue
        data = p.read_bytes()
        if p.name == MANIFEST_NAME:
            m = json.loads(data)
            m.pop("created")
            m["build"].pop("seconds_last_run")
            m["build"].pop("source_stats")
            data = json.dumps(m, sort_keys=True).encode()
        out[str(p.relative_to(folder))] = data
    return out


# --- the corpus and other files are never deleted ------------------------------------------------


def test_out_that_is_or_holds_the_corpus_is_refused(tmp_path, tok, cli_run):
    folder = tmp_path / "c"
    corpus = write_jsonl(folder / "corpus.jsonl", word_docs(30, 1))
    before = corpus.read_bytes()
    for out in (folder, tmp_path):
        code, _, err = cli_run(*build_args(folder, out, tok, "--force"))
        assert code == 2 and "contains the corpus" in err
    code, _, err = cli_run(*build_args(corpus, folder, tok, "--force"))
    assert code == 2 and "contains the corpus" in err
    assert corpus.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["corpus.jsonl"]


def test_force_replaces_only_an_index(tmp_path, tok, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 1))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, _, err = cli_run(*build_args(corpus, mine, tok, "--force"))
    assert code == 2 and "notes.txt" in err and "never deletes" in err
    assert (mine / "notes.txt").read_text() == "keep me"
    # an index with a user's file inside is not "only an index" either
    idx = tmp_path / "idx"
    assert cli_run(*build_args(corpus, idx, tok))[0] == 0
    (idx / "README.txt").write_text("my notes on this index")
    assert cli_run(*build_args(corpus, idx, tok))[0] == 0  # the same build again: still a no-op
    other = write_jsonl(tmp_path / "other.jsonl", word_docs(30, 2))
    code, _, err = cli_run(*build_args(other, idx, tok, "--force"))
    assert code == 2 and "README.txt" in err
    assert (idx / "README.txt").is_file() and open_index(idx).manifest.total_documents == 30


@pytest.mark.parametrize("user_file", ["propme-notes.md", "tmp-experiments/results.csv", "unigram.7",
                                       "propme-tokenizer/my-notes.txt", ".hidden.tmp"])
def test_force_never_deletes_a_user_file_inside_an_index(user_file, tmp_path, tok, cli_run):
    """Names that look like PropMe's (propme-*, tmp-*, a shard file of no shard, a file inside the
    tokenizer folder) are the user's unless the old manifest lists them."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 1))
    idx = tmp_path / "idx"
    assert cli_run(*build_args(corpus, idx, tok))[0] == 0
    mine = idx / user_file
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("the user's own")
    other = write_jsonl(tmp_path / "other.jsonl", word_docs(30, 2))
    code, _, err = cli_run(*build_args(other, idx, tok, "--force"))
    assert code == 2 and user_file in err and "never deletes" in err, err
    assert mine.read_text() == "the user's own"
    if user_file.startswith("unigram."):  # a shard-like name the engine would read: opening names it
        with pytest.raises(IndexFormatError, match="unigram.7"):
            verify_index(idx)
    else:
        assert verify_index(idx, full=True).ok
    mine.unlink()
    if mine.parent != idx and mine.parent.name != "propme-tokenizer":
        code, _, err = cli_run(*build_args(other, idx, tok, "--force"))  # an empty folder of the user's: kept
        assert code == 2 and "tmp-experiments/" in err and mine.parent.is_dir()
        mine.parent.rmdir()
    code, _, err = cli_run(*build_args(other, idx, tok, "--force"))  # only PropMe's files: replaced
    assert code == 0, err
    assert open_index(idx).manifest.source["location"].endswith("other.jsonl")


def test_symlinked_out_builds_into_its_target(tmp_path, tok, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 1))
    target = tmp_path / "disk" / "empty"
    target.mkdir(parents=True)
    link = tmp_path / "linkidx"
    link.symlink_to(target, target_is_directory=True)
    code, _, err = cli_run(*build_args(corpus, link, tok))
    assert code == 0, err
    assert link.is_symlink() and (target / MANIFEST_NAME).is_file()
    assert open_index(link).manifest.total_documents == 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "disk", "linkidx"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["empty"]
    assert cli_run(*build_args(corpus, link, tok))[0] == 0  # the same build again: a no-op
    assert verify_index(link, full=True).ok


# --- SIGKILL at every step ------------------------------------------------------------------------

def build_killed_at(point: str, nth: int, argv: list[str]) -> int:
    """In a forked child: `propme index build` that SIGKILLs itself at `point`, the `nth` time it is reached."""
    import propme_metrics.index.install as install
    import propme_metrics.index.suffix_array as sa

    calls = [0]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def after(fn):
        def wrapper(*args, **kwargs):
            result = fn(*args, **kwargs)
            calls[0] += 1
            if calls[0] == nth:
                die()
            return result
        return wrapper

    if point == "tokenize":  # killed with some documents written
        real_iter = build_module.CorpusSource.__iter__

        def documents(self):
            for i, doc in enumerate(real_iter(self)):
                if i == nth:
                    die()
                yield doc
        build_module.CorpusSource.__iter__ = documents
    elif point == "step":  # after the nth rust_indexing step (make-part, merge, concat of shard 0, then shard 1)
        sa._run_all = after(sa._run_all)
    elif point == "toplevel":  # a suffix array and its search samples written, progress not yet saved
        build_module.write_toplevel = after(build_module.write_toplevel)
    elif point == "manifest":  # the manifest written, the build not moved into place
        build_module.IndexManifest.write = after(build_module.IndexManifest.write)
    elif point == "aside":  # the old index moved aside, the new one not yet in
        real_replace = os.replace

        def replace(src, dst):
            real_replace(src, dst)
            if str(dst).endswith(".propme-old"):
                die()
        os.replace = replace
    elif point == "installed":  # the new index in place, the old one not yet deleted
        install._fsync_dir = after(install._fsync_dir)
    return cli.main(argv)

KILL_POINTS = [("tokenize", 25), ("step", 1), ("step", 2), ("step", 3), ("step", 5), ("toplevel", 1), ("manifest", 1),
               ("aside", 0), ("installed", 1)]


@pytest.fixture(scope="module")
def kill_setup(tmp_path_factory, tok):
    """Two corpora and the uninterrupted build of the second (the expected result)."""
    root = tmp_path_factory.mktemp("kill")
    old = write_jsonl(root / "old.jsonl", word_docs(40, 3))
    new = write_jsonl(root / "new.jsonl", word_docs(60, 4))
    assert cli.main(build_args(new, root / "reference", tok)) == 0
    return old, new, tree(root / "reference")


@pytest.mark.parametrize("point,nth", KILL_POINTS, ids=[f"{p}-{n}" for p, n in KILL_POINTS])
def test_sigkill_at_each_step_then_rerun_is_byte_identical(point, nth, tmp_path, tok, kill_setup, cli_run):
    old_corpus, corpus, expected = kill_setup
    out = tmp_path / "idx"
    replacing = point in ("aside", "installed")
    if replacing:  # killed while --force replaces an older index
        assert cli_run(*build_args(old_corpus, out, tok))[0] == 0
        old_tree = tree(out)
    argv = build_args(corpus, out, tok, *(["--force"] if replacing else []))
    child = run_forked(lambda: build_killed_at(point, nth, argv))
    assert child.returncode == -signal.SIGKILL, child.output
    if point == "installed":
        assert tree(out) == expected
    elif replacing:
        assert not out.exists() and tree(old_dir(out)) == old_tree
    else:
        with pytest.raises(IndexFormatError):
            open_index(out)
    code, _, err = cli_run(*argv)
    assert code == 0, err
    assert tree(out) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no partial build, no old index left
    assert not staging_dir(out).exists()


def test_kill_while_moving_aside_without_rerun_of_new_build_restores_old(tmp_path, tok, kill_setup, cli_run):
    """The next command may be another build: the half-replaced old index comes back first."""
    old_corpus, corpus, _ = kill_setup
    out = tmp_path / "idx"
    assert cli_run(*build_args(old_corpus, out, tok))[0] == 0
    old_tree = tree(out)
    shutil.rmtree(staging_dir(out), ignore_errors=True)
    os.replace(out, old_dir(out))  # as if killed right after moving the old index aside, build unfinished
    code, _, err = cli_run(*build_args(old_corpus, out, tok))
    assert code == 0, err
    assert tree(out) == old_tree and not old_dir(out).exists()


# --- source identity and integrity ----------------------------------------------------------------


def test_edited_corpus_of_the_same_size_is_rebuilt(tmp_path, tok, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 5))
    out = tmp_path / "idx"
    assert cli_run(*build_args(corpus, out, tok))[0] == 0
    identity = open_index(out).manifest.identity
    data = corpus.read_bytes()
    i = data.index(b"w1 ")
    corpus.write_bytes(data[:i] + b"w2 " + data[i + 3:])  # same size
    stat = corpus.stat()
    code, _, err = cli_run(*build_args(corpus, out, tok))
    assert code == 2 and "different index" in err
    code, _, err = cli_run(*build_args(corpus, out, tok, "--force"))
    assert code == 0, err
    assert open_index(out).manifest.identity != identity
    # a touched but unchanged corpus is the same build: content, not mtime, decides
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert cli_run(*build_args(corpus, out, tok))[0] == 0


@pytest.fixture
def small_index(tmp_path, tok, cli_run) -> Path:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 6))
    out = tmp_path / "idx"
    assert cli_run(*build_args(corpus, out, tok))[0] == 0
    return out


def test_flipped_byte_is_refused_on_open_and_by_full_verify(small_index, cli_run):
    path = small_index / "tokenized.0"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="tokenized.0 does not match its sampled checksum"):
        open_index(small_index)
    code, _, err = cli_run("index", "verify", small_index, "--full")
    assert code == 3 and "tokenized.0" in err


def test_full_verify_reads_every_byte(small_index, monkeypatch, cli_run):
    """A change outside the sampled blocks passes the cheap open check; --full finds it."""
    import propme_metrics.index.reader as index_module

    monkeypatch.setattr(index_module, "sample_matches", lambda p, recorded: True)
    path = small_index / "table.1"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    open_index(small_index)  # the cheap check on open does not see it
    code, out, _ = cli_run("index", "verify", small_index, "--full")
    assert code == 1 and "FAIL checksums" in out and "table.1 does not match" in out


def test_flipped_final_byte_of_a_large_table_fails_the_quick_verify(tmp_path, tok, cli_run):
    """The sampled checksum reads a large file's last bytes (docs/index-format.md): a flipped final
    byte of table.0 (over 64 KiB, its size not a multiple that lines the old blocks up with the
    end) fails `propme index verify` without --full."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(1200, 3, words=60))
    out = tmp_path / "idx"
    assert cli_run(*build_args(corpus, out, tok))[0] == 0
    path = out / "table.0"
    data = bytearray(path.read_bytes())
    assert len(data) > 64 * 1024 and (len(data) - 16 * 1024) % 3, len(data)
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    code, out_text, err = cli_run("index", "verify", out)
    assert code == 3 and "table.0 does not match its sampled checksum" in err, out_text + err


def test_verify_checks_the_tokenizer_hash(small_index, cli_run):
    path = small_index / MANIFEST_NAME
    m = json.loads(path.read_text())
    m["tokenizer"]["sha256"] = "0" * 64
    path.write_text(json.dumps(m))
    code, out, _ = cli_run("index", "verify", small_index)
    assert code == 1 and "FAIL tokenizer" in out


# --- write failures: one message, resumable -------------------------------------------------------


def test_disk_full_while_tokenizing_is_one_message(tmp_path, tok, monkeypatch, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 7))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x"))

    monkeypatch.setattr(build_module, "tokenize_corpus", full)
    code, _, err = cli_run(*build_args(corpus, tmp_path / "idx", tok))
    assert code == 2 and "No space left on device" in err and "hint:" in err


def test_read_only_out_is_one_message(tmp_path, tok, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 7))
    code, _, err = cli_run(*build_args(corpus, "/sys/propme-test-index", tok))
    assert code == 2 and "cannot write the index" in err and ("not permitted" in err or "denied" in err)


def test_tokenizer_with_empty_vocabulary_is_one_message(tmp_path, cli_run):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    empty = tmp_path / "empty-tok"
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({}, unk_token="[UNK]"))).save_pretrained(empty)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(3, 7))
    code, _, err = cli_run(*build_args(corpus, tmp_path / "idx", empty))
    assert code == 2 and "empty vocabulary" in err


def bpe_tokenizer(out: Path, alphabet: str) -> Path:
    """A character BPE that knows only `alphabet` and has no unknown token: it drops every other
    character, as a tokenizer saved without its vocabulary's pieces does."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE({c: i for i, c in enumerate(alphabet)}, merges=[]))
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=alphabet[-1]).save_pretrained(out)
    return out


@pytest.mark.parametrize("alphabet,found", [("#", "to no token ids"), ("0123456789#", "to only")],
                         ids=["nothing", "digits-only"])
def test_a_tokenizer_that_encodes_the_corpus_to_nearly_nothing_is_refused_before_any_work(
        alphabet, found, tmp_path, cli_run):
    docs = [{"id": f"d{i}", "text": f"Ordinary document {i} about the quick brown fox that jumps over the lazy "
                                    "dog and then runs far away into the green woods."}
            for i in range(400)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", docs)
    tok = bpe_tokenizer(tmp_path / "tok", alphabet)
    code, _, err = cli_run(*build_args(corpus, tmp_path / "idx", tok))
    assert code == 2 and found in err and "sample text(s)" in err and "hint:" in err
    assert not (tmp_path / "idx").exists() and not staging_dir(tmp_path / "idx").exists()  # nothing was written


def test_tracing_with_a_tokenizer_that_encodes_nothing_is_refused(tmp_path, tok, monkeypatch, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 7))
    monkeypatch.setattr(build_module, "check_encodes", lambda *args: None)  # an index built before the check
    code, _, err = cli_run(*build_args(corpus, tmp_path / "idx", bpe_tokenizer(tmp_path / "tok", "#")))
    assert code == 0, err
    gens = write_jsonl(tmp_path / "gens.jsonl", [{"completion": d["text"]} for d in word_docs(5, 7)])
    code, _, err = cli_run("trace", "--index", tmp_path / "idx", "--input", gens, "--out", tmp_path / "r.jsonl",
                           "--summary", tmp_path / "s.json", "--quiet")
    assert code == 2 and "the tokenizer stored in" in err and "to no token ids" in err
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("shards", [40, 100_000])
def test_more_shards_than_documents_is_one_rule_at_any_count(shards, tmp_path, tok, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 7))
    args = build_args(corpus, tmp_path / "idx", tok)
    args[args.index("--shards") + 1] = str(shards)
    code, _, err = cli_run(*args)
    assert code == 2, err
    assert f"shard(s) 30-{shards - 1} got no documents (30 documents for {shards:,} shards)" in err
    assert "use fewer --shards" in err and "open files" not in err


def test_shards_beyond_the_open_file_budget_are_reopened_to_append(tmp_path, tok, monkeypatch, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(60, 7))
    args = build_args(corpus, tmp_path / "wide", tok)
    args[args.index("--shards") + 1] = "6"
    assert cli_run(*args)[0] == 0
    monkeypatch.setattr("propme_metrics.index.shard_writer.open_shards_allowed", lambda: 2)
    args[args.index("--out") + 1] = str(tmp_path / "narrow")
    assert cli_run(*args)[0] == 0
    assert tree(tmp_path / "narrow") == tree(tmp_path / "wide")


def test_second_concurrent_build_of_the_same_out_stops_at_once(tmp_path, tok, cli_run):
    import fcntl

    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 8))
    out = tmp_path / "idx"
    with open(tmp_path / ".idx.propme-lock", "a") as held:  # as a running build holds it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        code, _, err = cli_run(*build_args(corpus, out, tok))
    assert code == 2 and "another `propme index build` is building" in err
    assert not out.exists() and not staging_dir(out).exists()
    assert cli_run(*build_args(corpus, out, tok))[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "idx"]


def test_a_ray_build_takes_the_local_builds_lock_and_spares_the_corpus(tmp_path, tok, monkeypatch):
    """`build_index_on_ray` goes through the local build's preamble and lock before it asks for a
    cluster: a second build of the same folder stops at once, an --out holding the corpus is refused,
    and an index already built there is reused; none of them starts Ray."""
    import fcntl

    import propme_metrics.index.ray_build as ray_build
    from propme_metrics.core.errors import ConfigError
    from propme_metrics.index.manifest import IndexManifest
    from propme_metrics.index.sources import CorpusSource

    def no_cluster(address):
        raise AssertionError("the cluster was asked for")

    monkeypatch.setattr(ray_build, "connect", no_cluster)
    corpus = write_jsonl(tmp_path / "data" / "corpus.jsonl", word_docs(30, 8))
    out = tmp_path / "idx"
    with open(tmp_path / ".idx.propme-lock", "a") as held:  # as a running build holds it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(ConfigError, match="another `propme index build` is building"):
            ray_build.build_index_on_ray(CorpusSource(str(corpus)), out, tokenizer=str(tok), num_shards=2,
                                         progress=False, check_space=False)
    with pytest.raises(ConfigError, match="is or contains the corpus"):
        ray_build.build_index_on_ray(CorpusSource(str(corpus)), tmp_path / "data", tokenizer=str(tok),
                                     num_shards=2, progress=False, check_space=False, force=True)
    assert cli.main(build_args(corpus, out, tok)) == 0
    local = IndexManifest.read(out)
    again = ray_build.build_index_on_ray(CorpusSource(str(corpus)), out, tokenizer=str(tok), num_shards=2,
                                         progress=False, check_space=False)
    assert again.created == local.created and again.build == local.build


# --- a damaged manifest or folder is exit 3 with what is wrong, never exit 70 ------------------------


def _edit_manifest(index: Path, edit) -> None:
    path = index / MANIFEST_NAME
    data = json.loads(path.read_text())
    path.write_text(json.dumps(edit(data)))


def _set(key, value):
    return lambda m: {**m, key: value}


def _shard0(key, value):
    return lambda m: {**m, "shards": [{**m["shards"][0], key: value}, *m["shards"][1:]]}


@pytest.mark.parametrize("edit,fragment", [
    (lambda m: [], "is not of type 'object'"),
    (lambda m: None, "is not of type 'object'"),
    (_set("files", []), "files"),
    (_shard0("id", "0"), "shards/0/id"),
    (_shard0("ds_bytes", 0), "shards/0/ds_bytes"),
    (lambda m: {**m, "shards": [], "shard_ids": [], "num_shards": 1}, "shards"),
    (_shard0("tokens", 10), "ds_bytes says"),  # a token count edited: checked against the file sizes
    (_set("num_shards", 1), "outside num_shards"),
    (lambda m: {k: v for k, v in m.items() if k != "tokenizer"}, "'tokenizer' is a required property"),
], ids=["list", "null", "files list", "string id", "ds_bytes 0", "no shards", "tokens edited", "id >= num_shards",
        "no tokenizer"])
def test_damaged_manifest_is_exit_3_naming_the_field(edit, fragment, tmp_path, synthetic_index, cli_run):
    index = tmp_path / "index"
    shutil.copytree(synthetic_index, index)
    _edit_manifest(index, edit)
    gens = write_jsonl(tmp_path / "g.jsonl", [{"completion": "the council decided"}])
    for args in (["index", "info", index], ["index", "verify", index, "--full"],
                 ["trace", "--index", index, "--input", gens, "--out", tmp_path / "r.jsonl",
                  "--summary", tmp_path / "s.json", "--quiet"]):
        code, _, err = cli_run(*args)
        assert code == 3 and "damaged" in err and fragment in err, (args[:2], err)


def test_a_manifest_text_is_checked_against_the_schema_once(tmp_path, synthetic_index, monkeypatch):
    """A manifest text that met the schema is not checked again (the check and its import are a third
    of a small `propme trace`); any change to the text is checked, and a damaged one still refused."""
    import jsonschema

    from propme_metrics.index.manifest import IndexManifest

    monkeypatch.setenv("PROPME_CACHE_DIR", str(tmp_path / "cache"))
    index = tmp_path / "index"
    shutil.copytree(synthetic_index, index)
    checked = []
    validator = jsonschema.Draft202012Validator
    monkeypatch.setattr(jsonschema, "Draft202012Validator", lambda schema: checked.append(1) or validator(schema))
    first = IndexManifest.read(index)
    assert IndexManifest.read(index) == first and len(checked) == 1
    original = (index / MANIFEST_NAME).read_bytes()
    _edit_manifest(index, _shard0("ds_bytes", 0))
    for _ in range(2):
        with pytest.raises(IndexFormatError, match="shards/0/ds_bytes"):
            IndexManifest.read(index)
    assert len(checked) == 3
    (index / MANIFEST_NAME).write_bytes(original)
    assert IndexManifest.read(index) == first and len(checked) == 3
    _edit_manifest(index, lambda m: {**m, "created": "another day"})  # valid, but another text: checked once more
    IndexManifest.read(index)
    IndexManifest.read(index)
    assert len(checked) == 4


def test_stray_shard_files_of_another_index_are_named(tmp_path, synthetic_index, cli_run):
    index = tmp_path / "index"
    shutil.copytree(synthetic_index, index)
    for kind in ("tokenized", "unigram"):
        shutil.copy2(index / f"{kind}.1", index / f"{kind}.5")
    code, _, err = cli_run("index", "verify", index)
    assert code == 3 and "tokenized.5" in err and "unigram.5" in err and "not this index's" in err, err


def test_join_refuses_a_part_with_a_flipped_byte(tmp_path, tok, cli_run):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", word_docs(30, 1))
    parts = [tmp_path / f"part{sid}" for sid in (0, 1)]
    for sid, part in enumerate(parts):
        assert cli_run(*build_args(corpus, part, tok, "--shard-ids", str(sid)))[0] == 0
    victim = parts[0] / "tokenized.0"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: only the content checksum can tell
    victim.write_bytes(bytes(data))
    code, _, err = cli_run("index", "join", *parts, "--out", tmp_path / "joined")
    assert code == 3 and "tokenized.0" in err and "checksum" in err, err
    assert not (tmp_path / "joined").exists()
