"""Prompt sets for the three prompted settings (docs/method.md, prompt settings): `generic`, `specific` and `prefix`.

* `prefix` (capability): documents of at least `min_doc_tokens` (PREFIX_MIN_DOC_TOKENS) index tokens
  are sampled from the index with `numpy.random.default_rng(seed)`; the prompt is the decoded first
  `prefix_tokens` (PREFIX_TOKENS) tokens, and the next `continuation_tokens` (CONTINUATION_TOKENS) are kept as the true
  continuation so that discoverable extraction can be scored. Both are whole characters: where a
  cut would split a character over two tokens (byte-level tokenizers, CJK and emoji) it moves back
  to the nearest whole character (`whole_character_cut`), so a prompt may hold a token or three fewer.
* `generic` / `specific` (propensity): prompts come from a candidates file (plain text, one per
  line, or JSONL objects with a "prompt" field) or from the built-in sets shipped in
  `propme_metrics/prompts/data/{da,en}.jsonl`. Every candidate is checked against the index: one
  that occurs verbatim is rejected, each kept one records its longest span in the corpus.
  `n` prompts are then chosen with the seed, spread evenly over domains (round-robin over the
  domains in a seeded order).

A prompt file `X.jsonl` has a sidecar `X.jsonl.manifest.json` that ties it to its index (index
identity, tokenizer hash), seed, source and package version; `load_prompt_set(path, index)`
refuses a file built for another index. The prompt file holds no timestamps or paths, so the same
index, seed and candidates give a byte-identical file.

Verbatim check and longest span: a prompt is tokenized with the index tokenizer twice, as is and
with one leading space (inside a document a sentence usually follows a space, which byte-level and
SentencePiece tokenizers fold into the first token); it is rejected when either token sequence
occurs in the corpus, and its longest span is the longer of the two.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import write_atomic
from propme_metrics.core.jsonl import json_objects, write_json_lines
from propme_metrics.prompts.settings import (
    CONTINUATION_TOKENS,
    DEFAULT_N_PROMPTS,
    DEFAULT_PROMPT_SEED,
    PREFIX,
    PREFIX_MIN_DOC_TOKENS,
    PREFIX_TOKENS,
    PROMPTED_SETTINGS,
)

PROMPTS_FORMAT = "propme-prompts/1"
#: bump when the same index, setting, n and seed would give other prompts (keys the prompt cache)
PROMPT_RULES_VERSION = 2  # 2: prefix prompts and continuations cut between whole characters
SPAN_THRESHOLD = 10  # the overlap profile's "share of prompts with a span of 10+ tokens"
SIDECAR_SUFFIX = ".manifest.json"
_LANGUAGE_RE = re.compile(r"^[a-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})?$")
_JSONL_SUFFIXES = (".jsonl", ".ndjson")


@dataclass
class PromptRecord:
    """One prompt with its overlap against the index (and, for `prefix`, its source document)."""

    id: str
    prompt: str
    setting: str
    domain: str | None = None
    language: str | None = None
    longest_span: int = 0  # tokens of the longest contiguous part of the prompt found in the corpus
    longest_span_count: int = 0  # occurrences of that span in the corpus
    longest_span_text: str = ""
    source_doc: dict[str, Any] | None = None  # prefix only: {"doc_ix", "shard", "metadata"}
    continuation: str | None = None  # prefix only: the document's next tokens, decoded
    continuation_tokens: int | None = None

    _KEYS = ("id", "prompt", "setting", "domain", "language", "longest_span", "longest_span_count",
             "longest_span_text", "source_doc", "continuation", "continuation_tokens")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict with the keys always in the same order."""
        return {k: getattr(self, k) for k in self._KEYS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PromptRecord:
        missing = [k for k in ("id", "prompt", "setting") if k not in data]
        if missing:
            raise ConfigError(f"prompt record lacks {', '.join(missing)}: {str(data)[:120]}")
        return cls(**{k: data[k] for k in cls._KEYS if k in data})


@dataclass
class PromptSet:
    """The records of a prompt file and its sidecar manifest."""

    records: list[PromptRecord]
    manifest: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# built-in sets and candidate files


def available_languages() -> list[str]:
    """Languages with a built-in prompt set."""
    folder = _builtin_dir()
    return sorted(p.name[:-len(".jsonl")] for p in folder.iterdir() if p.name.endswith(".jsonl"))


def _builtin_dir():
    from importlib.resources import files

    return files("propme_metrics.prompts") / "data"


def _builtin_file(language: str):
    if not isinstance(language, str) or language not in available_languages():
        raise ConfigError(f"no built-in prompt set for language {language!r}; available: "
                          f"{', '.join(available_languages())}",
                          "pass --language with one of those, or give your own prompts with --candidates")
    return _builtin_dir() / f"{language}.jsonl"


def cache_tag(setting: str, language: str | None) -> str:
    """What a cached prompt set depends on beyond its index, setting, n and seed: the file format,
    the selection rules and, for the built-in prompts, the shipped file. A change to any of them
    names another cache file, so an old set is rebuilt rather than reused."""
    payload = _builtin_file(language).read_bytes() if setting != PREFIX and language else b""
    key = f"{PROMPTS_FORMAT}|rules{PROMPT_RULES_VERSION}|".encode() + payload
    return hashlib.sha256(key).hexdigest()[:10]


def builtin_prompts(language: str) -> list[dict[str, Any]]:
    """The shipped prompts of `language`: dicts {id, prompt, setting, domain, language}."""
    resource = _builtin_file(language)
    records = []
    for line_no, rec in json_objects(resource.read_text(encoding="utf-8").splitlines(),
                                     f"built-in prompt set {language}.jsonl", "reinstall propme"):
        if not all(isinstance(rec.get(k), str) and rec.get(k) for k in ("id", "prompt", "setting")):
            raise ConfigError(f"built-in prompt set {language}.jsonl line {line_no} lacks id/prompt/setting",
                              "reinstall propme")
        records.append(rec)
    return records


@dataclass
class _Candidate:
    id: str
    prompt: str
    domain: str | None
    language: str | None
    line: int


def candidate_id(prompt: str) -> str:
    """Stable id of a prompt without one: `cand-` + the first 12 hex digits of its SHA-1."""
    return "cand-" + hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:12]


