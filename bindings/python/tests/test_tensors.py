"""hostfirst.open, tensors, row slices, NumPy arrays and DLPack, against the reference-written fixtures."""

import ctypes
import gc
import json
from pathlib import Path

import numpy as np
import pytest

import hostfirst

# numpy < 2.1 asks for the legacy "dltensor" capsule: a copy-on-write mapping, not the read-only mapping these
# tests check (test_dlpack.py covers that form).
versioned_dlpack = pytest.mark.skipif(tuple(map(int, np.__version__.split(".")[:2])) < (2, 1),
                                      reason="numpy < 2.1 takes the legacy DLPack form (test_dlpack.py)")

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
EXPECTED = json.loads((FIX / "expected.json").read_text())


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_open_matches_reference(name):
    exp = EXPECTED[name]
    with hostfirst.open(FIX / name) as f:
        assert list(f) == [t["name"] for t in exp["tensors"]]  # file order
        assert len(f) == len(exp["tensors"])
        assert f.metadata == exp["metadata"]
        for e in exp["tensors"]:
            assert e["name"] in f
            t = f[e["name"]]
            assert (t.name, t.dtype_name, t.shape) == (e["name"], e["dtype"], tuple(e["shape"]))
            assert fnv1a64(t.tobytes()) == e["fnv1a64"]
        assert "nope" not in f
        with pytest.raises(KeyError):
            f["nope"]


@versioned_dlpack
def test_numpy_from_dlpack_is_zero_copy_and_read_only():
    from safetensors.numpy import load_file

    ref = load_file(str(FIX / "basic.safetensors"))
    f = hostfirst.open(FIX / "basic.safetensors")
    for name in ("i32", "f32", "u64", "f16", "bool", "c64", "scalar", "rank8", "empty"):
        t = f[name]
        a = np.from_dlpack(t)
        assert a.dtype == ref[name].dtype and a.shape == ref[name].shape
        np.testing.assert_array_equal(a, ref[name])
        assert not a.flags.writeable
        if t.nbytes:
            assert a.ctypes.data == t.data_ptr  # the mapping itself, no copy
            with pytest.raises(ValueError):
                a.flat[0] = a.flat[0]
        b = t.numpy()
        np.testing.assert_array_equal(b, ref[name])
        assert not b.flags.writeable and (not t.nbytes or b.ctypes.data == t.data_ptr)
    assert f["i32"].__dlpack_device__() == (1, 0)


def test_row_slices_are_views():
    with hostfirst.open(FIX / "tokens.safetensors") as f:
        tokens = f["tokens"]
    ref = np.frombuffer(tokens.tobytes(), dtype=np.uint16)
    assert tokens.prefault() is True
    head = tokens[0:1024]
    assert head.shape == (1024,) and head.nbytes == 2048
    assert head.data_ptr == tokens.data_ptr
    mid = tokens[100:200]
    assert mid.data_ptr == tokens.data_ptr + 200
    np.testing.assert_array_equal(np.asarray(mid), ref[100:200])
    assert tokens[-5:].shape == (5,) and tokens[10:5].shape == (0,)
    np.testing.assert_array_equal(tokens[::2], ref[::2])  # a step: numpy's strided view of the mapping
    assert tokens[3] == ref[3]
    with hostfirst.open(FIX / "basic.safetensors") as f:
        with pytest.raises(IndexError, match="too many indices for tensor 'scalar'"):
            f["scalar"][0:1]
        assert f["scalar"][...].shape == ()


def index_cases():
    return [np.s_[1:3], np.s_[:, 1:3], np.s_[..., 2:], np.s_[1:2, :, 1:4], np.s_[:, -3:-1], np.s_[5:1],
            np.s_[...], np.s_[1], np.s_[:, 2], np.s_[-1, :, 0], np.s_[::2], np.s_[:, ::-2], np.s_[..., 1],
            np.s_[1, ..., 3:0:-1], np.s_[:, :, :],
            # indices that select nothing: numpy's empty results (issue 34: these raised OUT_OF_RANGE or TypeError)
            np.s_[-20::-1], np.s_[:, -11::-2], np.s_[[]], np.s_[:, []], np.s_[1, :, []], np.s_[..., []],
            np.s_[0:0, ::-1], np.s_[3:1:1, 2]]


