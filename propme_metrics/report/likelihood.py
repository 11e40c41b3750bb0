"""The report's likelihood part: the (n, p) curve of `propme_<corpus>_prefix_likelihood` per model.

Every number is computed from the per-document records in the samples files (the `likelihood`
item: log P(z), the greedy flag, z's model tokens), so `propme report` may use another n grid or
p than the run did (`discoverable_n`, `discoverable_p`; by default the run's task metadata).
Intervals: percentile bootstrap over documents (B = the report's `bootstrap`, same seed).
The curve is shown next to the prefix setting's FMR of the same model on the same documents
(`likelihood_<corpus>.png`, the leaderboard's `prefix_likelihood` columns, a Markdown table).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.jsonl import json_objects
from propme_metrics.metrics import registry
from propme_metrics.metrics.likelihood import (
    DISCOVERABLE_N,
    DISCOVERABLE_P,
    N_KEY,
    P_KEY,
    SUBTASK_SUFFIX,
    DocumentLikelihood,
    Estimate,
    bootstrap_documents,
    check_n,
    check_p,
    discoverable,
    is_likelihood_config,
)
from propme_metrics.metrics.registry import UNDEFINED
from propme_metrics.prompts.settings import PREFIX
from propme_metrics.report.load import (
    _date_id,
    _model_identity,
    _read_json,
    _results_files,
    _run_limit,
    limit_label,
)
from propme_metrics.trace.inputs import read_samples

if TYPE_CHECKING:  # pragma: no cover
    from propme_metrics.report.compute import CorpusResult, Report

#: the leaderboard's setting name of the likelihood subtask's columns
SETTING = SUBTASK_SUFFIX


@dataclass
class LikelihoodTask:
    """One likelihood subtask of one lm-eval run: a model x corpus and its scored documents."""

    task: str
    corpus: str
    model: str
    revision: str
    metadata: dict[str, Any]
    documents: list[DocumentLikelihood]
    results_path: Path
    samples_path: Path
    date_id: str
    limit: float | None = None
    index_identity: str | None = None
    recorded: dict[str, Any] = field(default_factory=dict)  #: discoverable_n / _p the run used (first record)

    @property
    def family(self) -> str:
        return "_".join(x for x in (self.corpus, limit_label(self.limit)) if x)

    @property
    def label(self) -> str:
        return self.model + (f"@{self.revision}" if self.revision else "")


def load_likelihood_run(path: str | Path) -> list[LikelihoodTask]:
    """Every likelihood subtask of an lm-eval output folder or results file, with its documents."""
    tasks = []
    for results_path in _results_files(Path(path)):
        data = _read_json(results_path)
        if not isinstance(data, dict) or not isinstance(data.get("configs"), dict):
            continue  # load.load_run names the file
        model, revision, _ = _model_identity(data)
        date_id = _date_id(results_path)
        for task, config in data["configs"].items():
            if not isinstance(config, dict) or not is_likelihood_config(config):
                continue
            metadata = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
            corpus = str(metadata.get("corpus") or task[len("propme_"):-len(SUBTASK_SUFFIX) - 1])
            samples = results_path.parent / f"samples_{task}_{date_id}.jsonl"
            if not samples.is_file():
                raise ConfigError(f"missing samples file {samples} for task {task} of {results_path}",
                                  "run lm-eval with --log_samples (and keep the samples files beside the results)")
            documents, identities, recorded = _documents(samples, task)
            if len(identities) > 1:
                raise ConfigError(f"{samples} mixes documents of several indexes: "
                                  + ", ".join(sorted(map(str, identities))))
            tasks.append(LikelihoodTask(task, corpus, model, revision, metadata, documents, results_path, samples,
                                        date_id, _run_limit(data, results_path), next(iter(identities), None),
                                        recorded))
    return tasks


def _documents(path: Path, task: str) -> tuple[list[DocumentLikelihood], set[str | None], dict[str, Any]]:
    hint = "the samples file is damaged: re-run lm-eval for this task (with --log_samples)"
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the samples file {path}: {exc}") from None
    docs: dict[str, DocumentLikelihood] = {}
    identities: set[str | None] = set()
    recorded: dict[str, Any] = {}
    with fh:
        for s in read_samples(list(json_objects(fh, str(path), hint))):
            item = s.row.get(registry.LIKELIHOOD_DIAGNOSTIC[0])
            try:
                doc = DocumentLikelihood.from_dict(item)
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(f"{path}, line {s.lineno}: no valid 'likelihood' record for task {task} "
                                  f"({type(exc).__name__}: {exc})", hint) from None
            docs.setdefault(doc.id, doc)  # one row per document per filter: keep the first
            if not recorded:
                recorded = {k: item[k] for k in (N_KEY, P_KEY) if item.get(k) is not None}
            identities.add(item.get("index_identity", s.doc.get("index_identity")))
    return list(docs.values()), identities, recorded


@dataclass
class LikelihoodResult:
    """What the report shows of one model's likelihood subtask on one corpus."""

    label: str
    corpus: str
    model: str
    revision: str
    task: LikelihoodTask
    p: float
    grid: tuple[int, ...]
    metrics: dict[str, Estimate]                 #: registry likelihood metric -> estimate
    curve: dict[int, Estimate]                   #: n -> share (n, p)-discoverable
    prefix_fmr: Estimate | None = None           #: the prefix setting's FMR on the same documents
    notes: list[str] = field(default_factory=list)

    @property
    def n_documents(self) -> int:
        return len(self.task.documents)


