"""JAX memory kinds in hostfirst.jax (issue 34): targets that name "device", "pinned_host" or "unpinned_host", alone
or after a device, in rules, default=, safe_open's device= and shard-on-read shardings, give jax.Arrays whose
sharding carries that memory kind; they work under jit and move between kinds with jax.device_put. CPU JAX has all
three kinds. The CUDA handover (a cuda_host buffer as a pinned_host array of its GPU) runs on the stand-in driver,
with JAX's GPU played by its CPU device (what must still be checked on a GPU: benches/gpu/README.md)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding  # noqa: E402

import hostfirst  # noqa: E402
import hostfirst.jax  # noqa: E402
from conftest import compile_c  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures"
CPU = jax.devices("cpu")[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from safetensors.numpy import save_file

    path = tmp_path_factory.mktemp("kinds") / "m.safetensors"
    rng = np.random.default_rng(3)
    tensors = {"opt.m": rng.standard_normal((8, 4), dtype=np.float32), "opt.v": rng.standard_normal(8).astype(np.float32),
               "embed": rng.standard_normal((16, 4), dtype=np.float32), "bias": np.arange(4, dtype=np.int32)}
    save_file(tensors, str(path))
    return path, tensors


@pytest.mark.parametrize("target,want", [
    ("pinned_host", ("default", "pinned_host")), ("unpinned_host", ("default", "unpinned_host")),
    ("device", ("default", "device")), ("cpu:pinned_host", ("cpu", "pinned_host")),
    ("cpu:0:unpinned_host", ("cpu:0", "unpinned_host")), ("cuda:0:pinned_host", ("cuda:0", "pinned_host")),
    ("default:device", ("default", "device")), (" CPU:Pinned_Host ", ("CPU", "pinned_host")),
    ("cpu", ("cpu", None)), ("host", ("host", None)),
    ("cuda:GPU-0123abcd-0000-1111-2222-333344445555:device", ("cuda:GPU-0123abcd-0000-1111-2222-333344445555", "device")),
])
def test_parse_target(target, want):
    assert hostfirst.jax.parse_target(target) == want


def test_rules_with_memory_kinds_give_arrays_in_those_kinds(model):
    path, ref = model
    with hostfirst.default_device("cpu"):
        out = hostfirst.jax.load_file(path, rules={"opt.m": "pinned_host", "opt.v": "cpu:unpinned_host",
                                                   "embed": "cpu:device", "bias": "host"})
    kinds = {n: out[n].sharding.memory_kind for n in ("opt.m", "opt.v", "embed")}
    assert kinds == {"opt.m": "pinned_host", "opt.v": "unpinned_host", "embed": "device"}
    assert all(out[n].devices() == {CPU} for n in kinds)
    for n in kinds:
        np.testing.assert_array_equal(np.asarray(out[n]), ref[n])
    assert isinstance(out["bias"], np.ndarray)


def test_default_takes_a_memory_kind(model):
    path, ref = model
    out = hostfirst.jax.load_file(path, rules={"embed": "cpu"}, default="cpu:pinned_host")
    assert out["embed"].sharding.memory_kind == "device"
    assert {out[n].sharding.memory_kind for n in ("opt.m", "opt.v", "bias")} == {"pinned_host"}


def test_memory_kinds_work_under_jit_and_move_with_device_put(model):
    path, ref = model
    out = hostfirst.jax.load_file(path, rules={"opt.m": "cpu:pinned_host"}, default="cpu")
    m = out["opt.m"]
    on_device = jax.device_put(m, m.sharding.with_memory_kind("device"))
    assert on_device.sharding.memory_kind == "device"
    np.testing.assert_array_equal(np.asarray(on_device), ref["opt.m"])
    step = jax.jit(lambda a, b: a * 2 + b[:, :1])
    np.testing.assert_allclose(np.asarray(step(on_device, out["embed"][:8])), ref["opt.m"] * 2 + ref["embed"][:8, :1])
    back = jax.device_put(on_device, SingleDeviceSharding(CPU, memory_kind="pinned_host"))
    assert back.sharding.memory_kind == "pinned_host"
    np.testing.assert_array_equal(np.asarray(back), ref["opt.m"])


def test_shard_on_read_takes_shardings_with_a_memory_kind(model):
    path, ref = model
    mesh = Mesh(np.array([CPU]), ("x",))
    sh = NamedSharding(mesh, PartitionSpec("x"), memory_kind="pinned_host")
    out = hostfirst.jax.load_file(path, shardings={"embed": sh, "opt.*": SingleDeviceSharding(CPU, memory_kind="unpinned_host")},
                                  default="cpu")
    assert out["embed"].sharding == sh and out["embed"].sharding.memory_kind == "pinned_host"
    assert out["opt.m"].sharding.memory_kind == "unpinned_host"
    np.testing.assert_array_equal(np.asarray(out["embed"]), ref["embed"])
    np.testing.assert_array_equal(np.asarray(out["opt.v"]), ref["opt.v"])


def test_safe_open_and_to_jax_take_a_memory_kind(model):
    path, ref = model
    with hostfirst.safe_open(path, framework="jax", device="cpu:pinned_host") as f:
        a = f.get_tensor("embed")
        everything = f.get_tensors()
        part = f.get_slice("embed")[2:4]
    assert a.sharding.memory_kind == "pinned_host" and part.sharding.memory_kind == "pinned_host"
    assert {v.sharding.memory_kind for v in everything.values()} == {"pinned_host"}
    np.testing.assert_array_equal(np.asarray(part), ref["embed"][2:4])
    x = hostfirst.jax.to_jax(np.arange(3, dtype=np.float32), "x", "unpinned_host")
    assert x.sharding.memory_kind == "unpinned_host"


def test_memory_kind_errors(model):
    path, _ = model
    with pytest.raises(hostfirst.InvalidArgumentError, match="host:pinned_host.*'cpu:pinned_host'"):
        hostfirst.jax.load_file(path, rules={"embed": "host:pinned_host"})
    with pytest.raises(hostfirst.InvalidArgumentError):  # not a memory kind: the device parser refuses it
        hostfirst.jax.load_file(path, rules={"embed": "cpu:pinned"})
    with hostfirst.strict(), pytest.raises(hostfirst.ImplicitPlacementError):  # alone: the default device
        hostfirst.jax.load_file(path, rules={"*": "pinned_host"})
    with hostfirst.strict():  # a default no tensor goes to is not resolved, so strict mode has nothing to refuse
        out = hostfirst.jax.load_file(path, rules={"*": "cpu"}, default="pinned_host")
    assert {a.sharding.memory_kind for a in out.values()} == {"device"}
    with pytest.raises(hostfirst.InvalidArgumentError):
        hostfirst.safe_open(path, framework="jax", device="host:device")


# --------------------------------------------------------------------------- CUDA: the stand-in driver
CHILD = textwrap.dedent(r"""
    import json, sys
    import numpy as np
    import jax
    import hostfirst, hostfirst.jax

    path, results = sys.argv[1], sys.argv[2]
    out = {"backends": [(b.name, b.status) for b in hostfirst.backends()]}
    ref = {n: np.array(v) for n, v in hostfirst.open(path).items()}
    try:  # CPU-only JAX: no GPU to hand the arrays to, said before anything moves
        hostfirst.jax.load_file(path, rules={"embed": "cuda_host"}, default="cpu")
    except hostfirst.UnavailableError as e:
        out["no_gpu"] = str(e)
    # JAX's GPU N played by its CPU device: the handover path runs as it would on a GPU
    gpu = jax.devices("cpu")[0]
    hostfirst.jax.jax_device = lambda device: gpu
    handed = []
    real = hostfirst.jax._pinned_handover
    def spy(buffer, device):
        handed.append((buffer.name, str(buffer.device), str(device)))
        return real(buffer, device)
    hostfirst.jax._pinned_handover = spy
    got = hostfirst.jax.load_file(path, rules={"embed": "cuda_host", "opt.m": "cuda:0:pinned_host",
                                               "opt.v": "cuda:0:unpinned_host"},
                                  default="cpu")
    out["kinds"] = {n: got[n].sharding.memory_kind for n in got}
    out["same"] = {n: bool(np.array_equal(np.asarray(got[n]), ref[n])) for n in got}
    out["handed"] = handed
    json.dump(out, open(results, "w"))
