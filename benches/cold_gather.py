#!/usr/bin/env python3
"""Cold and warm training batches through the transfer engine vs a serial os.pread loop, fio's random-read rates
beside them, and a training loop with prefetch (issue 22). A benchmark, not a test; root (drops the page cache).

    python benches/cold_gather.py [--gib 2] [--reps 3] [--batches 40] [--data DIR] [--out FILE]

Needs numpy and the hostfirst package (benches/run.py's `coldgather` section sets PYTHONPATH and
HOSTFIRST_LIBRARY to the checkout's release build); installs fio from Debian's packages if it is missing.
Per round, all in one process, contenders interleaved:

  cold  Gather.run to cpu of [64, 1025] u16 windows at random offsets of a >= 2 GiB token file whose pages were
        dropped (`echo 1 > /proc/sys/vm/drop_caches` before each contender), p50 over --batches batches
        vs the obvious serial reader: one os.pread per window into a numpy batch, same kind of offsets
  warm  the same with the whole file in the page cache, p50 over 300 batches
  loop  a training loop whose step (numpy on one core) takes about one cold gather (the round's mean): Gather.stream(depth=4) vs
        run-then-step, wall time of the loop over the same cold offsets
  fio   random 4 KiB O_DIRECT reads of the same file at queue depth 1 (psync) and 64 (io_uring), 5 s each: the
        device's limits; a batch is ~64 such reads

Ratios are hostfirst / peer within a round (lower is better); the report takes the median round.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

# The training step keeps one core busy (issue 22): BLAS must not spread it over both.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402 - after the thread settings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as bench  # noqa: E402 - benches/run.py: write_single, header_len, sh

B, T = 64, 1025


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def fio(path, depth):
    if shutil.which("fio") is None:
        # scripts/apt.sh: the one apt helper (waits for another apt run's locks, fails saying why)
        subprocess.run(["bash", "-c", ". scripts/apt.sh && apt_install fio"], cwd=os.path.dirname(HERE), check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, "APT_WHO": "benches/cold_gather.py"})
    engine = "psync" if depth == 1 else "io_uring"
    out = subprocess.run(["fio", "--name=rand4k", f"--filename={path}", "--rw=randread", "--bs=4k", "--direct=1",
                          f"--ioengine={engine}", f"--iodepth={depth}", "--runtime=5", "--time_based",
                          "--output-format=json", "--readonly"], capture_output=True, text=True, check=True)
    job = json.loads(out.stdout)["jobs"][0]["read"]
    return dict(depth=depth, engine=engine, iops=job["iops"], lat_us=job["clat_ns"]["mean"] / 1e3,
                version=subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip())


def p50(xs):
    return statistics.median(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--data", default=os.path.join(bench.ROOT, "bench-out", "data"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cold-gather.json"))
    args = ap.parse_args()

    import hostfirst

    nbytes = int(args.gib * (1 << 30))
    os.makedirs(args.data, exist_ok=True)
    path = os.path.join(args.data, f"single-{nbytes >> 20}MiB.safetensors")
    if not os.path.exists(path) or os.path.getsize(path) < nbytes:
        bench.write_single(path, nbytes)
    base = 8 + bench.header_len(path)
    n = (os.path.getsize(path) - base) // 2
    tokens = hostfirst.open(path)["tokens"]
    g = hostfirst.Gather("cpu", np.uint16, batch=B, window=T)
    fd = os.open(path, os.O_RDONLY)
    rng = np.random.default_rng(22)

    def offsets(k):
        return rng.integers(0, n - T, size=(k, B))

    def run_gather(offs):
        lat = []
        for o in offs:
            t = time.perf_counter()
            b = g.run(tokens, o)
            lat.append(time.perf_counter() - t)
            del b
        return lat

    def run_pread(offs):
        lat = []
        out = np.empty((B, T), np.uint16)
        for o in offs:
            t = time.perf_counter()
            for i, x in enumerate(o):
                out[i] = np.frombuffer(os.pread(fd, 2 * T, base + 2 * int(x)), np.uint16)
            lat.append(time.perf_counter() - t)
        return lat

    fio_limits = [fio(path, 1), fio(path, 64)]
    print(f"fio: {fio_limits}", file=sys.stderr)

    # The step: numpy on one core, calibrated in each round to that round's mean cold gather (the disk's speed
    # drifts on a shared machine).
    a = np.random.default_rng(0).standard_normal((64, 64))

    def step_n(k):
        x = a
        for _ in range(k):
            x = np.tanh(x @ a) * 0.5
        return x

    def calibrate(seconds):
        k = 1
        while True:
            t = time.perf_counter()
            step_n(k)
            if time.perf_counter() - t >= seconds or k > 1 << 20:
                break
            k *= 2
        t = time.perf_counter()
        step_n(k)
        return max(1, int(k * seconds / (time.perf_counter() - t)))

    rounds = []
    for r in range(args.reps):
        row = {}
        drop_caches()
        cold = run_gather(offsets(args.batches))
        row["cold_gather_p50_s"], row["cold_gather_mean_s"] = p50(cold), statistics.mean(cold)
        drop_caches()
        row["cold_pread_p50_s"] = p50(run_pread(offsets(args.batches)))
        warm_offs = offsets(300)
        run_gather(warm_offs)  # brings those windows in
        row["warm_gather_p50_s"] = p50(run_gather(warm_offs))
        row["warm_pread_p50_s"] = p50(run_pread(warm_offs))
        # The step takes one cold gather: the mean, not the p50 (the latency tail of a shared disk makes a
        # loop's gathers average 2-3x the p50; a step of the p50 left the loop gather-bound, bound ~0.7x).
        k = calibrate(row["cold_gather_mean_s"])
        loop_offs = offsets(args.batches * 2)
        drop_caches()
        t = time.perf_counter()
        g_s = s_s = 0.0
        for o in loop_offs:
            t0 = time.perf_counter()
            b = g.run(tokens, o)
            t1 = time.perf_counter()
            step_n(k)
            g_s, s_s = g_s + t1 - t0, s_s + time.perf_counter() - t1
            del b
        row["loop_serial_s"] = time.perf_counter() - t
        row["loop_gather_s"], row["loop_step_s"] = g_s, s_s
        # The best a perfect overlap can do with these two: max(gather, step) / (gather + step).
        row["loop_ideal_ratio"] = max(g_s, s_s) / (g_s + s_s)
        drop_caches()
        loop_offs = offsets(args.batches * 2)  # fresh windows: nothing cached by the serial loop helps
        t = time.perf_counter()
        for b in g.stream(tokens, loop_offs, depth=4):
            step_n(k)
        row["loop_stream_s"] = time.perf_counter() - t
        row["cold_ratio"] = row["cold_gather_p50_s"] / row["cold_pread_p50_s"]
        row["warm_ratio"] = row["warm_gather_p50_s"] / row["warm_pread_p50_s"]
        row["loop_ratio"] = row["loop_stream_s"] / row["loop_serial_s"]
        rounds.append(row)
        print(f"round {r + 1}: cold {row['cold_ratio']:.2f}, warm {row['warm_ratio']:.2f}, "
              f"loop {row['loop_ratio']:.2f} (ideal {row['loop_ideal_ratio']:.2f})", file=sys.stderr)
    os.close(fd)

    def median_round(key):
        return sorted(rounds, key=lambda x: x[key])[len(rounds) // 2]

    summary = {key: dict(median_round(key), min=min(x[key] for x in rounds), max=max(x[key] for x in rounds))
               for key in ("cold_ratio", "warm_ratio", "loop_ratio")}
    doc = dict(shape=[B, T], dtype="uint16", file_gib=args.gib, reps=args.reps, batches=args.batches,
               engine=hostfirst.read_engine(), fio=fio_limits, python=platform.python_version(),
               numpy=np.__version__, kernel=platform.release(), cores=os.cpu_count(),
               cpu=bench.sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
               loadavg=open("/proc/loadavg").read().split()[:3], stamp=time.strftime("%Y-%m-%d %H:%M:%S"),
               summary=summary, rounds=rounds)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(markdown(doc))


def markdown(doc):
    """The BENCHMARKS.md section (benches/report.py includes it from the JSON)."""
    q1, q64 = doc["fio"]
    batch_q1, batch_q64 = B / q1["iops"], B / q64["iops"]
    s = doc["summary"]
    lr = s["loop_ratio"]
    # Runs before the step was calibrated to the mean cold gather used its p50.
    step_basis = " (its mean)" if "cold_gather_mean_s" in lr else " (its p50)"
    lines = [
        f"[{doc['shape'][0]}, {doc['shape'][1]}] u16 windows at random offsets of a {doc['file_gib']:g} GiB token file; "
        f"{doc['cores']} cores ({doc['cpu']}), kernel {doc['kernel']}, load {' '.join(doc['loadavg'])} (a shared "
        f"machine: other work ran beside this); read engine: {doc['engine']}. {doc['reps']} rounds; cold: the page "
        f"cache dropped (`echo 1 > /proc/sys/vm/drop_caches`) before each contender, p50 of {doc['batches']} batches; "
        f"warm: p50 of 300 batches of windows read once before. Peer: the serial reader a user writes, one "
        f"`os.pread` per window into a numpy batch. Ratios hostfirst ÷ peer within a round, median round shown "
        f"(range over rounds). Command: `bash benches/run.sh --only coldgather` (runs `benches/cold_gather.py`).", "",
        f"Device limits (fio {q1['version']}, random 4 KiB O_DIRECT reads of the same file, 5 s): queue depth 1 "
        f"{q1['iops']:,.0f} reads/s ({q1['lat_us']:.0f} µs each) → a 64-window batch ≥ {batch_q1 * 1e3:.2f} ms read "
        f"one at a time; queue depth 64 {q64['iops']:,.0f} reads/s → ≥ {batch_q64 * 1e3:.2f} ms with every window in "
        f"flight.", "",
        "| case | hostfirst | peer | hostfirst ÷ peer | target |", "|---|---|---|---|---|",
        f"| cold batch, p50 | `Gather.run` {s['cold_ratio']['cold_gather_p50_s'] * 1e3:.2f} ms | serial `os.pread` loop "
        f"{s['cold_ratio']['cold_pread_p50_s'] * 1e3:.2f} ms | **{s['cold_ratio']['cold_ratio']:.2f}×** "
        f"({s['cold_ratio']['min']:.2f}–{s['cold_ratio']['max']:.2f}) | ≤ 0.4× |",
        f"| warm batch, p50 | `Gather.run` {s['warm_ratio']['warm_gather_p50_s'] * 1e6:.0f} µs | serial `os.pread` loop "
        f"{s['warm_ratio']['warm_pread_p50_s'] * 1e6:.0f} µs | **{s['warm_ratio']['warm_ratio']:.2f}×** "
        f"({s['warm_ratio']['min']:.2f}–{s['warm_ratio']['max']:.2f}) | ≤ 0.5× |",
        f"| training loop, {2 * doc['batches']} cold batches, step ≈ one cold gather{step_basis} (numpy on one core) | "
        f"`Gather.stream(depth=4)` {lr['loop_stream_s']:.2f} s | `Gather.run` then step {lr['loop_serial_s']:.2f} s "
        f"(gather {lr['loop_gather_s']:.2f} s + step {lr['loop_step_s']:.2f} s) | **{lr['loop_ratio']:.2f}×** "
        f"({s['loop_ratio']['min']:.2f}–{s['loop_ratio']['max']:.2f}); a perfect overlap of that round: "
        f"{lr['loop_ideal_ratio']:.2f}×; stream ÷ perfect overlap, median of rounds: "
        f"{statistics.median(x['loop_ratio'] / x['loop_ideal_ratio'] for x in doc['rounds']):.2f} | ≤ 0.6× |",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