@pytest.mark.parametrize("key", index_cases(), ids=str)
def test_basic_indexing_on_any_dimension_matches_numpy(tmp_path, key):
    from safetensors.numpy import save_file

    ref = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    save_file({"x": ref}, str(tmp_path / "x.safetensors"))
    t = hostfirst.open(tmp_path / "x.safetensors")["x"]
    got = t[key]
    want = ref[key]
    keys = key if isinstance(key, tuple) else (key,)
    if all(isinstance(k, slice) and k.step in (None, 1) or k is Ellipsis for k in keys):
        assert isinstance(got, hostfirst.View)  # a view of the library: .to(), DLPack, tobytes() work on it
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()
        assert np.asarray(got.to("cpu")).tobytes() == want.tobytes()
        if want.size and got.strides is not None:
            assert got.data_ptr + 0 <= np.asarray(got).ctypes.data < t.data_ptr + t.nbytes
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if want.size:  # zero-copy: inside the file's mapping of x
        assert t.data_ptr <= got.ctypes.data < t.data_ptr + t.nbytes and not got.flags.writeable


def test_indices_selecting_nothing_give_numpys_empty_arrays():
    with hostfirst.open(FIX / "basic.safetensors") as f:
        e, ref = f["empty"], np.asarray(f["empty"])  # shape (0, 3)
        for key in (np.s_[::-1], np.s_[:, ::-1], np.s_[-5::-1], np.s_[[]], np.s_[:, []], np.s_[::-1, 1]):
            got = e[key]
            assert np.asarray(got).shape == ref[key].shape and np.asarray(got).dtype == ref.dtype, key


def test_indexing_errors_say_what_is_wrong():
    t = hostfirst.open(FIX / "tokens.safetensors")["tokens"]
    with pytest.raises(IndexError, match="index 100000 is out of range for dimension 0 of tensor 'tokens'"):
        t[100000]
    with pytest.raises(IndexError, match="too many indices"):
        t[1:2, 3:4]
    with pytest.raises(TypeError, match=r"index \[1, 2\] is integer-array \(fancy\) indexing"):
        t[[1, 2]]
    with pytest.raises(TypeError, match="ints, slices and '...'"):
        t[1.5]
    with pytest.raises(IndexError):  # an empty list with an index out of range: numpy's error, as OutOfRangeError
        hostfirst.open(FIX / "basic.safetensors")["rank8"][[], 5]
    with pytest.raises(IndexError, match="single ellipsis"):
        t[..., ...]


def test_to_takes_the_put_options(tmp_path):
    t = hostfirst.open(FIX / "tokens.safetensors")["tokens"]
    ref = t.tobytes()
    for kw in ({}, {"copy_on_write": True}, {"threads": 2}, {"staging_mib": 8}, {"resident": True}):
        b = t.to("cpu", **kw)
        assert b.tobytes() == ref, kw
        a = np.asarray(b)
        assert a.flags.writeable
        a[0] ^= 1  # writable, and never the file's bytes
        assert t.tobytes() == ref
    with pytest.raises(ValueError, match="must not be negative"):
        t.to("cpu", threads=-1)


def test_low_precision_via_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from safetensors.numpy import load_file

    ref = load_file(str(FIX / "sharded" / "model-00001-of-00002.safetensors"))
    f = hostfirst.open(FIX / "sharded" / "model.safetensors.index.json")
    e = f["embed"].numpy()
    assert e.dtype == ml_dtypes.bfloat16 and not e.flags.writeable
    np.testing.assert_array_equal(e.view(np.uint16), ref["embed"].view(np.uint16))
    lowp = hostfirst.open(FIX / "lowp.safetensors")
    assert lowp["f8_e4m3"].numpy().dtype == ml_dtypes.float8_e4m3fn
    assert lowp["f8_e5m2fnuz"].numpy().dtype == ml_dtypes.float8_e5m2fnuz
    with pytest.raises(TypeError):
        lowp["f4"].numpy()  # packed 4-bit: no NumPy dtype; DLPack still describes it


@versioned_dlpack
def test_dlpack_capsule_fields_and_lifetime():
    gc.collect()
    base = hostfirst.handle_count()
    f = hostfirst.open(FIX / "lowp.safetensors")
    cap = f["f4"].__dlpack__(max_version=(1, 1))
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    from hostfirst._abi import DLPackManagedTensorVersioned as DLManagedTensorVersioned

    m = ctypes.cast(get(cap, b"dltensor_versioned"), ctypes.POINTER(DLManagedTensorVersioned)).contents
    assert (m.version.major, m.version.minor, m.flags) == (1, 1, 1)
    t = m.dl_tensor
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (17, 4, 1)  # kDLFloat4_e2m1fn
    assert (t.device.device_type, t.device.device_id, t.ndim) == (1, 0, 2) and not t.strides
    f.close()
    del f
    gc.collect()
    assert hostfirst.handle_count() == base + 1  # the unconsumed export
    del cap, m, t
    gc.collect()
    assert hostfirst.handle_count() == base  # the capsule's destructor called the deleter

    f = hostfirst.open(FIX / "basic.safetensors")
    a = np.from_dlpack(f["f64"])
    f.close()
    del f
    gc.collect()
    assert a.sum() == pytest.approx(np.sum(a))  # still mapped
    assert hostfirst.handle_count() == base + 1
    del a
    gc.collect()
    assert hostfirst.handle_count() == base


