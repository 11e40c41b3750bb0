"""What `build_report` is asked to do (`ReportRequest`): the runs, the folder, the intervals, the
PM metrics and what the report shows, each field with its help and bounds (`core.requests`),
checked once when the request is made; `propme report` builds it with `ReportRequest.from_cli`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.limits import MAX_SEED
from propme_metrics.core.requests import Request, option
from propme_metrics.metrics import registry
from propme_metrics.metrics.compare import PAIRINGS
from propme_metrics.metrics.likelihood import DISCOVERABLE_N, DISCOVERABLE_P, check_n, check_p
from propme_metrics.metrics.pm import CONFIDENCE, DEFAULT_BOOTSTRAP, IntervalSpec
from propme_metrics.metrics.provenance import RARE_MAX_COUNT, check_rare_max_count
from propme_metrics.report.defaults import HTML_DOCS_PER_SPAN, HTML_SNIPPET_CHARS


@dataclass(frozen=True)
class ReportRequest(Request):
    """A report of lm-eval runs of PropMe's tasks into `out` (`report.assemble.build_report`)."""

    runs: tuple[str | Path, ...] = option(help="lm-eval --output_path folder (searched recursively for "
                                          "results_*.json) or a results_*.json file")
    out: Path = option(help="report folder to write")
    bootstrap: int = option(DEFAULT_BOOTSTRAP, minimum=0,
                            help="bootstrap resamples of the prompts (0: no bootstrap intervals)")
    seed: int = option(0, minimum=0, maximum=MAX_SEED, help="bootstrap seed (same inputs and seed, same intervals)")
    pm_metrics: tuple[str, ...] = option(registry.DEFAULT_PM_METRICS,
                                         help="the metrics to compute PM for (comma-separated text or a sequence)")
    separate: bool = option(False, help="report runs of different index versions or prompt sets of one corpus "
                            "apart (as <corpus>_set1, <corpus>_set2, ...) instead of refusing them")
    retraced: tuple[str | Path, ...] = option((), help="a `propme trace` summary made from one of the runs' samples "
                                              "files: its results replace that file's traces (how failed traces "
                                              "are redone); repeat for several files")
    retraced_other_trace_options: bool = option(False, help="accept --retraced summaries traced with other "
                                                "tracing options (--mode, spans, ...) than the runs; PM then mixes "
                                                "the two (refused otherwise)")
    html: bool = option(True, flag="--no-html", help="skip report.html")
    plots: bool = option(True, help="write the PNG plots")
    html_docs_per_span: int = option(HTML_DOCS_PER_SPAN, minimum=0, flag="--html-docs",
                                     help="source documents shown per final span in report.html (the best "
                                     "matches; more make a bigger page)")
    html_snippet_chars: int = option(HTML_SNIPPET_CHARS, minimum=0, help="characters of document context shown on "
                                     "each side of a span in report.html")
    show_pii: bool = option(False, help="show leaked personal data unmasked in report.html (default: masked, e.g. "
                            "j***@e***.dk; the leaderboard never holds values)")
    discoverable_n: tuple[int, ...] | None = option(
        None, help="sample counts n of the likelihood subtasks' (n, p) curve (default: each run's "
        f"discoverable_n metadata, else {','.join(map(str, DISCOVERABLE_N))})")
    discoverable_p: float | None = option(
        None, help="probability p of (n, p)-discoverability, between 0 and 1 (default: each run's "
        f"discoverable_p metadata, else {DISCOVERABLE_P})")
    rare_max_count: int | None = option(None, minimum=1, help="fmr_rare counts a full match whose text occurs at "
                                        "most N times in the corpus (default: the runs' rare_max_count metadata, "
                                        f"else {RARE_MAX_COUNT})")
    pairing: str = option("all", choices=PAIRINGS, help="which models the paired comparisons compare: every pair, "
                          "or consecutive revisions of each model (input order)")
    confidence: float = option(CONFIDENCE, help="confidence level of every interval, strictly between 0 and 1 "
                               "(every label is written from it)")
    #: the `contamination.assess.ContaminationResult` of the runs' other benchmarks (the report's
    #: contamination section, `propme_tasks.contamination_run.report_section`), shown in report.html
    #: and the Every Eval Ever records; None: no section
    contamination: Any = option(None, help="the contamination section's check of the runs' other benchmarks")

    def __post_init__(self) -> None:
        super().__post_init__()
        set_ = object.__setattr__  # frozen: the checked values replace the given ones, once
        set_(self, "pm_metrics", _check_pm_metrics(self.pm_metrics))
        set_(self, "runs", tuple(self.runs) if not isinstance(self.runs, (str, Path)) else (self.runs,))
        set_(self, "retraced", tuple(self.retraced))
        set_(self, "out", Path(self.out))
        if self.discoverable_n is not None:
            set_(self, "discoverable_n", check_n(self.discoverable_n, "--discoverable-n"))
        if self.discoverable_p is not None:
            set_(self, "discoverable_p", check_p(self.discoverable_p, "--discoverable-p"))
        if self.rare_max_count is not None:
            set_(self, "rare_max_count", check_rare_max_count(self.rare_max_count, "--rare-max-count"))
        if not self.runs:
            raise ConfigError("no run given", "pass lm-eval output folders or results_*.json files")
        IntervalSpec(self.bootstrap, self.seed, self.confidence)  # its own checks, before anything is read


def _check_pm_metrics(pm_metrics: Any) -> tuple[str, ...]:
    """The PM metrics asked for (comma-separated text or a sequence), each once; ConfigError naming any
    metric PM cannot be computed for."""
    if isinstance(pm_metrics, str):
        pm_metrics = [m.strip() for m in pm_metrics.split(",") if m.strip()]
    metrics = tuple(dict.fromkeys(pm_metrics))
    bad = [m for m in metrics if m not in registry.PM_METRICS]
    if bad:
        known = [registry.BY_NAME[m] for m in bad if m in registry.BY_NAME]
        why = (" (prefix only: PM needs it under every setting)" if any(m.settings for m in known) else
               " (a maximum, not a ratio over prompts)" if any(not m.has_interval for m in known) else "")
        raise ConfigError(f"cannot compute PM for {', '.join(bad)}{why}",
                          f"choose among {', '.join(registry.PM_METRICS)}")
    if not metrics:
        raise ConfigError("no PM metric given", f"choose among {', '.join(registry.PM_METRICS)}")
    return metrics
