"""Paired comparisons of models (or revisions) that ran the same prompts against the same index.

For every pair (A, B), every setting both ran and every metric with an interval, and for PM: the
difference A - B with a **paired** percentile-bootstrap interval: one set of resampled prompt
indices is applied to both models (joined on prompt id), so what the prompts share (their
difficulty) cancels. The prompt-free settings have no shared prompts (their units are independent
generations): they are resampled apart and marked `paired=False`. The percentile tails are expanded
for small samples as for every bootstrap interval (`pm.expanded_alpha`). PM's two settings are resampled
apart from each other, each paired across the models. When every resample gives one difference
(no event in either model), the interval is the difference of the two models' own intervals
(`BOUNDS`), never [0, 0]. `significant`: the interval excludes 0. A PM the leaderboard withholds
(`pm.pm_withheld`: too few events on a capability side) is not compared: its row has no difference and
says why (`withheld`), so nothing ranks a value the leaderboard does not show.

A report compares many (pair, setting, metric) rows, and at 95% one null row in twenty looks
significant by chance. So every row also carries a two-sided bootstrap p-value of "no difference"
(`bootstrap_p_value`), the p-value adjusted by Benjamini-Hochberg over every row of the comparisons
(`ADJUSTMENT`; scipy's `false_discovery_control`), and `significant_adjusted`: the row's own flag
and an adjusted p-value of at most 1 - confidence, which bounds the expected share of false
discoveries among the flagged rows by that level (`benchmarks/false_discoveries.py` simulates it).

Ranks (docs/method.md, ranking): per corpus, setting and metric, a model's rank is 1 + the number
of models significantly below it (lower leaks less); models whose differences are not significant
share a rank.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any

from propme_metrics.metrics import registry
from propme_metrics.metrics.difference import Difference, metric_difference, pm_difference
from propme_metrics.metrics.pm import (
    CONFIDENCE,
    IntervalSpec,
    pm,
    pm_withheld,
    ratio,
)
from propme_metrics.metrics.ratio import Ratio
from propme_metrics.metrics.results import CorpusResult
from propme_metrics.prompts.settings import PREFIX, PROMPT_FREE_SETTINGS

#: which pairs to compare: every pair of models, or consecutive revisions of each model (input order)
PAIRINGS = ("all", "consecutive")
#: how `significant_adjusted` accounts for the number of comparisons (a false discovery rate at 1 - confidence)
ADJUSTMENT = "benjamini-hochberg"


@dataclass
class Arm:
    """One model (and revision) on one corpus label: per setting, each unit's pair per metric.

    `units[setting]` is a list of (unit id, {metric: Ratio}) in input order: the prompt id for
    prompted settings, `<prompt id>#<k>` per generation in the prompt-free ones."""

    model: str
    revision: str
    corpus: str
    identity: str | None
    units: dict[str, list[tuple[str, dict[str, Ratio]]]]

    @property
    def name(self) -> str:
        return self.model + (f"@{self.revision}" if self.revision else "")

    def stats(self, setting: str, metric: str) -> list[Ratio]:
        return [u[metric] for _, u in self.units[setting]]


@dataclass
class ComparisonRow:
    """One comparison: metric (or `pm_<metric>`) of A minus B on one corpus and setting, the
    difference one `Difference` interval (its method: `IntervalSpec.paired`, or BOUNDS)."""

    model_a: str
    revision_a: str
    model_b: str
    revision_b: str
    corpus: str
    setting: str                 #: the setting (for PM: its propensity setting)
    metric: str                  #: a registry metric, or `pm_<metric>`
    value_a: float | None
    value_b: float | None
    difference: Difference       #: value_a - value_b with its interval (estimate None: either is undefined)
    paired: bool
    units: int                   #: prompts joined (generations per model when unpaired)
    rank_a: int | None = None    #: ranks among the compared models of this corpus, setting, metric
    rank_b: int | None = None
    p_adjusted: float | None = None  #: the difference's p-value, Benjamini-Hochberg-adjusted over every row
    significant_adjusted: bool = False  #: significant, and p_adjusted <= 1 - confidence
    adjustment: str = ""             #: how p_adjusted was made (ADJUSTMENT; "" without a p-value)
    adjusted_over: int = 0           #: the number of comparisons it accounts for
    withheld: str = ""               #: PM only: why it is not compared (a side's PM is withheld); "" when compared

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        lo, hi = self.difference.low, self.difference.high
        return lo is not None and hi is not None and (lo > 0 or hi < 0)

    def to_dict(self) -> dict[str, Any]:
        """The row as comparisons.json/.csv write it (`COMPARISON_FIELDS`, in that order)."""
        d = self.difference
        return {"model_a": self.model_a, "revision_a": self.revision_a, "model_b": self.model_b,
                "revision_b": self.revision_b, "corpus": self.corpus, "setting": self.setting, "metric": self.metric,
                "value_a": self.value_a, "value_b": self.value_b, "diff": d.estimate, "low": d.low, "high": d.high,
                "significant": self.significant, "method": d.method, "paired": self.paired, "units": self.units,
                "confidence": d.confidence, "resamples": d.resamples, "rank_a": self.rank_a, "rank_b": self.rank_b,
                "p_value": d.p_value, "p_adjusted": self.p_adjusted, "significant_adjusted": self.significant_adjusted,
                "adjustment": self.adjustment, "adjusted_over": self.adjusted_over, "withheld": self.withheld}


#: the columns of comparisons.csv and the keys of each comparisons.json row, in order
COMPARISON_FIELDS = ("model_a", "revision_a", "model_b", "revision_b", "corpus", "setting", "metric", "value_a",
                     "value_b", "diff", "low", "high", "significant", "method", "paired", "units", "confidence",
                     "resamples", "rank_a", "rank_b", "p_value", "p_adjusted", "significant_adjusted", "adjustment",
                     "adjusted_over", "withheld")


@dataclass
class Comparisons:
    """Every comparison of a report, and the pairs refused (with why)."""

    rows: list[ComparisonRow] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    pairing: str = "all"
    confidence: float = CONFIDENCE   #: of every row's interval
    adjustment: str = ADJUSTMENT     #: how `significant_adjusted` accounts for the number of rows

    @property
    def tests(self) -> int:
        """The comparisons the adjustment accounts for: rows with a p-value."""
        return sum(r.difference.p_value is not None for r in self.rows)


# --- pairs, rows and ranks --------------------------------------------------------------------------

def pairing_problem(a: Arm, b: Arm) -> str | None:
    """Why two arms cannot be compared on shared prompts, or None."""
    if a.corpus != b.corpus:
        return f"{a.name} and {b.name} ran different corpora ({a.corpus}, {b.corpus})"
    if a.identity != b.identity:
        return (f"{a.name} and {b.name} on {a.corpus} were traced against different indexes "
                f"({a.identity}, {b.identity})")
    for s in (x for x in a.units if x in b.units):
        if s in PROMPT_FREE_SETTINGS:
            continue
        ia, ib = {u for u, _ in a.units[s]}, {u for u, _ in b.units[s]}
        if ia != ib:
            return (f"{a.name} and {b.name} on {a.corpus} ran different {s} prompt sets ({len(ia)} and "
                    f"{len(ib)} prompts, {len(ia & ib)} in common)")
    return None


def select_pairs(arms: Sequence[Arm], pairing: str = "all") -> list[tuple[Arm, Arm]]:
    """Every pair of arms in input order (`all`), or each model's consecutive revisions (`consecutive`)."""
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    if pairing == "all":
        return list(combinations(arms, 2))
    by_model: dict[str, list[Arm]] = {}
    for arm in arms:
        by_model.setdefault(arm.model, []).append(arm)
    return [(x, y) for runs in by_model.values() for x, y in zip(runs, runs[1:])]


