"""One yes/no reading (core.switches) behind every boolean setting: hooks, model arguments, switches."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.switches import FALSE_WORDS, TRUE_WORDS, env_switch, parse_bool
from propme_metrics.prompts.start import model_tokenizer_spec
from propme_tasks.schema import TaskConfigError, read_options

ROOT = Path(__file__).resolve().parents[2]
WORDS = [(w, True) for w in ("true", "1", "yes", "on")] + [(w, False) for w in ("false", "0", "no", "off")]


@pytest.mark.parametrize(("word", "expected"), WORDS)
def test_every_reader_takes_the_same_words(word, expected, monkeypatch):
    for spelling in (word, word.upper(), f"  {word} "):
        assert parse_bool(spelling) is expected
        assert read_options({"pii_show": spelling})["pii_show"] is expected
        spec = model_tokenizer_spec({"pretrained": "gpt2", "add_bos_token": spelling})
        assert spec.add_bos_token is expected
        monkeypatch.setenv("PROPME_X", spelling)
        assert env_switch("PROPME_X", default=not expected) is expected


@pytest.mark.parametrize("value", ["maybe", "2", "", "tru", "enabled"])
def test_a_word_that_is_not_yes_or_no_is_refused_naming_the_setting(value):
    with pytest.raises(ValueError):
        parse_bool(value)
    if value:
        with pytest.raises(TaskConfigError, match="pii_show"):
            read_options({"pii_show": value})
        with pytest.raises(ConfigError, match="use_fast_tokenizer"):
            model_tokenizer_spec({"pretrained": "gpt2", "use_fast_tokenizer": value})


def test_unset_settings_keep_their_default(monkeypatch):
    monkeypatch.delenv("PROPME_PII_SHOW", raising=False)
    assert read_options({})["pii_show"] is False
    assert model_tokenizer_spec({"pretrained": "gpt2"}).add_bos_token is None
    monkeypatch.delenv("PROPME_X", raising=False)
    assert env_switch("PROPME_X", default=True) is True


def test_a_bad_switch_keeps_its_default_and_says_so(monkeypatch, capsys):
    monkeypatch.setenv("PROPME_X", "maybe")
    assert env_switch("PROPME_X", default=True) is True
    assert "PROPME_X" in capsys.readouterr().err


def test_a_bad_discovery_switch_never_breaks_start_up():
    """The start-up hook runs in every interpreter: a wrong value is one line on stderr, not a failure."""
    code = ("import propme_tasks.discovery as d, sys; d.install(); "
            "print(any(type(f).__name__ == '_Watcher' and 'lm_eval.tasks.manager' in f.pending for f in sys.meta_path))")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PROPME_LMEVAL_DISCOVERY": "perhaps"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    assert "PROPME_LMEVAL_DISCOVERY" in out.stderr
    env["PROPME_LMEVAL_DISCOVERY"] = "off"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_docs_list_the_words_the_code_takes():
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    sentence = re.search(r"a yes/no setting\s+accepts\s+(.+?)\.", text, re.S).group(1)
    true_part, false_part = sentence.split(" and ", 1)
    assert re.findall(r"`([^`]+)`", true_part) == list(TRUE_WORDS)
    assert re.findall(r"`([^`]+)`", false_part) == list(FALSE_WORDS)
