"""Gather.stream and hostfirst.jax.stream: batches prefetched by a background thread, in order and byte for byte;
offsets from lists, generators (an open C stream fed as the consumer goes) and 2-D arrays (one C stream); errors at
their batch;
closing the generator cancels; on the stand-in driver's cuda:0 in both execution modes (in child processes)."""

import gc
import json
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_c

import hostfirst

ROOT = Path(__file__).resolve().parents[3]
N = 1 << 16


def token_file(path: Path) -> np.ndarray:
    data = (np.arange(N, dtype=np.uint64) * 7 + 3).astype(np.uint16)
    h = json.dumps({"tok": {"dtype": "U16", "shape": [N], "data_offsets": [0, 2 * N]}}).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data.tobytes())
    return data


def windows(ref, offs, w):
    return np.stack([ref[o:o + w] for o in offs])


def test_stream_in_order_from_lists_generators_and_arrays(tmp_path):
    ref = token_file(tmp_path / "t.safetensors")
    tok = hostfirst.open(tmp_path / "t.safetensors")["tok"]
    g = hostfirst.Gather("cpu", "uint16", batch=4, window=33)
    rng = np.random.default_rng(3)
    offs = rng.integers(0, N - 33, size=(300, 4))  # more than one chunk of 256
    got = 0
    for k, b in enumerate(g.stream(tok, offs, depth=3)):
        np.testing.assert_array_equal(np.asarray(b), windows(ref, offs[k], 33))
        got += 1
    assert got == 300
    gen = (list(map(int, o)) for o in offs[:10])  # a generator of lists
    seen = [np.asarray(b).copy() for b in g.stream(tok, gen, depth=1)]
    assert len(seen) == 10 and all((s == windows(ref, o, 33)).all() for s, o in zip(seen, offs))
    host = tok.to("cpu")  # a host Buffer as the source
    for k, b in enumerate(g.stream(host, offs[:5])):
        np.testing.assert_array_equal(np.asarray(b), windows(ref, offs[k], 33))
    assert g.ring()[0] >= 3 + 3  # raised to depth + 3
    assert list(g.stream(tok, [])) == []


def test_a_2d_array_streams_without_a_pause(tmp_path):
    """A 2-D array is one C stream: at batch 255 the worker has already filled batches past it (in chunks of 256,
    as an iterable is taken, nothing past 255 would be read until the consumer asked for batch 256)."""
    ref = token_file(tmp_path / "t.safetensors")
    tok = hostfirst.open(tmp_path / "t.safetensors")["tok"]
    g = hostfirst.Gather("cpu", "uint16", batch=4, window=33)
    offs = np.random.default_rng(5).integers(0, N - 33, size=(600, 4))
    for k, b in enumerate(g.stream(tok, offs, depth=3)):
        np.testing.assert_array_equal(np.asarray(b), windows(ref, offs[k], 33))
        if k == 255:
            for _ in range(12000):  # the worker is asynchronous: wait (up to 2 min, never a speed test) for it
                if g.ring()[2] >= 4:
                    break
                time.sleep(0.01)
            assert g.ring()[2] == 4  # this batch and 3 queued
    assert k == 599


def _wait_held(g, want):
    for _ in range(12000):  # up to 2 min (never a speed test) for the worker to fill what it may
        if g.ring()[2] >= want:
            break
        time.sleep(0.01)
    return g.ring()[2]


