"""A tokenizer folder is loaded once per content in a process (`index/tokenizer._LOADED`): the same
folder gives the same object, a folder saved anew with another tokenizer gives the new one, and
failures are never kept."""
from __future__ import annotations

import os

import pytest

from propme_metrics.core.errors import ConfigError
from propme_metrics.index.tokenizer import load_backend, load_tokenizer
from propme_metrics.testing import word_level_tokenizer


def test_one_folder_is_loaded_once_and_a_folder_saved_anew_is_loaded_anew(tmp_path):
    folder = word_level_tokenizer(tmp_path / "tok", 10)
    first = load_tokenizer(str(folder))
    assert load_tokenizer(str(folder)) is first and load_backend(folder) is load_backend(folder)
    assert first.encode("w3 w9", add_special_tokens=False) == [3, 9]
    # the same size of vocabulary, other ids: file sizes and the folder's name stay the same
    backend_before = load_backend(folder)
    word_level_tokenizer(folder, 11)
    again = load_tokenizer(str(folder))
    assert again is not first and again.encode("w10", add_special_tokens=False) == [10]
    assert load_backend(folder) is not backend_before and load_backend(folder).encode("w10").ids == [10]
    # options are part of what was loaded
    assert load_tokenizer(str(folder), model_max_length=7) is not again


def test_a_rewritten_file_of_the_same_size_and_time_is_loaded_anew(tmp_path):
    """Files are told apart by their bytes, not their size or modification time."""
    folder = word_level_tokenizer(tmp_path / "tok", 10)
    path = folder / "tokenizer.json"
    before = load_backend(folder)
    text = path.read_text(encoding="utf-8")
    swapped = text.replace('"w1": 1,', '"w1": 2,', 1).replace('"w2": 2,', '"w2": 1,', 1)
    assert swapped != text and len(swapped) == len(text)
    stat = path.stat()
    path.write_text(swapped, encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert load_backend(folder) is not before and load_backend(folder).encode("w1 w2").ids == [2, 1]


def test_a_failed_load_is_not_kept(tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    with pytest.raises(ConfigError, match="cannot load tokenizer file"):
        load_backend(folder)
    word_level_tokenizer(folder, 10)
    assert load_backend(folder).encode("w4").ids == [4]


def test_one_decoder_table_per_loaded_tokenizer(tmp_path):
    """`TokenDecoder.of` builds a tokenizer object's table once; a tokenizer loaded anew gets its own."""
    from propme_metrics.index.decode import TokenDecoder

    folder = word_level_tokenizer(tmp_path / "tok", 10)
    table = TokenDecoder.of(load_backend(folder))
    assert TokenDecoder.of(load_backend(folder)) is table and table.decode([3, 9]) == "w3 w9"
    word_level_tokenizer(folder, 11)
    again = TokenDecoder.of(load_backend(folder))
    assert again is not table and again.decode([10, 3]) == "w10 w3"
