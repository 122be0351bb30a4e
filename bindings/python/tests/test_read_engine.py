"""File.read_engine (issue 45, part 3): each file's file system decides whether views are mapped or read with owned
reads, and the report says which and why. HOSTFIRST_MAP (read at each open) forces owned reads here, on a local
disk, which is what a network or FUSE file gets by default (tests/it/file_engine.rs runs a real FUSE mount)."""

import struct

import numpy as np
import pytest

import hostfirst


def write(path, arr):
    header = ('{"x":{"dtype":"F32","shape":[%d,%d],"data_offsets":[0,%d]}}' % (*arr.shape, arr.nbytes)).encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + arr.astype("<f4").tobytes())


def test_a_local_file_is_mapped_and_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("HOSTFIRST_MAP", raising=False)
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    write(tmp_path / "m.safetensors", arr)
    with hostfirst.open(tmp_path / "m.safetensors") as f:
        r = f.read_engine
        assert isinstance(r, str) and "f_type 0x" in r and ": mapped (" in r, r
        assert "; reads: " in r and "; O_DIRECT: " in r, r
        assert f["x"].data_ptr != 0


def test_owned_reads_hand_out_no_mapping_and_numpy_copies(tmp_path, monkeypatch):
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    write(tmp_path / "m.safetensors", arr)
    monkeypatch.setenv("HOSTFIRST_MAP", "never")
    with hostfirst.open(tmp_path / "m.safetensors") as f:
        assert "owned reads" in f.read_engine and "HOSTFIRST_MAP=never" in f.read_engine, f.read_engine
        v = f["x"]
        assert v.data_ptr == 0  # no mapping handed out
        np.testing.assert_array_equal(np.asarray(v), arr)  # read once with pread into memory the view keeps
        np.testing.assert_array_equal(np.asarray(v[:, 1:3]), arr[:, 1:3])  # a strided view: its packed bytes


def test_an_unknown_hostfirst_map_is_refused_naming_it(tmp_path, monkeypatch):
    write(tmp_path / "m.safetensors", np.zeros((1, 1), np.float32))
    monkeypatch.setenv("HOSTFIRST_MAP", "sometimes")
    with pytest.raises(hostfirst.InvalidArgumentError, match="HOSTFIRST_MAP='sometimes'"):
        hostfirst.open(tmp_path / "m.safetensors")
