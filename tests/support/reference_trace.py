"""An independent SimpleTrace written out plainly from the published rules: brute-force longest
matches over the documents' own tokenizations, infini-gram's engine for `find` and
`get_doc_by_rank`, `difflib` for NV-recall, Python's `random` for the document samples.

It is slow and simple on purpose: the tests compare PropMe's tracer with it rule by rule.
"""
from __future__ import annotations

import json
import math
import random
import re
import unicodedata
from difflib import SequenceMatcher

import numpy as np

BOUNDARY = frozenset("!.?\n")


def has_boundary(text: str) -> bool:
    return not BOUNDARY.isdisjoint(text)


def published_words(text: str) -> list[str]:
    table = str.maketrans({"‘": "'", "’": "'", "‚": "'", "‛": "'", "“": '"', "”": '"', "„": '"', "‟": '"',
                           "«": '"', "»": '"', "–": "—", "―": "—", "−": "—", "…": "..."})
    norm = unicodedata.normalize("NFKC", text).translate(table)
    norm = re.sub(r"\.\s+\.\s+\.", "...", norm)
    norm = re.sub(r"\.\.\.(?=[0-9A-Za-z])", "... ", norm)
    norm = re.sub(r"_([^_]+)_", r"\1", norm)
    return norm.lower().split()


def published_nv_recall(generation: str, window: str) -> tuple[float, int]:
    """(NV-recall, matched words): difflib's blocks with its defaults, two merge passes."""
    gen, win = published_words(generation), published_words(window)
    n = len(gen)
    if not n:
        return 0.0, 0
    clamp = lambda v, lo, hi: max(lo, min(hi, v))  # noqa: E731
    passes = [(clamp(round(0.02 * n), 1, 6), clamp(round(0.01 * n), 1, 3), clamp(round(0.15 * n), 2, 20)),
              (clamp(round(0.08 * n), 2, 12), clamp(round(0.03 * n), 1, 5), clamp(round(0.35 * n), 4, 100))]
    blocks = [[m.a, m.a + m.size, m.b, m.b + m.size, m.size]
              for m in SequenceMatcher(None, gen, win).get_matching_blocks() if m.size]
    for gap, align, min_len in passes:
        merged: list[list[int]] = []
        for blk in blocks:
            if merged:
                cur = merged[-1]
                ga, gb = blk[0] - cur[1], blk[2] - cur[3]
                if max(ga, gb) <= gap and abs(ga - gb) <= align:
                    cur[1], cur[3], cur[4] = blk[1], blk[3], cur[4] + blk[4]
                    continue
            merged.append(list(blk))
        blocks = [b for b in merged if b[4] >= min_len]
    matched = sum(b[4] for b in blocks)
    return round(matched / n, 9), matched


def normalize_mixed(text: str) -> str:
    norm = unicodedata.normalize("NFKC", text).replace("\r\n", "\n").replace("\r", "\n")
    norm = re.sub(r"[ \t]+", " ", norm)
    norm = re.sub(r" *\n *", "\n", norm)
    norm = re.sub(r"\n{3,}", "\n\n", norm)
    return norm.strip()


class BruteForce:
    """Longest matches by brute force over the documents' token lists (matches never cross documents)."""

    def __init__(self, docs: list[list[int]], pad: int = 4096):
        parts: list[int] = []
        for d in docs:
            parts += d + [-1]
        self.flat = np.asarray(parts + [-1] * pad, dtype=np.int64)
        self.size = len(parts)
        self._tokens = self.flat.tolist()
        positions: dict[int, list[int]] = {}  # where each token occurs: every search's first step
        for pos, t in enumerate(parts):
            positions.setdefault(t, []).append(pos)
        self._at = {t: np.asarray(p, dtype=np.int64) for t, p in positions.items() if t >= 0}

    def _occurrences(self, q: list[int]) -> tuple[np.ndarray, int]:
        """Positions where q starts, scanning forward token by token, and how many tokens matched."""
        if not q or q[0] not in self._at:
            return np.empty(0, dtype=np.int64), 0
        cand, k = self._at[q[0]], 1
        while k < len(q) and len(cand) > 8:
            keep = self.flat[cand + k] == q[k]
            if not keep.any():
                return cand, k
            cand, k = cand[keep], k + 1
        lengths = []  # a few candidates left: each extended on its own
        for p in cand.tolist():
            j = k
            while j < len(q) and self._tokens[p + j] == q[j]:
                j += 1
            lengths.append(j)
        k = max(lengths)
        return cand[np.asarray(lengths) == k], k

    def longest(self, q: list[int], i: int) -> int:
        return self._occurrences(list(q[i:]))[1]

    def count(self, q: list[int]) -> int:
        cand, k = self._occurrences(list(q))
        return len(cand) if k == len(q) else 0


