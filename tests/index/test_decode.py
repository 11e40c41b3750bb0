"""The byte-table decoder (index/decode.py) against `tokenizers`' own decode: every window of the
test corpora, windows cut inside multi-byte characters, special and unknown ids, for GPT-2
byte-level BPE, two SentencePiece styles (Llama's byte-fallback BPE, Metaspace Unigram), WordPiece
and a decoder-less word-level tokenizer, all built offline."""
from __future__ import annotations

import random

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from propme.demo.synthetic import generate_corpus
from propme_metrics.index.decode import TokenDecoder, byte_level_chars, decoder_rules

#: text whose characters take 2, 3 and 4 UTF-8 bytes, combining marks and odd white space
MULTIBYTE = ("Æbleskiver på Østerbro koster 25 kr. — «billigt»! 日本語のテキスト、中文字符。 Ελληνικά. "
             "Emoji 😀👍🏽 and flags 🇩🇰; e\u0301 n\u0303 \u00a0nbsp\u3000ideographic\u200bzero-width. "
             "Tab\tand\nnewline,   spaces.  ")


def corpus_texts() -> list[str]:
    return [r["text"] for r in generate_corpus(40, seed=7)] + [MULTIBYTE, MULTIBYTE * 3]


def _llama_style() -> Tokenizer:
    """Llama's layout: '▁' pieces, <0xHH> byte pieces in the model vocabulary (byte fallback), the
    decoder Replace/ByteFallback/Fuse/Strip; trained on the corpus without the CJK/emoji text, so
    those characters fall back to byte pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.train_from_iterator([r["text"] for r in generate_corpus(60, seed=3)],
                            trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"],
                                                show_progress=False))
    vocab = tok.get_vocab(with_added_tokens=False)
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
              for m in __import__("json").loads(tok.to_str())["model"]["merges"]]
    out = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    out.normalizer = tok.normalizer
    out.add_special_tokens(["<unk>", "<s>", "</s>"])
    out.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    return out


def _metaspace_unigram() -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(corpus_texts(), trainers.UnigramTrainer(vocab_size=500, special_tokens=["<unk>", "</s>"],
                                                                    unk_token="<unk>", show_progress=False))
    return tok


def _wordpiece() -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.train_from_iterator([r["text"] for r in generate_corpus(60, seed=3)] + ["don't it's we've you're I'm do not"],
                            trainers.WordPieceTrainer(vocab_size=800, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                                      show_progress=False))
    return tok


def _word_level() -> Tokenizer:
    texts = corpus_texts()
    words = sorted({w for t in texts for w in t.split()})
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words + ["[UNK]"])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["</s>"])
    return tok


@pytest.fixture(scope="module", params=["gpt2", "llama", "metaspace", "wordpiece", "wordlevel"])
def tokenizer(request, gpt2_dir) -> Tokenizer:
    if request.param == "gpt2":
        return Tokenizer.from_file(str(gpt2_dir / "tokenizer.json"))
    return {"llama": _llama_style, "metaspace": _metaspace_unigram, "wordpiece": _wordpiece,
            "wordlevel": _word_level}[request.param]()


def _reference(tok: Tokenizer, seq) -> str:
    return tok.decode(list(seq), skip_special_tokens=False)


def test_the_table_covers_every_family_built_here(tokenizer):
    assert decoder_rules(tokenizer) is not None


def test_every_window_of_the_corpora(tokenizer):
    """Windows of several lengths at every start of every document, as lists and as arrays."""
    dec = TokenDecoder(tokenizer)
    for text in corpus_texts():
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        arr = np.asarray(ids, dtype=np.uint16)
        for length in (1, 2, 3, 5, 16, 80, len(ids)):
            starts = range(max(1, len(ids) - length + 1))
            windows = [ids[s:s + length] for s in starts]
            expected = [_reference(tokenizer, w) for w in windows]
            assert dec.decode_batch(windows) == expected, length
            assert [dec.decode(arr[s:s + length]) for s in starts] == expected
            assert dec.decode_batch([arr[s:s + length] for s in starts]) == expected
            for w, text in zip(windows, expected):  # the quick visibility test never calls blank text visible
                assert not dec.surely_visible(w) or text.strip()


def test_windows_cut_inside_multibyte_characters(tokenizer):
    """Every (start, end) window of the multi-byte text: byte-level pieces split characters (U+FFFD
    where the tokenizer puts one), byte-fallback runs cut short, combining marks apart."""
    dec = TokenDecoder(tokenizer)
    ids = tokenizer.encode(MULTIBYTE, add_special_tokens=False).ids
    windows = [ids[a:b] for a in range(len(ids)) for b in range(a, len(ids) + 1)]
    assert dec.decode_batch(windows) == [_reference(tokenizer, w) for w in windows]
    if decoder_rules(tokenizer).__class__.__name__ in ("_ByteLevel", "_SentencePiece"):
        # the text really was cut inside characters somewhere
        assert any("\ufffd" in _reference(tokenizer, w) for w in windows)


def test_random_ids_special_tokens_and_ids_outside_the_vocabulary(tokenizer):
    dec = TokenDecoder(tokenizer)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    special = sorted(tokenizer.get_added_tokens_decoder())
    rng = random.Random(5)
    seqs = [[rng.randrange(size) for _ in range(rng.randrange(0, 40))] for _ in range(400)]
    seqs += [[s] for s in special] + [[special[0], 5, 6], [7, special[-1]], [size + 3], [4, size + 10, 5], []]
    assert dec.decode_batch(seqs) == [_reference(tokenizer, s) for s in seqs]
    assert dec.decode(np.asarray([4, size + 10, 5], dtype=np.int64)) == _reference(tokenizer, [4, size + 10, 5])
    arrays = [np.asarray(q, dtype=np.uint32) for q in seqs]
    assert dec.decode_batch(arrays) == [_reference(tokenizer, s) for s in seqs]
    assert dec.decode_batch(arrays[:-6]) == [_reference(tokenizer, s) for s in seqs[:-6]]  # all ids in range
    with pytest.raises(OverflowError):  # a negative id is refused as the tokenizer refuses it
        dec.decode([3, -1])


def test_an_unknown_decoder_falls_back_to_the_tokenizer(gpt2_dir):
    tok = Tokenizer.from_file(str(gpt2_dir / "tokenizer.json"))
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    dec = TokenDecoder(tok)
    assert dec.rules is None
    ids = tok.encode(MULTIBYTE).ids
    assert dec.decode(ids) == _reference(tok, ids)
    tok.decoder = decoders.Sequence([decoders.Replace("_", " "), decoders.Fuse()])
    assert decoder_rules(tok) is None


def test_byte_level_alphabet_is_the_tokenizers_own():
    assert set(byte_level_chars()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(byte_level_chars().values()) == list(range(256))
