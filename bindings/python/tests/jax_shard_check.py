"""Run by test_shard_jax.py in fresh processes (XLA_FLAGS must be set before JAX starts):
    python jax_shard_check.py DIR                    one process, 8 CPU devices
    python jax_shard_check.py DIR PORT RANK          one of 2 jax.distributed processes on localhost, 4 devices each
Writes (rank 0) or reads the model in DIR, loads it with hostfirst.jax.load_file(shardings=...) on a 2x4 mesh,
checks every addressable shard (and, in one process, every global array) against NumPy, and writes its result
to result-<process>.json in the folder."""

import json
import struct
import sys
import time
from pathlib import Path

import numpy as np

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

import hostfirst.jax


def model():
    rng = np.random.default_rng(11)
    return {
        "layer.0.w": rng.standard_normal((8, 16), dtype=np.float32),
        "layer.0.col": rng.standard_normal((6, 8), dtype=np.float32),
        "layer.0.row": rng.integers(-99, 99, (4, 3), dtype=np.int32),
        "layer.0.bias": rng.standard_normal(5, dtype=np.float32),
        "embed": rng.standard_normal((16, 4), dtype=np.float32),
        "other": np.arange(7, dtype=np.float32),
    }


def write(path, arrays):
    names = {"float32": "F32", "int32": "I32"}
    hdr, off, blobs = {}, 0, []
    for k, a in arrays.items():
        b = a.tobytes()
        hdr[k] = {"dtype": names[a.dtype.name], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    tmp.rename(path)


def main():
    d = Path(sys.argv[1])
    multi = len(sys.argv) > 2
    if multi:
        jax.distributed.initialize(coordinator_address=f"localhost:{sys.argv[2]}", num_processes=2,
                                   process_id=int(sys.argv[3]))
    arrays = model()
    path = d / "model.safetensors"
    if jax.process_index() == 0:
        write(path, arrays)
    while not path.exists():
        time.sleep(0.05)
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    line = Mesh(np.array(jax.devices()), ("all",))  # a second mesh, 1-D over the same devices
    shardings = {
        "layer.*.w": NamedSharding(mesh, P("x", "y")),
        "*.col": NamedSharding(mesh, P(None, "y")),
        "*.row": NamedSharding(mesh, P("x")),
        "*.bias": NamedSharding(mesh, P()),
        "embed": NamedSharding(line, P("all")),
    }
    if not multi:
        shardings["other"] = SingleDeviceSharding(jax.devices()[3])
    # Which positions each plan reads into host memory (replicas of a part are read once: see below).
    from hostfirst import _shard
    real_load_shards, reads = _shard.load_shards, []

    def recording_load_shards(path, mesh, rules, owned, **kw):
        shards = real_load_shards(path, mesh, rules, owned, **kw)
        reads.append((sorted(owned), sorted({s.name for s in shards})))
        return shards

    _shard.load_shards = recording_load_shards
    try:
        got = hostfirst.jax.load_file(path, rules={"*": "host"}, shardings=shardings)
    finally:
        _shard.load_shards = real_load_shards
    assert list(got) == list(arrays), list(got)  # every tensor, in file order
    if multi:  # no sharding for it: the rules keep it a host array
        other = got.pop("other")
        assert isinstance(other, np.ndarray) and np.array_equal(other, arrays["other"])
    checked = 0
    for name, a in got.items():
        assert a.shape == arrays[name].shape and a.dtype == arrays[name].dtype, name
        for s in a.addressable_shards:
            assert np.array_equal(np.asarray(s.data), arrays[name][s.index]), (name, s.device)
            checked += 1
        if not multi:
            assert np.array_equal(np.asarray(a), arrays[name]), name
    total = None
    if multi:
        # A collective over the global array built from both processes' shards.
        total = float(jax.jit(lambda x: x.sum())(got["layer.0.w"]))
        assert abs(total - float(arrays["layer.0.w"].sum())) < 1e-3, total
    # The result goes to a file of its own (result-<process>.json in the folder), never to stdout, where JAX's
    # collectives (Gloo) print too, sometimes on the same line.
    result = {"process": jax.process_index(), "devices": jax.device_count(), "local": jax.local_device_count(),
              "arrays": len(got), "shards_checked": checked, "sum": total, "reads": reads}
    out = d / f"result-{jax.process_index()}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out)


if __name__ == "__main__":
    main()
