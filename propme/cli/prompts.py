"""`propme prompts build`: a prompt set of a prompted setting, checked against an index."""
from __future__ import annotations

import argparse

from propme.cli.arguments import positive, seed
from propme_metrics.core.errors import ExitCode
from propme_metrics.core.progress import terminal
from propme_metrics.prompts.settings import DEFAULT_N_PROMPTS, DEFAULT_PROMPT_SEED, PREFIX, PROMPTED_SETTINGS


def cmd_prompts_build(args: argparse.Namespace) -> int:
    from rich.text import Text

    from propme_metrics.core.outputs import check_outputs
    from propme_metrics.index.reader import open_index
    from propme_metrics.prompts.prompt_set import (
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
    console = terminal()
    console.print(overlap_table(index.manifest.identity, rows))
    rejected = ps.manifest["rejected"]
    if args.setting != PREFIX:
        console.print(f"{len(rejected)} candidate(s) rejected" + (":" if rejected else ""), highlight=False)
        for r in rejected[:5]:
            console.print(Text(f"  {r['id']}: {r['reason']}: {r['prompt'][:80]!r}"), highlight=False)
        if len(rejected) > 5:
            console.print(Text(f"  ... and {len(rejected) - 5} more (see {sidecar_path(out).name})"), highlight=False)
    console.print(Text(f"wrote {len(ps.records)} {args.setting} prompts to {out} (manifest {sidecar_path(out).name})"),
                  highlight=False)
    return ExitCode.OK


def overlap_table(identity: str, rows: list[tuple[str, dict | None]]):
    """The overlap profiles (name, profile or None when no document is long enough) as one table."""
    from rich.table import Table
    from rich.text import Text

    from propme_metrics.prompts.prompt_set import SPAN_THRESHOLD

    table = Table(title=f"overlap with index {identity} (longest span in tokens)")
    for col in ("prompt set", "n", "mean span", "max span", f"span >= {SPAN_THRESHOLD}"):
        table.add_column(col, justify="left" if col == "prompt set" else "right", no_wrap=True)
    for name, prof in rows:
        if prof is None:
            table.add_row(Text(name), "0", "-", "-", "-  (no document is long enough)")
        else:
            table.add_row(Text(name), str(prof["n"]), f"{prof['mean_longest_span']:.2f}", str(prof["max_longest_span"]),
                          f"{prof['share_span_ge_10']:.0%}")
    return table


def register(sub: argparse._SubParsersAction) -> None:
    """Add `propme prompts build`."""
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
    b.add_argument("--n", type=positive, default=DEFAULT_N_PROMPTS, help="number of prompts")
    b.add_argument("--seed", type=seed, default=DEFAULT_PROMPT_SEED, help="sampling seed")
    b.add_argument("--language", default=None, help="prompt language (da, en); required for the built-in sets")
    b.add_argument("--candidates", default=None, help="candidate prompts: plain text (one per line), JSONL "
                   "with a \"prompt\" field (optional id, domain, language), or Tatoeba's sentence export "
                   "(id<TAB>lang<TAB>text; filtered by --language); default: the built-in set")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=cmd_prompts_build)
