"""The demo on a shared machine: torch's threads are one whatever the load (its weights and scores
do not follow the load average), lm-eval's progress is read from its log (issue 46, item 6)."""
from __future__ import annotations

from propme.demo import layout, run


def test_torch_threads_are_one_whatever_the_load_unless_the_user_says(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(layout.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    for load in (0.0, 1.85, 19.0):  # idle, busy, overloaded: the same count, so the same trained weights
        monkeypatch.setattr(layout.os, "getloadavg", lambda load=load: (load, load, load))
        assert layout.torch_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert layout.torch_threads() == 3   # the user's choice wins
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    assert layout.torch_threads() == 1   # not a count: ignored


def test_the_lm_eval_children_get_the_threads(tmp_path):
    env = run.lm_eval_env(run.DemoPaths(tmp_path), threads=1)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"


def test_the_latest_request_counter_is_read_from_lm_evals_log(tmp_path):
    log = tmp_path / "lm-eval.log"
    assert run.latest_counter(log) is None   # not written yet
    log.write_text("INFO Building contexts\nRunning generate_until requests:   0%|          | 0/38 [00:00<?, ?it/s]"
                   "\rRunning generate_until requests:  24%|##4       | 9/38 [00:03<00:10,  2.8it/s]"
                   "\rRunning generate_until requests:  50%|#####     | 19/38 [00:06<00:06,  2.9it/s]")
    assert run.latest_counter(log) == ("Running generate_until requests", 50, 19, 38)
    with log.open("a") as fh:
        fh.write("\nRunning loglikelihood requests: 100%|##########| 6/6 [00:00<00:00, 99.37it/s]\n")
    assert run.latest_counter(log) == ("Running loglikelihood requests", 100, 6, 6)
