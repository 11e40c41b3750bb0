"""The sampled checksum (docs/index-format.md): of the size and four 16 KiB blocks, the first and the
last included, so a change to a large file's first or final bytes is always seen."""
from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from propme_metrics.core.checksums import _SAMPLE_BLOCK, _sampled, sample_matches, sampled_digest


@settings(max_examples=40, deadline=None)
@given(extra=st.integers(1, 3 * _SAMPLE_BLOCK), where=st.sampled_from(["first", "last", "end-block"]))
def test_first_and_final_bytes_are_sampled(tmp_path_factory, extra, where):
    size = 4 * _SAMPLE_BLOCK + extra
    path = tmp_path_factory.mktemp("c") / "f"
    data = bytearray(os.urandom(size))
    path.write_bytes(bytes(data))
    before = sampled_digest(path)
    at = {"first": 0, "last": size - 1, "end-block": size - _SAMPLE_BLOCK}[where]
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    assert sampled_digest(path) != before
    assert not sample_matches(path, before)


def test_a_checksum_recorded_by_older_versions_is_still_accepted(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(os.urandom(4 * _SAMPLE_BLOCK + 2))  # the old last block stops 2 bytes short
    legacy = _sampled(path, last_at_end=False)
    assert legacy != sampled_digest(path)
    assert sample_matches(path, legacy) and sample_matches(path, sampled_digest(path))
    assert not sample_matches(path, "0" * 32)
