#!/usr/bin/env python3
"""Python gather speed against nanoGPT's get_batch, peers in the same run (issue 11.7). A benchmark, not a test.

    python benches/python_gather.py [--mib 1024] [--reps 7] [--iters 200] [--data DIR] [--out FILE]

Run it with a Python where the hostfirst wheel, numpy and jax[cpu] are installed (scripts/test-python.sh makes
one: target/py-venv). It writes a token file of real random data (u16, --mib MiB), reads it into the page cache,
then, in each of --reps rounds and in turn, times --iters batches of [64, 1025] (the window and its one-shifted
target, as nanoGPT's x and y of [64, 1024]) per contender:

  host    nanoGPT get_batch (benches/run.py)            vs  hostfirst Gather.run to cpu (a Buffer, the ring's)
  host    nanoGPT get_batch                             vs  Gather.run from a cpu Buffer of the tokens (memcpy path)
  jax     get_batch -> jnp.asarray(x), jnp.asarray(y)   vs  Gather.run -> jax.device_put(batch)
  jax     get_batch -> jnp.asarray(x), jnp.asarray(y)   vs  Gather.run -> jax.dlpack.from_dlpack(batch)

Ratios are peer p50 / hostfirst p50 within a round; the table reports the median round, and the JSON all of them.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as bench  # noqa: E402 - benches/run.py: nanogpt_get_batch, write_single, header_len

B, T = 64, 1024


def p50(fn, iters):
    lat = []
    for i in range(iters + 5):
        t = time.perf_counter()
        fn(i)
        dt = time.perf_counter() - t
        if i >= 5:
            lat.append(dt)
    return statistics.median(lat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--data", default=os.path.join(bench.ROOT, "target", "bench-python"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "python-gather.json"))
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    import hostfirst
    import hostfirst.jax  # noqa: F401 - jax.device_put of a Buffer

    os.makedirs(args.data, exist_ok=True)
    path = os.path.join(args.data, f"tokens-{args.mib}mib.safetensors")
    if not os.path.exists(path) or os.path.getsize(path) < args.mib << 20:
        bench.write_single(path, args.mib << 20)
    with open(path, "rb") as f:  # into the page cache
        while f.read(64 << 20):
            pass
    off = 8 + bench.header_len(path)
    n = (os.path.getsize(path) - off) // 2

    tokens = hostfirst.open(path)["tokens"]
    tokens.prefault()
    host = tokens.to("cpu")
    g = hostfirst.Gather("cpu", np.uint16, batch=B, window=T + 1)
    stream = hostfirst.OffsetStream(1337)
    offsets = [np.asarray(stream.next(n, T + 1, B), dtype=np.uint64) for _ in range(args.iters + 5)]
    rng = np.random.default_rng(1337)

    def get_batch(i):
        return bench.nanogpt_get_batch(path, off, n, rng, B, T)

    def get_batch_jax(i):
        x, y = get_batch(i)
        jnp.asarray(x).block_until_ready()
        jnp.asarray(y).block_until_ready()

    def gather(i):
        return g.run(tokens, offsets[i])

    def gather_from_buffer(i):
        return g.run(host, offsets[i])

    def gather_device_put(i):
        jax.device_put(g.run(tokens, offsets[i])).block_until_ready()

    def gather_dlpack(i):
        jax.dlpack.from_dlpack(g.run(tokens, offsets[i])).block_until_ready()

    pairs = [("host", "Gather.run (mapping, prefaulted)", get_batch, gather),
             ("host", "Gather.run from a cpu Buffer", get_batch, gather_from_buffer),
             ("jax", "Gather.run -> jax.device_put", get_batch_jax, gather_device_put),
             ("jax", "Gather.run -> jax.dlpack.from_dlpack", get_batch_jax, gather_dlpack)]
    rounds = []
    for r in range(args.reps):
        row = {}
        for kind, name, peer, ours in pairs:
            tp, to = p50(peer, args.iters), p50(ours, args.iters)
            row[name] = dict(kind=kind, peer_p50_s=tp, hostfirst_p50_s=to, ratio=tp / to)
        rounds.append(row)
        print(f"round {r + 1}: " + ", ".join(f"{k}: {v['ratio']:.1f}x" for k, v in row.items()), file=sys.stderr)

    summary = {}
    for _, name, _, _ in pairs:
        ordered = sorted(rounds, key=lambda row: row[name]["ratio"])
        mid = ordered[len(ordered) // 2][name]
        summary[name] = dict(mid, min_ratio=ordered[0][name]["ratio"], max_ratio=ordered[-1][name]["ratio"])
    doc = dict(shape=[B, T + 1], dtype="uint16", file_mib=args.mib, reps=args.reps, iters=args.iters,
               python=platform.python_version(), numpy=np.__version__, jax=jax.__version__,
               hostfirst=hostfirst.__version__, cpu=bench.sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"),
               cores=os.cpu_count(), stamp=time.strftime("%Y-%m-%d %H:%M:%S"), summary=summary, rounds=rounds)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(markdown(doc))


def markdown(doc):
    """The BENCHMARKS.md section (benches/report.py includes it from the JSON)."""
    lines = [f"[{doc['shape'][0]}, {doc['shape'][1]}] u16 windows from a {doc['file_mib']} MiB token file in the page "
             f"cache; Python {doc['python']}, numpy {doc['numpy']}, JAX {doc['jax']} (CPU); {doc['cores']} cores, "
             f"{doc['cpu'].strip()}; {doc['reps']} rounds of {doc['iters']} batches, p50 per contender per round, the "
             f"median round shown (range over rounds in brackets). Command: `python benches/python_gather.py` "
             f"in the venv scripts/test-python.sh makes.", "",
             "Peer: nanoGPT's `get_batch` without torch (`nanogpt_get_batch` in benches/run.py: a new np.memmap per "
             "batch, x and y of [64, 1024] stacked as int64), and for JAX its x and y through `jnp.asarray`. "
             "hostfirst: one [64, 1025] u16 batch (x and y are its views), gathered to cpu from the prefaulted mapping "
             "or from a cpu Buffer of the tokens; each batch is dropped before the next run (the ring keeps one or "
             "two). CPU only: no GPU here.", "",
             "| hostfirst | peer | peer p50 | hostfirst p50 | peer ÷ hostfirst | target |", "|---|---|---|---|---|---|"]
    for name, s in doc["summary"].items():
        peer = "nanoGPT get_batch" if s["kind"] == "host" else "get_batch → jnp.asarray(x), jnp.asarray(y)"
        target = "≥ 15×" if s["kind"] == "host" else "≥ 10×"
        lines.append(f"| {name} | {peer} | {s['peer_p50_s'] * 1e6:,.0f} µs | {s['hostfirst_p50_s'] * 1e6:,.1f} µs | "
                     f"**{s['ratio']:.1f}×** ({s['min_ratio']:.1f}–{s['max_ratio']:.1f}) | {target} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
