"""`report.html`: one self-contained page (inline CSS and JS, plots as data URIs, no network).

Tables of PM and base metrics, the plots, then every prompt and generation per model and setting
(settings collapsed in `<details>`), final spans highlighted. Clicking a span (or pressing
Enter on it) opens a side panel with its source documents: source id, metadata, match class,
NV-recall and the document snippet with the span highlighted, like OLMoTrace's span view.
Personal data the generation reproduced (`propme_metrics.trace.pii`) is marked inside the spans and
masked, in the generation, the span texts and the snippets, unless `show_pii=True`.

This module only prepares plain data (the dataclasses below); the Jinja2 templates in `templates/`
lay it out, and `static/report.css` and `static/report.js` are inlined into the page.

Safety: the templates are rendered with autoescape, and every value they print goes through
`_escape` (`html.escape(..., quote=True)`), so model output, corpus text, metadata and file names
can only ever appear as text; nothing is marked safe but the package's own CSS and JS and the JSON
blocks. The documents behind the spans travel as JSON inside `<script type="application/json">`
blocks with `<`, `>` and `&` written as `\\u003c`, `\\u003e`, `\\u0026`, and the script builds the
panel with `textContent` only (never `innerHTML`).
"""
from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markupsafe import Markup

from propme_metrics.core.files import write_atomic
from propme_metrics.index.source_counts import DEFAULT_SOURCE_FIELD, source_of
from propme_metrics.metrics import registry
from propme_metrics.metrics.pm import percent
from propme_metrics.metrics.registry import NV_HIT_THRESHOLD, UNDEFINED
from propme_metrics.metrics.results import CorpusResult
from propme_metrics.prompts.settings import setting_sort_key
from propme_metrics.report.cells import fmt_value, pm_text, shown
from propme_metrics.report.contents import Report
from propme_metrics.report.defaults import HTML_DOCS_PER_SPAN, HTML_SNIPPET_CHARS
from propme_metrics.report.pages import environment, static
from propme_metrics.report.provenance_views import BUCKET_HEADS, SOURCE_HEADS, bucket_rows, source_rows
from propme_metrics.report.robustness_views import FigureTable, figure_tables
from propme_metrics.trace.pii import PIIItem, detect, leaks, mask_text
from propme_metrics.trace.result import FinalSpan, TracedDocument, TraceResult
from propme_metrics.trace.text_rules import locate_segments

_MATCH_RANK = {"full_raw": 0, "full_normalized": 1, "partial": 2}


def script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' characters at all."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# --- the view model: what the templates print --------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """A table cell: the value, its interval (low, high) on a second line, a background, a tooltip."""

    text: str
    ci: tuple[str, str] | None = None
    style: str = ""
    title: str = ""


@dataclass(frozen=True)
class PMRow:
    model: str
    revision: str
    cells: list[Cell]


@dataclass(frozen=True)
class PMTable:
    """PM per model for one corpus label; no `heads` when no PM could be computed."""

    label: str
    indexes: str
    heads: list[tuple[str, str]]  #: (metric label, setting)
    rows: list[PMRow]


@dataclass(frozen=True)
class MetricRow:
    model: str
    revision: str
    setting: str
    prompts: int
    counted: int
    degenerate: int
    failed: int
    loops: int           #: counted generations with a loop span (those spans left out of the metrics)
    cells: list[Cell]


@dataclass(frozen=True)
class MetricTable:
    label: str
    heads: list[str]
    rows: list[MetricRow]


@dataclass(frozen=True)
class Plot:
    name: str
    data: str  #: the PNG, base64 (only A-Z, a-z, 0-9, '+', '/', '=': nothing to escape)


@dataclass(frozen=True)
class TextRun:
    """A piece of shown text; `pii` is the type of the leaked personal-data item it is, if any."""

    text: str
    pii: str | None = None


@dataclass(frozen=True)
class SpanMark:
    """A clickable final span: which JSON block, generation and span the panel shows."""

    tag: str  #: "mark" inside the generation text, "span" in the list of overlapping spans
    cls: str
    block: int
    gen: str
    span: int
    title: str
    sources: str = "[]"  #: JSON list of its documents' corpus sources (the source filter reads it)


@dataclass(frozen=True)
class Piece:
    """Text runs, inside a span mark or not."""

    runs: list[TextRun]
    mark: SpanMark | None = None


@dataclass(frozen=True)
class Badge:
    cls: str
    text: str


