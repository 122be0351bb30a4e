"""The CUDA side of the Python handoff on the stand-in driver (tests/cuda_stub/stand_in_cuda.c; no GPU, and
never evidence of GPU speed): a gather's batches on cuda:0, the DLPack stream handshake in both capsule forms
(cuStreamWaitEvent counted by the stand-in), the CUDA Array Interface v3 with its stream, and the ring keeping a
held batch unchanged. Each configuration runs in a child process, which loads the stand-in as libcuda."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import compile_c

import hostfirst

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures"

CHILD = textwrap.dedent(r"""
    import ctypes, gc, json, sys
    import numpy as np
    import hostfirst
    from hostfirst import _abi

    cuda = ctypes.CDLL("libcuda.so.1")
    waits = cuda.stand_in_stream_wait_events
    waits.restype = ctypes.c_ulonglong
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    out = {"backends": [(b.name, b.status) for b in hostfirst.backends()]}

    tokens = hostfirst.open(sys.argv[1])["tokens"]
    ref = np.asarray(tokens)
    g = hostfirst.Gather("cuda:0", "uint16", batch=4, window=16)
    offs = [0, 100, 2000, 4000]
    b = g.run(tokens, offs)
    want = np.stack([ref[o:o + 16] for o in offs])
    out["device"] = str(b.device)
    out["dlpack_device"] = list(b.__dlpack_device__())
    out["bytes_ok"] = b.tobytes() == want.tobytes()
    try:
        np.asarray(b)
    except TypeError:
        out["np_asarray"] = "TypeError"

    w0 = waits()
    v = b.__dlpack__(stream=1, max_version=(1, 1))
    w1 = waits()
    legacy = b.__dlpack__(stream=2)
    w2 = waits()
    mine = b.__dlpack__(stream=-1, max_version=(1, 1))
    w3 = waits()
    out["capsules"] = [name(v).decode(), name(legacy).decode(), name(mine).decode()]
    out["waits"] = [w1 - w0, w2 - w1, w3 - w2]
    cai = b.__cuda_array_interface__
    out["cai"] = {k: (list(v_) if isinstance(v_, tuple) else v_) for k, v_ in cai.items()}
    out["cai_waits"] = waits() - w3
    out["address"] = b.address
    try:
        b.__dlpack__(stream=0, max_version=(1, 1))
    except hostfirst.InvalidArgumentError:
        out["stream0"] = "InvalidArgumentError"

    # the ring: b is held (the Buffer and three unconsumed capsules); the next runs fill other batches
    del b
    gc.collect()
    c = g.run(tokens, [1, 2, 3, 4])
    out["held_after_run"] = g.ring()
    out["other_batch"] = c.address != out["address"]
    del v, legacy, mine
    gc.collect()
    out["held_after_release"] = g.ring()
    with open(sys.argv[2], "w") as f:  # a file of its own: nothing else writes there
        json.dump(out, f)
""")


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    d = tmp_path_factory.mktemp("stand-in")
    compile_c(["-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", d / "libcuda.so.1",
               ROOT / "tests" / "cuda_stub" / "stand_in_cuda.c", "-lpthread"])
    (d / "libcuda.so").symlink_to("libcuda.so.1")
    return d


def run_child(stand_in, **knobs):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAND_IN_")}
    env["PYTHONPATH"] = str(Path(hostfirst.__file__).resolve().parents[1])  # the package under test
    env["LD_LIBRARY_PATH"] = f"{stand_in}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    env.update(knobs)
    with tempfile.TemporaryDirectory() as d:
        result = Path(d) / "result.json"
        out = subprocess.run([sys.executable, "-c", CHILD, str(FIX / "tokens.safetensors"), str(result)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(result.read_text())


def test_batches_on_cuda_stream_handshake_and_ring(stand_in):
    r = run_child(stand_in, STAND_IN_DEVICES="1")
    assert ["cuda", "available"] in r["backends"]
    assert r["device"] == "cuda:0" and r["dlpack_device"] == [2, 0] and r["bytes_ok"]
    assert r["np_asarray"] == "TypeError"  # device memory: no host array protocol
    assert r["capsules"] == ["dltensor_versioned", "dltensor", "dltensor_versioned"]
    # the consumer's stream (legacy default, per-thread default) waits for the batch's copy; -1: the consumer's job
    assert r["waits"] == [1, 1, 0]
    cai = r["cai"]
    assert cai["version"] == 3 and cai["stream"] == 1 and cai["typestr"] == "<u2" and cai["shape"] == [4, 16]
    assert cai["data"] == [r["address"], False] and r["cai_waits"] == 1
    assert r["stream0"] == "InvalidArgumentError"
    bound, allocated, held = r["held_after_run"]
    assert r["other_batch"] and held == 2 and allocated == 2  # the exported batch stays out of the ring's reach
    assert r["held_after_release"][2] == 1  # only the current Buffer c is still held
