"""The demo's shape, shared by its stages (`propme.demo.run`) and its benchmark task
(`propme.demo.benchmark_task`): its sizes, its folders, the model id its checkpoints are published
under, and the environment of its lm-eval runs."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from propme_metrics.metrics.pm import DEFAULT_BOOTSTRAP

#: the model id the demo's checkpoints are published under (a local hub cache, never the network)
DEMO_MODEL = "propme-demo/tiny-gpt2"
#: the revision name of the final checkpoint
FINAL = "final"


@dataclass(frozen=True)
class DemoSize:
    """How big the demo is; `small` is the CI size."""

    n_memorized: int = 16
    n_background: int = 300
    n_boilerplate: int = 200     #: documents ending in the same notice (more than 100 copies: boilerplate)
    n_prompts: int = 100         #: generic and specific prompts each (prefix: every eligible document)
    n_prompt_free: int = 100     #: generations of unconditional and of minimal_cue each
    max_gen_toks: int = 256
    bootstrap: int = DEFAULT_BOOTSTRAP
    early_steps: int = 40        #: training steps of the early checkpoint (revision `step<N>`)

    @property
    def revisions(self) -> tuple[str, str]:
        """The checkpoints lm-eval runs, in training order: the early one, then the final one."""
        return f"step{self.early_steps}", FINAL


FULL = DemoSize()
SMALL = DemoSize(n_memorized=8, n_background=120, n_boilerplate=110, n_prompts=8, n_prompt_free=8, max_gen_toks=96, bootstrap=1000)


@dataclass
class DemoPaths:
    root: Path

    @property
    def corpus(self) -> Path:
        return self.root / "corpus.jsonl"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def model(self) -> Path:
        """The final checkpoint."""
        return self.root / "model"

    def checkpoint(self, revision: str) -> Path:
        """The folder of a checkpoint (the final one is `model`)."""
        return self.model if revision == FINAL else self.root / "checkpoints" / revision

    @property
    def hub(self) -> Path:
        """The local Hugging Face cache the checkpoints are published in (HF_HUB_CACHE of the lm-eval runs)."""
        return self.root / "hub"

    def prompts(self, setting: str) -> Path:
        return self.root / "prompts" / f"{setting}.jsonl"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def run(self, revision: str) -> Path:
        """lm-eval's output folder for one checkpoint."""
        return self.runs / revision

    @property
    def report(self) -> Path:
        return self.root / "report"


#: the environment variables that set torch's (OpenMP's and MKL's) threads in a child process
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def torch_threads() -> int:
    """Threads for torch in the demo: one, whatever the machine's load, unless OMP_NUM_THREADS says
    otherwise (the user's choice wins). The count is part of the result: torch sums in another order
    with another count, so the weights the demo trains (and the log-probabilities lm-eval scores) would
    change with the load average if it followed it (a 2-thread and a 1-thread training differed by up
    to 1e-3 in a weight). One thread is also the fast choice for a model this small: on a loaded 2-core
    machine two threads were 7-25x slower at generation than one."""
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(given) if given.isdigit() and int(given) > 0 else 1


def lm_eval_env(paths: DemoPaths, threads: int | None = None) -> dict[str, str]:
    """The environment of the demo's lm-eval runs: offline, the demo's hub cache and PropMe cache,
    and torch's threads (`torch_threads` unless given)."""
    n = str(threads or torch_threads())
    return dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                HF_HUB_CACHE=str(paths.hub), PROPME_CACHE_DIR=str(paths.root / "cache"),
                **dict.fromkeys(THREAD_VARIABLES, n))
