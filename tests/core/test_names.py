"""String vocabularies (`core.names.StrEnum`): a member reads, prints, hashes and serializes as its
string, so replacing a bare string by a member changes no file, task name or message."""
from __future__ import annotations

import argparse
import json
import pickle

import orjson
import pytest

from propme_metrics.core.jsonl import json_line
from propme_metrics.index.format import SHARD_FILES, ShardFile, shard_file
from propme_metrics.prompts.settings import PROMPT_FREE_SETTINGS, PROMPTED_SETTINGS, SETTINGS, Setting, task_name
from propme_metrics.report.load import describe_trace_config
from propme_metrics.trace.result import RARITY_KINDS, TRACE_MODES, RarityKind, TraceConfig, TraceMode, TraceResult
from propme_metrics.trace.runner import job_fingerprint
from propme_metrics.trace.task_document import TaskDocument


@pytest.mark.parametrize("member", [*Setting, *ShardFile, *TraceMode, *RarityKind])
def test_a_member_behaves_as_its_string(member):
    plain = member.value
    assert type(plain) is str
    assert member == plain and hash(member) == hash(plain) and {plain: 1}[member] == 1
    assert (str(member), f"{member}", f"{member:>20}", repr(member)) == (plain, plain, f"{plain:>20}", repr(plain))
    assert json.dumps({member: [member]}) == json.dumps({plain: [plain]})
    assert pickle.loads(pickle.dumps(member)) is member and type(member)(plain) is member
    assert type(str(member)) is str  # what YAML and Arrow get


def test_vocabularies_hold_the_names_files_and_tasks_always_had():
    assert SETTINGS == ("generic", "specific", "prefix", "unconditional", "minimal_cue")
    assert set(PROMPTED_SETTINGS) | set(PROMPT_FREE_SETTINGS) == set(Setting)
    assert task_name("dynaword", Setting.PREFIX) == "propme_dynaword_prefix" and task_name("demo") == "propme_demo"
    assert task_name("demo", "likelihood") == "propme_demo_likelihood"
    assert SHARD_FILES == ("tokenized", "table", "offset", "metadata", "metaoff", "unigram")
    assert [shard_file("idx", kind, 3).name for kind in ShardFile][:2] == ["tokenized.3", "table.3"]
    assert TRACE_MODES == ("mixed", "text") and TraceConfig().mode == TraceMode.MIXED == "mixed"
    assert RARITY_KINDS == ("log", "product") and TraceConfig().rarity == RarityKind.LOG == "log"
    assert json.dumps(TraceConfig().to_dict(), sort_keys=True) == json.dumps(
        {**TraceConfig().to_dict(), "mode": "mixed"}, sort_keys=True)


@pytest.mark.parametrize("mode, rarity", [("text", "product"), (TraceMode.MIXED, RarityKind.LOG), ("mixed", "log")])
def test_trace_config_holds_members_and_serialises_as_the_strings_did(mode, rarity):
    """`TraceConfig` turns a given mode and rarity into their members once; every serialised form (to_dict,
    json, orjson, the summary's and the logged document's config, a result line, the job fingerprint,
    the messages) is the bytes the plain strings gave."""
    config = TraceConfig(mode=mode, rarity=rarity)
    assert type(config.mode) is TraceMode and type(config.rarity) is RarityKind
    assert config == TraceConfig(mode=str(mode), rarity=str(rarity)) == TraceConfig(**config.to_dict())
    plain = {"mode": str(mode), "span_divisor": 20, "docs_per_span": 10, "window_factor": 5, "max_anchors": 8,
             "seed": 42, "rarity": str(rarity), "snippet_chars": 300, "max_tokens": 4096}
    got = config.to_dict()
    assert list(got) == list(plain) and all(type(v) in (str, int) for v in got.values())
    assert repr(got) == repr(plain) and json_line(got) == json_line(plain)
    assert orjson.dumps(got) == orjson.dumps(plain) and json.dumps(got, indent=2) == json.dumps(plain, indent=2)
    assert TaskDocument(corpus="c", setting="prefix", index_path="i", trace=config).to_row()["trace_config"] \
        == json.dumps(plain, sort_keys=True)
    assert job_fingerprint("d", "i", got, []) == job_fingerprint("d", "i", plain, [])
    assert describe_trace_config(config) == ", ".join(f"{k}={v!r}" for k, v in sorted(plain.items()))
    line = TraceResult(key="k", text="t", n_tokens=0, degenerate=False, mode=config.mode)
    assert line.json_bytes() == TraceResult(key="k", text="t", n_tokens=0, degenerate=False, mode=str(mode)).json_bytes()
    read = TraceResult.from_dict(json.loads(line.json_bytes()))
    assert type(read.mode) is TraceMode and read.mode == mode and read.json_bytes() == line.json_bytes()


def test_a_result_line_with_an_unknown_mode_is_no_trace():
    """A result's mode is a TraceMode once read: a line naming another is refused as its other fields would be."""
    line = json.loads(TraceResult(key="k", text="t", n_tokens=0, degenerate=False).json_bytes())
    assert TraceResult.from_dict({**line, "mode": "text"}).mode is TraceMode.TEXT
    assert TraceResult.from_dict({k: v for k, v in line.items() if k != "mode"}).mode is TraceMode.MIXED
    with pytest.raises(ValueError):
        TraceResult.from_dict({**line, "mode": "fast"})


@pytest.mark.parametrize("field, value, message", [("mode", "fast", "mode must be one of mixed, text, not 'fast'"),
                                                   ("rarity", "sum", "rarity must be one of log, product, not 'sum'"),
                                                   ("mode", None, "mode must be one of mixed, text, not None")])
def test_an_unknown_mode_or_rarity_is_refused_as_before(field, value, message):
    with pytest.raises(ValueError) as caught:
        TraceConfig(**{field: value})
    assert str(caught.value) == message


def test_argparse_lists_members_as_plain_strings(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--setting", choices=PROMPTED_SETTINGS)
    with pytest.raises(SystemExit):
        parser.parse_args(["--setting", "bogus"])
    assert "(choose from 'generic', 'specific', 'prefix')" in capsys.readouterr().err
