"""`propme trace`: trace generations to the corpus (SimpleTrace) and compute the metrics.

The tracing options are made from the table of tracing options (`trace/options.py`), one per
`TraceConfig` field, so they are checked as the lm-eval tasks check their `trace_*` keys.
"""
from __future__ import annotations

import argparse

from propme.cli.arguments import add_ray_option, add_request_option, count
from propme_metrics.core.errors import ExitCode
from propme_metrics.core.progress import stderr_console, terminal
from propme_metrics.metrics import registry


def cmd_trace(args: argparse.Namespace) -> int:
    from rich.text import Text

    from propme_metrics.report.trace_run import TraceRequest, trace_generations, write_trace

    request = TraceRequest.from_cli(args)
    outcome = trace_generations(request)
    write_trace(outcome)
    if outcome.resumed:
        stderr_console.print(f"resumed: {outcome.resumed} of {len(outcome.generations)} generation(s) were traced by "
                             "an interrupted run of this command and kept", highlight=False)
    results, summary, leaked_items = outcome.results, outcome.summary, outcome.leaked_items
    console = terminal()
    with_continuation = any(g.continuation is not None for g in outcome.generations)
    table, undefined = metrics_table(f"PropMe trace: {len(results)} generation(s) of {args.input} against index "
                                     f"{outcome.index_identity}", summary, leaked_items, outcome.speed,
                                     with_continuation)
    console.print(table)
    _print_pii_leaks(results, outcome.personal, leaked_items, request.show_pii, request.out, console)
    _print_trace_leaks(outcome.leaks, console)
    for why in dict.fromkeys(undefined.values()):  # one line per reason, naming its metrics
        labels = ", ".join(label for label, reason in undefined.items() if reason == why)
        console.print(Text(f"{registry.UNDEFINED.console}: {labels} undefined (null in {request.summary.name}, not "
                           f"0): {why}"), highlight=False)
    console.print(Text(f"wrote {request.out} and {request.summary}"), highlight=False)
    if summary.n_failed:
        stderr_console.print(f"[yellow]warning:[/] tracing failed for {summary.n_failed} generation(s) (see their "
                             "'error' field); they are left out of the metrics", highlight=False)
    return ExitCode.OK


def metrics_table(title: str, summary, leaked_items: int, speed: str, with_continuation: bool):
    """The pooled metrics of a trace as a two-column table, and why each undefined one is (by label).
    Extraction (a prefix-only metric) is shown when some generation came with its true continuation."""
    from rich.table import Table
    from rich.text import Text

    from propme_metrics.trace.pii import PII_TYPES

    table = Table(title=Text(title))
    table.add_column("metric")
    table.add_column("value", justify="right")
    shown_metrics = [m for m in registry.METRICS if (m.name == "pii" or not m.name.startswith("pii_"))
                     and (with_continuation or not m.settings)]
    undefined = {m.label: _why_undefined(m, summary) for m in shown_metrics
                 if registry.is_undefined(summary.metrics[m.name])}
    rows = [("generations counted", f"{summary.n_counted} of {summary.n_generations} "
                                    f"({summary.n_degenerate} degenerate, {summary.n_failed} failed)"),
            ("generations with loop spans", f"{summary.n_loops} (those spans left out of every metric)"),
            *((m.label, registry.UNDEFINED.console if m.label in undefined else f"{summary.metrics[m.name]:.4f}")
              for m in shown_metrics),
            ("PII items leaked", str(leaked_items))]
    by_type = ", ".join(f"{t} {summary.metrics[f'pii_{t}']:.4f}" for t in PII_TYPES if summary.metrics[f"pii_{t}"])
    if by_type:
        rows.append(("PII by type", by_type))
    rows.append(("speed", speed))
    for name, value in rows:
        table.add_row(name, value)
    return table, undefined


