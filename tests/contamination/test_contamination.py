"""`propme contamination` against a brute-force oracle over a small corpus in which a local
benchmark's items are planted at known rates (verbatim, question only, answer only, white space
changed, near-verbatim with edits, not at all), and end to end through a stock lm_eval run."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from propme_metrics.contamination.check import KgramCounts, apply_rule, coverage_values, match_items
from propme_metrics.contamination.coverage import FREQUENT
from propme_metrics.contamination.items import BenchmarkItem
from propme_metrics.contamination.match import CorpusMatcher
from propme_metrics.contamination.rule import ContaminationRule
from propme_metrics.contamination.summary import task_summary
from propme_metrics.index.reader import open_index
from propme_metrics.metrics.pm import IntervalSpec
from propme_metrics.runs.files import model_identity
from propme_metrics.trace.text_rules import normalize_text
from support.corpora import make_index, write_jsonl
from support.lmeval import run_lm_eval, samples_file
from support.reference_trace import BruteForce

KINDS = ("verbatim", "question", "answer", "whitespace", "edited", "absent")
PER_KIND = 5
INSTRUCTION = ("Read the short passage below with care and then pick the one answer that fits the question "
               "best of all the answers given")
INSTRUCTION_COPIES = 12   #: documents of the corpus holding the instruction (a stock phrase: frequent)


def _words(rng: random.Random, n: int) -> list[str]:
    syllables = ["ka", "lo", "mir", "ten", "su", "vor", "ba", "dri", "pel", "nu", "gos", "fa", "ri", "mon", "te"]
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))) for _ in range(n)]


def _edited(text: str, rng: random.Random) -> str:
    """Every third word replaced by a new one."""
    words = text.split(" ")
    return " ".join(_words(rng, 1)[0] + "x" if i % 3 == 2 else w for i, w in enumerate(words))


def _spaced(text: str) -> str:
    """The same words with doubled spaces, a no-break space and outer white space."""
    words = text.split(" ")
    return "  " + "  ".join(words[:4]) + "\u00a0" + " ".join(words[4:]) + " \t"


@pytest.fixture(scope="module")
def planted(tmp_path_factory, gpt2_dir):
    """Items of a multiple-choice task, the corpus they are planted in, its index and the kinds."""
    rng = random.Random(11)
    root = tmp_path_factory.mktemp("contam")
    rows, docs, kinds = [], [], []
    for kind in KINDS:
        for _ in range(PER_KIND):
            question, choices = " ".join(_words(rng, 18)), [" ".join(_words(rng, 4)) for _ in range(4)]
            gold = rng.randrange(4)
            joined = f"{question} {choices[gold]}"
            planted_text = {"verbatim": joined, "question": question, "answer": choices[gold], "whitespace": joined,
                            "edited": _edited(joined, rng), "absent": None}[kind]
            if planted_text is not None:
                docs.append(" ".join(_words(rng, 20)) + " " + planted_text + " " + " ".join(_words(rng, 20)))
            shown = _spaced(question) if kind == "whitespace" else question
            rows.append({"question": shown, "choices": choices, "gold": gold, "kind": kind})
            kinds.append(kind)
    docs += [" ".join(_words(rng, 60)) for _ in range(30)]
    docs += [" ".join(_words(rng, 10)) + " " + INSTRUCTION + " " + " ".join(_words(rng, 10))
             for _ in range(INSTRUCTION_COPIES)]
    records = [{"id": f"d{i}", "text": t, "source": "planted" if i < len(docs) - 30 - INSTRUCTION_COPIES else "filler"}
               for i, t in enumerate(docs)]
    write_jsonl(root / "corpus.jsonl", records)
    make_index(root / "corpus.jsonl", root / "index", gpt2_dir, num_shards=2)
    return {"root": root, "rows": rows, "kinds": kinds, "docs": docs, "index": root / "index"}


@pytest.fixture(scope="module")
def index(planted):
    return open_index(planted["index"])


@pytest.fixture(scope="module")
def oracle(planted, index) -> BruteForce:
    return BruteForce([index.encode(t) for t in planted["docs"]])


def _items(rows, task="contam_mc") -> list[BenchmarkItem]:
    out = []
    for i, r in enumerate(rows):
        answer = r["choices"][r["gold"]]
        out.append(BenchmarkItem(task, i, r["question"], answer, f"{r['question']} {answer}"))
    return out


def _oracle_coverage(ids: list[int], lengths: list[int], k: int, boiler: set[tuple[int, ...]]):
    """Share of the tokens outside boilerplate k-grams that lie in a non-boilerplate corpus k-gram."""
    if len(ids) < k:
        return None
    grams = [tuple(ids[j:j + k]) for j in range(len(ids) - k + 1)]
    covered = [any(lengths[j] >= k and grams[j] not in boiler for j in range(max(0, p - k + 1), min(p, len(grams) - 1) + 1))
               for p in range(len(ids))]
    shared = [any(grams[j] in boiler for j in range(max(0, p - k + 1), min(p, len(grams) - 1) + 1)) for p in range(len(ids))]
    own = [p for p in range(len(ids)) if not shared[p]]
    return sum(covered[p] for p in own) / len(own) if own else None


def _oracle_boilerplate(texts: list[list[int]], k: int, min_items: int, min_count: int,
                        oracle: BruteForce) -> set[tuple[int, ...]]:
    """k-grams in at least `min_items` texts that the corpus holds `min_count` times or more, or
    that no corpus k-gram touches while they stand at one offset from the start (or from the end)
    in every text holding them."""
    starts: dict[tuple[int, ...], list[set[int]]] = {}
    ends: dict[tuple[int, ...], list[set[int]]] = {}
    touched = set()   # k-grams a token of which lies in a corpus k-gram (of the same text)
    for ids in texts:
        in_corpus = [oracle.count(ids[j:j + k]) > 0 for j in range(len(ids) - k + 1)]
        for j in range(len(ids) - k + 1):
            if any(in_corpus[max(0, j - k + 1):j + k]):
                touched.add(tuple(ids[j:j + k]))
        here: dict[tuple[int, ...], set[int]] = {}
        for j in range(len(ids) - k + 1):
            here.setdefault(tuple(ids[j:j + k]), set()).add(j)
        for g, at in here.items():
            starts.setdefault(g, []).append(at)
            ends.setdefault(g, []).append({len(ids) - k - j for j in at})
    out = set()
    for g, at in starts.items():
        if len(at) < min_items:
            continue
        count = oracle.count(list(g))
        fixed = bool(set.intersection(*at)) or bool(set.intersection(*ends[g]))
        if count >= min_count or (g not in touched and fixed):
            out.add(g)
    return out


def _oracle_ids(index, item: BenchmarkItem, field: str) -> list[int]:
    """The tokens of a field: the question's own; the answer with the delimiter before it (as the
    task joins them), unless the joined text is not question first (then the answer's own)."""
    question, answer = normalize_text(item.question), normalize_text(item.answer)
    if field == "joined":
        return index.encode(normalize_text(item.joined))
    if field == "question":
        return index.encode(question)
    return index.encode(" " + answer if normalize_text(item.joined).startswith(question) else answer)


def test_match_lengths_longest_and_coverage_equal_the_oracle(planted, index, oracle):
    items = _items(planted["rows"])
    for it in items[-4:]:  # joined answer first: question and answer are searched on their own
        it.joined = f"{it.answer} {it.question}"
    matcher = CorpusMatcher(index, batch_positions=97)  # small batches: texts split across calls
    results = match_items(items, matcher)
    for rule in (ContaminationRule(), ContaminationRule(k=4, boilerplate_share=0.1, boilerplate_min_count=2)):
        check = apply_rule("contam_mc", results, rule, KgramCounts(matcher))
        for field in ("joined", "question", "answer"):
            texts = [_oracle_ids(index, it, field) for it in items]
            boiler = _oracle_boilerplate(texts, rule.k, rule.boilerplate_items(len(items)), rule.boilerplate_min_count,
                                         oracle)
            for r, ids in zip(check.items, texts):
                m = r.matches[field]
                assert normalize_text(m.text) == normalize_text(getattr(r.item, field))
                lengths = [oracle.longest(ids, i) for i in range(len(ids))]
                assert m.ids.tolist() == ids
                assert m.lengths.tolist() == lengths
                assert m.longest == max(lengths, default=0)
                if m.longest:
                    span = ids[m.span[0]:m.span[1]]
                    assert m.span[1] - m.span[0] == m.longest and oracle.count(span) == m.count
                    assert m.source_id in {f"d{i}" for i, d in enumerate(planted["docs"]) if oracle_in(index, d, span)}
                expected = _oracle_coverage(ids, lengths, rule.k, boiler)
                got = r.coverage[field].value
                assert (got is None and expected is None) or got == pytest.approx(expected)


def oracle_in(index, doc: str, span: list[int]) -> bool:
    ids = index.encode(doc)
    return any(ids[i:i + len(span)] == span for i in range(len(ids) - len(span) + 1))


def test_planted_kinds_are_flagged_as_planted(planted, index):
    matcher = CorpusMatcher(index)
    check = apply_rule("contam_mc", match_items(_items(planted["rows"]), matcher), ContaminationRule(),
                       KgramCounts(matcher))
    by_kind: dict[str, list[bool]] = {}
    for kind, r in zip(planted["kinds"], check.items):
        by_kind.setdefault(kind, []).append(r.contaminated)
    assert all(by_kind["verbatim"]) and all(by_kind["whitespace"])  # white space normalized away
    assert not any(by_kind["absent"]) and not any(by_kind["answer"]) and not any(by_kind["edited"])
    # the question alone makes up most of the joined text: flagged; its own coverage is complete
    assert all(by_kind["question"])
    for kind, r in zip(planted["kinds"], check.items):
        if kind in ("verbatim", "whitespace", "question"):  # all but the first word (no space before it here)
            assert r.coverage["question"].value >= 0.9
        if kind == "absent":
            assert r.coverage["joined"].value == 0.0
        if kind == "edited":
            assert r.coverage["joined"].value < 0.7


def test_whitespace_is_normalized_before_matching(planted, index):
    """Without normalization the changed white space hides the copy (the matcher's normalization does the work)."""
    rows = [r for r in planted["rows"] if r["kind"] == "whitespace"]
    raw = [index.encode(r["question"]) for r in rows]
    matcher = CorpusMatcher(index)
    raw_longest = [int(lens.max()) for lens in matcher.match_lengths([np.asarray(ids) for ids in raw])]
    normalized = match_items(_items(rows), matcher)
    assert all(n.matches["question"].longest > r for n, r in zip(normalized, raw_longest))


def test_boilerplate_shared_by_every_item_flags_none(planted, index):
    """Every item opens with the same instruction, which the corpus holds: not contamination."""
    rng = random.Random(5)
    own = [_words(rng, 1)[0] for _ in range(12)]
    items = [BenchmarkItem("boiler", i, f"{INSTRUCTION} {w}", "yes", f"{INSTRUCTION} {w} yes") for i, w in enumerate(own)]
    matcher = CorpusMatcher(index)
    results = match_items(items, matcher)
    shared = apply_rule("boiler", results, ContaminationRule(), KgramCounts(matcher))
    assert shared.contaminated == 0 and shared.boilerplate_kgrams > 0
    for r in shared.items:   # the instruction is named as what was left out, and why
        spans = r.to_dict(shared.rule)["fields"]["joined"]["discounted_spans"]
        # all but its first word, which starts the text without the space the corpus has before it
        (d,) = spans
        assert d["chars"] == [INSTRUCTION.index(" "), len(INSTRUCTION)] and d["reason"] == FREQUENT
        assert d["items"] == len(items) and d["corpus_count"] == INSTRUCTION_COPIES
    counted = apply_rule("boiler", results, ContaminationRule(boilerplate_share=1.0),   # the rule switched off
                         KgramCounts(matcher))
    assert counted.contaminated == len(items)


def test_clean_and_contaminated_scores_recomputed_by_hand(planted, index):
    items = _items(planted["rows"])
    rng = random.Random(3)
    for it in items:
        it.metrics = {"model-a": {"acc": float(rng.random() < 0.5), "score": rng.random()}}
    matcher = CorpusMatcher(index)
    check = apply_rule("contam_mc", match_items(items, matcher), ContaminationRule(), KgramCounts(matcher))
    s = task_summary(check, IntervalSpec(500, 1)).to_dict()
    flagged = [r.contaminated for r in check.items]
    assert s["items"] == len(items) and s["contaminated"] == sum(flagged)
    for metric in ("acc", "score"):
        dirty = [it.metrics["model-a"][metric] for it, f in zip(items, flagged) if f]
        clean = [it.metrics["model-a"][metric] for it, f in zip(items, flagged) if not f]
        m = s["models"]["model-a"][metric]
        assert m["contaminated"]["value"] == pytest.approx(sum(dirty) / len(dirty))
        assert m["clean"]["value"] == pytest.approx(sum(clean) / len(clean))
        assert m["difference"]["value"] == pytest.approx(sum(dirty) / len(dirty) - sum(clean) / len(clean))
        for part in ("all", "clean", "contaminated", "difference"):
            assert m[part]["low"] <= m[part]["value"] <= m[part]["high"]
    # the curve at the rule's own thresholds is the rule's verdict
    point = next(p for p in s["curve"] if p["k"] == check.rule.k and p["min_coverage"] == check.rule.min_coverage)
    assert point["contaminated"] == s["contaminated"]
    strict = coverage_values(check.items, ContaminationRule(min_coverage=1.0), KgramCounts(matcher)) >= 1.0
    assert strict.sum() <= s["contaminated"] and not strict[~np.array(flagged)].any()


MC_YAML = """task: contam_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_target: gold
doc_to_choice: choices
metric_list:
  - metric: acc
"""
GEN_YAML = """task: contam_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: " "
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
metric_list:
  - metric: exact_match
"""


@pytest.fixture(scope="module")
def local_tasks(planted):
    """The planted items as two local lm-eval tasks: multiple choice, and generate_until whose
    gold answer is lm-eval's dummy model's reply ("lol") for every third item."""
    folder = planted["root"] / "tasks"
    mc = write_jsonl(folder / "mc.jsonl", planted["rows"])
    gen_rows = [{"question": r["question"], "answer": "lol" if i % 3 == 0 else r["choices"][r["gold"]]}
                for i, r in enumerate(planted["rows"])]
    gen = write_jsonl(folder / "gen.jsonl", gen_rows)
    (folder / "contam_mc.yaml").write_text(MC_YAML.format(data=mc))
    (folder / "contam_gen.yaml").write_text(GEN_YAML.format(data=gen))
    return folder


@pytest.fixture(scope="module")
def lm_eval_run(local_tasks, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    proc = run_lm_eval(["--model", "dummy", "--tasks", "contam_mc,contam_gen", "--include_path", str(local_tasks),
                        "--log_samples", "--output_path", str(tmp / "out")], tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "out"


@pytest.mark.slow  # a stock lm_eval run (the `lm_eval_run` fixture)
def test_after_a_stock_lm_eval_run(cli_run, lm_eval_run, local_tasks, planted, tmp_path):
    code, out, err = cli_run("contamination", lm_eval_run, "--index", planted["index"], "--out", tmp_path / "c",
                             "--include-path", local_tasks, "--bootstrap", 200, "--quiet")
    assert code == 0, err
    doc = json.loads((tmp_path / "c" / "contamination.json").read_text())
    assert set(doc["tasks"]) == {"contam_mc", "contam_gen"}
    rows = [json.loads(line) for line in (tmp_path / "c" / "contamination_items.jsonl").read_text().splitlines()]
    for task, metric in (("contam_mc", "acc"), ("contam_gen", "exact_match")):
        logged = {}
        for line in samples_file(lm_eval_run, task).read_text().splitlines():
            row = json.loads(line)
            logged[row["doc_id"]] = float(row[metric])
        flagged = {r["doc_id"]: r["contaminated"] for r in rows if r["task"] == task}
        assert set(flagged) == set(logged) == set(range(len(planted["rows"])))
        s = doc["tasks"][task]
        assert s["contaminated"] == sum(flagged.values())
        dirty = [v for d, v in logged.items() if flagged[d]]
        clean = [v for d, v in logged.items() if not flagged[d]]
        (model,) = s["models"]   # the run's model, as its results file names it
        assert model == model_identity(json.loads(next(lm_eval_run.rglob("results_*.json")).read_text()))[0]
        assert s["models"][model][metric]["contaminated"]["value"] == pytest.approx(sum(dirty) / len(dirty))
        assert s["models"][model][metric]["clean"]["value"] == pytest.approx(sum(clean) / len(clean))
        (board,) = doc["leaderboard"]
        assert board["model"] == model
        assert board[f"{task}_{metric}_clean"] == pytest.approx(sum(clean) / len(clean))
        assert board[f"{task}_contaminated_share"] == pytest.approx(s["contaminated"] / s["items"])
    # the multiple-choice task exposes the gold choice: what the planted rows say
    mc = {r["doc_id"]: r for r in rows if r["task"] == "contam_mc"}
    for i, row in enumerate(planted["rows"]):
        assert mc[i]["fields"]["answer"]["text"].strip() == row["choices"][row["gold"]]  # after the delimiter
        assert mc[i]["contaminated"] == (row["kind"] in ("verbatim", "whitespace", "question"))
    for name in ("contamination.csv", "contamination.md", "contamination_leaderboard.csv", "contamination_curve.png"):
        assert (tmp_path / "c" / name).stat().st_size > 0
    assert "contam_mc: 15 of 30 items contaminated" in out


def test_before_a_model_run_through_the_task_manager(cli_run, local_tasks, planted, tmp_path):
    code, out, err = cli_run("contamination", "--tasks", "contam_mc", "--include-path", local_tasks, "--index",
                             planted["index"], "--out", tmp_path / "c", "--quiet")
    assert code == 0, err
    doc = json.loads((tmp_path / "c" / "contamination.json").read_text())
    assert doc["tasks"]["contam_mc"]["contaminated"] == 3 * PER_KIND and doc["tasks"]["contam_mc"]["models"] == {}
    assert doc["leaderboard"] == [{"model": None, "contam_mc_contaminated_share": pytest.approx(0.5)}]


def test_tasks_of_the_include_path_alone_skip_the_builtin_index(local_tasks, monkeypatch):
    """Local task names need a TaskManager of their folder only; a pattern, or a name the folder does not
    define, needs lm-eval's built-in tasks as well."""
    import lm_eval.tasks

    from propme_tasks import benchmark_docs

    made = []

    class Recording(lm_eval.tasks.TaskManager):
        def __init__(self, *args, include_defaults=True, **kwargs):
            made.append(include_defaults)
            if include_defaults:  # stands in for the ~7 s index of lm-eval's built-in tasks
                return
            super().__init__(*args, include_defaults=include_defaults, **kwargs)

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", Recording)
    for names, expected in [(["contam_mc"], [False]), (["contam_mc", "contam_gen"], [False]),
                            (["contam_mc", "hellaswag"], [False, True]), (["contam_*"], [True])]:
        made.clear()
        manager = benchmark_docs._task_manager(names, str(local_tasks))
        assert made == expected, names
        if expected == [False]:
            assert set(names) <= set(manager.all_subtasks)
    made.clear()
    benchmark_docs._task_manager(["contam_mc"], None)
    assert made == [True]


@pytest.mark.slow  # indexes lm-eval's ~15k built-in task files to say that no task has the name
def test_an_unknown_task_is_one_line(cli_run, local_tasks, planted, tmp_path):
    code, _, err = cli_run("contamination", "--tasks", "no_such_task", "--include-path", local_tasks, "--index",
                           planted["index"], "--out", tmp_path / "c")
    assert code == 2 and "no_such_task" in err and "hint" in err


def test_user_errors_are_one_line(cli_run, local_tasks, planted, tmp_path):
    code, _, err = cli_run("contamination", "--index", planted["index"], "--out", tmp_path / "c")
    assert code == 2 and "--tasks" in err
    code, _, err = cli_run("contamination", tmp_path, "--index", planted["index"], "--out", tmp_path / "c")
    assert code == 2 and "results_" in err
    code, _, err = cli_run("contamination", "--tasks", "contam_mc", "--min-coverage", "1.5", "--index",
                           planted["index"], "--out", tmp_path / "c")
    assert code == 2


def test_workers_give_the_same_results(planted, index, monkeypatch):
    import propme_metrics.contamination.match as match

    monkeypatch.setattr(match, "WORKER_CHUNK", 4)  # several jobs per worker
    items = _items(planted["rows"])
    one_matcher, two_matcher = CorpusMatcher(index), CorpusMatcher(index, workers=2)
    one = apply_rule("t", match_items(items, one_matcher), ContaminationRule(), KgramCounts(one_matcher))
    two = apply_rule("t", match_items(items, two_matcher), ContaminationRule(), KgramCounts(two_matcher))
    for a, b in zip(one.items, two.items):
        assert a.to_dict(one.rule) == b.to_dict(two.rule)
        assert all(np.array_equal(a.matches[f].lengths, b.matches[f].lengths) for f in a.matches)


@pytest.mark.slow  # a stock lm_eval run (the `lm_eval_run` fixture)
def test_report_adds_a_contamination_section(cli_run, lm_eval_run, local_tasks, planted, tmp_path):
    """A report of PropMe's tasks and the benchmark run side by side: the section lists the flagged items."""
    import shutil

    from support.runs import DFM, stage1_settings, write_run

    write_run(tmp_path / "propme", DFM, "", stage1_settings())
    bench = tmp_path / "bench"
    shutil.copytree(lm_eval_run, bench)
    code, out, err = cli_run("report", tmp_path / "propme", bench, "--out", tmp_path / "r", "--index",
                             planted["index"], "--include-path", local_tasks, "--bootstrap", 100)
    assert code == 0, err
    page = (tmp_path / "r" / "report.html").read_text()
    assert "Contamination of the benchmark items" in page and "contam_mc: flagged items" in page
    assert page.count("data-b='contamination'") >= 15   # each flagged item's spans, linked to their documents
    doc = json.loads((tmp_path / "r" / "contamination" / "contamination.json").read_text())
    assert doc["tasks"]["contam_mc"]["contaminated"] == 3 * PER_KIND


def test_contamination_figures_never_have_zero_width():
    """Every contaminated item right and every clean one wrong (or a graded score that never moves):
    a bootstrap over items gives one value in every resample, so the figures take bounds instead."""
    from propme_metrics.contamination.summary import difference, mean_with_interval
    from propme_metrics.metrics.difference import BOUNDS
    from propme_metrics.metrics.pm import WILSON, IntervalSpec, wilson_interval

    spec = IntervalSpec(1000, 0)
    dirty, clean = np.ones(6), np.zeros(8)
    d = difference(dirty, clean, spec)
    assert d.estimate == 1.0 and d.method == BOUNDS
    assert d.low == pytest.approx(wilson_interval(6, 6)[0] - wilson_interval(0, 8)[1]) and d.low < 1.0
    assert d.high == pytest.approx(1.0)
    share = mean_with_interval(dirty, spec)
    assert share.method == WILSON and share.low < 1.0 == share.high
    graded = mean_with_interval(np.full(7, 0.42), spec)  # ROUGE 0.42 on every item: no range to bound it by
    assert graded.estimate == pytest.approx(0.42) and graded.low is None and graded.high is None
    assert difference(np.full(3, 0.5), np.full(4, 0.25), spec).low is None  # nor a difference of two such
    moving = mean_with_interval(np.array([0.1, 0.4, 0.42, 0.9]), spec)
    assert moving.low < moving.estimate < moving.high and moving.resamples == 1000
