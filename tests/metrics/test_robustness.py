"""The robustness figures (issue 43 items 4-6), each computed here independently on inputs built for it:
a prompt set with a known floor (traced by the reference oracle), planted duplicates (counted by
brute force over the documents' tokens), and hand-made prompts with k generations."""
from __future__ import annotations

import random
from pathlib import Path
from statistics import median

import pytest

from propme_metrics.index.reader import Index
from propme_metrics.metrics.figures import FLOOR
from propme_metrics.metrics.pm import WILSON, IntervalSpec, wilson_interval
from propme_metrics.metrics.robustness import corpus_robustness
from propme_metrics.metrics.runs import RunTask, TracedPrompt
from propme_metrics.metrics.values import contributions, counts_for_metrics
from propme_metrics.report.eee import INTERVAL_METHODS
from propme_metrics.testing import make_index, write_jsonl
from propme_metrics.trace.result import TraceConfig, TraceResult
from propme_metrics.trace.tracer import Tracer
from support.reference_trace import BruteForce, ReferenceTracer
from support.runs import gen

INTERVALS = IntervalSpec(200, 0)
#: planted passages and how many documents hold each
COPIES = {"once": 1, "five": 5, "twelve": 12, "many": 120}


def _words(rng: random.Random, n: int) -> str:
    syllables = ["ka", "lo", "mi", "ter", "vun", "so", "ral", "pe", "dix", "no", "gor", "bel"]
    return " ".join("".join(rng.choice(syllables) for _ in range(3)) for _ in range(n))


@pytest.fixture(scope="module")
def world(tmp_path_factory, gpt2_dir):
    """An index with four planted passages held by 1, 5, 12 and 120 documents, and filler documents."""
    rng = random.Random(3)
    root = tmp_path_factory.mktemp("robust")
    passages = {name: _words(rng, 40) for name in COPIES}
    records, k = [], 0
    for name, n in COPIES.items():
        for _ in range(n):
            records.append({"id": f"doc-{k}", "text": f"{_words(rng, 12)} {passages[name]} {_words(rng, 12)}",
                            "source": name})
            k += 1
    fillers = [_words(rng, 80) for _ in range(30)]
    records += [{"id": f"fill-{i}", "text": t, "source": "filler"} for i, t in enumerate(fillers)]
    make_index(write_jsonl(root / "c.jsonl", records), root / "index", gpt2_dir, cpus=1)
    index = Index(root / "index")
    docs = [index.encode(r["text"]) for r in records]
    return index, passages, fillers, records, docs


def _task(setting: str, prompts: list[TracedPrompt]) -> RunTask:
    for p in prompts:
        p.values = [contributions(t) if counts_for_metrics(t) else None for t in p.generations]
    return RunTask(task=f"propme_x_{setting}", corpus="x", setting=setting, model="m", revision="", model_args="",
                   metadata={}, index_identity=None, results={}, prompts=prompts, results_path=Path(),
                   samples_path=Path(), date_id="", trace_config=TraceConfig())


def _value(rob, name, setting):
    return rob.get(name, setting).value


def test_predictability_floor_equals_the_reference_tracer(world, tmp_path):
    index, _, fillers, _, docs = world
    rng = random.Random(5)
    # prompts absent from the corpus: new words, new words around 3-8 filler words, and one around a
    # 30-word piece of a filler document (a floor span of 20 tokens or more)
    texts = [_words(rng, 10), " ".join(fillers[0].split()[5:8]) + " " + _words(rng, 6),
             _words(rng, 4) + " " + " ".join(fillers[1].split()[10:18]) + " " + _words(rng, 3),
             _words(rng, 2) + " " + " ".join(fillers[2].split()[20:50]) + " " + _words(rng, 2)]
    tracer = Tracer(index, TraceConfig())
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(index.path / "propme-tokenizer" / "tokenizer.json"))
    ref = ReferenceTracer(index.engine, tok, BruteForce(docs), {i for i, b in enumerate(tracer._word_initial) if b},
                          dict(enumerate(index.unigram_table.tolist())), index.total_positions, mode="mixed")
    longest = [max((e - s for s, e, _ in ref.trace(t)), default=0) for t in texts]
    assert max(longest) >= 20 and min(longest) < 20  # the set was built to have both
    generic = [TracedPrompt(id=f"g{i}", prompt=t, generations=[TraceResult.from_dict(gen(f"g{i}", 30))])
               for i, t in enumerate(texts[:3])]
    specific = [TracedPrompt(id="s0", prompt=texts[3], generations=[TraceResult.from_dict(gen("s0", 12))]),
                TracedPrompt(id="s1", prompt=texts[0], generations=[TraceResult.from_dict(gen("s1", 22))])]
    tasks = {"generic": _task("generic", generic), "specific": _task("specific", specific)}
    rob = corpus_robustness(tasks, index, INTERVALS)
    assert rob.floor_prompts == 4 and rob.note is None  # texts[0] is in both settings: traced once
    als = _value(rob, "floor_als", FLOOR)
    assert als.estimate == pytest.approx(sum(longest) / 4) and als.low < als.estimate < als.high
    r20 = _value(rob, "floor_r20", FLOOR)
    hits = sum(x >= 20 for x in longest)
    assert r20.estimate == hits / 4 and (r20.low, r20.high) == pytest.approx(wilson_interval(hits, 4))
    assert _value(rob, "floor_longest", FLOOR).estimate == max(longest)
    # each setting's excess over the floor
    assert _value(rob, "excess_als", "generic").estimate == pytest.approx(30 - sum(longest) / 4)
    assert _value(rob, "excess_als", "specific").estimate == pytest.approx(17 - sum(longest) / 4)
    assert _value(rob, "excess_r20", "generic").estimate == pytest.approx(1 - hits / 4)
    ex = _value(rob, "excess_als", "specific")
    assert ex.method.startswith("unpaired") and ex.low < ex.estimate < ex.high
    # every method a figure's interval has is one the Every Eval Ever records may name (a report failed on
    # the excess over the floor's `unpaired-bootstrap-expanded-percentile`)
    assert {f.value.method for f in rob.figures if f.value.method} <= {name for name, _ in INTERVAL_METHODS}
    # without the index (a report made elsewhere) the floor is undefined, never 0, and says why
    blind = corpus_robustness(tasks, None, INTERVALS, "the index cannot be read here")
    assert _value(blind, "floor_als", FLOOR).estimate is None and _value(blind, "excess_als", "generic").estimate is None
    assert "floor" in blind.note and "cannot be read" in blind.note


