#!/usr/bin/env python3
"""The drop-in loaders against safetensors, in one process (issue 34). A benchmark, not a test.

    python benches/python_dropin.py FILE [--rounds 7] [--label NAME]

Each round times, back to back in this process (alternating which goes first), on a file in the page cache:
  numpy: hostfirst.numpy.load_file(FILE)  vs  safetensors.numpy.load_file(FILE)   (owned, writable arrays both)
  flax:  hostfirst.jax.load_file(FILE)    vs  safetensors.flax.load_file(FILE)    (jax.Arrays on JAX's CPU device,
         waited for with jax.block_until_ready inside the timed span)
and, for reference, hostfirst.numpy.load_file(FILE, zero_copy=True) (the mapping: nothing read). Timing boundary:
the call, from before it to after the dict is returned (and, for JAX, every array ready); dropping the arrays is
outside it. The first round is a warm-up. Prints one JSON line per pair: each side's median, the median of the
per-round ratios (hostfirst / safetensors), and the minima. Run it with a Python where numpy, jax and safetensors
are installed and the hostfirst package (bindings/python) is importable; benches/run.sh's venv has them.
"""

import gc
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import safetensors.flax  # noqa: E402
import safetensors.numpy  # noqa: E402

import hostfirst  # noqa: E402
import hostfirst.jax  # noqa: E402
import hostfirst.numpy  # noqa: E402


def timed(fn, wait=False):
    gc.collect()
    t = time.perf_counter()
    out = fn()
    if wait:
        jax.block_until_ready(list(out.values()))
    dt = time.perf_counter() - t
    n = len(out)
    nbytes = sum(int(v.nbytes) for v in out.values())
    del out
    gc.collect()
    return dt, n, nbytes


def paired(ours, theirs, rounds, wait=False):
    a, b, r = [], [], []
    n = nbytes = 0
    for i in range(rounds + 1):
        if i % 2 == 0:
            (x, n, nbytes), (y, _, _) = timed(ours, wait), timed(theirs, wait)
        else:
            (y, _, _), (x, n, nbytes) = timed(theirs, wait), timed(ours, wait)
        if i > 0:
            a.append(x)
            b.append(y)
            r.append(x / y)
    return dict(tensors=n, bytes=nbytes, hostfirst_s=statistics.median(a), peer_s=statistics.median(b),
                paired_ratio=statistics.median(r), hostfirst_min_s=min(a), peer_min_s=min(b))


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
    label = sys.argv[sys.argv.index("--label") + 1] if "--label" in sys.argv else os.path.basename(path)
    common = dict(op="python-dropin-paired", file=path, label=label, rounds=rounds, engine=hostfirst.read_engine(),
                  jax=jax.__version__, safetensors=safetensors.__version__)
    zc = [timed(lambda: hostfirst.numpy.load_file(path, zero_copy=True))[0] for _ in range(rounds + 1)][1:]
    rec = paired(lambda: hostfirst.numpy.load_file(path), lambda: safetensors.numpy.load_file(path), rounds)
    print(json.dumps(dict(common, pair="numpy", peer="safetensors.numpy.load_file", zero_copy_s=statistics.median(zc),
                          **rec)), flush=True)
    with hostfirst.default_device("cpu"):  # JAX's device here is its CPU: both sides end there
        rec = paired(lambda: hostfirst.jax.load_file(path), lambda: safetensors.flax.load_file(path), rounds,
                     wait=True)
    print(json.dumps(dict(common, pair="flax", peer="safetensors.flax.load_file", **rec)), flush=True)


if __name__ == "__main__":
    main()
