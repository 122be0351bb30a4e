"""Declared read plans (hostfirst.ReadPlan, safe_open.read_plan) and safetensors 0.9's `safe_open.prefetch`: the
numbers before reading, the arrays after, the over-read cap, bad input with its exception, and code written for
safetensors' prefetch running on hostfirst's safe_open unchanged."""

import json
import struct

import numpy as np
import pytest

import hostfirst


def _write(path, tensors):
    """A safetensors file of `tensors` ({name: array}, written in the order given), header padded to 8 bytes."""
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        code = {np.dtype("float32"): "F32", np.dtype("uint8"): "U8", np.dtype("int64"): "I64"}[a.dtype]
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(45)
    tensors = {
        "w": rng.standard_normal((64, 2048)).astype(np.float32),  # rows of 8 KiB
        "b": np.arange(4096, dtype=np.uint8),
        "c": np.arange(1024, dtype=np.int64),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    path = tmp_path / "model.safetensors"
    _write(path, tensors)
    return path, tensors


def test_numbers_then_arrays(model):
    path, t = model
    with hostfirst.ReadPlan(path, [("w", (slice(8, 24), slice(0, 128))), "b", "c", ("w", 40)]) as plan:
        assert plan.names == ["w", "b", "c", "w"]
        assert plan.shapes == [(16, 128), (4096,), (1024,), (2048,)]
        assert plan.needed_bytes == 16 * 128 * 4 + 4096 + 8192 + 8192
        assert plan.read_bytes >= plan.needed_bytes and plan.files == 1
        reqs = plan.request_list()
        assert len(reqs) == plan.requests and sum(r.length for r in reqs) == plan.read_bytes
        assert all(a.offset + a.length <= b.offset for a, b in zip(reqs, reqs[1:]))
        assert any(r.slices == 2 for r in reqs), reqs  # b and c are neighbours: one request
        assert plan.peak_memory_bytes >= plan.needed_bytes
        assert plan.over_read == plan.read_bytes / plan.needed_bytes
        got = plan.read()
        assert [n for n, _ in got] == plan.names
        np.testing.assert_array_equal(got[0][1], t["w"][8:24, :128])
        np.testing.assert_array_equal(got[1][1], t["b"])
        np.testing.assert_array_equal(got[2][1], t["c"])
        np.testing.assert_array_equal(got[3][1], t["w"][40])
        assert got[0][1].flags.writeable and got[0][1].flags.c_contiguous
    with pytest.raises(hostfirst.InvalidHandleError):
        plan.read()


def test_the_over_read_cap_decides_the_merging(model):
    path, _ = model
    cols = [("w", (slice(None), slice(0, 128)))]  # 512-byte runs, 7.5 KiB apart
    with hostfirst.safe_open(path, framework="numpy") as f:
        tight = f.read_plan(cols, max_over_read=1.0)
        loose = f.read_plan(cols, max_over_read=4.0)
    assert (tight.requests, tight.read_bytes, tight.over_read) == (64, 64 * 512, 1.0)
    assert (loose.requests, loose.read_bytes) == (1, 63 * 8192 + 512)
    assert loose.over_read > 15
    default = hostfirst.ReadPlan(path, cols)
    assert default.requests == 64  # 1.25 merges no gap of whole pages
    for p in (tight, loose, default):
        p.close()


@pytest.mark.parametrize("cap", [0.5, 0, -1, float("nan"), "2"])
def test_a_cap_below_one_is_refused_naming_it(model, cap):
    path, _ = model
    with pytest.raises(hostfirst.InvalidArgumentError, match="max_over_read"):
        hostfirst.ReadPlan(path, ["b"], max_over_read=cap)


def test_bad_slices_raise_their_errors(model):
    path, _ = model
    with pytest.raises(hostfirst.NotFoundError):
        hostfirst.ReadPlan(path, ["nope"])
    with pytest.raises(hostfirst.InvalidArgumentError, match="step"):
        hostfirst.ReadPlan(path, [("w", (slice(0, 8, 2),))])
    with pytest.raises(hostfirst.OutOfRangeError):
        hostfirst.ReadPlan(path, [("w", 64)])
    with pytest.raises(hostfirst.InvalidArgumentError, match="3 indices"):
        hostfirst.ReadPlan(path, [("w", (0, 0, 0))])
    with pytest.raises(hostfirst.InvalidArgumentError, match="share bytes"):
        hostfirst.ReadPlan(path, ["b", ("b", slice(0, 10))])


def test_a_file_truncated_under_a_plan_raises(model):
    path, _ = model
    plan = hostfirst.ReadPlan(path, ["c"])
    with open(path, "r+b") as fh:
        fh.truncate(4096)
    with pytest.raises(hostfirst.TruncatedError):
        plan.read()
    plan.close()


# ---- safetensors 0.9's prefetch ---------------------------------------------------------------------------


def _written_for_safetensors(safe_open, path):
    """Code as safetensors 0.9's prefetch documentation writes it (framework "np" instead of "pt"): all of it,
    some of it, iterated, counted."""
    out = {}
    with safe_open(path, framework="np", device="cpu") as sf:
        weights = dict(sf.prefetch())
        handle = sf.prefetch(["c", "b"])
        assert len(handle) == 2
        for name, tensor in handle:
            out[name] = tensor
        assert len(handle) == 0 and list(handle) == []
        everything = dict(sf.prefetch(sf.keys(), dtype=None, max_inflight=8))
    return weights, out, everything


def test_code_written_for_safetensors_prefetch_runs_unchanged(model):
    path, t = model
    weights, some, everything = _written_for_safetensors(hostfirst.safe_open, path)
    for got in (weights, everything):
        assert sorted(got) == sorted(t)
        for name, a in t.items():
            np.testing.assert_array_equal(got[name], a)
            assert got[name].dtype == a.dtype and got[name].shape == a.shape
    assert sorted(some) == ["b", "c"]
    np.testing.assert_array_equal(some["c"], t["c"])


def test_prefetch_runs_a_declared_plan_and_shows_its_numbers(model):
    path, t = model
    with hostfirst.safe_open(path, framework="numpy") as f:
        plan = f.read_plan([("w", (slice(0, 4),)), "b"])
        handle = f.prefetch(plan)
        assert handle.plan is plan and plan.needed_bytes == 4 * 8192 + 4096
        got = dict(handle)
        np.testing.assert_array_equal(got["w"], t["w"][:4])
        np.testing.assert_array_equal(got["b"], t["b"])
        handle = f.prefetch(["b", "b"], dtype=np.int32)  # a name twice is read once
        assert len(handle) == 1 and handle.plan.requests == 1
        assert next(handle)[1].dtype == np.int32
        with pytest.raises(hostfirst.NotFoundError):
            f.prefetch(["nope"])
        with pytest.raises(hostfirst.InvalidArgumentError, match="max_inflight"):
            f.prefetch(["b"], max_inflight=0)
    with pytest.raises(hostfirst.InvalidHandleError):
        f.prefetch()