def _grid_and_p(task: LikelihoodTask, grid: Sequence[int] | None, p: float | None) -> tuple[tuple[int, ...], float]:
    """The report's grid and p: given, else what the run recorded, else its task metadata, else the defaults."""
    where = f"{task.task} of {task.label}"

    def run_value(key: str, default: Any) -> Any:
        return task.recorded.get(key, task.metadata.get(key, default))

    g = check_n(run_value(N_KEY, DISCOVERABLE_N) if grid is None else grid,
                f"{N_KEY} of {where}" if grid is None else N_KEY)
    q = check_p(run_value(P_KEY, DISCOVERABLE_P) if p is None else p,
                f"{P_KEY} of {where}" if p is None else P_KEY)
    return g, q


def likelihood_result(task: LikelihoodTask, corpus_results: Sequence[CorpusResult], bootstrap: int, seed: int,
                      grid: Sequence[int] | None = None, p: float | None = None) -> LikelihoodResult:
    """The registry's likelihood metrics and the (n, p) curve of one task, beside its prefix FMR."""
    grid, p = _grid_and_p(task, grid, p)
    docs = task.documents
    columns: dict[str, list[float]] = {m.name: [m.value(d, p) for d in docs] for m in registry.LIKELIHOOD_METRICS}
    stats = {m.name: m.statistic for m in registry.LIKELIHOOD_METRICS}
    for n in grid:
        columns[f"n={n}"] = [float(discoverable(d.logp, n, p)) for d in docs]
        stats[f"n={n}"] = np.mean
    est = bootstrap_documents(columns, stats, bootstrap, seed)
    res = LikelihoodResult(task.family, task.corpus, task.model, task.revision, task, p, grid,
                           {m.name: est[m.name] for m in registry.LIKELIHOOD_METRICS},
                           {n: est[f"n={n}"] for n in grid})
    ids = {d.id for d in docs}
    for cr in corpus_results:
        same = (cr.model, cr.revision, cr.corpus) == (task.model, task.revision, task.corpus)
        prefix = cr.settings.get(PREFIX) if same else None
        if prefix is None or (task.index_identity and cr.index_identity and task.index_identity != cr.index_identity):
            continue
        res.label = cr.label
        if prefix.task.prompt_ids == ids:
            fmr = prefix.metrics.get("fmr")
            if fmr is not None and fmr.value is not None:
                res.prefix_fmr = Estimate(fmr.value, fmr.low, fmr.high)
        else:
            res.notes.append(f"{task.task} of {task.label}: its {len(ids)} documents are not the "
                             f"{len(prefix.task.prompt_ids)} prompts of {prefix.task.task}; prefix FMR not shown")
    unclean = sum(d.boundary_clean is False for d in docs)
    if unclean:
        res.notes.append(f"{task.task} of {task.label}: for {unclean} of {len(docs)} documents the model's tokenizer "
                         "merges the last context token with z's first (the scored tokens are not exactly z's)")
    return res