def _is_jsonl(path: Path, lines: list[str]) -> bool:
    if path.name.lower().endswith(_JSONL_SUFFIXES):
        return True
    first = next((ln for ln in lines if ln.strip()), "")
    if not first.lstrip().startswith("{"):
        return False
    try:
        return isinstance(json.loads(first), dict) and "prompt" in json.loads(first)
    except ValueError:
        return False


_TATOEBA_LINE = re.compile(r"^(\d+)\t([a-z]{3}(?:_[A-Za-z]+)?|\\N)\t(.*)$")


def _tatoeba_rows(lines: list[str], path: Path) -> list[re.Match] | None:
    """The parsed lines of a Tatoeba export (`id<TAB>lang<TAB>text` on every line), else None. A
    file most of whose lines are Tatoeba rows is one: a row that is not (cut short, say) is an
    error naming its line, never a reason to read ids and language codes as prompt text."""
    numbered = [(n, _TATOEBA_LINE.match(ln)) for n, ln in enumerate(lines, 1) if ln.strip()]
    bad = [n for n, m in numbered if m is None]
    if not numbered or 2 * len(bad) >= len(numbered):
        return None
    if bad:
        raise ConfigError(f"{path}:{bad[0]}: not a Tatoeba row (id<TAB>language<TAB>text), though "
                          f"{len(numbered) - len(bad)} of the file's {len(numbered)} lines are"
                          + (f" ({len(bad)} such lines)" if len(bad) > 1 else ""),
                          "repair or remove that line (a download cut short?), or give plain text with one "
                          "prompt per line")
    return [m for _, m in numbered]


