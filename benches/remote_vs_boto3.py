#!/usr/bin/env python3
"""A 256 MiB safetensors object from a local S3 server: hostfirst against boto3 + safetensors (issue 46, point 6).
A benchmark, not a test. Run by benches/remote_vs_boto3.sh, which builds what it needs and starts moto's S3
server on loopback; by hand:

    python benches/remote_vs_boto3.py --endpoint http://127.0.0.1:PORT [--rounds 5] [--json OUT]

The object (written once per run, bucket "bench", key "m.safetensors"): 4 f32 tensors of 56 MiB
([14680064] each) and 256 f32 tensors of 128 KiB ([32768] each): 256 MiB of data in 260 tensors.

Each round runs, in an order rotated from one round to the next, each in a fresh Python process (how users
meet it), the clock inside the process around the call only (interpreter start and imports excluded):
  hostfirst  hostfirst.numpy.load_file("s3://bench/m.safetensors")            {name: np.ndarray}
  boto3      s3.download_fileobj(..., Config=TransferConfig(max_concurrency=16)) into a BytesIO, then
             safetensors.numpy.load(bytes)                                     {name: np.ndarray}
             (the client is made before the clock starts: favours the peer)
  ceiling    the server's own ceiling: the whole object as 8 MiB ranged get_object calls on 16 threads of
             one boto3 client, bytes only (read and dropped)
Before the rounds, hostfirst's arrays are compared with safetensors' of the same bytes (every tensor equal).
Prints a table: GB/s (median over rounds, min-max), and the medians of the per-round ratios
hostfirst / boto3 and hostfirst / ceiling (ratios of throughput: above 1 means hostfirst is faster).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUCKET, KEY = "bench", "m.safetensors"
BIG, BIG_N = 4, 14680064  # f32 elements: 56 MiB each
SMALL, SMALL_N = 256, 32768  # f32 elements: 128 KiB each
SIZE_NOTE = "4 × f32[14680064] (56 MiB) + 256 × f32[32768] (128 KiB)"

CHILD = r"""
import os, sys, time
sys.path.insert(0, os.path.join(sys.argv[2], "..", "bindings", "python"))
mode, endpoint = sys.argv[1], sys.argv[3]
url = "s3://%s/%s" % (sys.argv[4], sys.argv[5])
if mode == "hostfirst":
    import hostfirst.numpy
    t = time.perf_counter()
    d = hostfirst.numpy.load_file(url)
    dt = time.perf_counter() - t
    n = sum(a.nbytes for a in d.values())
elif mode == "verify":
    import hostfirst.numpy, numpy, safetensors.numpy
    d = hostfirst.numpy.load_file(url)
    ref = safetensors.numpy.load(open(sys.argv[6], "rb").read())
    assert sorted(d) == sorted(ref), "names differ"
    for k in ref:
        assert d[k].dtype == ref[k].dtype and d[k].shape == ref[k].shape and numpy.array_equal(d[k], ref[k]), k
    dt, n = 0.0, sum(a.nbytes for a in d.values())
else:
    import io, boto3, botocore.config
    from boto3.s3.transfer import TransferConfig
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=botocore.config.Config(max_pool_connections=16))
    if mode == "boto3":
        import safetensors.numpy
        t = time.perf_counter()
        buf = io.BytesIO()
        s3.download_fileobj(sys.argv[4], sys.argv[5], buf, Config=TransferConfig(max_concurrency=16))
        d = safetensors.numpy.load(buf.getvalue())
        dt = time.perf_counter() - t
        n = sum(a.nbytes for a in d.values())
    else:  # ceiling: plain parallel ranged GETs, bytes only
        from concurrent.futures import ThreadPoolExecutor
        size = s3.head_object(Bucket=sys.argv[4], Key=sys.argv[5])["ContentLength"]
        step = 8 << 20
        def get(lo):
            hi = min(lo + step, size) - 1
            body = s3.get_object(Bucket=sys.argv[4], Key=sys.argv[5], Range="bytes=%d-%d" % (lo, hi))["Body"]
            return len(body.read())
        t = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            n = sum(pool.map(get, range(0, size, step)))
        dt = time.perf_counter() - t
        assert n == size, (n, size)
print(dt, n)
"""


def make_object(path):
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(46)
    tensors = {}
    for i in range(BIG):
        tensors[f"big.{i}"] = rng.standard_normal(BIG_N, dtype=np.float32)
    for i in range(SMALL):
        tensors[f"small.{i:03d}"] = rng.standard_normal(SMALL_N, dtype=np.float32)
    save_file(tensors, path)


def child(mode, args, env, extra=()):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, HERE, args.endpoint, BUCKET, KEY, *extra],
        env=env, capture_output=True, text=True,
    )
    if out.returncode != 0:
        sys.exit(f"{mode} failed:\n{out.stderr}")
    dt, n = out.stdout.split()
    return float(dt), int(n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--scratch", default=os.path.join(HERE, "..", "target", "remote-bench"))
    args = ap.parse_args()
    env = dict(os.environ)
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1",
               AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=args.endpoint, AWS_ALLOW_HTTP="true")
    os.environ.update(env)
    import boto3

    os.makedirs(args.scratch, exist_ok=True)
    local = os.path.join(args.scratch, "m.safetensors")
    make_object(local)
    size = os.path.getsize(local)
    s3 = boto3.client("s3", endpoint_url=args.endpoint, region_name="us-east-1")
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    s3.upload_file(local, BUCKET, KEY)
    child("verify", args, env, (local,))
    os.remove(local)

    modes = ["hostfirst", "boto3", "ceiling"]
    times = {m: [] for m in modes}
    load = [os.getloadavg()]
    for r in range(args.rounds):
        order = modes[r % 3:] + modes[: r % 3]
        for m in order:
            dt, n = child(m, args, env)
            times[m].append(dt)
        print(f"round {r + 1}: " + "  ".join(f"{m} {size / times[m][-1] / 1e9:.3f} GB/s" for m in modes),
              file=sys.stderr, flush=True)
    load.append(os.getloadavg())
    gbs = {m: [size / t / 1e9 for t in times[m]] for m in modes}
    ratio_boto = [b / h for h, b in zip(times["hostfirst"], times["boto3"])]
    ratio_ceil = [c / h for h, c in zip(times["hostfirst"], times["ceiling"])]
    print(f"object: {size} bytes, {SIZE_NOTE}; {args.rounds} rounds; load average "
          f"{' '.join(f'{x:.2f}' for x in load[0])} at start, {' '.join(f'{x:.2f}' for x in load[1])} at end")
    print("| row | GB/s, median (min–max) | median s |")
    print("|---|---|---|")
    for m in modes:
        g = gbs[m]
        print(f"| {m} | {statistics.median(g):.3f} ({min(g):.3f}–{max(g):.3f}) | {statistics.median(times[m]):.3f} |")
    print(f"hostfirst / boto3 (throughput, median of per-round ratios): {statistics.median(ratio_boto):.2f} "
          f"({', '.join(f'{x:.2f}' for x in ratio_boto)})")
    print(f"hostfirst / ceiling: {statistics.median(ratio_ceil):.2f} ({', '.join(f'{x:.2f}' for x in ratio_ceil)})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": size, "times": times, "load": load, "ratio_boto3": ratio_boto,
                       "ratio_ceiling": ratio_ceil, "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())},
                      f, indent=1)


if __name__ == "__main__":
    main()