def dedupe(tasks: list[LikelihoodTask], notes: list[str]) -> list[LikelihoodTask]:
    """One task per (model, revision, task, --limit): the latest date id wins (as for the settings)."""
    chosen: dict[tuple[str, str, str, float | None], LikelihoodTask] = {}
    for t in tasks:
        key = (t.model, t.revision, t.task, t.limit)
        old = chosen.get(key)
        if old is None or (old.samples_path.resolve() != t.samples_path.resolve() and t.date_id >= old.date_id):
            if old is not None:
                notes.append(f"{t.task} of {t.label}: using {t.results_path} (newer than {old.results_path})")
            chosen[key] = t
    return list(chosen.values())


def likelihood_results(runs: Sequence[str | Path], corpus_results: Sequence[CorpusResult], bootstrap: int, seed: int,
                       notes: list[str], grid: Sequence[int] | None = None,
                       p: float | None = None) -> list[LikelihoodResult]:
    """Every likelihood subtask of the runs, computed (notes collects what the report should say)."""
    tasks = dedupe([t for run in runs for t in load_likelihood_run(run)], notes)
    out = []
    for t in tasks:
        if not t.documents:
            notes.append(f"{t.task} of {t.label}: no samples in {t.samples_path}; ignored")
            continue
        res = likelihood_result(t, corpus_results, bootstrap, seed, grid, p)
        notes.extend(res.notes)
        out.append(res)
    return out


# --- leaderboard columns, Markdown, plot ---------------------------------------------------------


def columns(results: Sequence[LikelihoodResult]) -> list[str]:
    """The leaderboard's likelihood columns, per corpus label in order of first appearance."""
    cols: list[str] = []
    for label in dict.fromkeys(r.label for r in results):
        p = f"propme_{label}"
        cols.append(f"{p}_n_{SETTING}")
        for m in registry.LIKELIHOOD_LEADERBOARD:
            cols += [f"{p}_{SETTING}_{m}", f"{p}_{SETTING}_{m}_low", f"{p}_{SETTING}_{m}_high"]
    return cols


def row_values(res: LikelihoodResult) -> dict[str, Any]:
    p = f"propme_{res.label}"
    out: dict[str, Any] = {f"{p}_n_{SETTING}": res.n_documents}
    for m in registry.LIKELIHOOD_LEADERBOARD:
        e = res.metrics[m]
        out[f"{p}_{SETTING}_{m}"], out[f"{p}_{SETTING}_{m}_low"], out[f"{p}_{SETTING}_{m}_high"] = \
            e.value, e.low, e.high
    return out


def column_docs() -> list[tuple[str, str]]:
    """The likelihood columns' patterns and meaning (for the leaderboard's documentation)."""
    docs = [(f"propme_<corpus>_n_{SETTING}", "prefix documents scored by likelihood")]
    for m in registry.LIKELIHOOD_LEADERBOARD:
        spec = registry.LIKELIHOOD_BY_NAME[m]
        docs += [(f"propme_<corpus>_{SETTING}_{m}", spec.description),
                 (f"propme_<corpus>_{SETTING}_{m}_low", "lower end of its 95% bootstrap interval over documents"),
                 (f"propme_<corpus>_{SETTING}_{m}_high", "upper end of its 95% bootstrap interval over documents")]
    return docs


