"""The `propme` command: index, prompts, trace, report, demo.

Exit codes: 0 success; 1 a check failed (e.g. `index verify`); 2 bad input or configuration;
3 a missing, corrupt or mismatched index; 4 an external build step failed; 70 an internal error
(a bug: `PROPME_DEBUG=1` shows its traceback); 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import sys

from propme_metrics.core.errors import PropMeError
from propme_metrics.core.progress import stderr_console, terminal
from propme_metrics.core.switches import env_switch
from propme_metrics.metrics import registry
from propme_metrics.prompts.settings import DEFAULT_N_PROMPTS, DEFAULT_PROMPT_SEED, PREFIX, PROMPTED_SETTINGS


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _count(minimum: int):
    """An argparse type: an integer of at least `minimum` (refused before any work otherwise)."""
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value!r}")
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


_positive, _natural = _count(1), _count(0)


def _ints(value: str) -> list[int]:
    try:
        return [int(v) for v in _csv(value)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None


# --- index -------------------------------------------------------------------------------------

def cmd_index_build(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.build import build_index
    from propme_metrics.index.sources import CorpusSource

    source = CorpusSource(args.source, text_field=args.text_field, keep_fields=_csv(args.keep_fields),
                          source_field=args.source_field, exclude_sources=_csv(args.exclude_sources),
                          revision=args.revision, config=args.config, split=args.split)
    check_outputs({"--out": args.out}, output_folders=("--out",), index_outputs=("--out",))
    if args.ray is not None:
        manifest = _build_on_ray(args, source)
    else:
        manifest = build_index(source, args.out, tokenizer=args.tokenizer, tokenizer_revision=args.tokenizer_revision,
                               num_shards=args.shards, shard_ids=args.shard_ids, token_width=args.token_width,
                               batch_size=args.batch_size, cpus=args.cpus, force=args.force,
                               check_space=not args.skip_space_check, progress=not args.quiet,
                               sa_builder=args.sa_builder,
                               announce=None if args.quiet else lambda text: print(text, file=sys.stderr, flush=True))
    state = "complete" if manifest.complete else f"shards {manifest.shard_ids} of {manifest.num_shards}"
    print(f"index {args.out}: {manifest.total_documents:,} documents, {manifest.total_tokens:,} tokens, "
          f"{manifest.token_width * 8}-bit, tokenizer {manifest.tokenizer.name} ({state})")
    excluded = manifest.build.get("excluded_documents") or {}
    if excluded:
        print("left out by --exclude-sources: " + ", ".join(f"{s} ({n:,} documents)" for s, n in excluded.items()))
    return 0


def _build_on_ray(args: argparse.Namespace, source):
    from propme_metrics.core.errors import ConfigError
    from propme_metrics.index.ray_build import build_index_on_ray

    if args.shard_ids is not None:
        raise ConfigError("--shard-ids and --ray do not go together: a Ray build runs every shard as a task",
                          "leave out --shard-ids")
    memory = None if args.task_memory is None else int(args.task_memory * 2**30)
    return build_index_on_ray(source, args.out, address=args.ray or None, tokenizer=args.tokenizer,
                              tokenizer_revision=args.tokenizer_revision, num_shards=args.shards,
                              token_width=args.token_width, batch_size=args.batch_size, cpus_per_task=args.cpus or 1,
                              memory_per_task=memory, force=args.force, check_space=not args.skip_space_check,
                              progress=not args.quiet, sa_builder=args.sa_builder)


def _add_ray_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help=f"{what} on a Ray cluster: ADDRESS (host:port) or RAY_ADDRESS, else a local one "
                             '(needs `pip install "propme[ray]"`; the index folder must be on a file system '
                             "every node sees)")


def cmd_index_info(args: argparse.Namespace) -> int:
    from propme_metrics.index.reader import index_info

    info = index_info(args.index)
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
        return 0
    m = info["manifest"]
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"PropMe index {info['path']}"), show_header=False)
    rows = [
        ("identity", m["identity"]),
        ("source", f"{m['source']['location']} ({m['source']['kind']})"
                   + (f" @ {m['source'].get('revision')}" if m["source"].get("revision") else "")),
        ("tokenizer", f"{m['tokenizer']['name']} ({m['tokenizer']['family']}, {m['tokenizer']['vocab_size']:,} "
                      f"entries, sha256 {m['tokenizer']['sha256'][:12]})"),
        ("token width", f"{m['token_width'] * 8}-bit"),
        ("documents", f"{m['total_documents']:,}"),
        ("tokens", f"{m['total_tokens']:,}"),
        ("shards", ", ".join(f"{s['id']}: {s['documents']:,} docs / {s['tokens']:,} tok" for s in m["shards"])),
        ("excluded sources", ", ".join(m["source"].get("exclude_sources", [])) or "none"),
        ("size on disk", f"{info['bytes_total'] / 2**20:,.1f} MiB"),
        ("built", f"{m['created']} with propme {m['versions'].get('propme')}, infini-gram {m['versions'].get('infini-gram')}"),
        ("sample document", f"{info['sample_document']['metadata']}: {info['sample_document']['text_start']!r}"),
    ]
    for key, value in rows:
        table.add_row(key, Text(value))
    terminal().print(table)
    return 0


def cmd_index_verify(args: argparse.Namespace) -> int:
    from propme_metrics.index.reader import verify_index

    report = verify_index(args.index, samples=args.samples, seed=args.seed, full=args.full)
    for check in report.checks:
        print(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
    print("index verified" if report.ok else "index verification FAILED")
    return 0 if report.ok else 1


def cmd_index_join(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.join import join_indexes

    check_outputs({"--out": args.out}, folders={f"part {p}": p for p in args.parts}, output_folders=("--out",),
                  index_outputs=("--out",))  # an existing index at --out is refused by the join itself
    manifest = join_indexes(args.parts, args.out)
    print(f"joined {len(args.parts)} part(s) into {args.out}: {manifest.total_documents:,} documents, "
          f"{manifest.total_tokens:,} tokens in {manifest.num_shards} shard(s)")
    return 0


def _add_index_commands(sub: argparse._SubParsersAction) -> None:
    from propme_metrics.index.format import token_layout
    from propme_metrics.index.reader import VERIFY_SAMPLES
    from propme_metrics.index.shard_writer import DEFAULT_BATCH_SIZE
    from propme_metrics.index.source_counts import DEFAULT_SOURCE_FIELD
    from propme_metrics.index.suffix_array import SA_BUILDERS
    from propme_metrics.index.tokenizer import DEFAULT_TOKENIZER

    index = sub.add_parser("index", help="build, inspect and check infini-gram indexes",
                           description="Build, inspect and check infini-gram suffix-array indexes of a corpus.")
    isub = index.add_subparsers(dest="index_command", required=True, metavar="{build,info,verify,join}")

    b = isub.add_parser("build", help="index a corpus (local JSONL/parquet or a HF dataset) with any HF tokenizer",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                        description="Tokenize a corpus and build infini-gram v4 shards with suffix arrays. "
                                    "The build runs in a hidden folder beside --out and is moved into place when "
                                    "done; re-running the same command resumes an interrupted build.")
    b.add_argument("source", help="a .jsonl/.jsonl.gz/.jsonl.zst/.parquet file, a folder of them, or a HF dataset id")
    b.add_argument("--out", required=True, help="index folder to create")
    b.add_argument("--tokenizer", default=None, help="HF tokenizer id or local folder "
                   f"(default: {DEFAULT_TOKENIZER}, the ungated Llama-2 tokenizer)")
    b.add_argument("--tokenizer-revision", default=None, help="revision of a hub tokenizer")
    b.add_argument("--revision", default=None, help="dataset revision (commit or tag) of a HF dataset")
    b.add_argument("--config", default=None, help="dataset configuration of a HF dataset")
    b.add_argument("--split", default="train", help="dataset split of a HF dataset")
    b.add_argument("--text-field", default="text", help="field holding the document text")
    b.add_argument("--keep-fields", default="id,source", help="comma-separated fields stored as document metadata")
    b.add_argument("--source-field", default=DEFAULT_SOURCE_FIELD, help="field naming a document's source, for --exclude-sources")
    b.add_argument("--exclude-sources", default="", help="comma-separated sources to leave out "
                   "(the DFM Decoder skipped depbank,jvj,nordjyllandnews,synne of Dynaword 1.2.12)")
    b.add_argument("--shards", type=_positive, default=1, help="number of shards (document i goes to shard i mod N)")
    b.add_argument("--shard-ids", type=_ints, default=None, help="build only these shards (e.g. 0,1), "
                   "to spread a build over machines; combine the parts with `propme index join`")
    b.add_argument("--token-width", type=int, choices=(2, 4), default=None,
                   help=f"bytes per token id (default: 2 if every id <= {token_layout(2).max_id}, else 4)")
    b.add_argument("--batch-size", type=_positive, default=DEFAULT_BATCH_SIZE, help="documents per tokenizer batch")
    b.add_argument("--cpus", type=_positive, default=None, help="processes for the suffix-array build (default: all; "
                   "with --ray: CPUs per shard task, default 1)")
    b.add_argument("--sa-builder", choices=SA_BUILDERS, default="auto",
                   help="suffix-array builder: libdivsufsort (in memory, fast on any text), rust_indexing (in "
                   "parts, for shards larger than half the RAM; slow on long repeats), or auto (the first when "
                   "the shard fits in half the RAM)")
    _add_ray_option(b, "build one shard per task")
    b.add_argument("--task-memory", type=float, default=None, metavar="GIB",
                   help="with --ray: memory each shard task declares (default: from the corpus size)")
    b.add_argument("--force", action="store_true", help="replace the PropMe index that --out holds (never "
                   "anything else: a folder with other files is refused)")
    b.add_argument("--skip-space-check", action="store_true", help="do not check free disk space first")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=cmd_index_build)

    i = isub.add_parser("info", help="show an index's manifest, sizes and a sample document")
    i.add_argument("index", help="index folder")
    i.add_argument("--json", action="store_true", help="print JSON instead of a table")
    i.set_defaults(func=cmd_index_info)

    v = isub.add_parser("verify", help="check an index: sizes, suffix-array order, documents, unigram counts")
    v.add_argument("index", help="index folder")
    v.add_argument("--samples", type=_positive, default=VERIFY_SAMPLES, help="suffix-array positions to check per shard")
    v.add_argument("--seed", type=_natural, default=0, help="seed of the sampled positions")
    v.add_argument("--full", action="store_true", help="also check every file's content checksum (reads the "
                   "whole index; opening an index only checks sizes and sampled checksums)")
    v.set_defaults(func=cmd_index_verify)

    j = isub.add_parser("join", help="join shard sets built separately with --shard-ids into one index")
    j.add_argument("parts", nargs="+", help="index folders, each holding some shards of the same build")
    j.add_argument("--out", required=True, help="new index folder")
    j.set_defaults(func=cmd_index_join)


# --- prompts -----------------------------------------------------------------------------------

def cmd_prompts_build(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.reader import open_index
    from propme_metrics.prompts.prompt_set import (
        SPAN_THRESHOLD,
        build_prompt_set,
        eligible_documents,
        overlap_profile,
        sidecar_path,
        write_prompt_set,
    )

    check_outputs({"--out": args.out, "its sidecar manifest": sidecar_path(args.out)},
                  {"--candidates": args.candidates}, {"--index": args.index})
    index = open_index(args.index)
    ps = build_prompt_set(index, args.setting, n=args.n, seed=args.seed, language=args.language,
                          candidates=args.candidates, progress=not args.quiet)
    out = write_prompt_set(ps, args.out)
    rows = [(f"{args.setting} ({ps.manifest['source']['kind']})", ps.manifest["overlap_profile"])]
    if args.setting != PREFIX:
        n_ref = min(args.n, len(eligible_documents(index, ps.manifest["min_doc_tokens"])))
        ref = (overlap_profile(build_prompt_set(index, PREFIX, n=n_ref, seed=args.seed).records)
               if n_ref else None)
        rows.append(("prefix (reference)", ref))
    table = Table(title=f"overlap with index {index.manifest.identity} (longest span in tokens)")
    for col in ("prompt set", "n", "mean span", "max span", f"span >= {SPAN_THRESHOLD}"):
        table.add_column(col, justify="left" if col == "prompt set" else "right", no_wrap=True)
    for name, prof in rows:
        if prof is None:
            table.add_row(Text(name), "0", "-", "-", "-  (no document is long enough)")
        else:
            table.add_row(Text(name), str(prof["n"]), f"{prof['mean_longest_span']:.2f}", str(prof["max_longest_span"]),
                          f"{prof['share_span_ge_10']:.0%}")
    console = terminal()
    console.print(table)
    rejected = ps.manifest["rejected"]
    if args.setting != PREFIX:
        console.print(f"{len(rejected)} candidate(s) rejected" + (":" if rejected else ""), highlight=False)
        for r in rejected[:5]:
            console.print(Text(f"  {r['id']}: {r['reason']}: {r['prompt'][:80]!r}"), highlight=False)
        if len(rejected) > 5:
            console.print(Text(f"  ... and {len(rejected) - 5} more (see {sidecar_path(out).name})"), highlight=False)
    console.print(Text(f"wrote {len(ps.records)} {args.setting} prompts to {out} (manifest {sidecar_path(out).name})"),
                  highlight=False)
    return 0


def _add_prompts_commands(sub: argparse._SubParsersAction) -> None:
    prompts = sub.add_parser("prompts", help="build prompt sets (generic, specific, prefix) checked against an index",
                             description="Build the prompt sets of the prompted settings, tied to an index by a "
                                         "sidecar manifest: generic and specific (propensity; the other propensity "
                                         "settings, unconditional and minimal_cue, are prompt-free) and prefix "
                                         "(capability).")
    psub = prompts.add_subparsers(dest="prompts_command", required=True, metavar="{build}")
    b = psub.add_parser("build", help="build a prompt file and its sidecar manifest",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                        description="prefix: the first 50 tokens of sampled documents of at least 100 tokens "
                                    "(with the next 50 as the true continuation). generic/specific: prompts from "
                                    "--candidates or the built-in sets, minus any that occur verbatim in the "
                                    "index, spread evenly over domains. Prints the set's overlap profile next "
                                    "to that of a prefix set of the same index.")
    b.add_argument("--index", required=True, help="index folder")
    b.add_argument("--setting", required=True, choices=PROMPTED_SETTINGS, help="prompt setting")
    b.add_argument("--out", required=True, help="prompt file to write (FILE.jsonl; sidecar FILE.jsonl.manifest.json)")
    b.add_argument("--n", type=_positive, default=DEFAULT_N_PROMPTS, help="number of prompts")
    b.add_argument("--seed", type=_natural, default=DEFAULT_PROMPT_SEED, help="sampling seed")
    b.add_argument("--language", default=None, help="prompt language (da, en); required for the built-in sets")
    b.add_argument("--candidates", default=None, help="candidate prompts: plain text (one per line), JSONL "
                   "with a \"prompt\" field (optional id, domain, language), or Tatoeba's sentence export "
                   "(id<TAB>lang<TAB>text; filtered by --language); default: the built-in set")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=cmd_prompts_build)


def cmd_demo(args: argparse.Namespace) -> int:
    from propme_metrics.demo.run import run_demo

    run_demo(args.out, small=args.small, progress=not args.quiet)
    return 0


def cmd_tasks_new(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_tasks.custom import write_corpus_tasks

    check_outputs({"--out": args.out}, folders={"--index": args.index}, output_folders=("--out",))
    for path in write_corpus_tasks(args.name, args.index, args.language, args.out):
        print(path)
    print(f"run it with: lm_eval --include_path {args.out} --tasks propme_{args.name} ...")
    return 0


def cmd_tasks_path(args: argparse.Namespace) -> int:
    from propme_tasks.discovery import tasks_path

    print(tasks_path())
    return 0


# --- report ------------------------------------------------------------------------------------

def cmd_report(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.report.assemble import build_report
    from propme_metrics.report.console import print_summary
    from propme_metrics.report.contents import IncompleteReportError

    check_outputs({"--out": args.out}, {f"RUN {r}": r for r in args.runs} | {f"--retraced {r}": r for r in args.retraced},
                  output_folders=("--out",))
    from pathlib import Path

    from propme_metrics.cli.contamination import report_contamination

    contamination = report_contamination(args, Path(args.out) / "contamination")
    try:
        report = build_report(args.runs, args.out, bootstrap=args.bootstrap, seed=args.seed,
                              pm_metrics=args.pm_metrics, separate=args.separate, html=not args.no_html,
                              html_docs_per_span=args.html_docs, html_snippet_chars=args.html_snippet_chars,
                              retraced=args.retraced, show_pii=args.show_pii,
                              discoverable_n=args.discoverable_n, discoverable_p=args.discoverable_p,
                              retraced_other_settings=args.retraced_other_settings,
                              rare_max_count=args.rare_max_count, pairing=args.pairing,
                              contamination=contamination)
    except IncompleteReportError as exc:  # written, but with undefined parts: show it, then exit 2
        if exc.report is not None:
            print_summary(exc.report)
        raise
    print_summary(report)
    return 0


def _add_report_command(sub: argparse._SubParsersAction) -> None:
    from propme_metrics.metrics.compare import PAIRINGS
    from propme_metrics.metrics.leaks import RARE_MAX_COUNT
    from propme_metrics.metrics.likelihood import DISCOVERABLE_N, DISCOVERABLE_P
    from propme_metrics.metrics.pm import DEFAULT_BOOTSTRAP
    from propme_metrics.report.defaults import HTML_DOCS_PER_SPAN, HTML_SNIPPET_CHARS

    r = sub.add_parser("report", help="PM scores with intervals, leaderboard tables, plots and an HTML trace explorer",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Read lm-eval runs of PropMe's tasks (made with --log_samples), compute the base "
                                   "metrics per setting and PM (each propensity setting vs prefix) with 95% bootstrap "
                                   "intervals over prompts, and write leaderboard.csv/.json/.md, PNG plots and a "
                                   "self-contained report.html into --out.")
    r.add_argument("runs", nargs="+", metavar="RUN", help="lm-eval --output_path folder (searched recursively for "
                   "results_*.json) or a results_*.json file")
    r.add_argument("--out", required=True, help="report folder to write")
    r.add_argument("--bootstrap", type=_natural, default=DEFAULT_BOOTSTRAP, help="bootstrap resamples (0: no bootstrap intervals)")
    r.add_argument("--seed", type=_natural, default=0, help="bootstrap seed (same inputs and seed, same intervals)")
    r.add_argument("--pm-metrics", type=_csv, default=",".join(registry.DEFAULT_PM_METRICS),
                   help=f"comma-separated metrics to compute PM for ({', '.join(registry.PM_METRICS)})")
    r.add_argument("--separate", action="store_true", help="report runs of different index versions or prompt "
                   "sets of one corpus apart (as <corpus>_set1, <corpus>_set2, ...) instead of refusing them")
    r.add_argument("--retraced", action="append", default=[], metavar="SUMMARY.json",
                   help="a `propme trace` summary made from one of the runs' samples files: its results replace "
                        "that file's traces (how failed traces are redone); repeat for several files")
    r.add_argument("--retraced-other-settings", action="store_true",
                   help="accept --retraced summaries traced with other settings (--mode, spans, ...) than the "
                        "runs; PM then mixes the two (refused otherwise)")
    r.add_argument("--no-html", action="store_true", help="skip report.html")
    r.add_argument("--html-docs", type=_natural, default=HTML_DOCS_PER_SPAN, help="source documents shown per final "
                   "span in report.html (the best matches; more make a bigger page)")
    r.add_argument("--html-snippet-chars", type=_natural, default=HTML_SNIPPET_CHARS, help="characters of document "
                   "context shown on each side of a span in report.html")
    r.add_argument("--show-pii", action="store_true", help="show leaked personal data unmasked in report.html "
                   "(default: masked, e.g. j***@e***.dk; the leaderboard never holds values)")
    r.add_argument("--discoverable-n", metavar="N,N,...", default=None,
                   help="sample counts n of the likelihood subtasks' (n, p) curve (default: each run's "
                        f"discoverable_n metadata, else {','.join(map(str, DISCOVERABLE_N))})")
    r.add_argument("--discoverable-p", metavar="P", default=None,
                   help="probability p of (n, p)-discoverability, between 0 and 1 (default: each run's "
                        f"discoverable_p metadata, else {DISCOVERABLE_P})")
    r.add_argument("--rare-max-count", type=_positive, default=None, metavar="N",
                   help="fmr_rare counts a full match whose text occurs at most N times in the corpus (default: "
                        f"the runs' rare_max_count metadata, else {RARE_MAX_COUNT})")
    r.add_argument("--pairing", choices=PAIRINGS, default="all", help="which models the paired comparisons "
                   "(comparisons.json) compare: every pair, or consecutive revisions of each model (input order)")
    r.add_argument("--index", default=None, help="index for the contamination section of the runs' other "
                   "benchmark tasks (default: the index PropMe's tasks traced against)")
    r.add_argument("--include-path", default=None, help="folder of local lm-eval task YAML the runs' benchmark "
                   "tasks come from (lm-eval's --include_path)")
    r.set_defaults(func=cmd_report)


# --- trace -------------------------------------------------------------------------------------

def cmd_trace(args: argparse.Namespace) -> int:
    import time
    from dataclasses import fields, replace
    from pathlib import Path

    from rich.table import Table
    from rich.text import Text

    from propme_metrics.core.checksums import file_digest
    from propme_metrics.core.errors import ConfigError
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.reader import open_index
    from propme_metrics.metrics.values import summarize
    from propme_metrics.trace.inputs import read_generations
    from propme_metrics.trace.pii import PII_TYPES
    from propme_metrics.trace.result import TraceConfig
    from propme_metrics.trace.runner import finish, job_fingerprint, trace_resumable
    from propme_metrics.trace.summary import summary_record, write_trace_outputs
    from propme_metrics.trace.tracer import Tracer

    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    try:
        config = TraceConfig(**{f.name: getattr(args, f.name) for f in fields(TraceConfig)})
    except ValueError as exc:
        raise ConfigError(f"bad tracing parameters: {exc}") from None
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
    from propme_metrics.trace.pii import leaks

    personal = [leaks(r) for r in results]
    summary = summarize(results, drop_degenerate=not args.keep_degenerate, pii=personal,
                        rare_max_count=args.rare_max_count)
    leaked_items = int(summary.sums["pii_items"][0])  # over the counted generations
    from propme_metrics.report.trace_leaks import leaks_record, trace_leaks

    leaks_found = trace_leaks(generations, results, index.path, manifest.identity, args.rare_max_count,
                              args.bootstrap, args.seed)
    record = summary_record(summary.to_dict(), leaked_items, config, not args.keep_degenerate, args.rare_max_count,
                            index, args.input,
                            fmt, args.text_field, out, leaks=leaks_record(leaks_found))
    write_trace_outputs(out, summary_path, results, personal, record, show_pii=args.show_pii)
    finish(out)

    table = Table(title=Text(f"PropMe trace: {len(results)} generation(s) of {args.input} "
                             f"against index {manifest.identity}"))
    table.add_column("metric")
    table.add_column("value", justify="right")
    shown_metrics = [m for m in registry.METRICS if (m.name == "pii" or not m.name.startswith("pii_"))
                     and not (m.settings and summary.metrics[m.name] is None)]  # extraction: prefix runs only
    undefined = [m.label for m in shown_metrics if registry.is_undefined(summary.metrics[m.name])]
    rows = [("generations counted", f"{summary.n_counted} of {summary.n_generations} "
                                    f"({summary.n_degenerate} degenerate, {summary.n_failed} failed)"),
            *((m.label, registry.UNDEFINED.console if m.label in undefined else f"{summary.metrics[m.name]:.4f}")
              for m in shown_metrics),
            ("PII items leaked", str(leaked_items))]
    by_type = ", ".join(f"{t} {summary.metrics[f'pii_{t}']:.4f}" for t in PII_TYPES if summary.metrics[f"pii_{t}"])
    if by_type:
        rows.append(("PII by type", by_type))
    rows.append(("speed", f"{(len(results) - resumed) / seconds:,.1f} generations/s" if seconds > 0 else "-"))
    for name, value in rows:
        table.add_row(name, value)
    console = terminal()
    console.print(table)
    shown = [(r.key, x) for r, p in zip(results, personal) for x in p.leaked][:10]
    for key, x in shown:
        value = x.item.value if args.show_pii else x.item.masked
        console.print(Text(f"leaked {x.item.type} {value} in generation {key} (from document {x.source_id}, "
                           f"shard {x.shard})"), highlight=False)
    if shown and leaked_items > len(shown):
        console.print(Text(f"... {leaked_items - len(shown)} more leaked item(s) in {out}"), highlight=False)
    _print_trace_leaks(leaks_found, console)
    if undefined:
        why = ("no generation was counted (every one degenerate or failed)" if not summary.n_counted else
               "no counted generation has a document entry to average over")
        console.print(Text(f"{registry.UNDEFINED.console}: {', '.join(undefined)} undefined (null in {summary_path.name}, "
                           f"not 0): {why}"), highlight=False)
    console.print(Text(f"wrote {out} and {summary_path}"), highlight=False)
    if summary.n_failed:
        stderr_console.print(f"[yellow]warning:[/] tracing failed for {summary.n_failed} generation(s) (see their "
                             "'error' field); they are left out of the metrics", highlight=False)
    return 0


#: `propme trace --bootstrap`: fewer resamples than `propme report`'s, because the leak tables come on top
#: of every trace (benchmarks/trace_leaks.py: about 0.17 of the tracing CPU time at 1,000, 0.77 at 10,000,
#: on a small index where tracing is fast)
TRACE_LEAK_BOOTSTRAP = 1000


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


def _add_trace_command(sub: argparse._SubParsersAction) -> None:
    from propme_metrics.metrics.leaks import RARE_MAX_COUNT
    from propme_metrics.trace.result import RARITY_KINDS, TRACE_MODES, TraceConfig

    d = TraceConfig()
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
    t.add_argument("--mode", choices=TRACE_MODES, default=d.mode,
                   help="mixed (the published default): whole-generation lookup, spans of 4+ tokens, no sentence "
                        "rules; text: sentence and whole-word rules")
    t.add_argument("--workers", type=int, default=1, help="processes tracing in parallel (with --ray: "
                   "generations traced concurrently by driver threads)")
    _add_ray_option(t, "search the shards")
    t.add_argument("--actors", type=int, default=None, help="with --ray: actors holding the shards "
                   "(default: one per free CPU of the cluster, at most one per shard)")
    t.add_argument("--check-tokenizer", "--tokenizer", dest="check_tokenizer", default=None, metavar="NAME_OR_DIR",
                   help="check that this tokenizer (hub id or folder) is the index's; error if not (--tokenizer: "
                        "the older name)")
    t.add_argument("--span-divisor", type=_positive, default=d.span_divisor,
                   help="keep the K = ceil(L / this) rarest spans of a generation of L tokens")
    t.add_argument("--docs-per-span", type=_positive, default=d.docs_per_span,
                   help="documents retrieved per kept span (a seeded sample when more contain it)")
    t.add_argument("--window-factor", type=_positive, default=d.window_factor,
                   help="document window: this times L tokens around each occurrence (the engine's max_disp_len)")
    t.add_argument("--max-anchors", type=_positive, default=d.max_anchors,
                   help="mixed mode: long spans tried to find a full copy when the generation's tokens do not occur")
    t.add_argument("--rarity", choices=RARITY_KINDS, default=d.rarity,
                   help="rarity score: sum of log-probabilities, or the published product (underflows on long spans)")
    t.add_argument("--seed", type=_natural, default=d.seed,
                   help="document samples: random.Random(f'{seed}:{generation}') per generation")
    t.add_argument("--snippet-chars", type=_natural, default=d.snippet_chars,
                   help="characters of document context kept on each side of a span in the results")
    t.add_argument("--max-tokens", type=_positive, default=d.max_tokens,
                   help="longer generations are not traced but reported as failed, with the reason")
    t.add_argument("--rare-max-count", type=_positive, default=RARE_MAX_COUNT, metavar="N",
                   help="fmr_rare counts a full match whose text occurs at most N times in the corpus")
    t.add_argument("--bootstrap", type=_natural, default=TRACE_LEAK_BOOTSTRAP,
                   help="bootstrap resamples of the leak tables' enrichment intervals (seeded with --seed; 0: none)")
    t.add_argument("--keep-degenerate", action="store_true",
                   help="count degenerate generations (repetitive junk) in the metrics instead of dropping them")
    t.add_argument("--show-pii", action="store_true",
                   help="write and print leaked personal data unmasked (default: masked, e.g. j***@e***.dk)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_trace)


def _add_demo_and_tasks_commands(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("demo", help="run the whole job offline on a generated corpus and a tiny model",
                       description="Generate a bilingual corpus, index it, train a tiny GPT-2 that memorizes its "
                                   "planted documents, build the three prompt sets, run the propme_demo tasks "
                                   "through lm-eval and write the report. Finished stages are reused on a re-run.")
    d.add_argument("--out", default="propme-demo", help="folder for every artifact")
    d.add_argument("--small", action="store_true", help="CI size: fewer prompts, shorter generations")
    d.add_argument("--quiet", action="store_true", help="no progress bars")
    d.set_defaults(func=cmd_demo)
    tn = sub.add_parser("tasks-new", help="write lm-eval task YAML propme_<name> for your own corpus index",
                        description="Write a task group propme_<name> (generic, specific, prefix, unconditional, minimal_cue) that traces "
                                    "against your index; pass the folder to lm_eval --include_path.")
    tn.add_argument("name", help="corpus name: the tasks are called propme_<name>_<setting>")
    tn.add_argument("--index", required=True, help="index folder built with `propme index build`")
    tn.add_argument("--language", required=True, help="language of the built-in generic/specific prompts (da, en)")
    tn.add_argument("--out", required=True, help="folder for the YAML files")
    tn.set_defaults(func=cmd_tasks_new)
    tp = sub.add_parser("tasks-path", help="print the folder of PropMe's lm-eval task YAML (for --include_path)")
    tp.set_defaults(func=cmd_tasks_path)


# --- parser and entry point --------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="propme",
        description="PropMe: does a language model reproduce its training data under ordinary prompts "
                    "(propensity), not only under prefix attacks (capability)? Build an infini-gram index "
                    "of the training corpus, make prompt sets, trace generations with SimpleTrace, and "
                    "report PM scores.",
        epilog="Exit codes: 0 ok, 1 a check failed, 2 bad input or configuration, 3 missing/corrupt/"
               "mismatched index, 4 external build step failed, 70 internal error (PROPME_DEBUG=1 shows the "
               "traceback), 130 interrupted.")
    from propme_metrics import __version__

    parser.add_argument("--version", action="version", version=f"propme {__version__}")
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{index,prompts,trace,report,compare,contamination,demo,tasks-new,tasks-path}")
    _add_index_commands(sub)
    _add_prompts_commands(sub)
    _add_trace_command(sub)
    _add_report_command(sub)
    from propme_metrics.cli.compare import add_compare_command

    add_compare_command(sub, _natural, _csv)
    _add_demo_and_tasks_commands(sub)
    from propme_metrics.cli.contamination import add_contamination_command

    add_contamination_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "tokenizer", "unset") is None:
        from propme_metrics.index.tokenizer import DEFAULT_TOKENIZER

        args.tokenizer = DEFAULT_TOKENIZER
    try:
        return args.func(args)
    except PropMeError as exc:
        return _report_error(exc.message, exc.hint, exc.exit_code)
    except KeyboardInterrupt:
        stderr_console.print("[bold red]interrupted[/]: nothing was lost; re-run the same command to resume")
        return 130
    except Exception as exc:
        from propme_metrics.core.memory import is_out_of_memory, out_of_memory

        if not is_out_of_memory(exc):
            return _unexpected(args, exc)
        error = out_of_memory(f"running `propme {args.command}`")
        # plain writes: formatting with rich could need more memory than is left
        sys.stderr.write(f"error: {error.message}\n  hint: {error.hint}\n")
        return error.exit_code


def _unexpected(args: argparse.Namespace, exc: Exception) -> int:
    """An exception that is not PropMe's, nor running out of memory: a file that cannot be read or
    written is the environment; anything else is a bug (one paragraph, the traceback on request)."""
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return _report_error(f"cannot read or write{where}: {exc.strerror or exc}",
                             "check free disk space, permissions and the path, then re-run the same command", 2)
    if env_switch("PROPME_DEBUG", default=False):
        raise exc
    return _report_error(
        f"`propme {args.command}` failed unexpectedly ({type(exc).__module__}.{type(exc).__name__}: "
        f"{str(exc)[:300] or 'no message'}). This is a bug in PropMe, not in your input.",
        "re-run with PROPME_DEBUG=1 to see the traceback, and report it with the command you ran", EXIT_BUG)


#: exit status of an unexpected internal error (EX_SOFTWARE of sysexits.h)
EXIT_BUG = 70


def _report_error(message: str, hint: str | None, code: int) -> int:
    try:
        _print_error(message, hint)
    except MemoryError:  # out of memory: rich could not lay the message out; plain text needs none
        sys.stderr.write(f"error: {message}\n" + (f"  hint: {hint}\n" if hint else ""))
    return code


def _print_error(message: str, hint: str | None) -> None:
    from rich.text import Text

    stderr_console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)
    if hint:
        stderr_console.print(Text.assemble(("hint:", "yellow"), " ", hint), highlight=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