def _joined(a: Arm, b: Arm, setting: str, metric: str) -> tuple[list[Ratio], list[Ratio], bool]:
    """The two arms' units of a setting: joined on prompt id (paired), or apart (prompt-free)."""
    if setting in PROMPT_FREE_SETTINGS:
        return a.stats(setting, metric), b.stats(setting, metric), False
    by_id = dict(b.units[setting])
    return [u[metric] for _, u in a.units[setting]], [by_id[i][metric] for i, _ in a.units[setting]], True


def compare_pair(a: Arm, b: Arm, pm_metrics: Sequence[str], intervals: IntervalSpec) -> list[ComparisonRow]:
    """Every metric and PM of two pairable arms (`pairing_problem` is None)."""
    rows = []
    settings = [s for s in a.units if s in b.units]

    def row(setting: str, metric: str, va, vb, iv: Difference, paired: bool, units: int) -> ComparisonRow:
        return ComparisonRow(a.model, a.revision, b.model, b.revision, a.corpus, setting, metric, va, vb,
                             replace(iv, confidence=intervals.confidence), paired, units)

    for s in settings:
        for spec in registry.for_setting(s):
            if not spec.has_interval:
                continue
            xa, xb, paired = _joined(a, b, s, spec.name)
            if not xa or not xb:
                continue
            iv = metric_difference(spec, xa, xb, paired, intervals)
            rows.append(row(s, spec.name, ratio(xa), ratio(xb), iv, paired, len(xa)))
    if PREFIX in settings:
        for s in (x for x in settings if x != PREFIX):
            for m in pm_metrics:
                spec = registry.metric(m)
                pa, pb, paired = _joined(a, b, s, m)
                ca, cb, _ = _joined(a, b, PREFIX, m)
                if not (pa and pb and ca and cb):
                    continue
                va, vb = pm(ratio(pa), ratio(ca)), pm(ratio(pb), ratio(cb))
                why = [f"PM of {x.name} withheld ({w})" for x, v, c in ((a, va, ca), (b, vb, cb))
                       if v is not None and (w := pm_withheld(c))]
                if why:
                    rows.append(replace(row(s, f"pm_{m}", None, None, Difference(None), paired, len(pa)),
                                        withheld="; ".join(why)))
                    continue
                iv = pm_difference(spec, (pa, ca), (pb, cb), paired, intervals)
                rows.append(row(s, f"pm_{m}", va, vb, iv, paired, len(pa)))
    return rows


