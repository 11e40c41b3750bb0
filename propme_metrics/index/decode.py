"""Decoding index tokens to text through a per-vocabulary byte table: what the tokenizer's own
`decode(ids, skip_special_tokens=False)` returns, at a fraction of its cost on long windows.

Each token id maps to the bytes it contributes; a sequence is one numpy gather of those bytes and
one UTF-8 decode. The table follows the tokenizer's decoder rules for the families it can express:

- byte-level BPE (decoder `ByteLevel`, GPT-2 style): each piece's characters map back to bytes;
  invalid UTF-8 (a window cut inside a character) becomes U+FFFD per maximal invalid subpart,
  as the tokenizer's lossy decode does;
- SentencePiece pieces (decoder `Sequence[Replace('▁', ' '), ByteFallback, Fuse, Strip(' ', n, 0)]`,
  Llama style, any of those steps present in that order): '▁' is a space, `<0xHH>` pieces are
  raw bytes, then up to n leading spaces go; when the bytes are not valid UTF-8 the tokenizer
  turns every byte piece of the bad run into U+FFFD, so that sequence is left to the tokenizer;
- `Metaspace` (prepend scheme always/first/never): '▁' is a space, except that the first piece
  loses its '▁' characters (unless the scheme is never);
- WordPiece (decoder `WordPiece`): '##' continuations join their word, other pieces get a space
  before them (not the first), the decoder's clean-up applied piece by piece;
- no decoder at all: the pieces joined by single spaces.

Anything else is decoded by the tokenizer itself: every decoder of another type (BPE suffixes,
CTC, other Replace patterns, Strip from the right, ...), and within the supported ones every
sequence holding an added (special) token or an id outside the vocabulary.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from operator import itemgetter

import numpy as np

_SPIECE = "\u2581"  #: SentencePiece's space marker
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
#: WordPiece's clean-up (tokenizers' `decoders::wordpiece::cleanup`), in its order
_WORDPIECE_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                      (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def byte_level_chars() -> dict[str, int]:
    """The byte-level alphabet (GPT-2's bytes_to_unicode): printable bytes stand for themselves,
    the other 68 bytes for the code points 256 and up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _wordpiece_cleanup(text: str) -> str:
    for old, new in _WORDPIECE_CLEANUP:
        text = text.replace(old, new)
    return text


class _Rules:
    """How one decoder family turns a piece into bytes, and what happens to the joined text."""

    strict = False     #: invalid UTF-8 is left to the tokenizer (else replaced, as a lossy decode does)
    strip_left = 0     #: leading spaces removed from the text (SentencePiece's Strip)
    has_head = False   #: the first piece of a sequence decodes differently

    def body(self, piece: str) -> bytes | None:
        """Bytes of a piece that is not the first; None when the table cannot express it."""
        raise NotImplementedError

    def bodies(self, pieces: list[str | None]) -> list[bytes | None]:
        """`body` of every piece (None stays None)."""
        return [None if p is None else self.body(p) for p in pieces]

    def head(self, piece: str) -> bytes | None:
        return self.body(piece)


class _ByteLevel(_Rules):
    def __init__(self):
        chars = byte_level_chars()
        self.to_latin1 = str.maketrans({c: chr(b) for c, b in chars.items()})
        self.foreign = re.compile("[^" + re.escape("".join(chars)) + "]")

    def body(self, piece: str) -> bytes | None:
        if self.foreign.search(piece):  # the tokenizer would use the piece's own UTF-8: added tokens only
            return None
        return piece.translate(self.to_latin1).encode("latin-1")

    def bodies(self, pieces: list[str | None]) -> list[bytes | None]:
        # one translation of the whole vocabulary: a piece's characters are its bytes
        texts = [p or "" for p in pieces]
        joined = "".join(texts)
        data = joined.translate(self.to_latin1).encode("latin-1", "replace")
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        ends = np.cumsum(lens)
        out: list[bytes | None] = [data[a:b] for a, b in zip((ends - lens).tolist(), ends.tolist())]
        for m in self.foreign.finditer(joined):
            out[int(np.searchsorted(ends, m.start(), side="right"))] = None
        for i, p in enumerate(pieces):
            if p is None:
                out[i] = None
        return out


class _SentencePiece(_Rules):
    def __init__(self, replace: bool, byte_fallback: bool, strip_left: int):
        self.replace, self.byte_fallback, self.strip_left = replace, byte_fallback, strip_left
        self.strict = byte_fallback

    def body(self, piece: str) -> bytes | None:
        if self.byte_fallback and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            m = _BYTE_PIECE.fullmatch(piece)
            return bytes([int(m.group(1), 16)]) if m else None  # '<0x+F>' and the like: the tokenizer decides
        return (piece.replace(_SPIECE, " ") if self.replace else piece).encode("utf-8")


class _Metaspace(_Rules):
    def __init__(self, replacement: str, drop_first: bool):
        self.replacement, self.has_head = replacement, drop_first

    def body(self, piece: str) -> bytes | None:
        return piece.replace(self.replacement, " ").encode("utf-8")

    def head(self, piece: str) -> bytes | None:
        return piece.replace(self.replacement, "").encode("utf-8") if self.has_head else self.body(piece)


class _WordPiece(_Rules):
    has_head = True

    def __init__(self, prefix: str, cleanup: bool):
        self.prefix, self.cleanup = prefix, cleanup

    def _clean(self, text: str) -> bytes:
        return (_wordpiece_cleanup(text) if self.cleanup else text).encode("utf-8")

    def body(self, piece: str) -> bytes | None:
        return self._clean(piece.replace(self.prefix, "", 1) if piece.startswith(self.prefix) else " " + piece)

    def head(self, piece: str) -> bytes | None:
        return self._clean(piece)


class _Joined(_Rules):
    """No decoder: the tokenizer joins the pieces with spaces."""

    has_head = True

    def body(self, piece: str) -> bytes | None:
        return (" " + piece).encode("utf-8")

    def head(self, piece: str) -> bytes | None:
        return piece.encode("utf-8")


def decoder_rules(backend) -> _Rules | None:
    """The table rules for a `tokenizers.Tokenizer`'s decoder, or None when they cannot be expressed."""
    decoder = backend.decoder
    if decoder is None:
        return _Joined()
    spec = json.loads(decoder.__getstate__())
    kind = spec.get("type")
    if kind == "ByteLevel":
        return _ByteLevel()
    if kind == "WordPiece":
        return _WordPiece(spec.get("prefix", "##"), bool(spec.get("cleanup", True)))
    if kind == "Metaspace":
        scheme = spec.get("prepend_scheme", "always")
        if scheme not in ("always", "first", "never") or len(spec.get("replacement", "")) != 1:
            return None
        return _Metaspace(spec["replacement"], drop_first=scheme != "never")
    if kind == "Sequence":
        steps = [s.get("type") for s in spec.get("decoders", [])]
        order = ["Replace", "ByteFallback", "Fuse", "Strip"]
        if not steps or any(s not in order for s in steps) or steps != sorted(steps, key=order.index) \
                or len(set(steps)) != len(steps):
            return None
        parts = {s["type"]: s for s in spec["decoders"]}
        replace = parts.get("Replace")
        if replace is not None and (replace.get("pattern") != {"String": _SPIECE} or replace.get("content") != " "):
            return None
        strip = parts.get("Strip")
        if strip is not None and (strip.get("content") != " " or strip.get("stop", 0) != 0):
            return None
        if replace is None and "ByteFallback" not in parts:
            return None  # Fuse/Strip alone: not a SentencePiece decoder this table knows
        return _SentencePiece(replace is not None, "ByteFallback" in parts, int(strip.get("start", 0)) if strip else 0)
    return None


def _packed(parts: list[bytes | None]) -> tuple[bytes, list[int]]:
    """All parts in one buffer and their ends (-1: None), so that the lists behind them can be freed."""
    ends, end = [], 0
    for p in parts:
        if p is None:
            ends.append(-1)
        else:
            end += len(p)
            ends.append(end)
    return b"".join(p for p in parts if p is not None), ends


def _unpacked(data: bytes, ends: list[int]) -> list[bytes | None]:
    out: list[bytes | None] = []
    start = 0
    for end in ends:
        if end < 0:
            out.append(None)
        else:
            out.append(data[start:end])
            start = end
    return out


class TokenDecoder:
    """`decode` / `decode_batch` of token ids, identical to the tokenizer's (`skip_special_tokens=False`).

    Built once per tokenizer (one pass over the vocabulary; about 2.5 MB for GPT-2's 50,257 ids);
    sequences the table cannot express go to the tokenizer itself (see the module docstring)."""

    def __init__(self, backend):
        self.backend = backend
        self.rules = decoder_rules(backend)
        if self.rules is None:
            return
        size = backend.get_vocab_size(with_added_tokens=True)
        pieces = [backend.id_to_token(i) for i in range(size)]
        for i in backend.get_added_tokens_decoder():
            if 0 <= i < size:
                pieces[i] = None  # added tokens: the tokenizer decodes them its own way
        body = self.rules.bodies(pieces)
        head = [None if p is None else self.rules.head(p) for p in pieces] if self.rules.has_head else body
        # a printable non-space ASCII byte survives every rule above unchanged (no lossy decode,
        # strip or clean-up removes one): a sequence holding such a piece never decodes to blank text
        printable = re.compile(rb"[\x21-\x7e]").search
        self._visible = bytes(b is not None and h is not None and printable(b) is not None and printable(h) is not None
                              for b, h in zip(body, head))  # one byte per id, not a list
        packed = _packed(body), (_packed(head) if self.rules.has_head else None)
        del pieces, body, head  # freed before the table's objects are made: they reuse that memory
        #: bytes of each id (None: not expressible); `head`: of an id that starts a sequence
        self.body = _unpacked(*packed[0])
        self.head = _unpacked(*packed[1]) if packed[1] is not None else self.body
        self._body_array = np.empty(len(self.body), dtype=object)
        self._body_array[:] = self.body

    @staticmethod
    @lru_cache(maxsize=4)
    def of(backend) -> TokenDecoder:
        """The decoder of a tokenizer object, built once per object in a process (the last few; a
        table is read-only): `load_backend` hands out one object per tokenizer file, so every tracer and
        contamination check of an index shares one table. Tokenizer objects compare by identity."""
        return TokenDecoder(backend)

    def decode(self, ids) -> str:
        """Text of one sequence of ids (a list or a numpy array)."""
        if self.rules is None or not len(ids):
            return self._tokenizer_decode(ids)
        try:
            data = self._bytes(ids)
        except (TypeError, IndexError):  # an id the table cannot express (None) or outside the vocabulary
            return self._tokenizer_decode(ids)
        return self._text(data, ids)

    def _text(self, data: bytes | None, ids) -> str:
        """The decoded text of a sequence whose table bytes are `data` (None: the tokenizer decides)."""
        rules = self.rules
        if data is None:
            return self._tokenizer_decode(ids)
        if rules.strict:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:  # byte pieces the tokenizer replaces its own way: let it decide
                return self._tokenizer_decode(ids)
        else:
            text = data.decode("utf-8", "replace")
        if rules.strip_left:
            n = 0
            while n < rules.strip_left and n < len(text) and text[n] == " ":
                n += 1
            text = text[n:]
        return text

    def _bytes(self, ids) -> bytes | None:
        """The table's bytes of a non-empty sequence; None for a negative id (the tokenizer refuses it)."""
        if isinstance(ids, np.ndarray):
            if ids.dtype.kind != "u" and ids.min() < 0:
                return None
            if self.rules.has_head:
                return self.head[ids[0]] + b"".join(self._body_array[ids[1:]].tolist())
            return b"".join(self._body_array[ids].tolist())  # numpy's gather of the pieces, one join
        if min(ids) < 0:
            return None
        if len(ids) == 1:
            return self.head[ids[0]]
        if self.rules.has_head:
            return self.head[ids[0]] + b"".join(itemgetter(*ids[1:])(self.body)) if len(ids) > 2 \
                else self.head[ids[0]] + self.body[ids[1]]
        return b"".join(itemgetter(*ids)(self.body))

    def surely_visible(self, ids: Sequence[int]) -> bool:
        """True when `decode(ids)` certainly holds a character other than white space (a quick test
        on the pieces; False means: decode to know)."""
        return self.rules is not None and any(map(self._visible.__getitem__, ids))

    def decode_batch(self, seqs: Sequence) -> list[str]:
        """`decode` of each sequence; numpy arrays of unsigned ids (document windows) share one gather."""
        if self.rules is None or self.rules.has_head or not seqs or \
                not all(isinstance(q, np.ndarray) and q.dtype.kind == "u" for q in seqs):
            return [self.decode(q) for q in seqs]
        try:
            pieces = self._body_array[np.concatenate(seqs)].tolist()
        except IndexError:  # an id outside the vocabulary: one sequence at a time
            return [self.decode(q) for q in seqs]
        out, a = [], 0
        for q in seqs:
            b = a + len(q)
            try:
                data = b"".join(pieces[a:b]) if b > a else None
            except TypeError:  # a piece the table cannot express
                data = None
            out.append(self._text(data, q))
            a = b
        return out

    def _tokenizer_decode(self, ids) -> str:
        return self.backend.decode(ids.tolist() if isinstance(ids, np.ndarray) else list(ids), skip_special_tokens=False)
