"""Outputs that are character devices or FIFOs are written in place (streamed), never replaced by a
regular file; block devices and sockets are refused; regular files are still replaced atomically.

The character device is a node made here, in the test's own folder, with the numbers of the null
device (writes are discarded): the machine's /dev is never touched."""
from __future__ import annotations

import os
import socket
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.files import atomic_output, write_atomic
from propme_metrics.core.outputs import check_outputs
from support.special_files import NULL_DEVICE, FifoReader, null_node

KINDS = ["missing", "regular", "fifo", "device", "link-to-regular", "link-to-fifo", "link-to-device"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), data=st.binary(max_size=5000))
def test_every_kind_of_output_path_gets_the_bytes_and_keeps_its_kind(tmp_path_factory, kind, data):
    folder = tmp_path_factory.mktemp("out")
    target = folder / ("target" if kind.startswith("link-") else "out")
    base = kind.removeprefix("link-to-")
    reader = None
    if base == "regular":
        target.write_bytes(b"old contents")
    elif base == "fifo":
        reader = FifoReader(target)
    elif base == "device":
        null_node(target)
    path = target
    if kind.startswith("link-"):
        path = folder / "out"
        path.symlink_to(target)
    check_outputs({"--out": path})
    write_atomic(path, data)
    if base in ("missing", "regular"):
        assert path.read_bytes() == data and stat.S_ISREG(os.stat(path).st_mode)  # a link is replaced, as before
    elif base == "fifo":
        assert reader.result() == data and stat.S_ISFIFO(os.stat(path).st_mode)
    else:
        st_ = os.stat(path)
        assert stat.S_ISCHR(st_.st_mode) and st_.st_rdev == NULL_DEVICE
    if kind.startswith("link-"):
        assert path.is_symlink() or base == "regular"
    assert sorted(p.name for p in folder.iterdir()) == sorted({path.name, target.name})  # no temporary left


def test_a_failed_write_into_a_fifo_leaves_the_fifo(tmp_path):
    reader = FifoReader(tmp_path / "pipe")
    with pytest.raises(RuntimeError):
        with atomic_output(tmp_path / "pipe", "w") as fh:
            fh.write("partial\n")
            raise RuntimeError("stopped")
    assert reader.result() == b"partial\n" and stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def test_block_devices_and_sockets_are_refused(tmp_path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        with pytest.raises(ConfigError, match="is a socket"):
            check_outputs({"--out": tmp_path / "sock"})
    finally:
        sock.close()
    try:
        os.mknod(tmp_path / "blk", stat.S_IFBLK | 0o600, os.makedev(7, 255))
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    with pytest.raises(ConfigError, match="is a block device"):
        check_outputs({"--out": tmp_path / "blk"})
    assert stat.S_ISBLK(os.stat(tmp_path / "blk").st_mode)


def test_two_outputs_into_one_device_are_accepted(tmp_path):
    node = null_node(tmp_path / "null")
    check_outputs({"--out": node, "--summary": node})
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="same file"):
        check_outputs({"--out": tmp_path / "f", "--summary": tmp_path / "f"})