def same_language(a: str | None, b: str | None) -> bool:
    """Whether two language codes name the same language (ISO 639-1 `da` = ISO 639-3 `dan`)."""
    import langcodes

    if a is None or b is None:
        return True
    try:
        return langcodes.standardize_tag(a) == langcodes.standardize_tag(b)
    except ValueError:
        return a == b


def read_candidates(path: str | Path) -> tuple[list[dict[str, Any]], str]:
    """Raw candidates of a file and its sha256.

    Formats: JSONL objects with "prompt"; Tatoeba's sentence export (`id<TAB>lang<TAB>text` per
    line, the per-language `dan_sentences.tsv` or the full `sentences.tsv`: ids become
    `tatoeba-<id>`, languages are ISO 639-3 codes, matched to `--language` by `same_language`;
    Tatoeba's unknown language `\\N` becomes `und`, which no `--language` keeps);
    or plain text, one prompt per line. Each dict has id, prompt, domain, language, setting (may
    be None) and line (1-based).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"candidates file {path} does not exist")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"candidates file {path} is not UTF-8 ({exc})") from None
    lines = text.splitlines()
    out: list[dict[str, Any]] = []
    if _is_jsonl(path, lines):
        hint = ("give JSONL objects with a \"prompt\" field, or plain text with one prompt "
                "per line in a file not named .jsonl")
        for line_no, rec in json_objects(lines, str(path), hint):
            if not isinstance(rec.get("prompt"), str):
                raise ConfigError(f"{path} line {line_no} has no string \"prompt\" field")
            out.append({"id": rec.get("id"), "prompt": rec["prompt"], "domain": rec.get("domain"),
                        "language": rec.get("language"), "setting": rec.get("setting"), "line": line_no})
    elif (tatoeba := _tatoeba_rows(lines, path)) is not None:
        numbered = [n for n, ln in enumerate(lines, 1) if ln.strip()]
        for line_no, m in zip(numbered, tatoeba):
            out.append({"id": f"tatoeba-{m.group(1)}", "prompt": m.group(3).strip(), "domain": None,
                        "language": "und" if m.group(2) == "\\N" else m.group(2), "setting": None,
                        "line": line_no, "format": "tatoeba"})
    else:
        for line_no, line in enumerate(lines, 1):
            if line.strip():
                out.append({"id": None, "prompt": line.strip(), "domain": None, "language": None,
                            "setting": None, "line": line_no})
    if not out:
        raise ConfigError(f"candidates file {path} holds no prompts",
                          "give one prompt per line (plain text) or JSONL objects with a \"prompt\" field")
    return out, hashlib.sha256(raw).hexdigest()


def _prepare(raw: list[dict[str, Any]], setting: str, language: str | None, origin: str,
             rejected: list[dict[str, Any]]) -> list[_Candidate]:
    """Keep the candidates of this setting/language, give them ids, drop empty ones and duplicates."""
    by_id: dict[str, str] = {}
    by_prompt: dict[str, str] = {}
    out = []
    languages = sorted({str(r["language"]) for r in raw
                        if r.get("format") == "tatoeba" and r.get("language") not in (None, "und")})
    if language is None and len(languages) > 1:
        raise ConfigError(f"{origin} is a Tatoeba export in several languages ({', '.join(languages[:8])}"
                          + (", ..." if len(languages) > 8 else "") + ")", "pass --language to keep one of them")
    for rec in raw:
        if rec.get("setting") not in (None, setting):
            continue
        if not same_language(rec.get("language"), language):
            continue
        prompt = rec["prompt"]
        cid = str(rec["id"]) if rec.get("id") not in (None, "") else candidate_id(prompt)
        if not prompt.strip():
            rejected.append(_rejection(cid, rec["line"], prompt, "empty prompt", 0))
            continue
        if prompt in by_prompt:
            rejected.append(_rejection(cid, rec["line"], prompt, f"duplicate of {by_prompt[prompt]}", None))
            continue
        if cid in by_id:
            raise ConfigError(f"{origin}: id {cid!r} is used for two different prompts (line {rec['line']})",
                              "give every candidate its own id, or leave ids out")
        by_id[cid] = prompt
        by_prompt[prompt] = cid
        out.append(_Candidate(cid, prompt, rec.get("domain"), language or rec.get("language"), rec["line"]))
    return out


def _rejection(cid: str, line: int | None, prompt: str, reason: str, span: int | None) -> dict[str, Any]:
    return {"id": cid, "line": line, "prompt": prompt, "reason": reason, "longest_span": span}


# ---------------------------------------------------------------------------------------------
# overlap with the index


class Overlap(NamedTuple):
    """The longest contiguous piece of a prompt's tokens that occurs in the corpus."""

    length: int
    count: int       #: its occurrences in the corpus
    ids: list[int]