@dataclass(frozen=True)
class GenView:
    badges: list[Badge]
    pieces: list[Piece]
    listed: list[Piece]  #: spans overlapping a marked one, or not found in the text
    sources: str = "[]"  #: JSON list of the corpus sources of all its documents


@dataclass(frozen=True)
class PromptView:
    n: int
    id: str
    meta: list[str]
    prompt: str
    continuation: str | None
    gens: list[GenView]


@dataclass(frozen=True)
class SettingView:
    setting: str
    n_prompts: int
    n_counted: int
    nvr: str
    fmr: str
    als: str
    pii: str | None
    prompts: list[PromptView]


@dataclass(frozen=True)
class ModelView:
    model: str
    revision: str
    settings: list[SettingView]


@dataclass(frozen=True)
class Group:
    label: str
    models: list[ModelView]


@dataclass(frozen=True)
class Page:
    models: int
    labels: str
    bootstrap: str
    seed: int
    confidence: str              #: the intervals' confidence level, e.g. "95%"
    pm_tables: list[PMTable]
    metric_tables: list[MetricTable]
    natural_language_tables: list[MetricTable]   #: every generation and natural language only, side by side
    plots: list[Plot]
    problems: list[str]
    notes: list[str]
    show_pii: bool
    groups: list[Group]
    data: list[Markup]
    version: str
    sources: str
    css: Markup
    js: Markup
    leak_tables: list[LeakTable] = field(default_factory=list)
    figure_tables: list[FigureTable] = field(default_factory=list)
    source_options: list[str] = field(default_factory=list)   #: every source of a traced document
    contamination: Markup = Markup("")   #: built escaped by report/contamination_views.html_section


@dataclass(frozen=True)
class LeakTable:
    """Which data leaks in one model x corpus x setting: top sources and count buckets (`report/provenance_views.py`)."""

    title: str
    note: str
    source_heads: list[str]
    source_rows: list[list[str]]
    bucket_heads: list[str]
    bucket_rows: list[list[str]]


# --- tables and plots --------------------------------------------------------------------------


def _cell(value: float | None, low: float | None, high: float | None, metric: str = "", style: str = "",
          title: str = "") -> Cell:
    """A value with its interval (none when undefined)."""
    cell = shown(value, low, high, metric)
    return Cell(cell.text, cell.ends, style, title)


def _pm_colour(v: float | None) -> str:
    """The background of a PM cell: 0 blue, 0.5 white, 1 red ("" when undefined)."""
    if v is None or math.isnan(v):
        return ""
    v = min(max(v, 0.0), 1.0)
    if v < 0.5:
        t = v / 0.5
        r, g, b = (int(200 + 55 * t), int(222 + 33 * t), 255)
    else:
        t = (v - 0.5) / 0.5
        r, g, b = (255, int(255 - 55 * t), int(255 - 55 * t))
    return f"background:rgb({r},{g},{b})"


def pm_tables(rep: Report) -> list[PMTable]:
    tables = []
    for label in rep.labels:
        results = [r for r in rep.results if r.label == label]
        keys = sorted({k for r in results for k in r.pm},
                      key=lambda k: (rep.pm_metrics.index(k[0]), setting_sort_key(k[1])))
        rows = []
        for r in results:
            cells = []
            for k in keys:
                iv = r.pm.get(k)
                if iv is None:
                    cells.append(Cell(UNDEFINED.table))
                    continue
                text = pm_text(iv)
                cells.append(Cell(text.text, text.ends, "" if iv.withheld else _pm_colour(iv.estimate),
                                  iv.withheld or (f"{percent(iv.confidence)} {iv.method}" if iv.method else "")))
            rows.append(PMRow(r.model, r.revision or "-", cells))
        tables.append(PMTable(label, ", ".join(sorted({str(r.index_identity) for r in results})),
                              [(registry.LABELS[m], s) for m, s in keys], rows))
    return tables


def metric_tables(rep: Report, view: str = "html") -> list[MetricTable]:
    """Per corpus label, one row per model and setting: the metrics of `registry.VIEWS[view]`."""
    shown = registry.VIEWS[view]
    tables = []
    for label in rep.labels:
        rows = []
        for r in (x for x in rep.results if x.label == label):
            for s, sr in r.settings.items():
                cells = []
                for m in shown:
                    mr = sr.metrics.get(m)
                    if mr is None:
                        cells.append(Cell(UNDEFINED.table))
                        continue
                    cells.append(_cell(mr.estimate, mr.low, mr.high, m, title=f"{percent(mr.confidence)} {mr.method}" if mr.method else ""))
                c = sr.counts
                rows.append(MetricRow(r.model, r.revision or "-", s, c["prompts"], c["counted"], c["degenerate"],
                                      c["failed"], c["loops"], cells))
        tables.append(MetricTable(label, [registry.LABELS[m] for m in shown], rows))
    return tables


