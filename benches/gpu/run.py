#!/usr/bin/env python3
"""The GPU section of issue 6: hostfirst and its peers on a real GPU, measured in the same run. Not a test.

Run it on the GPU machine (it has CUDA, PyTorch, JAX, safetensors and CuPy but no Rust): build the benchmark driver
here, carry it, and run this script there (benches/gpu/README.md has the commands). One call writes one JSON file
of raw records to --out; `python3 benches/report.py` renders every benches/results/gpu-*.json into BENCHMARKS.md.

    python3 benches/gpu/run.py --bench EXE [--gib 8] [--reps 5] [--only put,cold,peers,gather,seeds]
                               [--data DIR] [--out DIR] [--stand-in DIR]

--stand-in DIR: a dry run against the stand-in driver built into DIR (benches/gpu/run.sh --dry-run builds it): proves
the script and the driver's GPU ops work on a machine without a GPU; its numbers are host memcpy, never GPU figures,
and the report refuses them. Each measurement is a fresh process; every process has a time limit, and a failed one
is recorded with its error instead of stopping the run.
"""
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCHES)
sys.path.insert(0, BENCHES)
from run import resident, sh, warm, write_single  # noqa: E402  (the same token file and cache helpers as the cpu sections)

MiB, GiB = 1 << 20, 1 << 30
SECTIONS = ("put", "cold", "peers", "gather", "seeds")


def machine(stand_in):
    mem = sh("awk '/MemTotal/{print $2}' /proc/meminfo")
    q = "name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"
    gpu = sh(f"nvidia-smi --query-gpu={q} --format=csv,noheader") if not stand_in else ""
    versions = {}
    for mod in ("torch", "jax", "jaxlib", "safetensors", "numpy", "cupy"):
        v = sh(f"{sys.executable} -c 'import {mod}; print({mod}.__version__)' 2>/dev/null")
        versions[mod] = v or None
    return dict(
        stand_in=bool(stand_in), cpu=sh("lscpu | sed -n 's/^Model name: *//p'") or platform.processor(),
        cores=os.cpu_count(), mem_gib=round(int(mem) / 1024 / 1024, 1) if mem else None, kernel=platform.release(),
        gpu=gpu or ("stand-in driver (host memory; not a GPU)" if stand_in else "none found"),
        gpu_fields=q, topo=sh("nvidia-smi topo -m") if not stand_in else "", python=platform.python_version(),
        versions=versions, date_utc=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        git=sh(f"git -C {ROOT} rev-parse --short HEAD") or os.environ.get("HOSTFIRST_GIT", "?"),
        loadavg_start=open("/proc/loadavg").read().split()[:3])


def evict(exe, path, env):
    """Cold cache without root: sync, POSIX_FADV_DONTNEED, then mincore says how much stayed resident."""
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return resident(exe, path, env)


def run1(cmd, env, timeout=400):
    t = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(failed=f"timed out after {timeout} s", cmd=cmd[-6:])
    if p.returncode != 0 or not p.stdout.strip():
        return dict(failed=(p.stderr or p.stdout)[-1500:], rc=p.returncode, cmd=cmd[-6:])
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    rec["process_s"] = round(time.time() - t, 3)
    return rec


