"""Text rules of tracing: what is traced at all, sentence boundaries, the mixed-mode span minimum,
normalization, degenerate generations, discoverable extraction, and where each final span lies in g.

A completion is traced exactly as the model wrote it, never stripped; every rule here reads it so.
"""
from __future__ import annotations

import re
import unicodedata
import zlib
from typing import Any

from propme_metrics.index.tokenizer import DELIMITER_CHARS

#: characters that end a sentence in text mode (a span may hold one only as its last character)
BOUNDARY_CHARS = DELIMITER_CHARS
#: mixed mode: shorter spans (other than the whole generation) are dropped, anchors are at least this long
MIXED_MIN_TOKENS = 4


def has_text(completion: str) -> bool:
    """Whether a completion is traced at all: one that is empty or only white space has no spans,
    no documents and no full match (it still counts as a generation)."""
    return bool(completion) and not completion.isspace()


def normalize_text(text: str) -> str:
    """Normalization behind `full_normalized`: NFKC, LF line ends, one space, no spaces at line
    ends, at most one blank line, stripped."""
    text = unicodedata.normalize("NFKC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


#: a degenerate generation compresses below this ratio with zlib ...
DEGENERATE_COMPRESSION = 0.10
#: ... and has fewer letters than this share of its non-space characters
DEGENERATE_LETTERS = 0.5


def letter_share(text: str) -> float | None:
    """The share of letters among the non-space characters (so outer white space cannot tip it);
    None when there is none."""
    visible = "".join(text.split())  # str.split drops exactly the characters str.isspace names
    return sum(map(str.isalpha, visible)) / len(visible) if visible else None


def is_degenerate(text: str) -> bool:
    """Repetitive junk: the text as given compresses below 10% with zlib and fewer than half of its
    non-space characters are letters (`letter_share`)."""
    raw = text.encode("utf-8", "surrogatepass")
    if not raw or len(zlib.compress(raw)) / len(raw) >= DEGENERATE_COMPRESSION:  # the cheap test first
        return False
    share = letter_share(text)
    return share is not None and share < DEGENERATE_LETTERS


def continuation_reproduced(generation: str, continuation: str) -> bool | None:
    """Discoverable extraction: True when the generation starts with the true continuation, white
    space folded on both sides (runs become one space, outer white space goes), so a completion that
    begins with the space or newline the continuation's decoding dropped or kept still counts.

    None (undefined) when the generation stopped inside the continuation while reproducing it so
    far: shorter than the continuation (e.g. lm-eval's max_gen_toks below its 50 tokens), it can
    neither show nor rule out extraction and is not counted in the rate. False otherwise (an empty
    generation, or one that differs from the continuation, is a real "not extracted")."""
    fold = lambda s: " ".join(s.split())  # noqa: E731
    cont, gen = fold(continuation), fold(generation)
    if not cont:
        return False
    if gen.startswith(cont):
        return True
    return None if gen and cont.startswith(gen) else False


def locate_segments(text: str, segments: list[dict[str, Any]]) -> list[tuple[int, int] | None]:
    """Character range of each final span in `text`, found by its `text`, left to right.

    Spans are searched in token order, each from the start of the previous one found; a span
    whose text (or stripped text) does not occur there gets None.
    """
    located: list[tuple[int, int] | None] = [None] * len(segments)
    pos = 0
    order = sorted(range(len(segments)), key=lambda i: (segments[i].get("start", 0), segments[i].get("end", 0)))
    for i in order:
        seg_text = segments[i].get("text") or ""
        for candidate in (seg_text, seg_text.strip()):
            if candidate:
                j = text.find(candidate, pos)
                if j >= 0:
                    located[i] = (j, j + len(candidate))
                    pos = j  # final spans may overlap: the next one starts at or after this start
                    break
    return located
