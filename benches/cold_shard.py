#!/usr/bin/env python3
"""Cold shard-on-read of P(None, "y") column shards on a 2x4 JAX mesh vs numpy slicing of a memmap +
jax.device_put with the same sharding, fio's random-read limits beside (issue 22). A benchmark, not a test;
root (drops the page cache).

    python benches/cold_shard.py [--reps 3] [--data DIR] [--out FILE]

Needs numpy, jax (CPU; 8 devices faked with XLA_FLAGS=--xla_force_host_platform_device_count=8) and the
hostfirst package (benches/run.py's `shard` section sets PYTHONPATH and HOSTFIRST_LIBRARY to the checkout's
release build). The file: 20 f32 [1024, 10240] tensors (800 MiB, 40 KiB rows); on a 2x4 mesh (x, y) with
P(None, "y") each device holds a [1024, 2560] column block (1024 runs of 10 KiB, 40 KiB apart) and the two
devices of one y column hold the same block. One process owns all 8 devices, so it needs every byte of the
file once. Every measurement runs in a fresh process (a load happens once per job: both contenders pay for
fresh memory, and neither reuses what an earlier load freed), timed from after `import jax` and the mesh to
the arrays ready. Per round, contenders alternating in order:

  cold  the page cache dropped (`sync; echo 1 > /proc/sys/vm/drop_caches`) before each contender; wall time
        to global jax.Arrays on every device (block_until_ready), and /proc/self/io read_bytes (bytes the
        process made the kernel fetch from storage)
        - hostfirst: `hostfirst.jax.load_file(path, shardings={"*": NamedSharding(mesh, P(None, "y"))})`
        - peer: np.memmap of the file, each tensor's block for each device sliced with the sharding's
          `addressable_devices_indices_map` and `jax.device_put` to it, then
          `jax.make_array_from_single_device_arrays` (what a user writes without shard-on-read)
  warm  the same right after, file cached

Ratios are hostfirst / peer within a round (lower is better); the report takes the median round.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as bench  # noqa: E402 - benches/run.py: write_sharded, header_len, sh
from cold_gather import drop_caches, fio  # noqa: E402 - the same cache drop and fio limits as section 9

TENSORS, ROWS, COLS = 20, 1024, 10240


def read_bytes():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def load_hostfirst(path, sharding, metas, hl):
    """hostfirst: shard-on-read straight to global jax.Arrays."""
    import jax
    import hostfirst.jax

    out = hostfirst.jax.load_file(path, shardings={"*": sharding})
    jax.block_until_ready(list(out.values()))
    return out


def load_peer(path, sharding, metas, hl):
    """The peer: numpy slicing of a memmap + jax.device_put per device, same sharding."""
    import jax

    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, v in metas.items():
        lo, hi = v["data_offsets"]
        shape = tuple(v["shape"])
        a = mm[8 + hl + lo:8 + hl + hi].view(np.float32).reshape(shape)
        parts = [jax.device_put(a[idx], d) for d, idx in sharding.addressable_devices_indices_map(shape).items()]
        out[name] = jax.make_array_from_single_device_arrays(shape, sharding, parts)
    jax.block_until_ready(list(out.values()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(bench.ROOT, "bench-out", "data"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cold-shard.json"))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--one", choices=("hostfirst", "peer"), help=argparse.SUPPRESS)  # a child's one load
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import hostfirst
    import hostfirst.jax

    path = args.path or os.path.join(args.data, f"shard-{TENSORS}x{ROWS}x{COLS}-f32.safetensors")
    if not args.one and not os.path.exists(path):
        os.makedirs(args.data, exist_ok=True)
        bench.write_sharded(path, TENSORS, ROWS, COLS)
    devices = jax.devices()
    assert len(devices) >= 8, f"need 8 JAX devices, have {len(devices)} (XLA_FLAGS={os.environ['XLA_FLAGS']})"
    mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("x", "y"))
    sharding = NamedSharding(mesh, P(None, "y"))
    hl = bench.header_len(path)
    header = json.loads(open(path, "rb").read(8 + hl)[8:])
    metas = {k: v for k, v in header.items() if k != "__metadata__"}
    data_bytes = sum(v["data_offsets"][1] - v["data_offsets"][0] for v in metas.values())
    device_bytes = 0  # bytes held over all 8 devices (each column block twice)
    for v in metas.values():
        shape = tuple(v["shape"])
        for idx in sharding.addressable_devices_indices_map(shape).values():
            device_bytes += int(np.prod([len(range(*s.indices(n))) for s, n in zip(idx, shape)])) * 4

    if args.one:  # a child: one load, one JSON line
        name = args.one
        load = load_hostfirst if name == "hostfirst" else load_peer
        io0, t = read_bytes(), time.perf_counter()
        out = load(path, sharding, metas, hl)
        dt = time.perf_counter() - t
        if args.check:  # the two give the same arrays with the same sharding
            other = (load_peer if name == "hostfirst" else load_hostfirst)(path, sharding, metas, hl)
            for k in metas:
                assert out[k].sharding == other[k].sharding, k
                assert np.array_equal(np.asarray(out[k]), np.asarray(other[k])), k
        print(json.dumps(dict(t_s=dt, read_bytes=read_bytes() - io0)))
        return

    def timed(name, cold, check=False):
        if cold:
            drop_caches()
        cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--path", path] + (["--check"] if check else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"cold_shard.py: {name} failed: {p.stderr[-2000:]}")
        rec = json.loads(p.stdout.strip().splitlines()[-1])
        return rec["t_s"], rec["read_bytes"]

    timed("hostfirst", cold=False, check=True)
    fio_limits = [fio(path, 1), fio(path, 64)]
    print(f"fio: {fio_limits}", file=sys.stderr)
    rounds = []
    for r in range(args.reps):
        row = {}
        order = ("hostfirst", "peer") if r % 2 == 0 else ("peer", "hostfirst")
        for name in order:
            row[f"cold_{name}_s"], row[f"cold_{name}_read_bytes"] = timed(name, cold=True)
            row[f"warm_{name}_s"], _ = timed(name, cold=False)
        row["cold_ratio"] = row["cold_hostfirst_s"] / row["cold_peer_s"]
        row["warm_ratio"] = row["warm_hostfirst_s"] / row["warm_peer_s"]
        row["read_ratio"] = row["cold_hostfirst_read_bytes"] / data_bytes
        row["peer_read_ratio"] = row["cold_peer_read_bytes"] / data_bytes
        rounds.append(row)
        print(f"round {r + 1}: cold {row['cold_hostfirst_s']:.2f} s vs {row['cold_peer_s']:.2f} s = "
              f"{row['cold_ratio']:.2f}x, read {row['read_ratio']:.3f}x the shard bytes; warm {row['warm_ratio']:.2f}x",
              file=sys.stderr)

    def median_round(key):
        return sorted(rounds, key=lambda x: x[key])[len(rounds) // 2]

    summary = {key: dict(median_round(key), min=min(x[key] for x in rounds), max=max(x[key] for x in rounds))
               for key in ("cold_ratio", "warm_ratio", "read_ratio")}
    doc = dict(tensors=TENSORS, shape=[ROWS, COLS], dtype="float32", mesh=[2, 4], spec='P(None, "y")',
               data_bytes=data_bytes, device_bytes=device_bytes, reps=args.reps, engine=hostfirst.read_engine(),
               fio=fio_limits, jax=jax.__version__, numpy=np.__version__, python=platform.python_version(),
               kernel=platform.release(), cores=os.cpu_count(),
               cpu=bench.sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
               loadavg=open("/proc/loadavg").read().split()[:3], stamp=time.strftime("%Y-%m-%d %H:%M:%S"),
               git=bench.sh(f"git -C {bench.ROOT} rev-parse --short HEAD"), summary=summary, rounds=rounds)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    if not args.keep:
        os.remove(path)
    print(markdown(doc))


def markdown(doc):
    """The BENCHMARKS.md part (benches/report.py includes it from the JSON)."""
    q1, q64 = doc["fio"]
    s = doc["summary"]
    c, w_, rd = s["cold_ratio"], s["warm_ratio"], s["read_ratio"]
    MiB = 1 << 20
    lines = [
        f"**Cold `P(None, \"y\")` on a 2×4 JAX mesh** (`benches/cold_shard.py`, run by the `shard` section): "
        f"{doc['tensors']} f32 {doc['shape']} tensors ({doc['data_bytes'] / MiB:.0f} MiB, 40 KiB rows); each of 8 JAX "
        f"CPU devices (`--xla_force_host_platform_device_count=8`) holds a column block of 10 KiB runs, the two "
        f"devices of a y column the same block ({doc['device_bytes'] / MiB:.0f} MiB on devices). One process owns "
        f"all 8 devices, so the shard bytes it must read are the whole file, once. {doc['cores']} cores "
        f"({doc['cpu']}), kernel {doc['kernel']}, load {' '.join(doc['loadavg'])} (a shared machine); jax "
        f"{doc['jax']}; read engine: {doc['engine']}. {doc['reps']} rounds, contenders alternating; cold: "
        f"`sync; echo 1 > /proc/sys/vm/drop_caches` before each contender. Peer: `np.memmap` of the file, each "
        f"device's block sliced by the sharding's `addressable_devices_indices_map`, `jax.device_put` to its "
        f"device, `jax.make_array_from_single_device_arrays`. hostfirst: `hostfirst.jax.load_file(path, "
        f"shardings={{'*': NamedSharding(mesh, P(None, 'y'))}})`. Read bytes: /proc/self/io `read_bytes` ÷ the "
        f"shard bytes. Ratios hostfirst ÷ peer within a round, median round (range).", "",
        f"Device limits (fio {q1['version']}, random 4 KiB O_DIRECT reads of the same file, 5 s): queue depth 1 "
        f"{q1['iops']:,.0f} reads/s ({q1['lat_us']:.0f} µs each), queue depth 64 {q64['iops']:,.0f} reads/s "
        f"({q64['iops'] * 4096 / MiB:.0f} MiB/s in 4 KiB reads).", "",
        "| case | hostfirst | peer | hostfirst ÷ peer | target |", "|---|---|---|---|---|",
        f"| cold, to jax.Arrays on 8 devices | {c['cold_hostfirst_s']:.2f} s, read "
        f"{c['cold_hostfirst_read_bytes'] / MiB:.0f} MiB | {c['cold_peer_s']:.2f} s, read "
        f"{c['cold_peer_read_bytes'] / MiB:.0f} MiB | **{c['cold_ratio']:.2f}×** ({c['min']:.2f}–{c['max']:.2f}) | "
        f"≤ 0.8× |",
        f"| bytes read, cold ÷ shard bytes | **{rd['read_ratio']:.3f}×** ({rd['min']:.3f}–{rd['max']:.3f}) | "
        f"{rd['peer_read_ratio']:.3f}× | | ≤ 1.25× |",
        f"| warm (file cached) | {w_['warm_hostfirst_s']:.2f} s | {w_['warm_peer_s']:.2f} s | "
        f"**{w_['warm_ratio']:.2f}×** ({w_['min']:.2f}–{w_['max']:.2f}) | |",
    ]
    return "\n".join(lines) + "\n"


def verdicts(doc):
    """Target rows for the report."""
    s = doc["summary"]
    c, rd = s["cold_ratio"], s["read_ratio"]
    return [
        ("Cold `P(None, \"y\")` shard-on-read on a 2×4 mesh: ≤ 0.8× numpy memmap slicing + `jax.device_put`, same run",
         f"{c['cold_ratio']:.2f}× ({c['min']:.2f}–{c['max']:.2f}); {c['cold_hostfirst_s']:.2f} s vs "
         f"{c['cold_peer_s']:.2f} s", "met" if c["cold_ratio"] <= 0.8 else "missed"),
        ("Cold `P(None, \"y\")` bytes read ≤ 1.25× the shard bytes", f"{rd['read_ratio']:.3f}× (max {rd['max']:.3f}×)",
         "met" if rd["max"] <= 1.25 else "missed"),
    ]


if __name__ == "__main__":
    main()