def curve_json(res: LikelihoodResult) -> dict[str, Any]:
    """The curve and metrics of one result, for leaderboard.json."""
    return {"corpus": res.label, "model": res.model, "revision": res.revision, "documents": res.n_documents,
            "p": res.p, "curve": [{"n": n, "share": e.value, "low": e.low, "high": e.high} for n, e in res.curve.items()],
            "metrics": {k: {"value": e.value, "low": e.low, "high": e.high} for k, e in res.metrics.items()},
            "prefix_fmr": None if res.prefix_fmr is None else vars(res.prefix_fmr)}


def _fmt(e: Estimate | None) -> str:
    from propme_metrics.report.cells import fmt_interval

    return UNDEFINED.table if e is None else fmt_interval(e.value, e.low, e.high)


def markdown_lines(results: Sequence[LikelihoodResult], cell=str) -> list[str]:
    """A Markdown section: per corpus, the (n, p) curve of every model next to its prefix FMR."""
    lines: list[str] = []
    for label in dict.fromkeys(r.label for r in results):
        rs = [r for r in results if r.label == label]
        grid = sorted({n for r in rs for n in r.curve})
        lines += [f"## {cell(label)}: probabilistic extraction ({SETTING})", "",
                  "Share of prefix documents (n, p)-discoverable, 1 - (1 - P(z))^n >= p, sampling at temperature 1 "
                  "without top-p; greedy extraction and the prefix FMR on the same documents beside it.", "",
                  "| model | revision | documents | p | " + " | ".join(f"n={n:,}" for n in grid)
                  + " | greedy extraction | median log10 P(z) | prefix FMR |",
                  "|---|---|---|---|" + "---|" * (len(grid) + 3)]
        for r in rs:
            cells = [_fmt(r.curve.get(n)) for n in grid]
            lines.append(f"| {cell(r.model)} | {cell(r.revision or '-')} | {r.n_documents} | {r.p:g} | "
                         + " | ".join(cells) + f" | {_fmt(r.metrics['greedy_extraction'])} | "
                         f"{_fmt(r.metrics['log10_p_median'])} | {_fmt(r.prefix_fmr)} |")
        lines.append("")
    return lines


def curve_plot(results: Sequence[LikelihoodResult], label: str, path: Path) -> Path | None:
    """The (n, p) curve per model (share against n, log axis), each with its prefix FMR as a dotted line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from propme_metrics.report.plots import _save, model_label, plain

    rs = [r for r in results if r.label == label]
    if not rs:
        return None
    fig = Figure(figsize=(7.2, 4.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for i, r in enumerate(rs):
        colour = f"C{i % 10}"
        ns = list(r.curve)
        vals = [r.curve[n].value for n in ns]
        name = model_label(r.model, r.revision)
        ax.plot(ns, vals, marker="o", color=colour, label=f"{name} (p = {r.p:g})")
        if all(r.curve[n].low is not None for n in ns):
            ax.fill_between(ns, [r.curve[n].low for n in ns], [r.curve[n].high for n in ns], color=colour, alpha=0.15)
        if r.prefix_fmr is not None and not math.isnan(r.prefix_fmr.value):
            ax.axhline(r.prefix_fmr.value, color=colour, linestyle=":", label=f"{name}: prefix FMR (greedy)")
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("samples n (log scale)")
    ax.set_ylabel("share of documents (n, p)-discoverable")
    ax.set_title(f"{plain(label)}: probabilistic extraction of prefix documents", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.subplots_adjust(right=0.62, bottom=0.13)
    _save(fig, path)
    return path


def write_plots(report: Report, out: Path) -> list[Path]:
    """`likelihood_<corpus>.png` for every corpus label with a likelihood result."""
    from propme_metrics.report.columns import slug

    written = []
    for label in dict.fromkeys(r.label for r in report.likelihood):
        p = curve_plot(report.likelihood, label, out / f"likelihood_{slug(label)}.png")
        if p:
            written.append(p)
    return written
