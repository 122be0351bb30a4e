"""hostfirst.load_shards (shard-on-read over the C API): every shard of a 2x4 mesh equals NumPy slicing of the whole
tensor for P('x','y'), P(None,'y'), P('x'), P(('x','y')) and replicated tensors; one rank of a 4-way split reads its
bytes only; uneven splits and positions off the mesh raise."""

import gc
import json
import struct

import numpy as np
import pytest

import hostfirst


def write(path, arrays):
    names = {"float32": "F32", "int32": "I32", "uint16": "U16", "float16": "F16"}
    hdr, off, blobs = {}, 0, []
    for k, a in arrays.items():
        b = np.ascontiguousarray(a).tobytes()
        hdr[k] = {"dtype": names[a.dtype.name], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(3)
    arrays = {
        "layer.w": rng.standard_normal((8, 16), dtype=np.float32),
        "layer.col": rng.integers(0, 60000, (6, 8), dtype=np.uint16),
        "layer.row": rng.integers(-9, 9, (4, 3), dtype=np.int32),
        "embed": rng.standard_normal((16, 2)).astype(np.float16),
        "bias": rng.standard_normal(5, dtype=np.float32),
    }
    path = tmp_path / "m.safetensors"
    write(path, arrays)
    return path, arrays


def test_every_shard_of_a_2x4_mesh_equals_numpy_slicing(model):
    path, arrays = model
    gc.collect()  # what earlier tests left behind is freed before the baseline
    base = hostfirst.handle_count()
    rules = [("layer.w", ("x", "y")), ("*.col", (None, "y")), ("*.row", ("x",)), ("embed", (("x", "y"),))]
    shards = hostfirst.load_shards(path, {"x": 2, "y": 4}, rules, {p: "cpu" for p in range(8)})
    assert len(shards) == 8 * len(arrays)
    for s in shards:
        want = arrays[s.name][s.index]
        got = s.numpy()
        assert got.dtype == want.dtype and np.array_equal(got, want), (s.name, s.position)
        assert s.shape == arrays[s.name].shape and str(s.device) == "cpu:0"
    w5 = next(s for s in shards if s.name == "layer.w" and s.position == 5)  # x=1, y=1
    assert w5.index == (slice(4, 8), slice(4, 8))
    bias = [s for s in shards if s.name == "bias"]
    assert all(s.rule is None and s.index == (slice(0, 5),) for s in bias)
    assert sum(s.copy_of is None for s in bias) == 1  # read once, copied to the other positions
    del got  # its DLPack export
    gc.collect()
    assert hostfirst.handle_count() == base + len(shards)  # one buffer each; file, mesh, rules, plan freed
    del shards, w5, bias, s
    gc.collect()
    assert hostfirst.handle_count() == base


def test_one_rank_reads_only_its_bytes(tmp_path):
    a = np.arange(64 * 16384, dtype=np.float32).reshape(64, 16384)  # 64 KiB rows
    path = tmp_path / "w.safetensors"
    write(path, {"w": a})
    for spec, index in (("r", (slice(32, 48), slice(None))), ("_,r", (slice(None), slice(8192, 12288)))):
        (s,) = hostfirst.load_shards(path, {"r": 4}, [("w", spec)], {2: "cpu"})
        assert np.array_equal(s.numpy(), a[index])
        assert s.bytes_read == a.nbytes // 4  # 16 KiB runs 48 KiB apart: read one by one, no extra byte


def test_errors(model):
    path, _ = model
    with pytest.raises(hostfirst.InvalidArgumentError, match="dimension 1 has size 16, which mesh axis 'z'"):
        hostfirst.load_shards(path, {"z": 3}, [("layer.w", "_,z")], [0])
    with pytest.raises(hostfirst.OutOfRangeError, match="mesh position 8"):
        hostfirst.load_shards(path, {"x": 2, "y": 4}, [], [8])
    with pytest.raises(hostfirst.InvalidArgumentError, match="no axis 'q'"):
        hostfirst.load_shards(path, {"x": 2}, [("layer.w", ("q",))], [0])