def leak_tables(rep: Report) -> list[LeakTable]:

    out = []
    for r in rep.results:
        if r.leaks is None:
            continue
        who = r.model + (f" @ {r.revision}" if r.revision else "")
        for s, sl in r.leaks.settings.items():
            out.append(LeakTable(f"{r.label} · {who} · {s}: {sl.full_matches} full matches, NV-recall mass "
                                 f"{fmt_value(sl.nv_mass)} (sources by {r.leaks.source_field!r})", r.leaks.note or "",
                                 SOURCE_HEADS, source_rows(sl), BUCKET_HEADS, bucket_rows(sl)))
    return out


def plots(files: Sequence[Path]) -> list[Plot]:
    """The PNG plots written beside the page, to inline (one that cannot be read is left out)."""
    out = []
    for p in files:
        try:
            out.append(Plot(p.name, base64.b64encode(Path(p).read_bytes()).decode("ascii")))
        except OSError:
            continue
    return out


# --- generations -------------------------------------------------------------------------------


def _span_class(docs: list[TracedDocument]) -> str:
    if any(d.match == "full_raw" for d in docs):
        return "c-full"
    if max((float(d.nv_recall or 0) for d in docs), default=0.0) > NV_HIT_THRESHOLD:
        return "c-high"
    return "c-low"


def _trim_snippet(doc: TracedDocument, chars: int) -> tuple[str, list[int], bool, bool]:
    snippet = str(doc.snippet or "")
    span = doc.snippet_span or (0, 0)
    try:
        a, b = int(span[0]), int(span[1])
    except (TypeError, ValueError, IndexError):
        a, b = 0, 0
    a = min(max(a, 0), len(snippet))
    b = min(max(b, a), len(snippet))
    lo, hi = max(0, a - chars), min(len(snippet), b + chars)
    return snippet[lo:hi], [a - lo, b - lo], lo > 0, hi < len(snippet)


def doc_json(doc: TracedDocument, chars: int, masked: tuple[PIIItem, ...] | None = None) -> dict[str, Any]:
    """A document entry for the panel; `masked` (None: show everything) are the leaked items to mask."""
    snippet, span, cut_left, cut_right = _trim_snippet(doc, chars)
    if masked is not None:  # corpus text: every item detected in it is masked, in place (the span stays put)
        chars = list(snippet)
        found = [(it.start, it.end) for it in detect(snippet)]
        found += [(m.start(), m.end()) for it in masked for m in re.finditer(re.escape(it.value), snippet)]
        for a, b in found:
            for k in range(a + 1, b):
                if chars[k].isalnum():
                    chars[k] = "*"
        snippet = "".join(chars)
    nv = doc.nv_recall
    nv = float(nv) if isinstance(nv, (int, float)) and math.isfinite(nv) else None
    meta = doc.metadata
    return {"source_id": "" if doc.source_id is None else str(doc.source_id),
            "shard": doc.shard, "doc_ix": doc.doc_ix, "match": str(doc.match or ""),
            "nv": nv, "metadata": json.loads(json.dumps(meta if isinstance(meta, dict) else {}, default=str)),
            "snippet": snippet, "span": span, "cut_left": cut_left, "cut_right": cut_right}


class _PIIView:
    """A generation's text as shown: leaked items masked (unless shown) and where they now sit."""

    def __init__(self, text: str, gen: TraceResult, show: bool):
        try:
            self.leaked = [x.item for x in leaks(gen).leaked]
        except (KeyError, TypeError, ValueError):
            self.leaked = []
        self.masked = () if show else tuple(self.leaked)
        pieces, self.ranges, self._shifts, cur, pos = [], [], [], 0, 0
        for it in sorted(self.leaked, key=lambda it: it.start):
            shown = it.value if show else it.masked
            pieces.append(text[cur:it.start])
            pos += it.start - cur
            self.ranges.append((pos, pos + len(shown), it))
            self._shifts.append((it.start, it.end, pos, pos + len(shown)))
            pieces.append(shown)
            pos += len(shown)
            cur = it.end
        pieces.append(text[cur:])
        self.text = "".join(pieces)

    def pos(self, p: int) -> int:
        """Where character p of the original text is in the shown text (inside an item: its end)."""
        shift = 0
        for a, b, _na, nb in self._shifts:
            if p >= b:
                shift = nb - b
            elif p > a:
                return nb
            else:
                break
        return p + shift

    def runs(self, a: int, b: int) -> list[TextRun]:
        """Shown text [a, b), the leaked items in it as runs of their own."""
        out, cur = [], a
        for lo, hi, it in self.ranges:
            lo, hi = max(lo, a), min(hi, b)
            if lo >= hi:
                continue
            out += [TextRun(self.text[cur:lo]), TextRun(self.text[lo:hi], it.type)]
            cur = hi
        out.append(TextRun(self.text[cur:b]))
        return [r for r in out if r.text]


