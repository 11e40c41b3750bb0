"""The document of a PropMe generation task, as lm-eval keeps it and logs it (a samples row's `doc`).

lm-eval hands a task's configuration to its dataset loader only, so `propme_tasks.hooks.load_prompts`
copies what scoring needs into every document: the index, the tracing configuration, the search
backend, the start token, the `fmr_rare` threshold, whether a chat template was applied, and the
PropMe version that wrote it. `to_row` is the one writer of that row and `from_row` its one reader;
`from_row` also reads the rows of earlier releases (no `propme_version`, no start token or chat
template recorded), so older runs still report.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

from propme_metrics.trace.result import TraceConfig
from propme_metrics.version import __version__

#: what a document records in `start_token_note` when the prompt went through the model's chat template
CHAT_TEMPLATE_NOTE = "chat template applied: the template writes the model's own start, PropMe puts nothing before the prompt"


@dataclass(frozen=True)
class RayBackend:
    """Tracing on a Ray cluster (`trace_backend: ray`): its address (None: start or find one) and actors."""

    address: str | None = None
    actors: int | None = None

    def to_json(self) -> str:
        return json.dumps({"backend": "ray", "address": self.address, "actors": self.actors}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> RayBackend | None:
        """The backend a row names; None for local tracing ("" or absent)."""
        if not text:
            return None
        data = json.loads(text)
        return cls(data.get("address"), data.get("actors")) if data.get("backend") == "ray" else None


@dataclass(frozen=True)
class TaskDocument:
    """One prompt of a PropMe generation task, with what tracing and scoring need to read it alone."""

    id: str = ""
    sample_ix: int = 0               #: which of the prompt's repeated samples (generations_per_prompt)
    prompt: str = ""
    model_prompt: str = ""           #: what the model is given: start token + prompt, or the prompt alone
    setting: str = ""
    domain: str = ""
    language: str = ""
    continuation: str = ""           #: prefix: the document's true continuation
    source_doc: str = ""             #: prefix: JSON of the document the prompt was cut from
    prompt_longest_span: int | None = None
    corpus: str = ""
    index_path: str = ""
    index_identity: str | None = None
    trace: TraceConfig | None = None     #: None: not recorded (a row of an older release)
    backend: RayBackend | None = None    #: None: traced in the lm-eval process (and its workers)
    trace_workers: int | None = None     #: None: `deferred.default_trace_workers()`
    start_token: str = ""
    start_token_choice: str | None = None  #: None: not recorded (a run made before PropMe recorded it)
    start_token_note: str = ""
    pii_show: bool = False
    rare_max_count: int | None = None    #: fmr_rare's threshold; None: not recorded (the default applies)
    chat_template: bool = False          #: the prompt went through the model's chat template
    propme_version: str | None = __version__  #: None: written before documents recorded it

    def to_row(self) -> dict[str, Any]:
        """The row lm-eval keeps (plain JSON-able values, in the order of earlier releases, then the version)."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["setting"] = str(self.setting)
        row["trace_config"] = json.dumps(self.trace.to_dict(), sort_keys=True) if self.trace is not None else ""
        row["trace_backend"] = self.backend.to_json() if self.backend is not None else ""
        return {k: row[k] for k in _ROW_KEYS}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TaskDocument:
        """A logged or loaded document; keys it does not know (the likelihood subtask's) are left out,
        keys an older release did not write take their 'not recorded' value."""
        known = {f.name for f in fields(cls)} - {"trace", "backend", "propme_version"}
        values = {k: v for k, v in row.items() if k in known and v is not None}
        raw = row.get("trace_config")
        config = json.loads(raw) if isinstance(raw, str) and raw else raw if isinstance(raw, dict) else None
        return cls(**values, trace=TraceConfig(**config) if config is not None else None,
                   backend=RayBackend.from_json(row.get("trace_backend")), propme_version=row.get("propme_version"))

    def under_chat_template(self) -> TaskDocument:
        """The document when the prompt is the user turn of the model's chat template (which writes
        the model's own start): the prompt alone, no start token."""
        return replace(self, model_prompt=self.prompt, chat_template=True, start_token="",
                       start_token_note=CHAT_TEMPLATE_NOTE)


#: the keys of a row, in the order rows have always had
_ROW_KEYS = ("id", "sample_ix", "prompt", "model_prompt", "setting", "domain", "language", "continuation",
             "source_doc", "prompt_longest_span", "corpus", "index_path", "index_identity", "trace_config",
             "trace_backend", "trace_workers", "start_token", "start_token_choice", "start_token_note", "pii_show",
             "rare_max_count", "chat_template", "propme_version")
