"""Fake lm-eval output folders with hand-made traces, shared by the report, fuzz and safety tests."""
from __future__ import annotations

import json
import re
from pathlib import Path

from propme_metrics.metrics.values import summarize
from propme_metrics.prompts.settings import task_name
from propme_metrics.trace.result import FinalSpan, Span, TracedDocument, TraceResult

DATE1 = "2026-01-01T10-00-00.000001"
DATE2 = "2026-01-02T10-00-00.000002"
DFM = "danish-foundation-models/dfm-decoder-open-v0-7b-pt"
COMMA = "common-pile/comma-v0.1-2t"
XSS = "<script>alert(1)</script>"


# --- fake traces and runs ----------------------------------------------------------------------


def gen(key: str, seg_len: int = 0, nvs: tuple[float, ...] = (), full: bool = False, text: str | None = None,
        degenerate: bool = False, error: str | None = None, extracted: bool | None = None,
        doc_text: str = "", meta: dict | None = None) -> dict:
    """A TraceResult dict: one final span of `seg_len` tokens (one word each) with one document per NV value."""
    words = [f"ord{i}" for i in range(max(seg_len, 1) + 6)]
    text = text if text is not None else "Indledning: " + " ".join(words) + "."
    spans, finals = [], []
    if seg_len:
        seg_text = " ".join(words[:seg_len])
        spans = [Span(0, seg_len, 3, -25.0, text=seg_text, kept=True)]
        documents = []
        for i, v in enumerate(nvs):
            snippet = f"{doc_text}før {seg_text} efter"
            a = snippet.index(seg_text)
            documents.append(TracedDocument(
                shard=0, doc_ix=100 + i, source_id=f"src-{key}-{i}", metadata=meta or {"source": "retsinformation"},
                match="full_raw" if full and i == 0 else "partial", nv_recall=v, nv_matched_words=0,
                nv_reference_words=seg_len + 8, nv_candidate_words=seg_len + 2,
                snippet=snippet, snippet_span=(a, a + len(seg_text))))
        finals = [FinalSpan(0, seg_len, seg_text, 3, documents)]
    result = TraceResult(key=key, text=text, n_tokens=seg_len + 8, degenerate=degenerate, spans=spans,
                         final_spans=finals, extracted=extracted, error=error)
    return result.to_dict()


def setting_prompts(setting: str, n: int, lengths: list[tuple[int, int]], nv: dict[int, float],
                    full: set[int], repeats: int = 1) -> list[list[dict]]:
    """n prompts, `repeats` generations each: ALS from (count, length) pairs, NV per prompt, full matches."""
    seg = [length for count, length in lengths for _ in range(count)]
    assert len(seg) == n
    out = []
    for i in range(n):
        gens = []
        for j in range(repeats):
            gens.append(gen(f"{setting}-{i}#{j}", seg[i], (nv.get(i, 0.0),), full=i in full,
                            extracted=(i in full) if setting == "prefix" else None))
        out.append(gens)
    return out


def reference_settings() -> dict[str, list[list[dict]]]:
    """The published figures (docs/method.md): NVR 0.00086 / 0.00081 / 0.0367, FMR 0 / 0.01 / 0.08, ALS 15.68 / 17.37 / 24.75."""
    return {
        "generic": setting_prompts("generic", 100, [(68, 16), (32, 15)], {0: 0.086}, set()),
        "specific": setting_prompts("specific", 100, [(37, 18), (63, 17)], {1: 0.081}, {1}),
        "prefix": setting_prompts("prefix", 100, [(75, 25), (25, 24)], {**{i: 0.4 for i in range(8)}, 8: 0.47},
                                  set(range(8))),
    }