def _badges(gen: TraceResult, leaked: list[PIIItem], n_spans: int, n_docs: int) -> list[Badge]:
    badges = []
    if gen.error is not None:
        badges.append(Badge("b bad", f"tracing failed (excluded): {gen.error}"))
    if gen.degenerate:
        badges.append(Badge("b bad", "degenerate (excluded)"))
    badges.append(Badge("b", f"longest span {gen.longest_span} tok"))
    badges.append(Badge("b", f"NV-recall max {max(gen.nv_recalls, default=0.0):.3g}"))
    if gen.full_match:
        badges.append(Badge("b full", "full match"))
    elif gen.full_match_normalized:
        badges.append(Badge("b high", "normalized full match"))
    if gen.extracted is True:
        badges.append(Badge("b full", "continuation extracted"))
    if leaked:
        kinds = ", ".join(sorted({it.type for it in leaked}))
        badges.append(Badge("b full", f"personal data leaked: {len(leaked)} ({kinds})"))
    badges.append(Badge("b dim", f"{n_spans} final span(s), {n_docs} document entries"))
    return badges


class _Explorer:
    """The generations section, in page order, and the JSON blocks (one per setting) its panel reads."""

    def __init__(self, docs_per_span: int, snippet_chars: int, show_pii: bool):
        self.show_pii = show_pii
        self.docs_per_span = max(1, docs_per_span)
        self.snippet_chars = max(0, snippet_chars)
        self.blocks: list[dict[str, Any]] = []
        self.source_field = DEFAULT_SOURCE_FIELD
        self.sources: set[str] = set()

    def _mask(self, text: str) -> str:
        """Corpus or model text with every detected personal-data item masked (unless shown)."""
        return text if self.show_pii else mask_text(text, detect(text))

    def generation(self, gen: TraceResult, block: dict[str, Any], title: str) -> GenView:
        """The generation's badges and text, its final spans marked; their documents go into `block`."""
        text = gen.text or ""
        spans: list[FinalSpan] = gen.final_spans
        view = _PIIView(text, gen, self.show_pii)
        badges = _badges(gen, view.leaked, len(spans), sum(len(s.documents) for s in spans))
        if not spans:
            return GenView(badges, [Piece(view.runs(0, len(view.text)))], [])
        span_sources = [sorted({source_of(d.metadata, self.source_field) for d in span.documents}) for span in spans]
        self.sources.update(x for srcs in span_sources for x in srcs)

        gid = str(len(block))
        span_data, classes = [], []
        for span in spans:
            docs = list(span.documents)
            classes.append(_span_class(docs))
            docs.sort(key=lambda d: (_MATCH_RANK.get(d.match, 3), -float(d.nv_recall or 0)))
            span_data.append({"text": self._mask(mask_text(str(span.text or ""), view.masked)),
                              "start": span.start,
                              "end": span.end, "n_docs": len(docs),
                              "docs": [doc_json(d, self.snippet_chars, None if self.show_pii else view.masked)
                                       for d in docs[: self.docs_per_span]]})
        block[gid] = {"title": title, "spans": span_data}

        def mark(k: int, runs: list[TextRun], tag: str = "mark") -> Piece:
            span = spans[k]
            length = (span.end or 0) - (span.start or 0)
            tip = f"span {k + 1}: {length} tokens, {span_data[k]['n_docs']} document(s); click for sources"
            return Piece(runs, SpanMark(tag, classes[k], len(self.blocks), gid, k, tip, json.dumps(span_sources[k])))

        located = locate_segments(text, [{"text": s.text, "start": s.start, "end": s.end} for s in spans])
        pieces, cur, listed = [], 0, []
        # final spans may overlap (the full-generation span holds the others): the longest are
        # marked in the text, the ones overlapping a marked span are listed below it
        for k, rng in sorted(((k, r) for k, r in enumerate(located) if r), key=lambda kr: kr[1][0]):
            a, b = view.pos(rng[0]), view.pos(rng[1])
            if a < cur:
                listed.append(k)
                continue
            pieces += [Piece(view.runs(cur, a)), mark(k, view.runs(a, b))]
            cur = b
        pieces.append(Piece(view.runs(cur, len(view.text))))
        listed += [k for k, r in enumerate(located) if r is None]
        return GenView(badges, pieces,
                       [mark(k, [TextRun(span_data[k]["text"] or f"span {k + 1}")], "span") for k in listed],
                       json.dumps(sorted({x for srcs in span_sources for x in srcs})))

    def setting(self, r: CorpusResult, setting: str) -> SettingView:
        sr = r.settings[setting]
        self.source_field = r.leaks.source_field if r.leaks is not None else DEFAULT_SOURCE_FIELD
        block: dict[str, Any] = {}
        who = f"{r.model}" + (f" @ {r.revision}" if r.revision else "")
        prompts = []
        for n, prompt in enumerate(sr.task.prompts, 1):
            title = f"{who} · {r.label} · {setting} · prompt {prompt.id}"
            gens = [self.generation(g, block, title) for g in prompt.generations]
            # the prompt and true continuation are corpus text: personal data in them is masked too
            prompts.append(PromptView(n, prompt.id, [v for v in (prompt.domain, prompt.language) if v],
                                      self._mask(prompt.prompt),
                                      self._mask(prompt.continuation) if prompt.continuation else None, gens))
        self.blocks.append(block)
        m = sr.metrics
        return SettingView(setting, sr.counts["prompts"], sr.counts["counted"], fmt_value(m["nvr"].estimate),
                           fmt_value(m["fmr"].estimate), fmt_value(m["als"].estimate, "als"),
                           fmt_value(m["pii"].estimate) if "pii" in m else None, prompts)

    def groups(self, rep: Report) -> list[Group]:
        return [Group(label, [ModelView(r.model, r.revision, [self.setting(r, s) for s in r.settings])
                              for r in rep.results if r.label == label])
                for label in rep.labels]


