"""The seeds' story in JAX terms, with hostfirst.

A JAX user's training set is one big safetensors array of uint16 tokens. `safetensors.flax.load_file` puts it
on the default device (the GPU) and runs out of memory although it fits in RAM. With hostfirst the tokens stay
a zero-copy, read-only NumPy view of the file mapping in host RAM, and only each batch is moved to the default
device: with jax.device_put when JAX is installed, else with torch when it is, else it stays a NumPy array.

    python3 bindings/python/examples/seed_story.py [tokens.safetensors] [--batch 8] [--seq 128] [--steps 4]

Without a path it writes a small token file to a temporary directory first. Runs without JAX, torch or a GPU.
"""

import argparse
import json
import os
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

try:
    import hostfirst
except ImportError:  # not installed: a source checkout's bindings/python
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import hostfirst


def rss_mib():
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def write_tokens(path, n, seed=0):
    """A safetensors file with one U16 tensor 'tokens' of n elements (written by hand: no extra package)."""
    tokens = np.random.default_rng(seed).integers(0, 50257, size=n, dtype=np.uint16)
    header = json.dumps({"tokens": {"dtype": "U16", "shape": [n], "data_offsets": [0, tokens.nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.write(tokens.tobytes())


def to_default_device(batch):
    """Moves one host batch to the framework's default device; returns (array, where)."""
    try:
        import jax

        arr = jax.device_put(batch)  # jax's default device (the GPU when there is one)
        return arr, f"jax {next(iter(arr.devices()))}"
    except ImportError:
        pass
    try:
        import torch

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.from_numpy(batch.astype(np.int32)).to(dev), f"torch {dev}"
    except ImportError:
        pass
    return np.array(batch), "numpy (no JAX or torch here)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()

    for b in hostfirst.backends():
        print(f"backend {b.name}: {b.status}" + (f" ({b.reason})" if b.reason else ""))
    d = hostfirst.default_device()
    print(f"default device: {d.device} (from {d.source})")

    tmp = None
    path = args.path
    if path is None:
        tmp = tempfile.TemporaryDirectory()
        path = os.path.join(tmp.name, "tokens.safetensors")
        write_tokens(path, 1 << 20)

    before = rss_mib()
    f = hostfirst.open(path)  # header only; the data stays on disk, mapped read-only
    tokens = f["tokens"]
    host = tokens.numpy()  # zero-copy view of the mapping, read-only, in host RAM
    print(f"opened {path}: tokens {tokens.dtype} {tokens.shape}, {tokens.nbytes / 2**20:.1f} MiB; "
          f"RSS {before:.1f} -> {rss_mib():.1f} MiB; writeable={host.flags.writeable}")

    per = args.batch * args.seq
    for step in range(min(args.steps, len(tokens) // per)):
        rows = tokens[step * per:(step + 1) * per]  # zero-copy row slice of the file
        batch = np.asarray(rows).reshape(args.batch, args.seq)  # still zero-copy, read-only
        arr, where = to_default_device(batch)
        print(f"step {step}: batch {tuple(batch.shape)} -> {where}, first token {int(batch[0, 0])}")
    if tmp is not None:
        f.close()  # the views stay valid; unlinking a mapped file is fine on POSIX
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
