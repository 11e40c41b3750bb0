"""The demo's other benchmark: a small local multiple-choice task (`demo_quiz`) run through stock
lm-eval on the demo model next to `propme_demo`, then checked against the demo index by
`propme contamination`'s code. Half of its questions are sentences of the demo corpus (the gold
answer is the words that follow them there), half are made-up words: the contaminated half is
known, and the model that memorized its training data should score higher on it."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

TASK = "demo_quiz"
ITEMS = 24
_SYLLABLES = ("ka", "lo", "mir", "ten", "su", "vor", "ba", "dri", "pel", "nu", "gos", "fa")


def _made_up(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(n))


def write_task(corpus: Path, folder: Path, seed: int = 0) -> Path:
    """The task's YAML and JSONL in `folder`: ITEMS / 2 copied questions (the first 16 words of a
    document's first paragraph, the next 4 the gold choice; the documents the demo model memorized
    first), ITEMS / 2 of made-up words."""
    rng = random.Random(seed)
    records = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    sources = [(not r.get("memorized"), rng.random(), r["text"].split("\n\n")[0].split(" ")) for r in records
               if not str(r.get("id", "")).startswith("notice-")]
    sources = [words for _, _, words in sorted(sources) if len(words) >= 20]
    rows = []
    for i in range(ITEMS):
        if i % 2 == 0:
            words = sources[(i // 2) % len(sources)]
            question, gold = " ".join(words[:16]), " ".join(words[16:20])
        else:
            question, gold = _made_up(rng, 16), _made_up(rng, 4)
        choices = [gold] + [_made_up(rng, 4) for _ in range(3)]
        rng.shuffle(choices)
        rows.append({"question": question, "choices": choices, "gold": choices.index(gold)})
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{TASK}.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data))}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: \"{{question}}\"\ndoc_to_target: gold\n"
        "doc_to_choice: choices\nmetric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n", encoding="utf-8")
    return folder


def run_benchmark_task(paths, root: Path | None = None, progress: bool = False):
    """Run `demo_quiz` through lm-eval on the demo model's final checkpoint (`DemoPaths` `paths`, the
    same model id and revision as its PropMe run; reused when done), check its items against the
    index and write the outputs into `root/contamination` (`root`: the demo folder by default).
    Returns the `ContaminationResult` (its terminal lines: `contamination_views.contamination_lines`)."""
    from propme.demo.layout import DEMO_MODEL, FINAL, lm_eval_env
    from propme_metrics.contamination.assess import check_tasks
    from propme_metrics.contamination.rule import ContaminationRule
    from propme_metrics.contamination.runs import read_runs
    from propme_metrics.core.errors import BuildError
    from propme_metrics.index.reader import open_index
    from propme_metrics.metrics.pm import IntervalSpec
    from propme_metrics.report.contamination_views import write_outputs
    from propme_tasks.benchmark_docs import logged_items

    root = paths.root if root is None else Path(root)
    folder = write_task(paths.corpus, root / "benchmark-task")
    runs = root / "benchmark-runs"
    if not (runs.exists() and any(runs.rglob("results_*.json"))):
        log = root / "benchmark-lm-eval.log"
        with open(log, "w") as fh:
            proc = subprocess.run([sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
                                   f"pretrained={DEMO_MODEL},revision={FINAL},dtype=float32", "--device", "cpu",
                                   "--batch_size", "8", "--tasks", TASK, "--include_path", str(folder),
                                   "--log_samples", "--output_path", str(runs)],
                                  env=lm_eval_env(paths), stdout=fh, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise BuildError(f"lm-eval failed on {TASK} (exit {proc.returncode}); see {log}",
                             "fix the cause and run `propme demo` again: finished stages are reused")
    logged = read_runs([runs], (TASK,))
    per_task = logged_items(logged, str(folder))
    result = check_tasks(open_index(paths.index), per_task, ContaminationRule(), 1, IntervalSpec(1000, 0), not progress,
                         runs={TASK: logged[0].runs})
    write_outputs(root / "contamination", result)
    return result
