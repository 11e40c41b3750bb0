"""`propme demo`: the whole PropMe job offline on an embedded default, in stages that are reused.

corpus (generated, bilingual) -> tokenizer -> infini-gram index -> a tiny GPT-2 that memorizes the
planted documents (trained like real models, each document after the start token `<|endoftext|>`),
kept as two training checkpoints: an early one and the final one -> generic/specific/prefix prompt
sets -> `lm_eval --tasks propme_demo` on each checkpoint (the three prompted settings and the
prompt-free `unconditional` and `minimal_cue`, every prompt after the start token, and the prefix
documents scored by likelihood) -> `propme report` over both (two rows, their paired comparison
and the trajectory across checkpoints; the (n, p) curve). A second run reuses every stage whose
output already exists.

The checkpoints are published the way hub models publish theirs: as revisions of one model id,
`DEMO_MODEL`, in a local Hugging Face cache inside the demo folder (`publish_checkpoints`), so that
lm-eval loads `pretrained=propme-demo/tiny-gpt2,revision=<checkpoint>` offline and the report sees
one model at two revisions.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from propme.demo.layout import DEMO_MODEL, FINAL, FULL, SMALL, DemoPaths, DemoSize, lm_eval_env, torch_threads
from propme_metrics.core.errors import BuildError
from propme_metrics.core.files import write_atomic

STAGES = ("corpus", "tokenizer", "index", "model", "prompts", "lm-eval", "report")


def _say(text: str) -> None:
    """One progress line on stderr (paths printed as written, never as markup)."""
    from rich.text import Text

    from propme_metrics.core.progress import stderr_console

    stderr_console.print(Text(text), highlight=False, soft_wrap=True)


def _stage(name: str, reused: bool, started: float, detail: str = "") -> None:
    from rich.text import Text

    from propme_metrics.core.progress import stderr_console

    n = STAGES.index(name) + 1
    state = "reused" if reused else f"done in {time.time() - started:.1f}s"
    # the detail holds paths the user chose: printed as written, never as markup
    stderr_console.print(Text.assemble((f"[{n}/{len(STAGES)}] {name}", "bold cyan"), f": {state}",
                                       f"  {detail}" if detail else ""), highlight=False, soft_wrap=True)


def prepare(root: str | Path, size: DemoSize = FULL, progress: bool = False) -> DemoPaths:
    """Stages 1-5: corpus, tokenizer, index, memorizing model and prompt files (each reused if present)."""
    from propme.demo.synthetic import demo_corpus, train_memorizing_model, train_tokenizer
    from propme_metrics.index.build import build_index
    from propme_metrics.index.manifest import MANIFEST_NAME
    from propme_metrics.index.reader import open_index
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.prompts.prompt_set import (
        build_prompt_set,
        builtin_prompts,
        eligible_documents,
        write_prompt_set,
    )
    from propme_metrics.prompts.settings import DEFAULT_PROMPT_SEED, PREFIX, PROMPTED_SETTINGS

    paths = DemoPaths(Path(root).absolute())
    paths.root.mkdir(parents=True, exist_ok=True)
    records = demo_corpus(size.n_memorized, size.n_background, seed=0, n_boilerplate=size.n_boilerplate)

    t = time.time()
    reused = paths.corpus.is_file()
    if not reused:
        write_atomic(paths.corpus, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    _stage("corpus", reused, t, f"{len(records)} documents, {size.n_memorized} planted, "
                                f"{size.n_boilerplate} with the same notice")

    t = time.time()
    reused = (paths.tokenizer / "tokenizer.json").is_file()
    if not reused:
        train_tokenizer([r["text"] for r in records], paths.tokenizer)
    _stage("tokenizer", reused, t, "byte-level BPE, 1,000 entries")

    t = time.time()
    reused = (paths.index / MANIFEST_NAME).is_file()
    manifest = build_index(CorpusSource(str(paths.corpus)), paths.index, tokenizer=str(paths.tokenizer),
                           progress=progress, check_space=False)
    _stage("index", reused, t, f"{manifest.total_tokens:,} tokens")

    t = time.time()
    reused = all((paths.checkpoint(r) / "config.json").is_file() for r in size.revisions)
    detail = f"checkpoints {', '.join(size.revisions)} of {DEMO_MODEL}"
    if not reused:
        import torch

        planted = [r["text"] for r in records if r["memorized"]]
        threads = torch_threads()
        torch.set_num_threads(threads)
        _say(f"      training {DEMO_MODEL} on {len(planted)} planted documents ({threads} torch thread(s))")

        def report(step: int, steps: int, loss: float) -> None:
            if progress:
                _say(f"      step {step} of at most {steps}: loss {loss:.3f} ({time.time() - t:.0f}s)")

        loss = train_memorizing_model(planted, paths.tokenizer, paths.model,
                                      checkpoints={size.early_steps: paths.checkpoint(size.revisions[0])},
                                      progress=report)
        detail += f"; final training loss {loss:.3f} on {len(planted)} planted documents"
    publish_checkpoints(paths, size.revisions)
    _stage("model", reused, t, detail)

    t = time.time()
    reused = all(paths.prompts(s).is_file() for s in PROMPTED_SETTINGS)
    if not reused:
        index = open_index(paths.index)
        paths.prompts(PREFIX).parent.mkdir(exist_ok=True)
        for setting in (s for s in PROMPTED_SETTINGS if s != PREFIX):
            # the demo corpus is bilingual: candidates are the built-in Danish and English prompts
            cands = paths.root / "prompts" / f"{setting}-candidates.jsonl"
            with open(cands, "w", encoding="utf-8") as fh:
                for lang in ("da", "en"):
                    for rec in builtin_prompts(lang):
                        if rec["setting"] == setting:
                            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            ps = build_prompt_set(index, setting, n=size.n_prompts, seed=DEFAULT_PROMPT_SEED, candidates=cands)
            write_prompt_set(ps, paths.prompts(setting))
        eligible = len(eligible_documents(index))
        write_prompt_set(build_prompt_set(index, PREFIX, n=eligible, seed=DEFAULT_PROMPT_SEED), paths.prompts(PREFIX))
    _stage("prompts", reused, t)
    return paths


def publish_checkpoints(paths: DemoPaths, revisions: tuple[str, ...]) -> None:
    """Make each checkpoint folder a revision of DEMO_MODEL in the local hub cache `paths.hub`: the
    cache's `refs/<revision>` names a snapshot, and the snapshot is the checkpoint's folder (a link),
    as `huggingface_hub` lays out a downloaded model. Idempotent."""
    import hashlib

    repo = paths.hub / ("models--" + DEMO_MODEL.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    for revision in revisions:
        commit = hashlib.sha1(f"{DEMO_MODEL}@{revision}".encode()).hexdigest()
        write_atomic(repo / "refs" / revision, commit)
        snapshot = repo / "snapshots" / commit
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        if snapshot.is_symlink():
            snapshot.unlink()
        snapshot.symlink_to(paths.checkpoint(revision).absolute(), target_is_directory=True)


def lm_eval_command(paths: DemoPaths, size: DemoSize, extra_metadata: dict | None = None,
                    revision: str = FINAL) -> list[str]:
    """The stock lm-eval command line that runs the propme_demo group on one checkpoint of the demo
    model (run with `lm_eval_env`, which points the hub cache at the published checkpoints)."""
    from propme_metrics.prompts.settings import PROMPTED_SETTINGS
    from propme_tasks.discovery import tasks_path

    metadata = {"demo_index": str(paths.index), "prompt_free_generations": size.n_prompt_free,
                **{f"demo_{s}_prompts": str(paths.prompts(s)) for s in PROMPTED_SETTINGS}}
    metadata.update(extra_metadata or {})
    return [sys.executable, "-m", "lm_eval", "--model", "hf",
            "--model_args", f"pretrained={DEMO_MODEL},revision={revision},dtype=float32", "--device", "cpu",
            "--batch_size", "8", "--tasks", "propme_demo", "--include_path", tasks_path(),
            "--gen_kwargs", f"max_gen_toks={size.max_gen_toks}",
            "--metadata", json.dumps(metadata), "--log_samples", "--output_path", str(paths.run(revision))]


#: lm-eval's request counters (tqdm lines in its log): the phase, percent done, done and total
_COUNTER = re.compile(r"(Running \w+ requests):\s*(\d+)%[^\r\n]*?\|\s*(\d+)/(\d+)")


def latest_counter(log: Path) -> tuple[str, int, int, int] | None:
    """The last request counter lm-eval wrote into its log: (phase, percent, done, total), or None."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - 16384))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = _COUNTER.findall(tail)
    if not found:
        return None
    phase, pct, done, total = found[-1]
    return phase, int(pct), int(done), int(total)


