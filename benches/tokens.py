"""Token files (issue 35): nanoGPT's get_batch against a hostfirst gather on the same raw u16 .bin, warm and cold
(page cache dropped before every batch), RSS after many batches, and opening a ~10 GiB .npy and the largest
llm.c shard the format allows (sparse files under target/, deleted afterwards). Run as root, serialised with
other benchmarks:

    flock /work/notes/bench.lock python benches/tokens.py [--batches 200000] [--out benches/results/tokens.json]

The peer is nanoGPT's get_batch as train.py writes it (np.memmap made anew each batch, windows sliced, cast to
int64 and stacked for x and y); "memmap once" is the version issue 287 reports growing. hostfirst: the same
random windows of block + 1 tokens gathered in one call (hostfirst.Gather over hostfirst.open_raw), x and y the
two shifted views of the batch. Ratios are from the same run. Each measurement runs in a fresh process.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
B, T = 64, 1024


def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def nanogpt(path):
    def get_batch(ix):
        data = np.memmap(path, dtype=np.uint16, mode="r")
        x = np.stack([data[i:i + T].astype(np.int64) for i in ix])
        y = np.stack([data[i + 1:i + 1 + T].astype(np.int64) for i in ix])
        return x, y
    return get_batch


def nanogpt_once(path):
    data = np.memmap(path, dtype=np.uint16, mode="r")

    def get_batch(ix):
        x = np.stack([data[i:i + T].astype(np.int64) for i in ix])
        y = np.stack([data[i + 1:i + 1 + T].astype(np.int64) for i in ix])
        return x, y
    return get_batch


def hostfirst_batch(path):
    import hostfirst
    tokens = hostfirst.open_raw(path, "uint16")["data"]
    g = hostfirst.Gather("cpu", "uint16", batch=B, window=T + 1)

    def get_batch(ix):
        batch = np.asarray(g.run(tokens, ix))
        return batch[:, :-1], batch[:, 1:]
    return get_batch


MAKERS = {"nanogpt": nanogpt, "nanogpt_once": nanogpt_once, "hostfirst": hostfirst_batch}


def child(args):
    """One measurement in this fresh process; prints one JSON line."""
    kind, mode, path, n = args.child, args.mode, args.file, args.batches
    get_batch = MAKERS[kind](path)
    ntok = os.path.getsize(path) // 2
    rng = np.random.default_rng(1337)
    out = {}
    if mode in ("warm", "cold"):
        times = []
        for _ in range(n):
            ix = rng.integers(0, ntok - T - 1, B)
            if mode == "cold":
                drop_caches()
            t0 = time.perf_counter()
            x, y = get_batch(ix)
            int(x[0, 0]) + int(y[-1, -1])
            times.append(time.perf_counter() - t0)
        out["p50_us"] = float(np.median(times) * 1e6)
        out["p90_us"] = float(np.percentile(times, 90) * 1e6)
    elif mode == "rss":
        for _ in range(1000):
            get_batch(rng.integers(0, ntok - T - 1, B))
        base = rss_mib()
        t0 = time.perf_counter()
        for _ in range(n):
            x, y = get_batch(rng.integers(0, ntok - T - 1, B))
        out["seconds"] = time.perf_counter() - t0
        out["rss_base_mib"], out["rss_end_mib"] = base, rss_mib()
        out["rss_growth_mib"] = out["rss_end_mib"] - base
    print(json.dumps(out))


def open_child(args):
    import hostfirst
    small = Path(args.file).with_name("warmup.npy")
    np.save(small, np.arange(4, dtype=np.uint16))
    hostfirst.open(small).close()
    times, growth = [], []
    for _ in range(20):
        base = rss_mib()
        t0 = time.perf_counter()
        f = hostfirst.open(args.file)
        times.append(time.perf_counter() - t0)
        growth.append(rss_mib() - base)
        keep = f  # noqa: F841 - held while RSS is read
    print(json.dumps({"open_p50_us": float(np.median(times) * 1e6), "open_max_us": float(max(times) * 1e6),
                      "rss_growth_max_mib": float(max(growth)), "bytes": os.path.getsize(args.file),
                      "format": keep.format}))


def run_child(*argv):
    env = dict(os.environ)
    env.setdefault("HOSTFIRST_LIBRARY", str(ROOT / "target/release/libhostfirst.so"))
    env["PYTHONPATH"] = str(ROOT / "bindings/python")
    p = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--mode")
    ap.add_argument("--file")
    ap.add_argument("--batches", type=int, default=200_000)
    ap.add_argument("--gib", type=float, default=2.0, help="size of the token file for get_batch")
    ap.add_argument("--out", default=str(ROOT / "benches/results/tokens.json"))
    args = ap.parse_args()
    if args.child == "open":
        return open_child(args)
    if args.child:
        return child(args)
    work = ROOT / "target/bench-tokens"
    work.mkdir(parents=True, exist_ok=True)
    train = work / "train.bin"
    ntok = int(args.gib * 2**30) // 2
    if not train.exists() or train.stat().st_size != 2 * ntok:
        rng = np.random.default_rng(0)
        with open(train, "wb") as fh:
            for _ in range(0, ntok, 1 << 26):
                fh.write(rng.integers(0, 50257, min(1 << 26, ntok), dtype=np.uint16).tobytes())
            fh.truncate(2 * ntok)
    res = {"file_bytes": train.stat().st_size, "batch": B, "block": T}
    with open(train, "rb") as fh:  # warm the page cache
        while fh.read(1 << 24):
            pass
    for kind in ("nanogpt", "hostfirst"):
        res[f"warm_{kind}"] = run_child("--child", kind, "--mode", "warm", "--file", str(train), "--batches", "300")
    for kind in ("nanogpt", "hostfirst"):
        res[f"cold_{kind}"] = run_child("--child", kind, "--mode", "cold", "--file", str(train), "--batches", "30")
    with open(train, "rb") as fh:
        while fh.read(1 << 24):
            pass
    for kind in ("nanogpt_once", "hostfirst"):
        res[f"rss_{kind}"] = run_child("--child", kind, "--mode", "rss", "--file", str(train),
                                       "--batches", str(args.batches))
    res["warm_ratio"] = res["warm_hostfirst"]["p50_us"] / res["warm_nanogpt"]["p50_us"]
    res["cold_ratio"] = res["cold_hostfirst"]["p50_us"] / res["cold_nanogpt"]["p50_us"]
    # Opening a ~10 GiB .npy and the largest llm.c shard (u32 tokens, count < 2**31): sparse files.
    big = work / "big.npy"
    n = (10 << 30) // 2
    hdr = f"{{'descr': '<u2', 'fortran_order': False, 'shape': ({n},), }}"
    hdr += " " * (64 - (10 + len(hdr) + 1) % 64) + "\n"
    with open(big, "wb") as fh:
        fh.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode())
        fh.truncate(10 + len(hdr) + 2 * n)
    shard = work / "big_llmc.bin"
    m = 2**31 - 1
    with open(shard, "wb") as fh:
        h = np.zeros(256, np.int32)
        h[:3] = (20240801, 7, m)
        fh.write(h.tobytes())
        fh.truncate(1024 + 4 * m)
    try:
        res["open_npy"] = run_child("--child", "open", "--file", str(big))
        res["open_llmc"] = run_child("--child", "open", "--file", str(shard))
    finally:
        big.unlink()
        shard.unlink()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    train.unlink()
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
