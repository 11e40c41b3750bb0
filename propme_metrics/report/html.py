"""`report.html`: one self-contained page (inline CSS and JS, plots as data URIs, no network).

Tables of PM and base metrics, the plots, then every prompt and generation per model and setting
(settings collapsed in `<details>`), traced segments highlighted. Clicking a segment (or pressing
Enter on it) opens a side panel with its source documents: source id, metadata, match class,
NV-recall and the document snippet with the span highlighted, like OLMoTrace's span view.
Personal data the generation reproduced (`propme_metrics.trace.pii`) is marked inside the segments and
masked, in the generation, the segment texts and the snippets, unless `show_pii=True`.

The CSS and JS are the package files `static/report.css` and `static/report.js`.

Safety: every piece of model output, corpus text, metadata and file name is escaped with
`html.escape(..., quote=True)`; the documents behind the segments travel as JSON inside
`<script type="application/json">` blocks with `<`, `>` and `&` written as `\\u003c`, `\\u003e`,
`\\u0026`, and the script builds the panel with `textContent` only (never `innerHTML`).
"""
from __future__ import annotations

import base64
import html
import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from propme_metrics.core.files import write_atomic
from propme_metrics.metrics.registry import NV_HIT_THRESHOLD
from propme_metrics.trace.pii import PIIItem, detect, leaks, mask_text
from propme_metrics.trace.text_rules import locate_segments

if TYPE_CHECKING:  # pragma: no cover
    from propme_metrics.report.compute import CorpusResult, Report

_MATCH_RANK = {"full_raw": 0, "full_normalized": 1, "partial": 2}


def esc(value: Any) -> str:
    """Text for HTML content or attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' characters at all."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _seg_class(docs: list[dict[str, Any]]) -> str:
    if any(d.get("match") == "full_raw" for d in docs):
        return "c-full"
    if max((float(d.get("nv_recall") or 0) for d in docs), default=0.0) > NV_HIT_THRESHOLD:
        return "c-high"
    return "c-low"


def _trim_snippet(doc: dict[str, Any], chars: int) -> tuple[str, list[int], bool, bool]:
    snippet = str(doc.get("snippet") or "")
    span = doc.get("snippet_span") or (0, 0)
    try:
        a, b = int(span[0]), int(span[1])
    except (TypeError, ValueError, IndexError):
        a, b = 0, 0
    a = min(max(a, 0), len(snippet))
    b = min(max(b, a), len(snippet))
    lo, hi = max(0, a - chars), min(len(snippet), b + chars)
    return snippet[lo:hi], [a - lo, b - lo], lo > 0, hi < len(snippet)


def _doc_json(doc: dict[str, Any], chars: int, masked: tuple[PIIItem, ...] | None = None) -> dict[str, Any]:
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
    nv = doc.get("nv_recall")
    nv = float(nv) if isinstance(nv, (int, float)) and math.isfinite(nv) else None
    meta = doc.get("metadata")
    return {"source_id": "" if doc.get("source_id") is None else str(doc.get("source_id")),
            "shard": doc.get("shard"), "doc_ix": doc.get("doc_ix"), "match": str(doc.get("match") or ""),
            "nv": nv, "metadata": json.loads(json.dumps(meta if isinstance(meta, dict) else {}, default=str)),
            "snippet": snippet, "span": span, "cut_left": cut_left, "cut_right": cut_right}


def _cell_html(value: float | None, low: float | None, high: float | None, metric: str = "") -> str:
    """A value with its interval on a second, smaller line."""
    from propme_metrics.report.columns import fmt_value

    text = esc(fmt_value(value, metric))
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return text
    return f'{text}<br><small class="ci">[{esc(fmt_value(low, metric))}, {esc(fmt_value(high, metric))}]</small>'


def _pm_colour(v: float | None) -> str:
    if v is None or math.isnan(v):
        return ""
    v = min(max(v, 0.0), 1.0)
    # 0 -> blue, 0.5 -> white, 1 -> red
    if v < 0.5:
        t = v / 0.5
        r, g, b = (int(200 + 55 * t), int(222 + 33 * t), 255)
    else:
        t = (v - 0.5) / 0.5
        r, g, b = (255, int(255 - 55 * t), int(255 - 55 * t))
    return f' style="background:rgb({r},{g},{b})"'


class _PIIView:
    """A generation's text as shown: leaked items masked (unless shown) and where they now sit."""

    def __init__(self, text: str, gen: dict[str, Any], show: bool):
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
        for a, b, na, nb in self._shifts:
            if p >= b:
                shift = nb - b
            elif p > a:
                return nb
            else:
                break
        return p + shift

    def html(self, a: int, b: int) -> str:
        """Shown text [a, b) escaped, leaked items wrapped in a mark."""
        out, cur = [], a
        for lo, hi, it in self.ranges:
            lo, hi = max(lo, a), min(hi, b)
            if lo >= hi:
                continue
            out.append(esc(self.text[cur:lo]))
            out.append(f'<mark class="pii" title="{esc(f"leaked {it.type} (personal data from the corpus)")}">'
                       f"{esc(self.text[lo:hi])}</mark>")
            cur = hi
        out.append(esc(self.text[cur:b]))
        return "".join(out)


