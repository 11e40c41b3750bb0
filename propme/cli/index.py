"""`propme index build|adopt|info|verify|join`: build, adopt, inspect and check infini-gram indexes."""
from __future__ import annotations

import argparse
import json
import sys

from propme.cli.arguments import add_ray_option, csv, ints, positive, seed
from propme_metrics.core.errors import ExitCode
from propme_metrics.core.progress import terminal


def cmd_index_build(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.build import build_index
    from propme_metrics.index.sources import CorpusSource
    from propme_metrics.index.tokenizer import DEFAULT_TOKENIZER

    if args.tokenizer is None:
        args.tokenizer = DEFAULT_TOKENIZER
    source = CorpusSource(args.source, text_field=args.text_field, keep_fields=csv(args.keep_fields),
                          source_field=args.source_field, exclude_sources=csv(args.exclude_sources),
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
    return ExitCode.OK


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


def cmd_index_adopt(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.adopt import adopt_index

    check_outputs({"--out": args.out}, folders={f"IG_DIR {d}": d for d in args.ig_dirs}, output_folders=("--out",),
                  index_outputs=("--out",))
    manifest = adopt_index(args.ig_dirs, args.out, args.tokenizer, tokenizer_revision=args.tokenizer_revision,
                           source_field=args.source_field, force=args.force, progress=not args.quiet)
    adopted = manifest.adopted or {}
    for check in adopted.get("checks", []):
        print(f"ok   {check['name']}: {check['detail']}")
    if adopted.get("computed"):
        print(f"computed (the infini-gram folder lacks them): {', '.join(adopted['computed'])}")
    print(f"index {args.out}: adopted {', '.join(adopted.get('from', []))}: {manifest.total_documents:,} documents, "
          f"{manifest.total_tokens:,} tokens in {manifest.num_shards} shard(s), {manifest.token_width * 8}-bit, "
          f"tokenizer {manifest.tokenizer.name}; pass it as --index {args.out}")
    return ExitCode.OK


def cmd_index_info(args: argparse.Namespace) -> int:
    from propme_metrics.index.reader import index_info

    info = index_info(args.index)
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
    else:
        terminal().print(info_table(info))
    return ExitCode.OK


def info_table(info: dict):
    """`propme index info`'s table: the manifest's identity, source, tokenizer, sizes and a sample document."""
    from rich.table import Table
    from rich.text import Text

    m = info["manifest"]
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
        *([("adopted from", f"{', '.join(m['adopted']['from'])} (computed: {', '.join(m['adopted']['computed']) or 'nothing'})")]
          if m.get("adopted") else []),
        ("sample document", f"{info['sample_document']['metadata']}: {info['sample_document']['text_start']!r}"),
    ]
    for key, value in rows:
        table.add_row(key, Text(value))
    return table


def cmd_index_verify(args: argparse.Namespace) -> int:
    from propme_metrics.index.reader import verify_index

    report = verify_index(args.index, samples=args.samples, seed=args.seed, full=args.full)
    for check in report.checks:
        print(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
    print("index verified" if report.ok else "index verification FAILED")
    return ExitCode.OK if report.ok else ExitCode.CHECK_FAILED


def cmd_index_join(args: argparse.Namespace) -> int:
    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.join import join_indexes

    check_outputs({"--out": args.out}, folders={f"part {p}": p for p in args.parts}, output_folders=("--out",),
                  index_outputs=("--out",))  # an existing index at --out is refused by the join itself
    manifest = join_indexes(args.parts, args.out)
    print(f"joined {len(args.parts)} part(s) into {args.out}: {manifest.total_documents:,} documents, "
          f"{manifest.total_tokens:,} tokens in {manifest.num_shards} shard(s)")
    return ExitCode.OK


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme index` and its subcommands build, info, verify and join."""
    from propme_metrics.index.format import token_layout
    from propme_metrics.index.reader import VERIFY_SAMPLES
    from propme_metrics.index.shard_writer import DEFAULT_BATCH_SIZE
    from propme_metrics.index.source_counts import DEFAULT_SOURCE_FIELD
    from propme_metrics.index.suffix_array import SA_BUILDERS
    from propme_metrics.index.tokenizer import DEFAULT_TOKENIZER

    index = sub.add_parser("index", help="build, adopt, inspect and check infini-gram indexes",
                           description="Build, adopt, inspect and check infini-gram suffix-array indexes of a corpus.")
    isub = index.add_subparsers(dest="index_command", required=True, metavar="{build,adopt,info,verify,join}")

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
    b.add_argument("--shards", type=positive, default=1, help="number of shards (document i goes to shard i mod N)")
    b.add_argument("--shard-ids", type=ints, default=None, help="build only these shards (e.g. 0,1), "
                   "to spread a build over machines; combine the parts with `propme index join`")
    b.add_argument("--token-width", type=int, choices=(2, 4), default=None,
                   help=f"bytes per token id (default: 2 if every id <= {token_layout(2).max_id}, else 4)")
    b.add_argument("--batch-size", type=positive, default=DEFAULT_BATCH_SIZE, help="documents per tokenizer batch")
    b.add_argument("--cpus", type=positive, default=None, help="processes for the suffix-array build (default: all; "
                   "with --ray: CPUs per shard task, default 1)")
    b.add_argument("--sa-builder", choices=SA_BUILDERS, default="auto",
                   help="suffix-array builder: libdivsufsort (in memory, fast on any text), rust_indexing (in "
                   "parts, for shards larger than half the RAM; slow on long repeats), or auto (the first when "
                   "the shard fits in half the RAM)")
    add_ray_option(b, "build one shard per task")
    b.add_argument("--task-memory", type=float, default=None, metavar="GIB",
                   help="with --ray: memory each shard task declares (default: from the corpus size)")
    b.add_argument("--force", action="store_true", help="replace the PropMe index that --out holds (never "
                   "anything else: a folder with other files is refused)")
    b.add_argument("--skip-space-check", action="store_true", help="do not check free disk space first")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=cmd_index_build)

    a = isub.add_parser("adopt", help="make an index that infini-gram's own indexer wrote usable as --index",
                        description="Turn a folder written by infini-gram's indexer (v4: tokenized.N, table.N, "
                                    "offset.N, optionally metadata.N, metaoff.N, unigram.N) into a PropMe index at "
                                    "--out that links to its files. Nothing in the folder is written, so it may be "
                                    "read-only. The files' sizes, separators, sampled suffix-array ranks and that "
                                    "the tokenizer reproduces sampled documents are checked; missing unigram and "
                                    "metadata files are computed into --out.")
    a.add_argument("ig_dirs", metavar="IG_DIR", nargs="+", help="the folder infini-gram's indexer wrote (its "
                   "--save_dir); several folders of one corpus (an index published in parts) make one index, their "
                   "shards numbered on in the order given")
    a.add_argument("--tokenizer", required=True, help="HF tokenizer id or local folder: the one the index was "
                   "built with (docs/index-format.md lists those of the published indexes)")
    a.add_argument("--tokenizer-revision", default=None, help="revision of a hub tokenizer")
    a.add_argument("--out", required=True, help="index folder to create (outside IG_DIR)")
    a.add_argument("--source-field", default=None, help="key inside each document's metadata that names its "
                   f"source, dotted for a nested one (e.g. meta.pile_set_name; default: {DEFAULT_SOURCE_FIELD})")
    a.add_argument("--force", action="store_true", help="replace the PropMe index that --out holds")
    a.add_argument("--quiet", action="store_true", help="no progress bars")
    a.set_defaults(func=cmd_index_adopt)

    i = isub.add_parser("info", help="show an index's manifest, sizes and a sample document")
    i.add_argument("index", help="index folder")
    i.add_argument("--json", action="store_true", help="print JSON instead of a table")
    i.set_defaults(func=cmd_index_info)

    v = isub.add_parser("verify", help="check an index: sizes, suffix-array order, documents, unigram counts")
    v.add_argument("index", help="index folder")
    v.add_argument("--samples", type=positive, default=VERIFY_SAMPLES, help="suffix-array positions to check per shard")
    v.add_argument("--seed", type=seed, default=0, help="seed of the sampled positions")
    v.add_argument("--full", action="store_true", help="also check every file's content checksum (reads the "
                   "whole index; opening an index only checks sizes and sampled checksums)")
    v.set_defaults(func=cmd_index_verify)

    j = isub.add_parser("join", help="join shard sets built separately with --shard-ids into one index")
    j.add_argument("parts", nargs="+", help="index folders, each holding some shards of the same build")
    j.add_argument("--out", required=True, help="new index folder")
    j.set_defaults(func=cmd_index_join)