def main():
    argv = sys.argv[1:]
    opt = lambda k, d: argv[argv.index(k) + 1] if k in argv else d
    exe = os.path.abspath(opt("--bench", ""))
    if not os.path.exists(exe):
        sys.exit("--bench EXE: the hostfirst benchmark driver (cargo build --release --bench hostfirst-bench)")
    stand_in = opt("--stand-in", None)
    gib = float(opt("--gib", "0.25" if stand_in else "8"))
    reps = int(opt("--reps", "2" if stand_in else "5"))
    only = opt("--only", ",".join(SECTIONS)).split(",")
    unknown = set(only) - set(SECTIONS)
    if unknown:
        sys.exit(f"--only: unknown sections {sorted(unknown)} (known: {', '.join(SECTIONS)})")
    data = opt("--data", os.path.join(ROOT, "bench-out", "gpu-data"))
    out = opt("--out", os.path.join(BENCHES, "results"))
    os.makedirs(data, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ)
    if stand_in:
        env["LD_LIBRARY_PATH"] = os.path.abspath(stand_in) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    py = [sys.executable, os.path.join(HERE, "peers.py")]
    t_start = time.time()
    m = machine(stand_in)
    m.update(reps=reps, gib=gib, sections=only, command="python3 benches/gpu/run.py " + " ".join(argv))
    print(f"machine: {json.dumps(m)}", flush=True)
    recs = []

    def add(r, **extra):
        r.update(extra)
        recs.append(r)
        brief = {k: r[k] for k in ("op", "impl", "gbps_first", "gbps_best", "ceiling_gbps_best", "gbps", "p50_s",
                                   "tokens_per_s", "anon_growth_kib", "outcome", "skipped", "failed") if k in r}
        print(json.dumps(dict(brief, **extra)), flush=True)

    nbytes = int(gib * GiB) // 2 * 2
    path = os.path.join(data, f"tokens-{nbytes // MiB}MiB.safetensors")
    if not os.path.exists(path) or os.path.getsize(path) < nbytes:
        t = time.time()
        write_single(path, nbytes)
        print(f"wrote {path} in {time.time() - t:.1f} s", flush=True)
    res = warm(exe, path, env)

    if "put" in only:  # warm page cache: staging ring vs resident registration, the ceiling in the same process
        for r in range(reps):
            for mode in ("ring", "resident"):
                res = warm(exe, path, env)
                add(run1([exe, "gpu-put", path, "tokens", "0", mode, "3", "0", "1" if r == 0 else "0"], env),
                    cache="warm", resident=res, rep=r)
    if "cold" in only:  # evicted and checked with mincore before each process
        for r in range(reps):
            for mode in ("ring", "resident"):
                res = evict(exe, path, env)
                add(run1([exe, "gpu-put", path, "tokens", "0", mode, "1", "0", "0"], env), cache="cold",
                    resident=res, rep=r)
    if "peers" in only:
        for r in range(reps):
            for op in ("torch-load_file", "torch-safe_open", "torch-pin", "jax-flax", "jax-numpy"):
                res = warm(exe, path, env)
                add(run1(py + [op, path, "tokens"], env), cache="warm", resident=res, rep=r)
    if "gather" in only:
        shapes = [(12, 1024, 200), (64, 1024, 200), (64, 8192, 60), (512, 1024, 60)]
        for r in range(min(reps, 3)):
            for b, t, iters in shapes:
                res = warm(exe, path, env)
                for pf in ("0", "1"):
                    add(run1([exe, "gpu-gather", path, "tokens", "0", str(b), str(t), str(iters), str(1234 + r), pf], env),
                        resident=res, rep=r)
                add(run1(py + ["nanogpt-cuda", path, str(b), str(t), str(iters), str(1234 + r)], env), resident=res, rep=r)
    if "seeds" in only:  # the token file does not fit the GPU memory left free; it stays on the host
        leave = round(gib / 2, 3)
        add(run1([exe, "gpu-seeds", path, "tokens", "0", str(leave), "64", "1024", "200"], env), leave_gib=leave)
        add(run1(py + ["jax-seeds", path, str(leave)], env), leave_gib=leave)

    m["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    m["wall_s"] = round(time.time() - t_start, 1)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = f"gpu-{stamp}{'-stand-in' if stand_in else ''}-{'-'.join(only)}.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(dict(machine=m, records=recs), f, indent=1)
    failed = [r for r in recs if "failed" in r]
    print(f"wrote {os.path.join(out, name)} ({len(recs)} records, {len(failed)} failed, {m['wall_s']} s)")


if __name__ == "__main__":
    main()