def longest_overlap(index, ids: Iterable[int]) -> Overlap:
    """The longest contiguous sub-sequence of `ids` that occurs in the corpus.

    The tracer's search (`IndexSearch.longest_match_bounds`: the longest match at every start, all
    starts in one vectorized search); ties go to the leftmost piece; (0, 0, []) when not even one
    token occurs.
    """
    ids = [int(t) for t in ids]
    start, end = index.search.longest_match_bounds(ids)
    if end == start:
        return Overlap(0, 0, [])
    span = ids[start:end]
    return Overlap(end - start, index.count(span), span)


def _token_variants(index, prompt: str) -> list[list[int]]:
    variants = [index.encode(prompt)]
    if not prompt[:1].isspace():
        spaced = index.encode(" " + prompt)
        if spaced != variants[0]:
            variants.append(spaced)
    return [v for v in variants if v]


def check_prompt(index, prompt: str) -> tuple[bool, int, int, str]:
    """(occurs verbatim, longest span, its count, its text) of `prompt` against the index."""
    verbatim, best = False, Overlap(0, 0, [])
    for ids in _token_variants(index, prompt):
        overlap = longest_overlap(index, ids)
        if overlap.length == len(ids):
            verbatim = True
        if overlap.length > best.length:
            best = overlap
    return verbatim, best.length, best.count, index.decode(best.ids) if best.ids else ""


def overlap_profile(records: Iterable[PromptRecord]) -> dict[str, Any]:
    """n, mean and max longest span (tokens), and the share of prompts with a span of 10+ tokens."""
    spans = [int(r.longest_span) for r in records]
    if not spans:
        return {"n": 0, "mean_longest_span": 0.0, "max_longest_span": 0, "share_span_ge_10": 0.0}
    return {"n": len(spans), "mean_longest_span": round(sum(spans) / len(spans), 4),
            "max_longest_span": max(spans),
            "share_span_ge_10": round(sum(s >= SPAN_THRESHOLD for s in spans) / len(spans), 4)}


# ---------------------------------------------------------------------------------------------
# building


def eligible_documents(index, min_doc_tokens: int = PREFIX_MIN_DOC_TOKENS) -> np.ndarray:
    """doc_ix (sorted) of the documents with at least `min_doc_tokens` tokens."""
    return np.flatnonzero(np.asarray(index.document_lengths) >= min_doc_tokens)