# --- the page ----------------------------------------------------------------------------------


def render(report: Report, docs_per_span: int = HTML_DOCS_PER_SPAN, snippet_chars: int = HTML_SNIPPET_CHARS,
           show_pii: bool = False, contamination: str = "", plot_files: Sequence[Path] = ()) -> str:
    """The page's HTML (the same report and options give the same text); `contamination` is the
    contamination section (`contamination_views.html_section`), or none; `plot_files` the PNGs to inline."""
    from propme_metrics.version import __version__

    explorer = _Explorer(docs_per_span, snippet_chars, show_pii)
    groups = explorer.groups(report)
    page = Page(
        models=len({(r.model, r.revision) for r in report.results}), labels=", ".join(report.labels),
        bootstrap=f"{report.intervals.resamples:,}", seed=report.intervals.seed,
        confidence=report.intervals.percent, pm_tables=pm_tables(report),
        metric_tables=metric_tables(report), natural_language_tables=metric_tables(report, "natural_language"),
        plots=plots(plot_files), problems=list(report.problems),
        notes=list(report.notes), show_pii=show_pii, groups=groups,
        # script_json leaves no '<', '>' or '&' in the text: it cannot end the <script> element
        data=[Markup(script_json(b)) for b in explorer.blocks], version=__version__,
        sources="; ".join(sorted({str(s.task.results_path) for r in report.results for s in r.settings.values()})),
        css=static("report.css"), js=static("report.js"), leak_tables=leak_tables(report),
        figure_tables=figure_tables(report.results),
        source_options=sorted(explorer.sources), contamination=Markup(contamination))
    return environment().get_template("report.html.j2").render(page=page)


def write_html(report: Report, path: Path, docs_per_span: int = HTML_DOCS_PER_SPAN, snippet_chars: int = HTML_SNIPPET_CHARS,
               show_pii: bool = False, contamination: str = "", plot_files: Sequence[Path] = ()) -> Path:
    """Write the self-contained HTML report to `path` (leaked personal data masked unless `show_pii`)."""
    write_atomic(path, render(report, docs_per_span, snippet_chars, show_pii, contamination, plot_files))
    return path