def test_repeated_sampling_counts_prompts_not_generations():
    def g(key, seg, full=False, degenerate=False, extracted=None):
        return TraceResult.from_dict(gen(key, seg, (1.0,) if full else (), full=full, degenerate=degenerate,
                                         extracted=extracted))

    prompts = [
        # two of ten are full matches of 33 tokens (>= 20), none has a 50-token span
        TracedPrompt(id="a", prompt="a", generations=[g(f"a{j}", 25, full=j < 2) for j in range(10)]),
        # full matches of 13 tokens only: too short to count
        TracedPrompt(id="b", prompt="b", generations=[g(f"b{j}", 5, full=True) for j in range(10)]),
        # one generation of ten holds a 55-token span (not a full match)
        TracedPrompt(id="c", prompt="c", generations=[g(f"c{j}", 55 if j == 3 else 8) for j in range(10)]),
        # every generation degenerate: the prompt has nothing counted and is no unit
        TracedPrompt(id="d", prompt="d", generations=[g(f"d{j}", 60, full=True, degenerate=True) for j in range(10)]),
    ]
    rob = corpus_robustness({"generic": _task("generic", prompts)}, None, INTERVALS, "no index")
    fm20, span50 = _value(rob, "any_fm20", "generic"), _value(rob, "any_span50", "generic")
    assert fm20.estimate == pytest.approx(1 / 3) and span50.estimate == pytest.approx(1 / 3)
    assert (fm20.low, fm20.high) == pytest.approx(wilson_interval(1, 3)) and fm20.method == WILSON
    assert rob.get("any_fm20", "generic").units == 3
    assert _value(rob, "mean_fm20", "generic").estimate == 2 and _value(rob, "mean_span50", "generic").estimate == 1
    # no prompt leaks: the share is 0 with an interval above 0, the mean of k undefined
    quiet = [TracedPrompt(id=f"q{i}", prompt="q", generations=[g(f"q{i}{j}", 8) for j in range(3)]) for i in range(5)]
    rob = corpus_robustness({"specific": _task("specific", quiet)}, None, INTERVALS, "no index")
    zero = _value(rob, "any_fm20", "specific")
    assert zero.estimate == 0 and zero.low == 0 and zero.high > 0
    assert _value(rob, "mean_fm20", "specific").estimate is None
    # prefix: extraction in at least one of k
    ext = [TracedPrompt(id="e0", prompt="e", continuation="x", generations=[g("e0a", 8, extracted=False),
                                                                             g("e0b", 8, extracted=True)]),
           TracedPrompt(id="e1", prompt="e", continuation="x", generations=[g("e1a", 8, extracted=False)])]
    rob = corpus_robustness({"prefix": _task("prefix", ext)}, None, INTERVALS, "no index")
    assert _value(rob, "any_extraction", "prefix").estimate == 0.5
    assert _value(rob, "mean_extraction", "prefix").estimate == 1