def build_prompt_set(index, setting: str, n: int = DEFAULT_N_PROMPTS, seed: int = DEFAULT_PROMPT_SEED, language: str | None = None,
                     candidates: str | Path | None = None, prefix_tokens: int = PREFIX_TOKENS,
                     continuation_tokens: int = CONTINUATION_TOKENS, min_doc_tokens: int = PREFIX_MIN_DOC_TOKENS,
                     progress: bool = False, at_most: bool = False, option: str = "--n") -> PromptSet:
    """Build `n` prompts of `setting` against `index` (an `Index` or an index folder); with
    `at_most`, as many as the index allows up to `n` (the manifest's `requested` keeps `n`).

    Raises ConfigError on bad arguments, an empty candidates file, an unknown language, too few
    eligible documents (prefix) or too few candidates left after the verbatim check (with
    `at_most`: none at all). `option` is what the user's command calls `n`, named in the hints.
    """
    from propme_metrics.index.reader import Index, open_index
    from propme_metrics.version import __version__

    if not isinstance(index, Index):
        index = open_index(index)
    if setting not in PROMPTED_SETTINGS:
        raise ConfigError(f"unknown prompt setting {setting!r}; choose one of {', '.join(PROMPTED_SETTINGS)}")
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"{option} must be a positive number of prompts, not {n!r}")
    if prefix_tokens < 1 or continuation_tokens < 0 or min_doc_tokens < prefix_tokens:
        raise ConfigError(f"need prefix_tokens >= 1, continuation_tokens >= 0 and min_doc_tokens >= prefix_tokens "
                          f"(got {prefix_tokens}, {continuation_tokens}, {min_doc_tokens})")
    if language is not None and not _LANGUAGE_RE.match(str(language)):
        raise ConfigError(f"unknown language {language!r}",
                          f"give a language code such as {', '.join(available_languages())}")
    n = int(n)
    rejected: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    if setting == PREFIX:
        records = _build_prefix(index, n, seed, language, prefix_tokens, continuation_tokens, min_doc_tokens,
                                progress, at_most, option)
        source: dict[str, Any] = {"kind": "index"}
        counts = {"eligible_documents": int(len(eligible_documents(index, min_doc_tokens)))}
    else:
        if candidates is None:
            if language is None:
                raise ConfigError(f"the built-in {setting} prompts need a language",
                                  f"pass --language ({', '.join(available_languages())}) or give --candidates")
            resource = _builtin_file(language)
            raw = [dict(rec, line=i) for i, rec in enumerate(builtin_prompts(language), 1)]
            origin = f"built-in {language}.jsonl"
            source = {"kind": "builtin", "name": f"{language}.jsonl",
                      "sha256": hashlib.sha256(resource.read_bytes()).hexdigest()}
        else:
            raw, sha = read_candidates(candidates)
            origin = str(candidates)
            source = {"kind": "candidates", "path": str(candidates), "name": Path(candidates).name, "sha256": sha}
        pool = _prepare(raw, setting, language, origin, rejected)
        if not pool:
            raise ConfigError(f"{origin} holds no usable {setting} prompts"
                              + (f" for language {language}" if language else "")
                              + f" ({len(raw)} records read)",
                              "check the \"setting\"/\"language\" fields of the candidates, or --language")
        kept = _check_candidates(index, pool, setting, rejected, progress)
        counts = {"read": len(raw), "candidates": len(pool), "passed": len(kept)}
        if len(kept) < n and not (at_most and kept):
            reasons = "; ".join(f"{r['id']}: {r['reason']}" for r in rejected[:3])
            raise ConfigError(
                f"only {len(kept)} of {len(pool)} {setting} candidates from {origin} pass the overlap check, "
                f"fewer than {option} {n}; {len(rejected)} rejected" + (f" (e.g. {reasons})" if reasons else ""),
                f"lower {option}, or give more prompts" + (" with --candidates" if option == "--n" else " in a prompt file"))
        records = _stratified(kept, min(n, len(kept)), seed)
    manifest = {
        "format": PROMPTS_FORMAT,
        "setting": setting,
        "language": language,
        "n": len(records),
        "requested": n,
        "seed": int(seed),
        "source": source,
        "index_identity": index.manifest.identity,
        "index_path": str(index.path),
        "tokenizer_name": index.manifest.tokenizer.name,
        "tokenizer_sha256": index.manifest.tokenizer.sha256,
        "prefix_tokens": prefix_tokens,
        "continuation_tokens": continuation_tokens,
        "min_doc_tokens": min_doc_tokens,
        "counts": counts,
        "rejected": rejected,
        "overlap_profile": overlap_profile(records),
        "propme_version": __version__,
    }
    return PromptSet(records=records, manifest=manifest)


