"""hostfirst.jax.load_file(path, shardings=...): global jax.Arrays on a 2x4 mesh of 8 CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8) built from each device's shard only, for P('x','y'),
P(None,'y'), P('x'), replicated, a second mesh and a single device, values against NumPy; then the same under
jax.distributed with two processes on localhost (4 devices each), each reading only its own shards, and a jitted
sum across both; token files (.npy, llm.c, raw, Megatron) split over both processes the same way. Each case runs
in fresh processes (XLA_FLAGS is read when JAX starts)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "jax_shard_check.py"


def env(devices):
    e = dict(os.environ)
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    e["JAX_PLATFORMS"] = "cpu"
    if e.get("HOSTFIRST_TEST_INSTALLED") != "1":  # a developer's run: the source tree, as conftest.py does
        e["PYTHONPATH"] = os.pathsep.join([str(HERE.parent)] + [p for p in [e.get("PYTHONPATH")] if p])
    return e


def result(p, folder, process=0):
    """The check's result, from the file it writes (never from stdout, which JAX's collectives print to too)."""
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-3000:]
    return json.loads((Path(folder) / f"result-{process}.json").read_text())


def test_one_process_2x4_mesh(tmp_path):
    p = subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], env=env(8), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    r = result(p, tmp_path)
    assert (r["devices"], r["local"], r["arrays"]) == (8, 8, 6)
    assert r["shards_checked"] == 5 * 8 + 1
    # One plan per (mesh, split axes); devices holding the same part are read once, into the first of them.
    reads = {tuple(names): owned for owned, names in r["reads"]}
    assert reads[("layer.0.w",)] == list(range(8))  # P("x", "y"): every device its own part
    assert reads[("layer.0.col",)] == [0, 1, 2, 3]  # P(None, "y"): the x pairs share a read
    assert reads[("layer.0.row",)] == [0, 4]  # P("x"): each row of the mesh one read
    assert reads[("layer.0.bias",)] == [0]  # P(): one read for all 8
    assert reads[("embed",)] == list(range(8))  # P("all") on the 1-D mesh
    assert reads[("other",)] == [0]  # SingleDeviceSharding: a one-device mesh of its own


def test_two_processes_jax_distributed(tmp_path):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path), port, str(rank)], env=env(4),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    rs = [result(p, tmp_path, rank) for rank, p in enumerate(procs)]
    for rank, r in enumerate(rs):
        assert (r["process"], r["devices"], r["local"], r["arrays"]) == (rank, 8, 4, 5)
        assert r["shards_checked"] == 5 * 4  # its own 4 devices' shards, not the other process's
        reads = {tuple(names): owned for owned, names in r["reads"]}
        assert reads[("layer.0.col",)] == ([0, 1, 2, 3] if rank == 0 else [4, 5, 6, 7])  # y parts, own x row
        assert reads[("layer.0.bias",)] == [4 * rank]  # one read per process
        assert r["sum"] is not None


TOKENS_SCRIPT = HERE / "jax_shard_tokens_check.py"


def write_token_files(d):
    """The files jax_shard_tokens_check.py reads, written before its processes start (they only read)."""
    from test_tokens import write_llmc, write_megatron

    rng = np.random.default_rng(35)
    np.save(d / "tokens.npy", rng.integers(-1000, 1000, (64, 24), dtype=np.int32))
    write_llmc(d / "shard.bin", rng.integers(0, 50257, 8 * 1000).astype(np.uint16))
    (d / "train.bin").write_bytes(rng.integers(0, 50257, 8 * 999).astype(np.uint16).tobytes())
    seqs = [rng.integers(0, 50257, n).astype(np.uint16) for n in (5, 0, 17, 33, 9, 16)]  # 80 tokens
    write_megatron(str(d / "corpus_text_document"), seqs, [0, 2, 6])


def test_two_processes_shard_token_files(tmp_path):
    """Shard-on-read of token files under jax.distributed: a .npy, an llm.c shard, a headerless raw file and a
    Megatron dataset, each split along dimension 0 over the 8 devices of two processes; each process reads its
    4 devices' parts and nothing else (bytes read = the bytes of its shards = half the tensor), checked shard by
    shard against NumPy, with a jitted sum across both processes."""
    write_token_files(tmp_path)
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, str(TOKENS_SCRIPT), str(tmp_path), port, str(rank)], env=env(4),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    rs = [result(p, tmp_path, rank) for rank, p in enumerate(procs)]
    sizes = {"npy": 64 * 24 * 4, "llmc": 8000 * 2, "raw": 8 * 999 * 2, "megatron": 80 * 2}
    formats = {"npy": "npy", "llmc": "llmc", "raw": "raw", "megatron": "megatron"}
    for rank, r in enumerate(rs):
        assert (r["process"], r["devices"], r["local"]) == (rank, 8, 4)
        for key, size in sizes.items():
            got = r[key]
            assert (got["format"], got["tensor_bytes"], got["checked"]) == (formats[key], size, 4), (key, got)
            assert got["positions"] == [4 * rank + k for k in range(4)], (key, got)
            rows = {"npy": 64, "llmc": 8000, "raw": 8 * 999, "megatron": 80}[key] // 8
            assert got["starts"] == [rows * p for p in got["positions"]], (key, got)
            # Only its bytes: the shards of its 4 devices, half the tensor, read once each.
            assert got["shard_bytes"] == size // 2 and got["bytes_read"] == size // 2, (key, got)
            assert got["sum"] == rs[0][key]["sum"]
        assert rs[rank]["megatron"]["others"] == ["document_indices", "sequence_lengths", "sequence_pointers"]


def test_replicated_devices_share_one_host_read():
    """Devices that differ only along axes a spec does not split over are read once (the first of them) and
    copied by jax.device_put: P(None, "y") on a 2x4 (x, y) mesh reads positions 0-3 and gives 4-7 their copies."""
    import types

    import numpy as np
    from jax.sharding import PartitionSpec as P

    from hostfirst._shard import _replica_of, _split_axes

    assert _split_axes(P(None, "y"), ("x", "y")) == {"y"}
    assert _split_axes(P(("x", "y")), ("x", "y")) == {"x", "y"}
    assert _split_axes(P(), ("x", "y")) == frozenset()
    mesh = types.SimpleNamespace(axis_names=("x", "y"), devices=np.empty((2, 4), dtype=object))
    assert _replica_of(list(range(8)), mesh, frozenset({"y"})) == {k: k % 4 for k in range(8)}
    assert _replica_of(list(range(8)), mesh, frozenset({"x"})) == {k: 0 if k < 4 else 4 for k in range(8)}
    assert _replica_of(list(range(8)), mesh, frozenset()) == {k: 0 for k in range(8)}
    assert _replica_of([5, 6], mesh, frozenset({"x", "y"})) == {5: 5, 6: 6}
    # Under jax.distributed a process holds only some positions: its first of each class is its reader.
    assert _replica_of([4, 5, 6, 7], mesh, frozenset({"x"})) == {4: 4, 5: 4, 6: 4, 7: 4}