def rank(rows: Sequence[ComparisonRow]) -> None:
    """Fill rank_a and rank_b: per corpus, setting and metric, 1 + the number of compared models
    significantly below the model (lower leaks less); not significantly different models share a rank."""
    below: dict[tuple[str, str, str], dict[tuple[str, str], int]] = {}
    for r in rows:
        counts = below.setdefault((r.corpus, r.setting, r.metric), {})
        a, b = (r.model_a, r.revision_a), (r.model_b, r.revision_b)
        counts.setdefault(a, 0)
        counts.setdefault(b, 0)
        if r.significant and r.difference.estimate is not None:
            counts[a if r.difference.estimate > 0 else b] += 1
    for r in rows:
        counts = below[(r.corpus, r.setting, r.metric)]
        r.rank_a = 1 + counts[(r.model_a, r.revision_a)]
        r.rank_b = 1 + counts[(r.model_b, r.revision_b)]


def adjust(comparisons: Comparisons) -> None:
    """Fill every row's p_adjusted (Benjamini-Hochberg over the rows with a p-value: `ADJUSTMENT`) and
    significant_adjusted (significant, and p_adjusted at most 1 - confidence)."""
    rows = [r for r in comparisons.rows if r.difference.p_value is not None]
    if not rows:
        return
    from scipy.stats import false_discovery_control  # imported here: only reports with comparisons need it

    alpha = 1 - comparisons.confidence
    for r, q in zip(rows, false_discovery_control([r.difference.p_value for r in rows], method="bh")):
        r.p_adjusted, r.adjustment, r.adjusted_over = float(q), ADJUSTMENT, len(rows)
        r.significant_adjusted = r.significant and r.p_adjusted <= alpha


def compare_arms(arms: Sequence[Arm], pm_metrics: Sequence[str], intervals: IntervalSpec,
                 pairing: str = "all") -> Comparisons:
    """Every selected pair of arms of one corpus label compared; pairs that cannot be paired refused."""
    out = Comparisons(pairing=pairing, confidence=intervals.confidence)
    for a, b in select_pairs(arms, pairing):
        why = pairing_problem(a, b)
        if why:
            out.refused.append(why)
            continue
        out.rows += compare_pair(a, b, pm_metrics, intervals)
    rank(out.rows)
    adjust(out)
    return out


# --- the report's models, compared per corpus label ------------------------------------------------

def arm(result: CorpusResult) -> Arm:
    """A model's result on a corpus as the comparisons read it: per setting, each unit's pair per
    metric with an interval (prompts; generations, `<prompt id>#<k>`, in the prompt-free settings)."""
    units: dict[str, list[tuple[str, dict]]] = {}
    for s, sr in result.settings.items():
        names = [m.name for m in registry.for_setting(s) if m.has_interval]
        if s in PROMPT_FREE_SETTINGS:
            units[s] = []
            for p in sr.task.prompts:
                per_metric = {m: p.generation_stats(m) for m in names}
                units[s] += [(f"{p.id}#{k}", {m: per_metric[m][k] for m in names})
                             for k in range(len(per_metric[names[0]]))]
        else:
            units[s] = [(p.id, {m: p.stat(m) for m in names}) for p in sr.task.prompts]
    return Arm(result.model, result.revision, result.corpus, result.index_identity, units)


def compare_results(results: Sequence[CorpusResult], pm_metrics: Sequence[str], intervals: IntervalSpec,
                    pairing: str = "all") -> Comparisons | None:
    """Paired comparisons of the models of each corpus label (`compare_arms`); runs of one corpus
    reported apart (`--separate`) are refused for pairing, with why. None: nothing to compare."""
    out = Comparisons(pairing=pairing, confidence=intervals.confidence)
    labels = list(dict.fromkeys(r.label for r in results))
    for label in labels:
        done = compare_arms([arm(r) for r in results if r.label == label], pm_metrics, intervals, pairing)
        for row in done.rows:
            row.corpus = label
        out.rows += done.rows
        out.refused += done.refused
    for x, y in combinations(labels, 2):
        rx, ry = (next(r for r in results if r.label == lab) for lab in (x, y))
        if rx.corpus == ry.corpus:
            why = pairing_problem(arm(rx), arm(ry)) or "they are reported apart"
            out.refused.append(f"runs of {x} and {y} are not compared on shared prompts: {why}")
    adjust(out)  # over every row of the report: the number of comparisons a reader sees in comparisons.csv
    return out if out.rows or out.refused else None