def test_dlpack_requests_it_cannot_serve():
    t = hostfirst.open(FIX / "basic.safetensors")["i32"]
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))  # no CUDA device here
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 0), copy=False, dl_device=(2, 0))


@versioned_dlpack
def test_put_to_cpu_and_dlpack_of_the_buffer():
    f = hostfirst.open(FIX / "basic.safetensors")
    t = f["i32"]
    b = t.to("cpu")
    assert b.device == "cpu:0" and b.shape == t.shape and b.dtype == t.dtype == np.dtype("int32")
    assert b.tobytes() == t.tobytes()
    a = np.from_dlpack(b)
    assert a.flags.writeable and a.tobytes() == t.tobytes()
    assert a.__array_interface__["data"][0] == b.address
    with hostfirst.default_device("cpu"):
        assert t.to().device == "cpu:0"
        with hostfirst.strict():
            with pytest.raises(hostfirst.ImplicitPlacementError):
                t.to("default")
    with pytest.raises(hostfirst.NoSuchDeviceError):
        t.to("cpu:4")


def test_load_by_rules_keeps_unmatched_on_the_host():
    names = list(hostfirst.open(FIX / "basic.safetensors"))
    placed = hostfirst.load(FIX / "basic.safetensors", rules=[(names[0], "cpu")])
    assert list(placed) == names
    assert isinstance(placed[names[0]], hostfirst.Buffer)
    assert all(isinstance(placed[n], hostfirst.View) for n in names[1:])
    with hostfirst.strict():
        with pytest.raises(hostfirst.ImplicitPlacementError):
            hostfirst.load(FIX / "basic.safetensors", rules=[("*", "default")])


def test_load_warns_about_a_rule_that_places_nothing():
    # The README story's typo: 'u1' for the tensor 'u16' places nothing, so 'u16' would follow '*'.
    with pytest.warns(hostfirst.UnmatchedRuleWarning) as w:
        placed = hostfirst.load(FIX / "basic.safetensors", rules=["u1=host", "f32=cpu", "*=host", "i8=cpu"])
    messages = [str(x.message) for x in w]
    assert len(messages) == 2, messages
    assert "u1" in messages[0] and "u16" in messages[0], messages  # names the rule and the tensor it meant
    assert "i8" in messages[1], messages  # shadowed by '*=host'
    assert isinstance(placed["f32"], hostfirst.Buffer) and isinstance(placed["i8"], hostfirst.View)
    with hostfirst.strict():
        with pytest.raises(hostfirst.UnmatchedRuleError) as e:
            hostfirst.load(FIX / "basic.safetensors", rules=["u1=host", "*=host"])
    assert "u1" in str(e.value)


def test_load_to_devices_only_gives_buffers_that_take_their_handles_when_used():
    # Every tensor to cpu: the Buffers of the load share its handle until one is used, then take their own;
    # each keeps the load's memory alive on its own, and nothing leaks when they go.
    gc.collect()
    base = hostfirst.handle_count()
    f = hostfirst.open(FIX / "basic.safetensors")
    expect = {n: np.array(f[n]) for n in f}
    names = list(f)
    f.close()
    del f
    gc.collect()
    for rules, default in (({"*": "cpu"}, "host"), ({names[0]: "cpu"}, "cpu"), (["*=cpu"], "default")):
        placed = hostfirst.load(FIX / "basic.safetensors", rules=rules, default=default)
        assert list(placed) == names
        assert all(isinstance(b, hostfirst.Buffer) for b in placed.values())
        assert hostfirst.handle_count() == base + 1  # the load's, shared; no buffer handle yet
        keep = placed[names[-1]]
        assert keep.name == names[-1] and hostfirst.handle_count() == base + 1  # the name needs no handle
        # described from the load's bulk table (hostfirst_load_entries), numpy included: still no handle
        first = placed[names[0]]
        assert keep.device.kind == "cpu" and keep.shape == expect[names[-1]].shape
        np.testing.assert_array_equal(np.asarray(first), expect[names[0]])
        assert hostfirst.handle_count() == base + 1
        assert keep.tobytes() == expect[names[-1]].tobytes()  # a handle call: keep takes its own
        assert hostfirst.handle_count() == base + 2
        del placed
        gc.collect()
        assert hostfirst.handle_count() == base + 2  # `first` (no handle of its own) still holds the load
        np.testing.assert_array_equal(np.asarray(first), expect[names[0]])
        del first
        gc.collect()
        assert hostfirst.handle_count() == base + 1  # the load went with the last untaken Buffer
        a = np.asarray(keep)
        assert a.flags.writeable and a.dtype == expect[names[-1]].dtype
        np.testing.assert_array_equal(a, expect[names[-1]])
        again = hostfirst.load(FIX / "basic.safetensors", rules=rules, default=default)
        for n in names:
            np.testing.assert_array_equal(np.asarray(again[n]), expect[n])
            assert again[n].shape == expect[n].shape and again[n].nbytes == expect[n].nbytes
        assert "Buffer(" in repr(again[names[0]])
        with pytest.raises(AttributeError):
            again[names[0]].no_such_attribute
        del a, keep, again
        gc.collect()
        assert hostfirst.handle_count() == base


