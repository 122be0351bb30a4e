"""Run by test_shard_jax.py in two fresh processes (XLA_FLAGS must be set before JAX starts):
    python jax_shard_tokens_check.py DIR PORT RANK      one of 2 jax.distributed processes on localhost, 4 devices each
The token files in DIR (written by the test before it starts the processes, so nothing here waits for a file):
tokens.npy (int32 [64, 24]), shard.bin (an llm.c shard of u16 tokens), train.bin (headerless u16 tokens, opened with
hostfirst.open_raw) and corpus_text_document.idx/.bin (a Megatron dataset). Each is loaded with
hostfirst.jax.load_file(shardings=...) split along its first dimension over a 1-D mesh of the 8 devices of both
processes; every addressable shard is checked against NumPy's own reading of the file, a jitted sum over the global
array crosses both processes, and the file bytes each process read for its shards are counted from the shards
hostfirst returns. The result goes to result-<process>.json in DIR (never stdout, where JAX's collectives print too).
"""

import json
import sys
from pathlib import Path

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import hostfirst
import hostfirst.jax


def references(d):
    """{file key: (what load_file is given, the tensor split, the whole tensor as NumPy reads it)}."""
    mega = np.fromfile(d / "corpus_text_document.bin", np.uint16)
    return {
        "npy": (d / "tokens.npy", "data", np.load(d / "tokens.npy")),
        "llmc": (d / "shard.bin", "tokens", np.fromfile(d / "shard.bin", np.uint16, offset=1024)),
        "raw": (hostfirst.open_raw(d / "train.bin", "uint16", name="tokens"), "tokens",
                np.memmap(d / "train.bin", np.uint16, mode="r")),
        "megatron": (d / "corpus_text_document", "tokens", mega),
    }


def main():
    d = Path(sys.argv[1])
    jax.distributed.initialize(coordinator_address=f"localhost:{sys.argv[2]}", num_processes=2,
                               process_id=int(sys.argv[3]))
    mesh = Mesh(np.array(jax.devices()), ("x",))
    from hostfirst import _shard
    real_load_shards, shards = _shard.load_shards, []

    def recording_load_shards(*args, **kw):
        got = real_load_shards(*args, **kw)
        shards.extend(got)
        return got

    _shard.load_shards = recording_load_shards
    result = {"process": jax.process_index(), "devices": jax.device_count(), "local": jax.local_device_count()}
    try:
        for key, (src, name, ref) in references(d).items():
            shards.clear()
            # The other tensors (Megatron's index) stay zero-copy host arrays.
            rules = {"*": "host"} if key == "megatron" else None
            got = hostfirst.jax.load_file(src, rules=rules, shardings={name: NamedSharding(mesh, P("x"))})
            a = got[name]
            assert a.shape == ref.shape and a.dtype == ref.dtype, (key, a.shape, a.dtype)
            checked = 0
            for s in a.addressable_shards:
                assert np.array_equal(np.asarray(s.data), ref[s.index]), (key, s.device)
                checked += 1
            # A collective over the global array built from both processes' shards.
            total = int(jax.jit(lambda x: jnp.sum(x.astype(jnp.int32)))(a))
            assert total == int(np.asarray(ref, np.int64).sum()), (key, total)
            mine = [s for s in shards if s.name == name]
            result[key] = {
                "format": (src if isinstance(src, hostfirst.File) else hostfirst.open(src)).format,
                "tensor_bytes": int(ref.nbytes),
                "checked": checked,
                "positions": sorted(s.position for s in mine),
                "shard_bytes": sum(s.buffer.nbytes for s in mine),
                "bytes_read": sum(s.bytes_read for s in mine),
                "starts": sorted(s.index[0].start for s in mine),
                "others": sorted(n for n in got if n != name),
                "sum": total,
            }
    finally:
        _shard.load_shards = real_load_shards
    out = d / f"result-{jax.process_index()}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out)


if __name__ == "__main__":
    main()
