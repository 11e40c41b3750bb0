"""PropMe's tasks are checked before the model loads, and `lm_eval validate` says what is missing."""
from __future__ import annotations

import json

from propme_tasks import hooks
from support.lmeval import run_lm_eval


def test_a_missing_index_stops_the_run_before_the_model_loads(tmp_path):
    """The model folder does not exist either: the run must stop on the index, before lm-eval
    initializes the model (which would fail on the model instead)."""
    proc = run_lm_eval(["--model", "hf", "--model_args", f"pretrained={tmp_path / 'no-model'}", "--device", "cpu",
                        "--tasks", "propme_demo", "--metadata", json.dumps({"demo_index": str(tmp_path / "none")})],
                       tmp_path)
    assert proc.returncode != 0
    assert "PropMe: the index given by metadata key 'demo_index'" in proc.stderr, proc.stderr[-2000:]
    assert "Initializing hf model" not in proc.stderr and "Traceback" not in proc.stderr


def test_validate_says_what_is_missing(tmp_path):
    proc = run_lm_eval(["validate", "--tasks", "propme_dynaword"], tmp_path)
    assert proc.returncode == 1
    assert "no index for corpus 'dynaword'" in proc.stderr and "PROPME_DYNAWORD_INDEX" in proc.stderr
    assert "--metadata '" not in proc.stderr  # lm_eval validate has no --metadata: the hint names what it takes
    assert "All tasks found and valid" not in proc.stdout


def test_a_dataset_built_ahead_is_handed_over_once():
    calls = []

    @hooks.handed_over
    def loader(**meta):
        calls.append(meta)
        return {"test": [meta["n"]]}

    with hooks.building_ahead():
        assert loader(n=1) == {"test": [1]}
    assert loader(n=1) == {"test": [1]} and len(calls) == 1  # lm-eval's own build: handed over
    assert loader(n=1) == {"test": [1]} and len(calls) == 2  # once only: a later build loads again
    with hooks.building_ahead(keep=False):  # `lm_eval validate`: checked, nothing kept
        loader(n=2)
    loader(n=2)
    assert len(calls) == 4