class ReferenceTracer:
    """The published SimpleTrace over an engine, with PropMe's five deliberate deviations
    (word starts from the space marker, summed log-probabilities, counts, both neighbours, nothing
    traced in a completion that is only white space)."""

    def __init__(self, engine, tokenizer, brute: BruteForce, word_initial: set[int], unigram: dict[int, int],
                 total: int, mode: str = "mixed", seed: int = 42, docs_per_span: int = 10):
        self.engine, self.tok, self.brute = engine, tokenizer, brute
        self.word_initial, self.mode, self.seed, self.k_docs = word_initial, mode, seed, docs_per_span
        self.unigram, self.total = unigram, total
        self._decoded: dict[tuple[int, ...], str] = {}

    def decode(self, ids) -> str:
        """The tokenizer's decode, remembered: `trim` decodes every end of a span, and copies share spans."""
        key = tuple(ids)
        if key not in self._decoded:
            self._decoded[key] = self.tok.decode(list(key), skip_special_tokens=False)
        return self._decoded[key]

    def rarity(self, ids) -> float:
        return math.fsum(math.log(self.unigram[t]) - math.log(self.total) if self.unigram.get(t) else 0.0
                         for t in ids)

    def flat(self, ids) -> list[tuple[int, int]]:
        res = self.engine.find(input_ids=list(ids))
        return [(s, r) for s, (a, b) in enumerate(res["segment_by_shard"]) for r in range(a, b)]

    @staticmethod
    def evenly(items, k):
        if k >= len(items):
            return list(items)
        if k == 1:
            return [items[len(items) // 2]]
        n = len(items)
        idx = []
        for i in range(k):
            j = round(i * (n - 1) / (k - 1))
            if j not in idx:
                idx.append(j)
        for j in range(n):
            if len(idx) == k:
                break
            if j not in idx:
                idx.append(j)
        return [items[j] for j in idx]

    def docs(self, g, ranks, limit, rng, max_disp_len):
        if len(ranks) > limit:
            ranks = self.evenly(ranks, limit) if rng is None else rng.sample(ranks, limit)
        out, seen = [], set()
        for s, r in ranks:
            d = self.engine.get_doc_by_rank(s=s, rank=r, max_disp_len=max_disp_len)
            if (s, d["doc_ix"]) in seen:
                continue
            seen.add((s, d["doc_ix"]))
            text = self.decode(d["token_ids"])
            meta = json.loads(d["metadata"]) if d["metadata"].strip() else {}
            sid = next((meta[k] for k in ("id", "doc_id", "source", "url") if meta.get(k)), d["doc_ix"])
            if g in text:
                tier = "full_raw"
            elif self.mode == "mixed" and normalize_mixed(g) and normalize_mixed(g) in normalize_mixed(text):
                tier = "full_normalized"
            else:
                tier = "partial"
            nv, matched = published_nv_recall(g, text)
            out.append({"doc_ix": d["doc_ix"], "id": sid, "text": text, "tier": tier, "nv": nv, "matched": matched})
        return out

    def is_initial(self, ids, pos):
        return pos == 0 or ids[pos] in self.word_initial

    def trim(self, ids, start, end):
        first = next((i for i in range(start, end) if has_boundary(self.decode([ids[i]]))), None)
        if first is not None:
            # the largest valid end, found by trying every end (the published code binary-searches)
            end = max(e for e in range(first, end + 1)
                      if e == first or not has_boundary(self.decode(ids[start:e])[:-1]))
        while start < end < len(ids) and not self.is_initial(ids, end):
            end -= 1
        return end

    def keep(self, ids, s, e):
        text = self.decode(ids[s:e])
        if self.mode == "mixed":
            return (s, e) == (0, len(ids)) or (e - s >= 4 and any(not c.isspace() for c in text))
        return (not has_boundary(text[:-1]) and self.is_initial(ids, s)
                and (e == len(ids) or self.is_initial(ids, e)))

    def trace(self, generation: str) -> list[tuple[int, int, list[dict]]]:
        # the completion exactly as given, as the published tracer takes it (never stripped); one
        # that is only white space has nothing to trace (the one rule added to the published code)
        g = generation
        if not g.strip():
            return []
        ids = self.tok.encode(g, add_special_tokens=False).ids
        L = len(ids)
        M, rng = 5 * L, random.Random(f"{self.seed}:{g}")
        full = []
        if self.mode == "mixed" and self.flat(ids):
            full = self.docs(g, self.flat(ids), self.k_docs, None, M)
        starts = [b for b in range(L - 1) if self.mode == "mixed" or self.is_initial(ids, b)]
        spans = [(b, b + self.brute.longest(ids, b)) for b in starts]
        clean = []
        for s, e in spans:
            if self.mode == "text":
                e = self.trim(ids, s, e)
            if s < e and self.keep(ids, s, e):
                clean.append((s, e))
        maximal, last = [], -1
        for s, e in sorted(clean):
            if e > last:
                maximal.append((s, e))
                last = e
        k = max(1, math.ceil(L / 20))
        kept = sorted(sorted(maximal, key=lambda se: self.rarity(ids[se[0]:se[1]]))[:k])
        span_docs = [self.docs(g, self.flat(ids[s:e]), self.k_docs, rng, M) for s, e in kept]
        finals = []
        if kept:
            groups, (cs, ce) = [[0]], kept[0]
            for i, (s, e) in enumerate(kept[1:], start=1):
                if s < ce and self.flat(ids[min(cs, s):max(ce, e)]):
                    groups[-1].append(i)
                    cs, ce = min(cs, s), max(ce, e)
                else:
                    groups.append([i])
                    cs, ce = s, e
            for grp in groups:
                s, e = min(kept[i][0] for i in grp), max(kept[i][1] for i in grp)
                docs = span_docs[grp[0]] if len(grp) == 1 else self.docs(g, self.flat(ids[s:e]), self.k_docs, rng, M)
                finals.append((s, e, docs))
        if self.mode == "mixed":
            if not full:
                cands = sorted({(s, e) for s, e in spans if e - s >= 4},
                               key=lambda se: (-(se[1] - se[0]), self.rarity(ids[se[0]:se[1]]), se[0]))[:8]
                seen = set()
                for s, e in cands:
                    per = max(1, math.ceil(self.k_docs / len(cands)))
                    for d in self.docs(g, self.flat(ids[s:e]), per, None, M):
                        if d["tier"] != "partial" and (str(d["id"]).strip(), d["text"]) not in seen and len(full) < self.k_docs:
                            seen.add((str(d["id"]).strip(), d["text"]))
                            full.append(d)
            if full:
                at = next((i for i, f in enumerate(finals) if f[:2] == (0, L)), None)
                merged, seen = [], set()
                for d in full + (finals[at][2] if at is not None else []):
                    ident = (str(d["id"]).strip(), d["tier"], d["text"])
                    if ident not in seen:
                        seen.add(ident)
                        merged.append(d)
                finals = [(0, L, merged)] + [f for i, f in enumerate(finals) if i != at]
        return sorted(finals, key=lambda f: f[1] - f[0], reverse=True)