def test_errors_raise_status_classes(tmp_path):
    with pytest.raises(hostfirst.IoError) as e:
        hostfirst.open(tmp_path / "missing.safetensors")
    assert "missing.safetensors" in str(e.value) and isinstance(e.value, FileNotFoundError)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((4).to_bytes(8, "little") + b"{x}\x00")
    with pytest.raises(hostfirst.FormatError) as e:
        hostfirst.open(bad)
    assert e.value.status_name == "INVALID_HEADER_JSON"


def test_gather_batches_match_numpy_and_stay_unchanged_while_held():
    with hostfirst.open(FIX / "tokens.safetensors") as f:
        tokens = f["tokens"]
    ref = np.asarray(tokens)
    n = tokens.shape[0]
    import gc

    gc.collect()
    before = hostfirst.handle_count()
    g = hostfirst.Gather("cpu", "U16", batch=4, window=33)
    assert repr(g) == "Gather([4, 33] U16 on 'cpu:0')"
    stream, again = hostfirst.OffsetStream(7), hostfirst.OffsetStream(7)
    first = stream.next(n, 33, 4)
    assert first == again.next(n, 33, 4) and all(0 <= o < n - 33 for o in first)
    it = iter(hostfirst.OffsetStream(7, n, window=33, batch=4))  # iterable: the same stream, as arrays
    drawn = [next(it) for _ in range(3)]
    assert [d.tolist() for d in drawn] == [first] + [again.next(n, 33, 4) for _ in range(2)]
    assert all(d.dtype == np.uint64 and d.shape == (4,) for d in drawn)
    with pytest.raises(TypeError, match="length, window and batch"):
        iter(hostfirst.OffsetStream(7))
    b = g.run(tokens, first)
    assert b.shape == (4, 33) and b.dtype_name == "U16" and str(b.device) == "cpu:0"
    want = np.stack([ref[o:o + 33] for o in first])
    np.testing.assert_array_equal(np.asarray(b), want)
    second = stream.next(n, 33, 4)
    assert second != first
    b2 = g.run(tokens, second)
    assert b2.address != b.address  # b is held: the second run filled another batch
    np.testing.assert_array_equal(np.frombuffer(b2.tobytes(), np.uint16).reshape(4, 33),
                                  np.stack([ref[o:o + 33] for o in second]))
    np.testing.assert_array_equal(np.frombuffer(b.tobytes(), np.uint16).reshape(4, 33), want)
    with pytest.raises(hostfirst.OutOfRangeError) as e:
        g.run(tokens, [0, 1, n - 32, 2])
    assert "offset 2" in str(e.value)
    with pytest.raises(ValueError):
        g.run(tokens, [0, 1])
    with pytest.raises(hostfirst.InvalidArgumentError):
        hostfirst.Gather("cpu", "U16", batch=0, window=4)
    with pytest.raises(hostfirst.InvalidArgumentError):
        hostfirst.OffsetStream(1).next(10, 10, 2)
    with pytest.raises(hostfirst.OutOfRangeError, match=r"offsets\[2\] is -1: .*cannot be negative") as e:
        g.run(tokens, [0, 1, -1, 2])
    assert "18446744073709551615" not in str(e.value)
    # A negative offset after one past the end, and the most negative of two: still named as negative.
    for bad, at in (([0, n, -3, 2], 2), ([-1, 0, -2**62, 2], 2)):
        with pytest.raises(hostfirst.OutOfRangeError, match=rf"offsets\[{at}\] is -\d+: .*cannot be negative"):
            g.run(tokens, bad)
    # The failed runs changed no batch: the ring's current one is the last good run's.
    np.testing.assert_array_equal(np.frombuffer(g.current().tobytes(), np.uint16).reshape(4, 33),
                                  np.stack([ref[o:o + 33] for o in second]))
    assert hostfirst.handle_count() == before + 3  # the gather and the two batches
    del g, b, b2, e
    gc.collect()
    assert hostfirst.handle_count() == before