def _build_prefix(index, n, seed, language, prefix_tokens, continuation_tokens, min_doc_tokens,
                  progress, at_most: bool = False, option: str = "--n") -> list[PromptRecord]:
    eligible = eligible_documents(index, min_doc_tokens)
    if len(eligible) < n and not (at_most and len(eligible)):
        raise ConfigError(
            f"the index has {len(eligible)} documents of at least {min_doc_tokens} tokens "
            f"(of {len(index.document_lengths)}), fewer than {option} {n}",
            f"lower {option} to at most {len(eligible)}, or index a larger corpus" if len(eligible)
            else "index a corpus with longer documents")
    n = min(n, len(eligible))
    chosen = np.random.default_rng(seed).choice(eligible, size=n, replace=False)
    identity = index.manifest.identity
    records = []
    from propme_metrics.core.progress import progress_bar

    with progress_bar(progress) as bar:
        task = bar.add_task("prefix prompts", total=n, rate="")
        for doc_ix in chosen:
            # 8 tokens more than kept: enough to see whether the last kept one ends a character
            doc = index.document(int(doc_ix), max_tokens=prefix_tokens + continuation_tokens + 8)
            ids = doc.token_ids.tolist()
            # whole characters on both sides of each cut: a cut inside a character moves back
            cut = whole_character_cut(index.decode, ids, prefix_tokens)
            end = whole_character_cut(index.decode, ids, min(len(ids), cut + continuation_tokens), floor=cut)
            prompt_ids, cont_ids = ids[:cut], ids[cut:end]
            prompt = index.decode(prompt_ids)
            meta = doc.meta
            records.append(PromptRecord(
                id=f"prefix-{identity}-{int(doc_ix)}", prompt=prompt, setting=PREFIX,
                domain=meta.get("source"), language=language if language is not None else meta.get("language"),
                longest_span=len(prompt_ids), longest_span_count=index.count(prompt_ids), longest_span_text=prompt,
                source_doc={"doc_ix": int(doc_ix), "shard": doc.shard, "metadata": meta},
                continuation=index.decode(cont_ids), continuation_tokens=len(cont_ids)))
            bar.advance(task)
    return records


def whole_character_cut(decode, ids: list[int], k: int, floor: int = 0, forward: bool = False) -> int:
    """The token boundary nearest `k` that falls between whole characters: `k` itself when it does,
    else the nearest one before it (after it with `forward`), never past `floor` (or the end).

    A byte-level tokenizer can split a multi-byte character (CJK, emoji) over two tokens; cutting
    there would decode both halves as U+FFFD. A cut is whole when decoding the two sides apart
    gives no more U+FFFD than decoding them together (tokenizer-agnostic: a SentencePiece decoder
    that drops a leading space is no reason to move). The ends of `ids` count as whole: pass a few
    tokens beyond a cut for it to be checked."""
    bad = "\ufffd"
    lo, hi = max(0, floor), len(ids)

    def whole(c: int) -> bool:
        if c <= lo or c >= hi:
            return True
        a, b = max(lo, c - 8), min(hi, c + 8)  # a character spans at most 4 bytes: 8 tokens either side suffice
        return (decode(ids[a:c]) + decode(ids[c:b])).count(bad) == decode(ids[a:b]).count(bad)

    step = 1 if forward else -1
    c = min(max(k, lo), hi)
    while not whole(c):
        c += step
    return c


def _check_candidates(index, pool: list[_Candidate], setting: str, rejected: list[dict[str, Any]],
                      progress: bool) -> list[PromptRecord]:
    from propme_metrics.core.progress import progress_bar

    kept = []
    with progress_bar(progress) as bar:
        task = bar.add_task(f"checking {setting} candidates", total=len(pool), rate="")
        for cand in pool:
            verbatim, span, count, text = check_prompt(index, cand.prompt)
            if verbatim:
                rejected.append(_rejection(cand.id, cand.line, cand.prompt,
                                           f"occurs verbatim in the index ({count} times)", span))
            else:
                kept.append(PromptRecord(id=cand.id, prompt=cand.prompt, setting=setting, domain=cand.domain,
                                         language=cand.language, longest_span=span, longest_span_count=count,
                                         longest_span_text=text))
            bar.advance(task)
    return kept


