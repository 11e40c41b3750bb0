"""How the leak analysis (`metrics/provenance_analysis.py`) is written: leaderboard.json's `leaks`, Markdown and console tables.

The sources are not leaderboard columns: their set changes from corpus to corpus, so they live in
leaderboard.json under `leaks` (one entry per model, revision and corpus) and in the tables.
"""
from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text  # corpus sources and model names print as written, never as markup

from propme_metrics.metrics.provenance_analysis import SettingLeaks, SourceLeak
from propme_metrics.metrics.registry import UNDEFINED
from propme_metrics.metrics.results import CorpusResult
from propme_metrics.report.cells import fmt_interval, fmt_value, md_cell
from propme_metrics.report.contents import Report

#: sources per setting in the Markdown and console tables
SHOWN_SOURCES = 5


def leaks_json(report: Report) -> list[dict[str, Any]]:
    """leaderboard.json's `leaks`: per model, revision and corpus, each setting's top sources and buckets."""
    return [{"model": r.model, "revision": r.revision, "corpus": r.label, "source_field": r.leaks.source_field,
             "corpus_tokens": r.leaks.corpus_tokens, "rare_max_count": report.rare_max_count, "note": r.leaks.note,
             "settings": {s: sl.to_dict() for s, sl in r.leaks.settings.items()}}
            for r in report.results if r.leaks is not None]


def _enrichment(iv) -> str:
    return UNDEFINED.table if iv is None else fmt_interval(iv.estimate, iv.low, iv.high)


def _pct(v: float | None) -> str:
    return UNDEFINED.table if v is None else f"{100 * v:.1f}%"


def source_rows(sl: SettingLeaks, n: int = SHOWN_SOURCES) -> list[list[str]]:
    """Table rows: source, corpus token share, share of full matches, enrichment, share of NV mass, enrichment."""
    return [[s.source, _pct(s.token_share), _pct(s.full_share), _enrichment(s.enrichment_full), _pct(s.nv_share),
             _enrichment(s.enrichment_nv)] for s in _leaking(sl)[:n]]


def _leaking(sl: SettingLeaks) -> list[SourceLeak]:
    return [s for s in sl.sources if s.full_matches or s.nv_mass]


SOURCE_HEADS = ["source", "corpus tokens", "full matches", "enrichment (FM)", "NV mass", "enrichment (NV)"]
BUCKET_HEADS = ["corpus count", "full matches", "share", "NV mass share", "prefix extraction"]


def bucket_rows(sl: SettingLeaks) -> list[list[str]]:
    """Table rows: count bucket, full matches, their share, NV mass share, prefix extraction rate [Wilson]."""
    extraction = {e.bucket: e for e in sl.extraction}
    rows = []
    for b in sl.buckets:
        e = extraction.get(b.bucket)
        ext = UNDEFINED.table if e is None or not e.generations else \
            f"{fmt_interval(e.rate, e.low, e.high)} ({e.extracted}/{e.generations})"
        rows.append([b.bucket, str(b.full_matches), _pct(b.full_share), _pct(b.nv_share), ext])
    return rows


def leaks_markdown(report: Report) -> list[str]:
    """The Markdown section: per corpus, model and setting, the top sources and the count buckets."""
    lines = ["## Which data leaks", "",
             "Enrichment = a source's share of the leaks / its share of the corpus tokens (1: in proportion; "
             f"{report.intervals.percent} bootstrap intervals). Corpus count: occurrences of the leaked text; `fmr_rare` counts full "
             f"matches occurring at most {report.rare_max_count} times.", ""]
    for r in report.results:
        if r.leaks is None:
            continue
        lines += [f"### {md_cell(r.label)}: {md_cell(_who(r))}", ""]
        if r.leaks.note:
            lines += [f"Note: {md_cell(r.leaks.note)}", ""]
        for s, sl in r.leaks.settings.items():
            lines += [f"**{s}** ({sl.full_matches} full matches, NV-recall mass {fmt_value(sl.nv_mass)}; sources by "
                      f"`{md_cell(r.leaks.source_field)}`)", ""]
            rows = source_rows(sl)
            if rows:
                lines += ["| " + " | ".join(SOURCE_HEADS) + " |", "|---" * len(SOURCE_HEADS) + "|"]
                lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
                lines.append("")
            lines += ["| " + " | ".join(BUCKET_HEADS) + " |", "|---" * len(BUCKET_HEADS) + "|"]
            lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in bucket_rows(sl)]
            lines.append("")
    return lines


def _who(r: CorpusResult) -> str:
    return r.model + (f" @ {r.revision}" if r.revision else "")


def print_leaks(report: Report, console) -> None:
    """Rich tables: the top sources of every setting with leaks, and the count buckets."""
    for r in report.results:
        if r.leaks is None:
            continue
        for s, sl in r.leaks.settings.items():
            if sl.full_matches or sl.nv_mass:
                print_setting_leaks(sl, f"{r.label}, {_who(r)}, {s}", console)


def print_setting_leaks(sl: SettingLeaks, where: str, console) -> None:
    """The two rich tables of one setting's leaks (`where` names it in their titles)."""
    table = Table(title=Text(f"Which data leaks: {where}"), show_lines=False)
    for h in SOURCE_HEADS:
        table.add_column(h, justify="left" if h == "source" else "right")
    for row in source_rows(sl):
        table.add_row(*map(Text, row))
    console.print(table)
    buckets = Table(title=Text(f"By corpus count: {where}"))
    for h in BUCKET_HEADS:
        buckets.add_column(h, justify="right")
    for row in bucket_rows(sl):
        buckets.add_row(*map(Text, row))
    console.print(buckets)
