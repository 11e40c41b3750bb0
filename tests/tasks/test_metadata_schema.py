"""The task metadata schema (propme_tasks/schema.py): types, ranges, huge integers, misspelt keys."""
from __future__ import annotations

import inspect
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from propme_tasks import schema
from propme_tasks.schema import KEYS, TASK_KEYS, TaskConfigError, read_options
from support.lmeval import model_args, run_lm_eval

ALL_KEYS = {**KEYS, **TASK_KEYS}


def _refused(meta: dict, match: str) -> str:
    with pytest.raises(TaskConfigError, match=match) as err:
        read_options(meta)
    return str(err.value)


def test_integers_are_plain_digits_within_range():
    assert read_options({"n_prompts": "30"})["n_prompts"] == 30
    assert read_options({"n_prompts": 30.0})["n_prompts"] == 30
    _refused({"n_prompts": "3_0"}, "'n_prompts' must be an integer, not '3_0'")
    for bad in ("1e3", "0x10", " ", "3.5", "١٢"):  # Python's int() would read some of these
        _refused({"prompt_seed": bad}, "'prompt_seed' must be an integer")
    for key in ("rare_max_count", "trace_workers", "n_prompts", "trace_window_factor", "prompt_seed"):
        message = _refused({key: 10 ** 20}, f"'{key}' must be between")
        assert "100000000000000000000" in message
    _refused({"discoverable_n": [1, 10 ** 20]}, "'discoverable_n' must be a list of whole numbers")
    _refused({"n_prompts": 1e30}, "must be between 1 and 10,000,000")
    _refused({"trace_workers": 0}, "'trace_workers' must be at least 1, not 0")


@pytest.fixture(autouse=True, scope="module")
def _no_propme_environment():
    with pytest.MonkeyPatch.context() as mp:
        for name in KEYS:
            mp.delenv(f"PROPME_{name.upper()}", raising=False)
        yield


def test_environment_is_read_and_checked_the_same_way(monkeypatch):
    monkeypatch.setenv("PROPME_RARE_MAX_COUNT", "7")
    assert read_options({})["rare_max_count"] == 7
    monkeypatch.setenv("PROPME_N_PROMPTS", "3_0")
    with pytest.raises(TaskConfigError, match="environment variable PROPME_N_PROMPTS must be an integer"):
        read_options({})
    monkeypatch.setenv("PROPME_N_PROMPTS", "9")
    assert read_options({"n_prompts": 4})["n_prompts"] == 4  # metadata wins over the environment


def test_misspelt_keys_are_refused_with_the_nearest_key():
    assert "did you mean 'n_prompts'?" in _refused({"n_promts": 5}, "unknown metadata key 'n_promts'")
    assert "did you mean 'rare_max_count'?" in _refused({"rare_max_cont": 5}, "unknown metadata key")
    assert "did you mean 'trace_workers'?" in _refused({"trace_worker": 2}, "unknown tracing parameter 'trace_worker'")
    _refused({"prompt_language": "da"}, "unknown metadata key 'prompt_language'")  # PropMe's prefix, no near key
    # every key one letter short is refused, and the key it came from is suggested
    for name in ALL_KEYS:
        if len(name) >= 8:
            typo = name[:3] + name[4:]
            if typo not in ALL_KEYS:
                assert "did you mean" in _refused({typo: 1}, "unknown")


def test_model_arguments_pass():
    """lm-eval merges --model_args into the metadata: none of its HF backend's arguments is refused."""
    from lm_eval.models.huggingface import HFLM

    names = [p for p in inspect.signature(HFLM.__init__).parameters if p not in ("self", "args", "kwargs")]
    assert len(names) > 20
    read_options({name: "x" for name in names if name not in ALL_KEYS and name not in schema.MODEL_KEYS})
    for extra in ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "data_parallel_size",
                  "enable_thinking", "config_source", "version"):
        read_options({extra: 1})


VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=12), st.from_regex(r"[+-]?[0-9_]{1,25}", fullmatch=True),
                   st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(sorted(ALL_KEYS)), value=VALUES)
def test_fuzz_every_key_gives_a_checked_value_or_one_message(key, value):
    """Any value of any key: a value of the key's type within its range, or TaskConfigError; never
    another exception (OverflowError, TypeError), never a value out of range."""
    try:
        got = read_options({key: value}).get(key)
    except TaskConfigError as exc:
        assert key in str(exc) or "tracing parameters" in str(exc)
        return
    spec = ALL_KEYS[key]
    if value is None or value == "":
        return  # unset: the default
    if spec.kind is int:
        assert type(got) is int and spec.minimum <= got <= spec.maximum
        assert not isinstance(value, bool)
        assert "_" not in str(value)
        assert got == (int(value) if not isinstance(value, str) else int(value.strip()))
    elif spec.kind is float:
        assert type(got) is float and math.isfinite(got) and 0 < got < 1
    elif spec.kind is bool:
        assert type(got) is bool
    elif spec.kind is list:
        assert all(type(n) is int and 1 <= n <= spec.maximum for n in got)
    else:
        assert isinstance(got, str)


@settings(max_examples=200, deadline=None)
@given(key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=20))
def test_fuzz_unknown_keys(key):
    """A key is accepted only if it is PropMe's, lm-eval's or not like any of PropMe's keys."""
    try:
        read_options({key: "1"})
    except TaskConfigError as exc:
        assert key in str(exc) or "tracing parameters" in str(exc)
        assert key not in ALL_KEYS or "must be" in str(exc)


def test_huge_integers_stop_stock_lm_eval_with_one_message(demo_paths, tmp_path):
    """Before: OverflowError traceback after the model was loaded. Now: one PropMe message, exit 1."""
    meta = {"demo_index": str(demo_paths.index), "rare_max_count": 10 ** 20}
    proc = run_lm_eval([*model_args(demo_paths), "--tasks", "propme_demo_generic", "--metadata", json.dumps(meta)],
                       tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert "PropMe: metadata key 'rare_max_count' must be between 1 and" in output
    assert "Traceback" not in output and "Running generate_until" not in output
    typo = run_lm_eval([*model_args(demo_paths), "--tasks", "propme_demo_generic",
                        "--metadata", json.dumps({"demo_index": str(demo_paths.index), "n_promts": 3})], tmp_path)
    assert typo.returncode == 1 and "did you mean 'n_prompts'?" in typo.stderr