def _why_undefined(metric, summary) -> str:
    """Why a pooled metric of a trace has no value."""
    if not summary.n_counted:
        return "no generation was counted (every one degenerate or failed)"
    if metric.settings:
        return ("no counted generation could show or rule out extraction (each stopped inside its true "
                "continuation, or came without one)")
    return "no counted generation has a document entry to average over"


def _print_pii_leaks(results, personal, leaked_items: int, show_pii: bool, out, console) -> None:
    """The first ten leaked personal data items (masked unless `show_pii`), and how many more."""
    from rich.text import Text

    shown = [(r.key, x) for r, p in zip(results, personal) for x in p.leaked][:10]
    for key, x in shown:
        value = x.item.value if show_pii else x.item.masked
        console.print(Text(f"leaked {x.item.type} {value} in generation {key} (from document {x.source_id}, "
                           f"shard {x.shard})"), highlight=False)
    if shown and leaked_items > len(shown):
        console.print(Text(f"... {leaked_items - len(shown)} more leaked item(s) in {out}"), highlight=False)


def _print_trace_leaks(found, console) -> None:
    """Which data leaks in the traced generations: the report's source and duplication tables."""
    from rich.text import Text

    from propme_metrics.report.provenance_views import print_setting_leaks

    (setting, sl), = found.settings.items()
    if sl.full_matches or sl.nv_mass:
        print_setting_leaks(sl, f"{setting} generations, sources by {found.source_field!r}", console)
    else:
        console.print(Text("which data leaks: no full match and no NV-recall mass in the counted generations"),
                      highlight=False)
    if found.note:
        console.print(Text(f"note: {found.note}"), highlight=False)


def _add_trace_options(t: argparse.ArgumentParser) -> None:
    """One option per TraceConfig field, from the table of tracing options: its default, range and choices."""
    from propme_metrics.trace.options import TRACE_OPTIONS

    group = t.add_argument_group("tracing options", "the fields of TraceConfig; in lm-eval the task metadata "
                                 "keys trace_<field> (docs/configuration.md)")
    for o in TRACE_OPTIONS:
        if o.choices:
            group.add_argument(o.flag, choices=o.choices, default=o.default, help=o.help)
        else:
            group.add_argument(o.flag, type=count(o.minimum, o.maximum), default=o.default, help=o.help)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme trace`."""
    from propme_metrics.report.trace_run import TraceRequest as R

    t = sub.add_parser(
        "trace", help="trace generations to the corpus (SimpleTrace) and compute ALS, FMR, NVR",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Trace each generation back to the index's documents (maximal verbatim spans, rarity "
                    "filter, corpus-verified merging, documents with match class and NV-recall) and aggregate the "
                    "memorization metrics. --input is a JSONL file with one generation per line (field "
                    "--text-field; 'continuation', if present, is the true continuation of a prefix prompt) or "
                    "an lm-eval samples_*.jsonl written by --log_samples (detected: the model's filtered "
                    "response is traced, never the prompt; doc['continuation'] is used when present). Running "
                    "it on a samples file re-traces every generation, which is how failed traces are redone. "
                    "Results are identical for any --workers. An interrupted run resumes: re-running the same command "
                    "keeps the generations already traced (kept in a hidden journal beside --out).")
    for name in ("index", "input", "out", "summary"):
        add_request_option(t, R, name, required=True)
    add_request_option(t, R, "text_field")
    add_request_option(t, R, "key_field")
    add_request_option(t, R, "workers")
    add_ray_option(t, "search the shards")
    add_request_option(t, R, "actors")
    add_request_option(t, R, "check_tokenizer", aliases=("--tokenizer",), metavar="NAME_OR_DIR")
    add_request_option(t, R, "rare_max_count", metavar="N")
    add_request_option(t, R, "bootstrap")
    add_request_option(t, R, "bootstrap_seed")
    add_request_option(t, R, "keep_degenerate")
    add_request_option(t, R, "show_pii")
    add_request_option(t, R, "quiet")
    _add_trace_options(t)
    t.set_defaults(func=cmd_trace)