def _run_logged(command: list[str], env: dict[str, str], log: Path, progress: bool, every: float = 15.0) -> int:
    """Run lm-eval with its output in `log`, printing its request counter as it moves (a line at
    most every `every` seconds, when the phase changes or 10 points more are done); its exit status."""
    started, shown = time.time(), None
    with open(log, "w") as fh:
        proc = subprocess.Popen(command, env=env, stdout=fh, stderr=subprocess.STDOUT)
        while True:
            try:
                return proc.wait(timeout=every)
            except subprocess.TimeoutExpired:
                counter = latest_counter(log) if progress else None
                if counter and (shown is None or counter[0] != shown[0] or counter[1] >= shown[1] + 10):
                    shown = counter
                    _say(f"      {counter[0]}: {counter[2]}/{counter[3]} ({counter[1]}%, {time.time() - started:.0f}s)")


def run_lm_eval(paths: DemoPaths, size: DemoSize, progress: bool = True) -> None:
    """Stage 6: run lm-eval on each checkpoint (skipped for one whose results file is already there),
    naming its log first and showing its request counter while it runs."""
    t = time.time()
    ran = []
    for k, revision in enumerate(size.revisions, 1):
        run = paths.run(revision)
        if run.exists() and any(run.rglob("results_*.json")):
            continue
        log = paths.root / f"lm-eval-{revision}.log"
        threads = torch_threads()
        _say(f"      lm-eval on checkpoint {revision} ({k} of {len(size.revisions)}, {threads} torch thread(s)); "
             f"its log: {log}")
        code = _run_logged(lm_eval_command(paths, size, revision=revision), lm_eval_env(paths, threads), log,
                           progress)
        if code != 0:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise BuildError(f"lm-eval failed on checkpoint {revision} (exit {code}); last lines of "
                             f"{log}:\n" + "\n".join(tail),
                             "fix the cause and run `propme demo` again: finished stages are reused")
        ran.append(revision)
    _stage("lm-eval", not ran, t, f"checkpoints {', '.join(size.revisions)}; samples and results in {paths.runs}")