@pytest.mark.parametrize("jax_arrays", [False, True], ids=["Gather.stream", "hostfirst.jax.stream"])
def test_an_endless_iterable_streams_without_a_pause(tmp_path, jax_arrays):
    """An endless generator of offsets feeds one open C stream: the generator is read at most depth + 1 arrays
    ahead of the batch yielded; the worker keeps exactly `depth` batches filled ahead (never more) at every
    batch checked, batch 256 and later included (fed in chunks of 256, the stream would drain there: nothing
    past batch 255 was read before the consumer asked for batch 256); the bytes are right."""
    if jax_arrays:
        jax = pytest.importorskip("jax")
        import hostfirst.jax as hjax
    ref = token_file(tmp_path / "t.safetensors")
    tok = hostfirst.open(tmp_path / "t.safetensors")["tok"]
    g = hostfirst.Gather("cpu", "uint16", batch=4, window=33)
    rng = np.random.default_rng(11)
    offs = rng.integers(0, N - 33, size=(400, 4))
    pulled = [0]

    def endless():
        k = 0
        while True:
            pulled[0] += 1
            yield offs[k % len(offs)]
            k += 1

    depth = 2
    it = hjax.stream(g, tok, endless(), depth=depth) if jax_arrays else g.stream(tok, endless(), depth=depth)
    for k, b in enumerate(it):
        np.testing.assert_array_equal(np.asarray(b), windows(ref, offs[k % len(offs)], 33))
        assert pulled[0] <= k + 1 + depth + 1, (k, pulled[0])
        held = g.ring()[2]
        assert held <= 1 + depth + (1 if jax_arrays else 0), (k, held)  # never more than depth ahead
        if not jax_arrays and k in (0, 254, 255, 256, 257, 380):
            assert _wait_held(g, 1 + depth) == 1 + depth, k  # this batch and `depth` filled ahead
        if jax_arrays and k in (255, 256, 257):
            # the generator's batch (its jax.Array a copy or an alias of it) and `depth` filled ahead
            assert _wait_held(g, 1 + depth) >= 1 + depth, k
        del b
        if k == 400:
            break
    it.close()
    gc.collect()
    assert g.ring()[2] == 0  # closing the generator freed the stream and its queued batches


def test_stream_errors(tmp_path):
    token_file(tmp_path / "t.safetensors")
    tok = hostfirst.open(tmp_path / "t.safetensors")["tok"]
    g = hostfirst.Gather("cpu", "uint16", batch=2, window=8)
    with pytest.raises(ValueError):
        list(g.stream(tok, [[1, 2, 3]]))
    with pytest.raises(TypeError):
        list(g.stream(tok, [np.array([1.0, 2.0])]))
    with pytest.raises(hostfirst.OutOfRangeError) as e:
        list(g.stream(tok, [[0, 1], [2, N]]))
    assert "batch 1" in str(e.value)
    with pytest.raises(hostfirst.InvalidArgumentError):
        list(g.stream(tok, [[0, 1]], depth=0))
    # a read failing in the worker: the file cut; batches before it come first
    os.truncate(tmp_path / "t.safetensors", os.path.getsize(tmp_path / "t.safetensors") - N)
    it = g.stream(tok, [[0, 1], [2, 3], [4, N - 8], [5, 6]], depth=2)
    assert next(it) is not None and next(it) is not None
    with pytest.raises(hostfirst.TruncatedError) as e:
        next(it)
    assert "batch 2" in str(e.value)


def test_closing_the_generator_cancels(tmp_path):
    token_file(tmp_path / "t.safetensors")
    tok = hostfirst.open(tmp_path / "t.safetensors")["tok"]
    g = hostfirst.Gather("cpu", "uint16", batch=2, window=8)
    it = g.stream(tok, ([i, i + 1] for i in range(100000)), depth=4)
    kept = next(it)
    next(it)
    it.close()
    gc.collect()
    assert g.ring()[2] == 1  # only the batch kept
    del kept
    gc.collect()
    assert g.ring()[2] == 0


def test_jax_stream_yields_arrays(tmp_path):
    jax = pytest.importorskip("jax")
    import hostfirst.jax

    ref = token_file(tmp_path / "t.safetensors")
    tok = hostfirst.open(tmp_path / "t.safetensors")["tok"]
    g = hostfirst.Gather("cpu", "uint16", batch=4, window=16)
    offs = [[0, 10, 20, 30], [5, 6, 7, 8], [100, 200, 300, 400]]
    arrays = list(hostfirst.jax.stream(g, tok, offs, depth=2))
    assert all(isinstance(a, jax.Array) for a in arrays)
    for a, o in zip(arrays, offs):
        np.testing.assert_array_equal(np.asarray(a), windows(ref, o, 16))


