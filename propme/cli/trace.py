"""`propme trace`: trace generations to the corpus (SimpleTrace) and compute the metrics.

The tracing options are made from the table of tracing options (`trace/options.py`), one per
`TraceConfig` field, so they are checked as the lm-eval tasks check their `trace_*` keys.
"""
from __future__ import annotations

import argparse

from propme.cli.arguments import add_ray_option, count, natural, positive
from propme_metrics.core.errors import ExitCode
from propme_metrics.core.progress import stderr_console, terminal
from propme_metrics.metrics import registry

#: `propme trace --bootstrap`: fewer resamples than `propme report`'s, because the leak tables come on top
#: of every trace (benchmarks/trace_leaks.py: about 0.17 of the tracing CPU time at 1,000, 0.77 at 10,000,
#: on a small index where tracing is fast)
TRACE_LEAK_BOOTSTRAP = 1000


def cmd_trace(args: argparse.Namespace) -> int:
    import time
    from dataclasses import replace
    from pathlib import Path

    from rich.text import Text

    from propme_metrics.core.checksums import file_digest
    from propme_metrics.core.errors import ConfigError
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.reader import open_index
    from propme_metrics.metrics.values import summarize
    from propme_metrics.report.trace_leaks import leaks_record, trace_leaks, trace_robustness, traced_task
    from propme_metrics.runs.generations import read_generations
    from propme_metrics.trace.options import TRACE_OPTIONS
    from propme_metrics.trace.pii import leaks
    from propme_metrics.trace.result import TraceConfig
    from propme_metrics.trace.runner import finish, job_fingerprint, trace_resumable
    from propme_metrics.trace.summary import summary_record, write_trace_outputs
    from propme_metrics.trace.tracer import Tracer

    config = TraceConfig(**{o.name: getattr(args, o.name) for o in TRACE_OPTIONS})  # in range: the parser checked
    check_outputs({"--out": args.out, "--summary": args.summary}, {"--input": args.input},
                  {"--index": args.index})
    generations, fmt = read_generations(args.input, text_field=args.text_field, key_field=args.key_field)
    index = open_index(args.index)
    manifest = index.manifest
    if args.check_tokenizer:
        index.check_tokenizer(args.check_tokenizer)
    out, summary_path = Path(args.out), Path(args.summary)
    try:
        for path in (out, summary_path):
            path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder for the results: {exc}") from None
    if args.ray is not None:
        from propme_metrics.trace.ray_search import ray_tracer

        tracer = ray_tracer(index, config, address=args.ray or None, actors=args.actors)
    else:
        tracer = Tracer(index, config)
    fingerprint = job_fingerprint(file_digest(args.input), manifest.identity, config.to_dict(), generations)
    started = time.time()
    results, resumed = trace_resumable(tracer, generations, out, fingerprint, workers=args.workers,
                                       progress=not args.quiet)
    seconds = time.time() - started
    results = [r if g.missing is None else replace(r, error=g.missing) for r, g in zip(results, generations)]
    if resumed:
        stderr_console.print(f"resumed: {resumed} of {len(generations)} generation(s) were traced by an "
                             "interrupted run of this command and kept", highlight=False)
    personal = [leaks(r) for r in results]
    summary = summarize(results, drop_degenerate=not args.keep_degenerate, pii=personal,
                        rare_max_count=args.rare_max_count)
    leaked_items = int(summary.sums["pii_items"][0])  # over the counted generations
    task = traced_task(generations, results, index.path, manifest.identity, args.rare_max_count,
                       summary.per_generation)
    leaks_found = trace_leaks(task, args.bootstrap, args.seed)
    robust = trace_robustness(task, index, args.bootstrap, args.seed)
    record = summary_record(summary.to_dict(), leaked_items, config, not args.keep_degenerate, args.rare_max_count,
                            index, args.input, fmt, args.text_field, out, leaks=leaks_record(leaks_found),
                            robustness=robust.to_dict())
    write_trace_outputs(out, summary_path, results, personal, record, show_pii=args.show_pii)
    finish(out)

    speed = f"{(len(results) - resumed) / seconds:,.1f} generations/s" if seconds > 0 else "-"
    console = terminal()
    with_continuation = any(g.continuation is not None for g in generations)
    table, undefined = metrics_table(f"PropMe trace: {len(results)} generation(s) of {args.input} against index "
                                     f"{manifest.identity}", summary, leaked_items, speed, with_continuation)
    console.print(table)
    _print_pii_leaks(results, personal, leaked_items, args.show_pii, out, console)
    _print_trace_leaks(leaks_found, console)
    for why in dict.fromkeys(undefined.values()):  # one line per reason, naming its metrics
        labels = ", ".join(label for label, reason in undefined.items() if reason == why)
        console.print(Text(f"{registry.UNDEFINED.console}: {labels} undefined (null in {summary_path.name}, not 0): "
                           f"{why}"), highlight=False)
    console.print(Text(f"wrote {out} and {summary_path}"), highlight=False)
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

    from propme_metrics.report.leak_views import print_setting_leaks

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
    from propme_metrics.metrics.leaks import RARE_MAX_COUNT

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
    t.add_argument("--index", required=True, help="index folder")
    t.add_argument("--input", required=True, help="generations: JSONL or an lm-eval samples_*.jsonl")
    t.add_argument("--out", required=True, help="RESULTS.jsonl to write: one line per generation")
    t.add_argument("--summary", required=True, help="SUMMARY.json to write: metrics, parameters, index identity")
    t.add_argument("--text-field", default="completion", help="field of a JSONL row holding the generation")
    t.add_argument("--key-field", default=None, help="field naming a generation (default: key, id or doc_id if "
                   "present, else the line number)")
    t.add_argument("--workers", type=positive, default=1, help="processes tracing in parallel, forked only when "
                   "the rest of the job pays for them once its first generations are traced here (with --ray: "
                   "generations traced concurrently by driver threads)")
    add_ray_option(t, "search the shards")
    t.add_argument("--actors", type=positive, default=None, help="with --ray: actors holding the shards "
                   "(default: one per free CPU of the cluster, at most one per shard)")
    t.add_argument("--check-tokenizer", "--tokenizer", dest="check_tokenizer", default=None, metavar="NAME_OR_DIR",
                   help="check that this tokenizer (hub id or folder) is the index's; error if not (--tokenizer: "
                        "the older name)")
    t.add_argument("--rare-max-count", type=positive, default=RARE_MAX_COUNT, metavar="N",
                   help="fmr_rare counts a full match whose text occurs at most N times in the corpus")
    t.add_argument("--bootstrap", type=natural, default=TRACE_LEAK_BOOTSTRAP,
                   help="bootstrap resamples of the leak tables' enrichment intervals (seeded with --seed; 0: none)")
    t.add_argument("--keep-degenerate", action="store_true",
                   help="count degenerate generations (repetitive junk) in the metrics instead of dropping them")
    t.add_argument("--show-pii", action="store_true",
                   help="write and print leaked personal data unmasked (default: masked, e.g. j***@e***.dk)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_trace_options(t)
    t.set_defaults(func=cmd_trace)