def _stratified(records: list[PromptRecord], n: int, seed: int) -> list[PromptRecord]:
    """n records, round-robin over the domains in a seeded order, each domain's records shuffled."""
    rng = np.random.default_rng(seed)
    groups: dict[str | None, list[PromptRecord]] = {}
    for r in records:
        groups.setdefault(r.domain, []).append(r)
    domains = sorted(groups, key=lambda d: (d is None, str(d)))
    order = [domains[i] for i in rng.permutation(len(domains))]
    queues = {d: [groups[d][i] for i in rng.permutation(len(groups[d]))] for d in order}
    out: list[PromptRecord] = []
    while len(out) < n:
        for d in order:
            if queues[d] and len(out) < n:
                out.append(queues[d].pop(0))
    return out


# ---------------------------------------------------------------------------------------------
# files


def sidecar_path(path: str | Path) -> Path:
    """`prompts.jsonl` -> `prompts.jsonl.manifest.json`."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def prompt_file_bytes(records: Iterable[PromptRecord]) -> bytes:
    """A prompt file's JSON Lines (the standard library's layout, UTF-8 characters as they are)."""
    text = io.StringIO()
    write_json_lines(text, (r.to_dict() for r in records), partial(json.dumps, ensure_ascii=False))
    return text.getvalue().encode("utf-8")


def write_prompt_set(ps: PromptSet, out: str | Path) -> Path:
    """Write the JSONL prompt file and its sidecar manifest (each atomically); returns the file path.

    The sidecar goes first: whoever sees the prompt file (the prompt cache checks for it) also
    finds its sidecar."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = prompt_file_bytes(ps.records)
    ps.manifest["prompts_sha256"] = hashlib.sha256(data).hexdigest()
    write_atomic(sidecar_path(out),
                  (json.dumps(ps.manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    write_atomic(out, data)
    return out


def load_prompt_set(path: str | Path, index=None, setting: str | None = None) -> PromptSet:
    """Read a prompt file and its sidecar; refuse one built for another index or another setting."""
    path = Path(path)
    side = sidecar_path(path)
    hint = "rebuild it with `propme prompts build`"
    if not path.is_file():
        raise ConfigError(f"prompt file {path} does not exist", "build one with `propme prompts build`")
    if not side.is_file():
        raise ConfigError(f"prompt file {path} has no sidecar manifest {side.name}", hint)
    try:
        manifest = json.loads(side.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != PROMPTS_FORMAT:
            raise ValueError(f"format is {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                             f"not {PROMPTS_FORMAT}")
    except ValueError as exc:
        raise ConfigError(f"sidecar manifest {side} is corrupt ({exc})", hint) from None
    data = path.read_bytes()
    if manifest.get("prompts_sha256") not in (None, hashlib.sha256(data).hexdigest()):
        raise ConfigError(f"prompt file {path} was changed after it was built (its sha256 differs from {side.name})",
                          hint + "; to use your own prompts, pass them with --candidates")
    try:
        # JSON Lines end at "\n" only (str.splitlines would also split at U+0085 or U+2028 in a prompt)
        records = [PromptRecord.from_dict(json.loads(line)) for line in data.decode("utf-8").split("\n")
                   if line.strip()]
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"prompt file {path} is corrupt ({exc})", hint) from None
    if index is not None:
        from propme_metrics.index.reader import Index, open_index

        if not isinstance(index, Index):
            index = open_index(index)
        built_for, here = manifest.get("index_identity"), index.manifest.identity
        if built_for != here:
            raise ConfigError(f"prompt file {path} was built for index {built_for}, not {here} ({index.path})",
                              f"rebuild it with `propme prompts build --index {index.path}`")
    if setting is not None and manifest.get("setting") != setting:
        raise ConfigError(f"prompt file {path} holds {manifest.get('setting')} prompts, not {setting} prompts",
                          f"give a file built with `propme prompts build --setting {setting}`")
    return PromptSet(records=records, manifest=manifest)