CHILD = textwrap.dedent(r"""
    import json, sys
    import numpy as np
    import hostfirst
    tok = hostfirst.open(sys.argv[1])["tok"]
    ref = np.asarray(tok)
    g = hostfirst.Gather("cuda:0", "uint16", batch=4, window=16)
    offs = np.random.default_rng(1).integers(0, len(ref) - 16, size=(20, 4))
    ok = []
    for k, b in enumerate(g.stream(tok, offs, depth=3)):
        ok.append(str(b.device) == "cuda:0" and b.tobytes() == np.stack([ref[o:o + 16] for o in offs[k]]).tobytes())
    with open(sys.argv[2], "w") as f:  # a file of its own: nothing else writes there
        json.dump({"n": len(ok), "ok": all(ok)}, f)
""")


def test_a_stream_whose_batches_are_all_kept_says_ring_bound(tmp_path):
    """Keeping every batch of a stream stalls its ring: BusyError in Python's terms (ring_bound=, not the C call)."""
    token_file(tmp_path / "t.safetensors")
    tok = hostfirst.open(tmp_path / "t.safetensors")["tok"]
    for offsets in (np.zeros((40, 4), dtype=np.int64), iter([[0, 1, 2, 3]] * 40)):  # one C stream, and a fed one
        g = hostfirst.Gather("cpu", "u16", batch=4, window=8)
        kept = []
        with pytest.raises(hostfirst.BusyError) as e:
            for b in g.stream(tok, offsets):
                kept.append(b)
        msg = str(e.value)
        assert "ring_bound=" in msg and "hostfirst_gather_set_ring_bound" not in msg, msg
        assert f"ring_bound is {g.ring()[0]}" in msg and "Gather(..., ring_bound=" in msg
        del kept


def test_jax_stream_arrays_of_a_host_gather_can_all_be_kept(tmp_path):
    """Gradient accumulation: keeping every jax.Array of hostfirst.jax.stream over a host gather never holds the
    gather's ring (each batch is copied into JAX's memory), so it never raises BusyError; every array keeps its
    values after the batches it came from were refilled."""
    jax = pytest.importorskip("jax")
    import hostfirst.jax

    ref = token_file(tmp_path / "t.safetensors")
    tok = hostfirst.open(tmp_path / "t.safetensors")["tok"]
    g = hostfirst.Gather("cpu", "u16", batch=4, window=8)  # ring bound: the default (4), raised to depth + 3
    offs = np.random.default_rng(1).integers(0, N - 8, size=(32, 4))
    kept = list(hostfirst.jax.stream(g, tok, iter(offs.tolist()), depth=2))
    assert len(kept) == 32 and all(isinstance(a, jax.Array) for a in kept)
    for a, o in zip(kept, offs):
        np.testing.assert_array_equal(np.asarray(a), windows(ref, o, 8))
    assert g.ring()[2] <= 1  # no batch held by the arrays


@pytest.mark.parametrize("deferred", ["0", "1"])
def test_stream_on_the_stand_in(tmp_path, deferred):
    d = tmp_path / "stand-in"
    d.mkdir()
    compile_c(["-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", d / "libcuda.so.1",
               ROOT / "tests" / "cuda_stub" / "stand_in_cuda.c", "-lpthread"])
    (d / "libcuda.so").symlink_to("libcuda.so.1")
    token_file(tmp_path / "t.safetensors")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAND_IN_")}
    env["PYTHONPATH"] = str(Path(hostfirst.__file__).resolve().parents[1])
    env["LD_LIBRARY_PATH"] = f"{d}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    env.update(STAND_IN_DEVICES="1", STAND_IN_DEFERRED=deferred, STAND_IN_POISON_FRESH="1", STAND_IN_LEAK_REPORT="1")
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "t.safetensors"), str(tmp_path / "r.json")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "r.json").read_text()) == {"n": 20, "ok": True}


def test_read_engine_is_named():
    e = hostfirst.read_engine()
    assert e.startswith("io_uring") or e.startswith("pread pool"), e