class _Page:
    def __init__(self, report: "Report", docs_per_segment: int, snippet_chars: int, show_pii: bool = False):
        self.report = report
        self.show_pii = show_pii
        self.docs_per_segment = max(1, docs_per_segment)
        self.snippet_chars = max(0, snippet_chars)
        self.blocks: list[dict[str, Any]] = []

    def _mask(self, text: str) -> str:
        """Corpus or model text with every detected personal-data item masked (unless shown)."""
        return text if self.show_pii else mask_text(text, detect(text))

    # -- tables ---------------------------------------------------------------------------------

    def pm_tables(self) -> str:
        from propme_metrics.metrics import registry
        from propme_metrics.prompts.settings import setting_sort_key

        rep = self.report
        parts = []
        for label in rep.labels:
            results = [r for r in rep.results if r.label == label]
            keys = sorted({k for r in results for k in r.pm},
                          key=lambda k: (rep.pm_metrics.index(k[0]), setting_sort_key(k[1])))
            idents = ", ".join(sorted({str(r.index_identity) for r in results}))
            parts.append(f'<h3>{esc(label)} <small>index {esc(idents)}</small></h3>')
            if not keys:
                parts.append('<p class="warn">No PM: the prefix setting (or every propensity setting) is missing.</p>')
                continue
            head = "".join(f"<th>PM {esc(registry.LABELS[m])}<br><small>{esc(s)} vs prefix</small></th>" for m, s in keys)
            rows = []
            for r in results:
                cells = []
                for k in keys:
                    iv = r.pm.get(k)
                    if iv is None:
                        cells.append("<td>-</td>")
                    else:
                        cells.append(f"<td{_pm_colour(iv.estimate)}>{_cell_html(iv.estimate, iv.low, iv.high)}</td>")
                rows.append(f"<tr><td>{esc(r.model)}</td><td>{esc(r.revision or '-')}</td>{''.join(cells)}</tr>")
            parts.append(f'<div class="scroll"><table class="num"><thead><tr><th>model</th><th>revision</th>{head}'
                         f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
        return "".join(parts)

    def metric_tables(self) -> str:
        from propme_metrics.metrics import registry
        from propme_metrics.report.columns import fmt_value

        shown = registry.VIEWS["html"]
        parts = []
        for label in self.report.labels:
            results = [r for r in self.report.results if r.label == label]
            head = "".join(f"<th>{esc(registry.LABELS[m])}</th>" for m in shown)
            rows = []
            for r in results:
                for s, sr in r.settings.items():
                    cells = []
                    for m in shown:
                        mr = sr.metrics.get(m)
                        if mr is None:
                            cells.append("<td>-</td>")
                            continue
                        title = ""
                        if m in registry.PROPORTIONS and mr.wilson_low is not None:
                            title = (f' title="Wilson 95%: [{esc(fmt_value(mr.wilson_low))}, '
                                     f'{esc(fmt_value(mr.wilson_high))}]"')
                        cells.append(f"<td{title}>{_cell_html(mr.value, mr.low, mr.high, m)}</td>")
                    c = sr.counts
                    extra = f"{c['counted']}" + (f" <small>({c['degenerate']} degen., {c['failed']} failed)</small>"
                                                 if c["degenerate"] or c["failed"] else "")
                    rows.append(f"<tr><td>{esc(r.model)}</td><td>{esc(r.revision or '-')}</td><td>{esc(s)}</td>"
                                f"<td>{c['prompts']}</td><td>{extra}</td>{''.join(cells)}</tr>")
            parts.append(f"<h3>{esc(label)}</h3><div class=\"scroll\"><table class=\"num\"><thead><tr><th>model</th>"
                         f"<th>revision</th><th>setting</th><th>prompts</th><th>generations</th>{head}</tr></thead>"
                         f"<tbody>{''.join(rows)}</tbody></table></div>")
        return "".join(parts)

    def plots(self) -> str:
        figs = []
        for p in self.report.plots:
            try:
                data = base64.b64encode(Path(p).read_bytes()).decode("ascii")
            except OSError:
                continue
            figs.append(f'<figure><img alt="{esc(p.name)}" src="data:image/png;base64,{data}">'
                        f'<figcaption>{esc(p.name)}</figcaption></figure>')
        return "".join(figs) or "<p>No plots.</p>"

    # -- generations ----------------------------------------------------------------------------

    def generation(self, gen: dict[str, Any], block: dict[str, Any], title: str) -> str:
        text = str(gen.get("text") or "")
        segments = [s for s in (gen.get("final_spans") or []) if isinstance(s, dict)]
        n_docs = sum(len(s.get("documents") or []) for s in segments)
        badges = []
        if gen.get("error") is not None:
            badges.append(f'<span class="b bad">tracing failed (excluded): {esc(gen.get("error"))}</span>')
        if gen.get("degenerate"):
            badges.append('<span class="b bad">degenerate (excluded)</span>')
        badges.append(f'<span class="b">longest span {esc(gen.get("longest_span", 0))} tok</span>')
        nvmax = gen.get("nv_recall_max")
        if isinstance(nvmax, (int, float)):
            badges.append(f'<span class="b">NV-recall max {esc(f"{nvmax:.3g}")}</span>')
        if gen.get("full_match"):
            badges.append('<span class="b full">full match</span>')
        elif gen.get("full_match_normalized"):
            badges.append('<span class="b high">normalized full match</span>')
        if gen.get("extracted") is True:
            badges.append('<span class="b full">continuation extracted</span>')
        view = _PIIView(text, gen, self.show_pii)
        if view.leaked:
            kinds = ", ".join(sorted({it.type for it in view.leaked}))
            badges.append(f'<span class="b full">personal data leaked: {len(view.leaked)} ({esc(kinds)})</span>')
        badges.append(f'<span class="b dim">{len(segments)} final span(s), {n_docs} document entries</span>')
        if not segments:
            return (f'<div class="gen"><div class="badges">{"".join(badges)}</div>'
                    f'<div class="gtext">{view.html(0, len(view.text))}</div></div>')

        gid = str(len(block))
        seg_data, classes = [], []
        for seg in segments:
            docs = [d for d in (seg.get("documents") or []) if isinstance(d, dict)]
            classes.append(_seg_class(docs))
            docs.sort(key=lambda d: (_MATCH_RANK.get(d.get("match"), 3), -float(d.get("nv_recall") or 0)))
            seg_data.append({"text": self._mask(mask_text(str(seg.get("text") or ""), view.masked)),
                             "start": seg.get("start"),
                             "end": seg.get("end"), "n_docs": len(docs),
                             "docs": [_doc_json(d, self.snippet_chars, None if self.show_pii else view.masked)
                                      for d in docs[: self.docs_per_segment]]})
        block[gid] = {"title": title, "segments": seg_data}

        def mark(k: int, inner: str, tag: str = "mark") -> str:
            seg = segments[k]
            length = (seg.get("end") or 0) - (seg.get("start") or 0)
            tip = f"span {k + 1}: {length} tokens, {seg_data[k]['n_docs']} document(s); click for sources"
            return (f'<{tag} class="seg {classes[k]}" tabindex="0" role="button" data-b="{len(self.blocks)}" '
                    f'data-g="{gid}" data-s="{k}" title="{esc(tip)}">{inner}</{tag}>')

        located = locate_segments(text, segments)
        pieces, cur, listed = [], 0, []
        # final spans may overlap (the full-generation span holds the others): the longest are
        # marked in the text, the ones overlapping a marked span are listed below it
        for k, rng in sorted(((k, r) for k, r in enumerate(located) if r), key=lambda kr: kr[1][0]):
            a, b = view.pos(rng[0]), view.pos(rng[1])
            if a < cur:
                listed.append(k)
                continue
            pieces.append(view.html(cur, a))
            pieces.append(mark(k, view.html(a, b)))
            cur = b
        pieces.append(view.html(cur, len(view.text)))
        listed += [k for k, r in enumerate(located) if r is None]
        tail = ""
        if listed:
            tail = ('<div class="unlocated">more spans: '
                    + " ".join(mark(k, esc(seg_data[k]["text"] or f"span {k + 1}"), "span") for k in listed)
                    + "</div>")
        return (f'<div class="gen"><div class="badges">{"".join(badges)}</div>'
                f'<div class="gtext">{"".join(pieces)}</div>{tail}</div>')

    def setting_block(self, r: "CorpusResult", setting: str) -> str:
        from propme_metrics.report.columns import fmt_value

        sr = r.settings[setting]
        block: dict[str, Any] = {}
        who = f"{r.model}" + (f" @ {r.revision}" if r.revision else "")
        items = []
        for n, prompt in enumerate(sr.task.prompts, 1):
            title = f"{who} · {r.label} · {setting} · prompt {prompt.id}"
            gens = "".join(self.generation(g, block, title) for g in prompt.generations)
            meta = " ".join(f'<span class="b dim">{esc(v)}</span>' for v in (prompt.domain, prompt.language) if v)
            # the prompt and true continuation are corpus text: personal data in them is masked too
            cont = ""
            if prompt.continuation:
                cont = (f'<div class="cont"><span class="lbl">true continuation</span> '
                        f'{esc(self._mask(prompt.continuation))}</div>')
            items.append(f'<div class="prompt"><div class="phead"><span class="pid">#{n} {esc(prompt.id)}</span>'
                         f'{meta}</div><div class="ptext"><span class="lbl">prompt</span> '
                         f'{esc(self._mask(prompt.prompt))}</div>{cont}{gens}</div>')
        m = sr.metrics
        summary = (f"{esc(setting)} <small>{sr.counts['prompts']} prompts, {sr.counts['counted']} generations counted"
                   f" · NVR {esc(fmt_value(m['nvr'].value))} · FMR {esc(fmt_value(m['fmr'].value))}"
                   f" · ALS {esc(fmt_value(m['als'].value, 'als'))}"
                   + (f" · PII {esc(fmt_value(m['pii'].value))}" if "pii" in m else "") + "</small>")
        self.blocks.append(block)
        return f'<details class="setting"><summary>{summary}</summary>{"".join(items)}</details>'

    def explorer(self) -> str:
        parts = []
        for label in self.report.labels:
            parts.append(f"<h3>{esc(label)}</h3>")
            for r in (x for x in self.report.results if x.label == label):
                who = esc(r.model) + (f" <small>revision {esc(r.revision)}</small>" if r.revision else "")
                settings = "".join(self.setting_block(r, s) for s in r.settings)
                parts.append(f'<details class="model" open><summary>{who}</summary>{settings}</details>')
        return "".join(parts)

    def render(self) -> str:
        from propme_metrics import __version__

        rep = self.report
        sources = sorted({str(s.task.results_path) for r in rep.results for s in r.settings.values()})
        problems = "".join(f'<li class="warn">{esc(p)}</li>' for p in rep.problems)
        notes = "".join(f"<li>{esc(n)}</li>" for n in rep.notes)
        notes_html = f"<ul>{problems}{notes}</ul>" if problems or notes else "<p>None.</p>"
        pm_html, metric_html, plots_html = self.pm_tables(), self.metric_tables(), self.plots()
        explorer_html = self.explorer()
        data_html = "".join(f'<script type="application/json" id="propme-data-{i}">{script_json(b)}</script>'
                            for i, b in enumerate(self.blocks))
        models = len({(r.model, r.revision) for r in rep.results})
        return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>PropMe report</title><style>
{_static('report.css')}</style></head>
<body>
<header><h1>PropMe report</h1>
<p>Memorization propensity (generic/specific prompts) against capability (prefix prompts).
{models} model revision(s), corpora: {esc(", ".join(rep.labels))}. PM = p / (p + c): 0 leaks only under attack,
0.5 the same, 1 leaks more unprompted. 95% percentile-bootstrap intervals over prompts (B = {rep.bootstrap:,},
seed {rep.seed}); hover a proportion for its Wilson interval.</p>
<nav><a href="#pm">PM</a> · <a href="#metrics">base metrics</a> · <a href="#plots">plots</a> ·
<a href="#notes">notes</a> · <a href="#explorer">generations</a></nav></header>
<main>
<section id="pm"><h2>Propensity scores (PM)</h2>{pm_html}</section>
<section id="metrics"><h2>Base metrics per setting</h2>{metric_html}</section>
<section id="plots"><h2>Plots</h2><div class="plots">{plots_html}</div></section>
<section id="notes"><h2>Notes</h2>{notes_html}</section>
<section id="explorer"><h2>Generations and traced segments</h2>
<p class="legend">Highlighted: traced segments (verbatim spans found in the corpus).
<mark class="seg c-full">a full_raw document</mark> <mark class="seg c-high">NV-recall above 0.5</mark>
<mark class="seg c-low">partial matches</mark>. Click a segment for its source documents.
<mark class="pii">Personal data</mark> the generation reproduced from a training document
({"shown unmasked (--show-pii)" if self.show_pii else "masked; --show-pii shows the values"}).</p>
{explorer_html}</section>
<footer>propme {esc(__version__)} · inputs: {esc("; ".join(sources))}</footer>
</main>
<aside id="panel" hidden aria-live="polite"><button id="panel-close" type="button" aria-label="close">×</button>
<div id="panel-body"></div></aside>
{data_html}
<script>
{_static('report.js')}</script>
</body></html>
"""


def _static(name: str) -> str:
    """A file of `static/` (the page's CSS or JS), inlined as it is."""
    return resources.files("propme_metrics.report").joinpath("static", name).read_text(encoding="utf-8")


def write_html(report: "Report", path: Path, docs_per_segment: int = 3, snippet_chars: int = 200,
               show_pii: bool = False) -> Path:
    """Write the self-contained HTML report to `path` (leaked personal data masked unless `show_pii`)."""
    page = _Page(report, docs_per_segment, snippet_chars, show_pii)
    write_atomic(path, page.render())
    return path

