"""String vocabularies (`core.names.StrEnum`): a member reads, prints, hashes and serializes as its
string, so replacing a bare string by a member changes no file, task name or message."""
from __future__ import annotations

import argparse
import json
import pickle

import pytest

from propme_metrics.index.format import SHARD_FILES, ShardFile, shard_file
from propme_metrics.prompts.settings import PROMPT_FREE_SETTINGS, PROMPTED_SETTINGS, SETTINGS, Setting, task_name
from propme_metrics.trace.result import TRACE_MODES, TraceConfig, TraceMode


@pytest.mark.parametrize("member", [*Setting, *ShardFile, *TraceMode])
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
    assert json.dumps(TraceConfig().to_dict(), sort_keys=True) == json.dumps(
        {**TraceConfig().to_dict(), "mode": "mixed"}, sort_keys=True)


def test_argparse_lists_members_as_plain_strings(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--setting", choices=PROMPTED_SETTINGS)
    with pytest.raises(SystemExit):
        parser.parse_args(["--setting", "bogus"])
    assert "(choose from 'generic', 'specific', 'prefix')" in capsys.readouterr().err