def test_duplication_and_concentration_of_planted_copies(world):
    index, passages, _, records, docs = world
    brute = BruteForce(docs)
    tracer = Tracer(index, TraceConfig())
    names = list(COPIES)
    traced = {n: tracer.trace_one(" " + passages[n], key=n) for n in names}
    assert all(t.longest_span >= 50 for t in traced.values())
    # one generation per prompt, two prompts per setting: a planted passage and a short miss
    miss = tracer.trace_one(" lo ka mi", key="miss")

    def prompts(which):
        return [TracedPrompt(id=n, prompt=n, generations=[traced[n]]) for n in which] + \
            [TracedPrompt(id=f"miss-{w}", prompt="m", generations=[miss]) for w in which]

    tasks = {"generic": _task("generic", prompts(["once", "five"])),
             "prefix": _task("prefix", prompts(names))}
    rob = corpus_robustness(tasks, index, INTERVALS)
    # the heads' counts, by brute force over the documents' tokens: the planted number of copies
    heads = {n: brute.count(index.encode(" " + passages[n])[:50]) for n in names}
    assert heads == COPIES
    assert _value(rob, "r50_copies_1", "prefix").estimate == 0.25
    assert _value(rob, "r50_copies_2_9", "prefix").estimate == 0.25
    assert _value(rob, "r50_copies_10_99", "prefix").estimate == 0.25
    assert _value(rob, "r50_copies_100", "prefix").estimate == 0.25
    assert _value(rob, "r50_copies_median", "prefix").estimate == median(COPIES.values())
    # R50 restricted to rare text: over all counted generations (8 in prefix, 4 in generic)
    assert _value(rob, "r50_rare", "prefix").estimate == 2 / 8 and _value(rob, "r50_unique", "prefix").estimate == 1 / 8
    assert _value(rob, "r50_rare", "generic").estimate == 2 / 4 and _value(rob, "r50_unique", "generic").estimate == 1 / 4
    pm = _value(rob, "pm_r50_rare", "generic")
    assert pm.estimate == pytest.approx((2 / 4) / (2 / 4 + 2 / 8)) and pm.low <= pm.estimate <= pm.high
    # concentration: the documents each span retrieved (at most docs_per_span), counted by hand
    longest = {n: sorted(traced[n].final_spans, key=lambda s: -s.length)[0] for n in names}
    retrieved = {n: {(d.shard, d.doc_ix) for d in longest[n].documents} for n in names}
    sizes = {n: len(v) for n, v in retrieved.items()}
    assert sizes["once"] == 1 and sizes["five"] == 5 and 10 <= sizes["twelve"] <= 12 and sizes["many"] >= 10
    assert all(d.metadata["source"] == n for n in names for d in longest[n].documents)  # the planted copies
    assert _value(rob, "r50_documents", "prefix").estimate == len(set().union(*retrieved.values()))
    assert rob.get("r50_top10_share", "prefix").units == 4
    # without the index the counts are undefined, the concentration (read off the traces) is not
    blind = corpus_robustness(tasks, None, INTERVALS, "no index")
    assert _value(blind, "r50_rare", "prefix").estimate is None and _value(blind, "pm_r50_rare", "generic").estimate is None
    assert _value(blind, "r50_documents", "prefix").estimate == _value(rob, "r50_documents", "prefix").estimate


def test_extraction_by_copies_of_the_hundred_tokens(world):
    index, passages, _, _, docs = world
    brute = BruteForce(docs)

    def prompt(name, extracted):
        words = passages[name].split()
        p, c = " " + " ".join(words[:18]), " " + " ".join(words[18:36])  # as inside the documents
        gens = [TraceResult.from_dict(gen(f"{name}{j}", 8, extracted=x)) for j, x in enumerate(extracted)]
        return TracedPrompt(id=name, prompt=p, continuation=c, generations=gens)

    prompts = [prompt("once", [True, False]), prompt("five", [False, False]), prompt("many", [True, True])]
    rob = corpus_robustness({"prefix": _task("prefix", prompts)}, index, INTERVALS)
    counts = {p.id: brute.count(index.encode(p.prompt + p.continuation)) for p in prompts}
    assert counts == {"once": 1, "five": 5, "many": 120}
    assert _value(rob, "extraction_copies_1", "prefix").estimate == 0.5
    assert _value(rob, "extraction_copies_2_9", "prefix").estimate == 0
    assert _value(rob, "extraction_copies_100", "prefix").estimate == 1
    assert _value(rob, "extraction_copies_10_99", "prefix").estimate is None  # no prompt there: undefined


def test_docs_figure_table_equals_the_figures():
    from propme_metrics.metrics.figures import FIGURES

    text = (Path(__file__).parents[2] / "docs" / "method.md").read_text(encoding="utf-8")
    table = text[text.index("| figure | label | meaning | interval |"):]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(tuple(c.strip() for c in line.strip("|").split("|")))
    assert [r[:3] for r in rows] == [(f"`{f.name}`", f.label, f.description) for f in FIGURES]
    assert [r[3] == "none" for r in rows] == [not f.interval for f in FIGURES]