""")


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    d = tmp_path_factory.mktemp("stand-in")
    compile_c(["-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", d / "libcuda.so.1",
               ROOT / "tests" / "cuda_stub" / "stand_in_cuda.c", "-lpthread"])
    (d / "libcuda.so").symlink_to("libcuda.so.1")
    return d


def test_cuda_host_is_handed_over_as_pinned_host_on_the_stand_in(stand_in, model, tmp_path):
    path, _ = model
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAND_IN_")}
    env["PYTHONPATH"] = str(Path(hostfirst.__file__).resolve().parents[1])
    env["LD_LIBRARY_PATH"] = f"{stand_in}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    env.update(STAND_IN_DEVICES="1", JAX_PLATFORMS="cpu")
    results = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(results)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(results.read_text())
    assert ["cuda", "available"] in r["backends"]
    assert "no JAX device" in r["no_gpu"] and "cuda" in r["no_gpu"]
    assert r["kinds"] == {"opt.m": "pinned_host", "opt.v": "unpinned_host", "embed": "pinned_host",
                          "bias": "device"}  # bias: default="cpu" (cuda:N device memory goes by DLPack, GPU only)
    assert all(r["same"].values()), r["same"]
    # pinned_host tensors went through hostfirst's page-locked memory (cuda_host), to GPU 0's pinned_host
    assert sorted(r["handed"]) == [["embed", "cuda_host", "cuda_host"], ["opt.m", "cuda_host", "cuda:0"]]
