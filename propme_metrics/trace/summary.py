"""The files `propme trace` writes, in one place: RESULTS.jsonl (one trace result per line, with its
PII leaks) and SUMMARY.json (metrics, tracing options, index identity, input, the results' path,
which data leaks by source and by duplication),
and the reader of SUMMARY.json that `propme report --retraced` uses.

The metrics themselves are computed above this layer and handed in as their JSON-able record.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import atomic_output, write_atomic
from propme_metrics.core.jsonl import scrub_surrogates
from propme_metrics.index.reader import Index
from propme_metrics.trace.inputs import SAMPLES_FORMAT
from propme_metrics.trace.pii import PIILeaks
from propme_metrics.trace.result import TraceConfig, TraceResult

#: what to pass instead of a file that is no re-trace summary
RETRACE_HINT = "pass the SUMMARY.json that `propme trace --input samples_<task>_*.jsonl --summary` wrote"


@dataclass
class TraceSummary:
    """What SUMMARY.json records besides the metrics: where the traces came from and went."""

    input_path: Path        #: the traced file (absolute)
    input_format: str       #: 'jsonl' or SAMPLES_FORMAT (an lm-eval samples file)
    index_identity: str
    results_path: Path      #: the RESULTS.jsonl written beside it
    config: dict[str, Any] | None = None  #: the tracing options (TraceConfig.to_dict())


def summary_record(metrics: dict[str, Any], leaked_items: int, config: TraceConfig, drop_degenerate: bool,
                   rare_max_count: int, index: Index, input_path: str | Path, input_format: str, text_field: str,
                   results_path: Path, leaks: dict[str, Any] | None = None,
                   robustness: dict[str, Any] | None = None) -> dict[str, Any]:
    """The SUMMARY.json object: the metrics record (`Summary.to_dict()`), the PII item total, the
    tracing options (fmr_rare's threshold among them), the index, the input and the results file, `leaks`
    (which data leaks: by source and by duplication, `report.trace_provenance.leaks_record`) and
    `robustness` (`metrics.robustness.Robustness.to_dict`)."""
    manifest = index.manifest
    return {
        **metrics,
        "pii_leaked_items": leaked_items,
        "config": config.to_dict(),
        "drop_degenerate": drop_degenerate,
        "rare_max_count": rare_max_count,
        "index": {"path": str(index.path), "identity": manifest.identity, "total_tokens": manifest.total_tokens,
                  "total_documents": manifest.total_documents,
                  "tokenizer": {"name": manifest.tokenizer.name, "sha256": manifest.tokenizer.sha256}},
        "input": {"path": str(Path(input_path).absolute()), "format": input_format,
                  "text_field": text_field if input_format == "jsonl" else "filtered_resps"},
        "results": str(results_path.absolute()),
        "leaks": leaks,
        "robustness": robustness,
    }


def write_trace_outputs(results_path: Path, summary_path: Path, results: Sequence[TraceResult],
                        leaks: Sequence[PIILeaks], record: dict[str, Any], show_pii: bool = False) -> None:
    """Write RESULTS.jsonl (each result with its leaks, values masked unless `show_pii`) and
    SUMMARY.json (`record`), each atomically; ConfigError when the disk refuses."""
    try:
        with atomic_output(results_path, "wb") as fh:  # a unique temporary name: concurrent writers never collide
            for res, p in zip(results, leaks):
                fh.write(res.json_bytes(pii=p.to_dict(show=show_pii)))
        write_atomic(summary_path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write results: {exc}",
                          "free space or fix permissions, then re-run the same command: finished traces are kept") from None


def read_summary(path: Path, samples_only: bool = True) -> TraceSummary:
    """SUMMARY.json as written by `write_trace_outputs`; with `samples_only`, one made from an lm-eval
    samples file. ConfigError for anything else, saying which file to pass."""
    try:
        with open(path, encoding="utf-8") as fh:
            summary = scrub_surrogates(json.load(fh))[0]  # a "\ud800" in a path cannot be written out
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc})", RETRACE_HINT) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", RETRACE_HINT) from None
    try:
        inp, index, results = summary["input"], summary["index"], summary["results"]
        if samples_only and inp["format"] != SAMPLES_FORMAT:
            raise ConfigError(f"{path} re-traced {inp['path']}, not an lm-eval samples file", RETRACE_HINT)
        config = summary.get("config") if isinstance(summary.get("config"), dict) else None
        return TraceSummary(Path(inp["path"]), inp["format"], str(index["identity"]), Path(results), config)
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a `propme trace` summary (no {exc})", RETRACE_HINT) from None