def stage1_settings() -> dict[str, list[list[dict]]]:
    return {
        "generic": setting_prompts("generic", 100, [(50, 12), (50, 10)], {0: 0.2, 5: 0.1}, set()),
        "specific": setting_prompts("specific", 100, [(100, 14)], {1: 0.05}, set()),
        "prefix": setting_prompts("prefix", 100, [(50, 20), (50, 22)], {i: 0.5 for i in range(5)}, set(range(5))),
    }


def edge_settings() -> dict[str, list[list[dict]]]:
    """Comma: prefix FMR 0 (c = 0), specific FMR 0.03 -> PM 1; generic FMR 0 -> PM 0; ALS generic == prefix -> 0.5.

    Two generations per prompt (sampled), as two sample rows sharing the prompt id.
    """
    return {
        "generic": setting_prompts("generic", 100, [(100, 10)], {3: 0.3}, set(), repeats=2),
        "specific": setting_prompts("specific", 100, [(100, 12)], {4: 0.6}, {4, 5, 6}, repeats=2),
        "prefix": setting_prompts("prefix", 100, [(100, 10)], {7: 0.9}, set(), repeats=2),
    }


def write_run(root: Path, model: str, revision: str, settings: dict[str, list[list[dict]]], *,
              corpus: str = "dynaword", identity: str = "idx-dynaword-v1", date: str = DATE1,
              prompt_prefix: str = "", prompt_text: str = "Der var engang") -> Path:
    """An lm-eval --output_path folder: <root>/<sanitized model>/results_<date>.json + samples files."""
    folder = root / re.sub(r'[/:"<>|\\?*\[\]]', "__", model)
    folder.mkdir(parents=True, exist_ok=True)
    model_args = f"pretrained={model}" + (f",revision={revision}" if revision else "") + ",dtype=float32"
    results = {"results": {}, "configs": {}, "versions": {}, "group_subtasks": {task_name(corpus): []},
               "config": {"model": "hf", "model_args": model_args, "batch_size": 1},
               "model_name": model, "date": 1767261600.0}
    for setting, prompts in settings.items():
        task = task_name(corpus, setting)
        results["group_subtasks"][task_name(corpus)].append(task)
        all_gens = [g for gens in prompts for g in gens]
        s = summarize([TraceResult.from_dict(g) for g in all_gens])
        results["results"][task] = {
            "alias": f" - {task}", "als,none": s.als, "als_stderr,none": "N/A", "fmr,none": s.fmr,
            "nvr,none": s.nvr, "trace,none": s.n_failed, "trace_stderr,none": "N/A"}
        results["configs"][task] = {"task": task, "output_type": "generate_until", "metadata": {
            "version": 1.0, "corpus": corpus, "setting": setting, "language": "da", "dynaword_index": "/idx"}}
        results["versions"][task] = 1.0
        lines = []
        doc_id = 0
        for i, gens in enumerate(prompts):
            pid = f"{prompt_prefix}{setting}-{i:03d}"
            for j, g in enumerate(gens):  # one sample row per generation, as lm-eval's repeats give
                doc = {"id": pid, "sample_ix": j, "prompt": f"{prompt_text} {i}", "setting": setting,
                       "domain": "news", "language": "da",
                       "continuation": "og de levede lykkeligt" if setting == "prefix" else "",
                       "source_doc": "", "index_path": "/idx", "index_identity": identity, "corpus": corpus}
                row = {"doc_id": doc_id, "doc": doc, "target": doc["continuation"],
                       "arguments": {"gen_args_0": {"arg_0": doc["prompt"], "arg_1": {"until": []}}},
                       "resps": [[g["text"]]], "filtered_resps": [g["text"]], "filter": "none",
                       "metrics": ["als", "fmr", "nvr", "trace"], "als": float(g["longest_span"]),
                       "fmr": float(g["full_match"]), "nvr": None,
                       "trace": {"prompt_id": pid, "setting": setting, "index_identity": identity, "failed": 0,
                                 "top_sources": [], "generations": [g],
                                 "pooled": {"als": {"sum": g["longest_span"], "n": 1},
                                            "fmr": {"sum": float(g["full_match"]), "n": 1}, "nvr": {"sum": 0, "n": 0}}}}
                lines.append(json.dumps(row, ensure_ascii=False))
                doc_id += 1
        (folder / f"samples_{task}_{date}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / f"results_{date}.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return folder


# --- benchmark runs (another lm-eval task beside PropMe's, for the contamination check) -----------

QUIZ_YAML = {"output_type": "generate_until", "test_split": "test", "doc_to_text": "{{question}}",
             "doc_to_target": "{{answer}}", "target_delimiter": " ", "dataset_path": "json",
             "generation_kwargs": {"until": ["\n"], "max_gen_toks": 4}, "metric_list": [{"metric": "exact_match"}]}


def quiz_config(task: str, data: Path) -> dict:
    """The config lm-eval records for a local generate_until task reading `data` (a JSONL of
    question/answer rows), as its results file writes it."""
    return {"task": task, **QUIZ_YAML, "dataset_kwargs": {"data_files": {"test": str(data)}},
            "metadata": {"version": 1.0, "config_source": f"{task}.yaml"}}


def write_benchmark_run(root: Path, model: str, task: str, config: dict, docs: list[dict], values: list[float], *,
                        revision: str = "", date: str = DATE1, metric: str = "exact_match") -> Path:
    """An lm-eval --output_path folder of one benchmark task run by `model` with --log_samples:
    <root>/<sanitized model>/results_<date>.json and samples_<task>_<date>.jsonl, document i
    scoring values[i]. Returns the results file."""
    folder = root / re.sub(r'[/:"<>|\\?*\[\]]', "__", model)
    folder.mkdir(parents=True, exist_ok=True)
    model_args = f"pretrained={model}" + (f",revision={revision}" if revision else "")
    results = {"results": {task: {f"{metric},none": sum(values) / len(values), "alias": task}},
               "configs": {task: config}, "versions": {task: 1.0}, "higher_is_better": {task: {metric: True}},
               "config": {"model": "hf", "model_args": model_args, "limit": None}, "model_name": model}
    path = folder / f"results_{date}.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    with open(folder / f"samples_{task}_{date}.jsonl", "w", encoding="utf-8") as fh:
        for i, (doc, value) in enumerate(zip(docs, values)):
            fh.write(json.dumps({"doc_id": i, "doc": doc, "target": doc.get("answer", ""),
                                 "arguments": {"gen_args_0": {"arg_0": doc.get("question", ""), "arg_1": {}}},
                                 "resps": [["x"]], "filtered_resps": ["x"], "filter": "none", "metrics": [metric],
                                 metric: value}) + "\n")
    return path


def add_likelihood_task(folder: Path, logps: list[float], date: str = DATE1) -> Path:
    """Add the prefix likelihood subtask (one document per log-probability, greedy when above -1) to the
    run whose results file in `folder` has date id `date`."""
    results = folder / f"results_{date}.json"
    data = json.loads(results.read_text())
    task = "propme_dynaword_likelihood"
    data["configs"][task] = {"task": task, "output_type": "loglikelihood", "metadata": {
        "version": 1.0, "corpus": "dynaword", "measure": "likelihood", "language": "da"}}
    data["results"][task] = {"alias": task}
    data["versions"][task] = 1.0
    results.write_text(json.dumps(data))
    rows = [{"doc_id": i, "doc": {"id": f"prefix-{i:03d}", "index_identity": "idx-dynaword-v1"}, "target": "",
             "arguments": {}, "resps": [[[lp, lp > -1]]], "filtered_resps": [[lp, lp > -1]], "filter": "none",
             "metrics": ["likelihood"], "likelihood": {"id": f"prefix-{i:03d}", "logp": lp, "greedy": lp > -1,
                                                        "target_tokens": 50}}
            for i, lp in enumerate(logps)]
    path = folder / f"samples_{task}_{date}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