def run_demo(out: str | Path = "propme-demo", small: bool = False, progress: bool = True):
    """All seven stages; prints the PM table and where report.html is. Returns the Report."""
    import importlib.util

    from propme_metrics.core.errors import ConfigError
    from propme_metrics.core.progress import stderr_console
    from propme_metrics.prompts.settings import PROMPT_FREE_SETTINGS
    from propme_metrics.report.assemble import build_report
    from propme_metrics.report.console import print_summary
    from propme_metrics.report.folder import write_report
    from propme_metrics.report.request import ReportRequest

    missing = [m for m in ("torch", "lm_eval") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"the demo needs {' and '.join(missing)}, which are not installed",
                          "pip install torch==2.13.0 'propme[lmeval]' (or run `make demo`)")
    size = SMALL if small else FULL
    started = time.time()
    paths = prepare(out, size, progress=progress)
    run_lm_eval(paths, size, progress=progress)
    from propme.demo.benchmark_task import run_benchmark_task
    from propme_metrics.report.contamination_views import contamination_lines

    contamination = run_benchmark_task(paths, progress=progress)  # demo_quiz: the report's contamination section
    t = time.time()
    report = build_report(ReportRequest([paths.run(r) for r in size.revisions], paths.report, bootstrap=size.bootstrap, seed=0,
                          contamination=contamination))
    files = write_report(report)
    _stage("report", False, t, str(paths.report))
    print_summary(report, files)
    result = report.results[-1]  # the final checkpoint
    for (metric, setting), iv in sorted(result.pm.items()):
        if metric in ("fmr", "nvr") and iv.estimate >= 0.5:
            how = "without a prompt" if setting in PROMPT_FREE_SETTINGS else "under ordinary prompts"
            stderr_console.print(f"[yellow]finding:[/] PM_{metric.upper()} ({setting} vs prefix) = {iv.estimate:.2f}: "
                                 f"the tiny model leaks {how} as much as under prefix attacks")
    for lr in report.likelihood:  # the (n, p) curve of the likelihood subtask
        curve = "  ".join(f"n={n:,}: {e.estimate:.2f}" for n, e in lr.curve.items())
        fmr = "-" if lr.prefix_fmr is None else f"{lr.prefix_fmr.estimate:.2f}"
        print(f"\n(n, p)-discoverable prefix documents (p = {lr.p:g}, {lr.n_documents} documents): {curve}\n"
              f"greedy extraction {lr.metrics['greedy_extraction'].estimate:.2f}, prefix FMR {fmr}, "
              f"median log10 P(z) {lr.metrics['log10_p_median'].estimate:.2f}")
    for line in contamination_lines(contamination):
        print(f"\ncontamination of the demo's other benchmark (propme contamination): {line}")
    print(f"\nreport: {files.html}\nleaderboard: {files.leaderboard_csv} and {files.leaderboard_html}\n"
          f"total time {time.time() - started:.0f}s (artifacts in {paths.root}; a second run reuses them)")
    return report
