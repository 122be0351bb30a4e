"""Run by test_save_jax.py in fresh processes (XLA_FLAGS must be set before JAX starts):
    python jax_save_check.py DIR                    one process, 8 CPU devices
    python jax_save_check.py DIR PORT RANK          one of 2 jax.distributed processes on localhost, 4 devices each
Saves a pytree of jax.Arrays sharded on a 2x4 mesh (P('x','y'), P(None,'y'), P('x'), replicated, one device, a
numpy leaf) with hostfirst.jax.save_tree, each process writing the shards it holds; prints one JSON line."""

import json
import sys
from pathlib import Path

import numpy as np

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

import hostfirst.jax


def model():
    rng = np.random.default_rng(5)
    return {
        "w": rng.standard_normal((8, 16), dtype=np.float32),
        "col": rng.standard_normal((6, 8), dtype=np.float32),
        "row": rng.integers(-99, 99, (4, 3), dtype=np.int32),
        "bias": rng.standard_normal(5, dtype=np.float32),
        "one": np.arange(7, dtype=np.float32),
        "host": np.arange(3, dtype=np.int64),
    }


def main():
    d = Path(sys.argv[1])
    multi = len(sys.argv) > 2
    if multi:
        jax.distributed.initialize(coordinator_address=f"localhost:{sys.argv[2]}", num_processes=2,
                                   process_id=int(sys.argv[3]))
    arrays = model()
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    specs = {"w": P("x", "y"), "col": P(None, "y"), "row": P("x"), "bias": P()}

    def put(name, a):
        return jax.make_array_from_callback(a.shape, NamedSharding(mesh, specs[name]), lambda idx: a[idx])

    tree = {"params": {k: put(k, arrays[k]) for k in specs}, "host": arrays["host"]}
    if multi:
        tree["params"]["one"] = jax.make_array_from_callback(
            arrays["one"].shape, NamedSharding(Mesh(np.array(jax.devices()[5:6]), ("z",)), P()),
            lambda idx: arrays["one"][idx], dtype=arrays["one"].dtype)
    else:
        tree["params"]["one"] = jax.device_put(arrays["one"], SingleDeviceSharding(jax.devices()[3]))
    info = hostfirst.jax.save_tree(tree, d / "tree.safetensors", metadata={"step": "7"}, max_part_bytes=600)
    flat = {f"params.{k}": v for k, v in arrays.items() if k != "host"}
    flat["host"] = arrays["host"]
    got = hostfirst.numpy.load_file(info["index"])
    ok = sorted(got) == sorted(flat) and all(np.array_equal(got[k], flat[k]) for k in flat)
    print(json.dumps({"process": jax.process_index(), "ok": ok, "parts": len(info["parts"]),
                      "written": info["written"], "file_bytes": info["file_bytes"]}))


if __name__ == "__main__":
    main()
