"""hostfirst.jax.save_file (the drop-in for safetensors.flax.save_file) and save_tree: a pytree of sharded
jax.Arrays written shard by shard (each distinct shard once), in one process with 8 CPU devices and under
jax.distributed with two processes (4 devices each) writing the same files together."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import hostfirst.jax  # noqa: E402
import hostfirst.numpy  # noqa: E402

safetensors_numpy = pytest.importorskip("safetensors.numpy")

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "jax_save_check.py"


def test_save_file_is_the_flax_bytes(tmp_path):
    t = {"a": jax.numpy.arange(6, dtype=jax.numpy.float32).reshape(2, 3), "b": jax.numpy.ones(4, dtype=jax.numpy.int32)}
    p = tmp_path / "m.safetensors"
    hostfirst.jax.save_file(t, p, metadata={"format": "flax"})
    want = safetensors_numpy.save({k: np.asarray(v) for k, v in t.items()}, metadata={"format": "flax"})
    assert p.read_bytes() == want
    assert hostfirst.jax.save(t, {"format": "flax"}) == want
    with pytest.raises(ValueError):
        hostfirst.jax.save_tree({"a": {"b": np.zeros(1)}, "a.b": np.zeros(1)}, tmp_path / "dup.safetensors")


def env(devices):
    e = dict(os.environ)
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    e["JAX_PLATFORMS"] = "cpu"
    if e.get("HOSTFIRST_TEST_INSTALLED") != "1":
        e["PYTHONPATH"] = os.pathsep.join([str(HERE.parent)] + [p for p in [e.get("PYTHONPATH")] if p])
    return e


def result(p):
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-3000:]
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def test_save_tree_one_process_8_devices(tmp_path):
    p = subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], env=env(8), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    r = result(p)
    assert r["ok"] and r["parts"] >= 2
    assert r["written"] == r["file_bytes"]  # one process writes everything, once
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".hostfirst-tmp")]


def test_save_tree_two_processes_jax_distributed(tmp_path):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path), port, str(rank)], env=env(4),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    rs = [result(p) for p in procs]
    assert all(r["ok"] for r in rs)
    # Nothing written twice: the two processes' bytes add up to the files' bytes exactly.
    assert rs[0]["written"] + rs[1]["written"] == rs[0]["file_bytes"]
    assert rs[1]["written"] > 0  # process 1 wrote its own shards
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".hostfirst-tmp")]
