#!/usr/bin/env python3
"""The GPU section of issue 6: hostfirst and its peers on a real GPU, measured in the same run. Not a test.

Run it on the GPU machine (it has CUDA, PyTorch, JAX, safetensors and CuPy but no Rust): build the benchmark driver
here, carry it, and run this script there (benches/gpu/README.md has the commands). One call writes one JSON file
of raw records to --out; `python3 benches/report.py` renders every benches/results/gpu-*.json into BENCHMARKS.md.

    python3 benches/gpu/run.py --bench EXE [--gib 8] [--reps 5] [--only put,cold,peers,gather,seeds]
                               [--budget 480] [--data DIR] [--out DIR] [--stand-in DIR]

--stand-in DIR: a dry run against the stand-in driver built into DIR (benches/gpu/run.sh --dry-run builds it): proves
the script and the driver's GPU ops work on a machine without a GPU; its numbers are host memcpy, never GPU figures,
and the report refuses them. Each measurement is a fresh process; every process has a time limit, and a failed one
(an error, a crash with no output, a timeout) is recorded with what is known instead of stopping the run.

--budget SECONDS (default 480): the whole call stays under it, below the device tool's 600 s per command. Before
each measurement the call checks the time left against the longest one so far; when it would not fit, that and the
remaining measurements are recorded as skipped ("time budget") and the call ends cleanly, and no process may run
past the budget. The JSON file is rewritten after every record, so even a call killed from outside keeps what it
measured.
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


def describe_exit(rc):
    """A process's exit status in words (a negative status is the signal that killed it)."""
    if rc < 0:
        try:
            import signal
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


def run1(cmd, env, timeout=400):
    """One measurement process: its last stdout line is its JSON record. Never raises: a timeout, a crash, no output
    or output that is not a record becomes {"failed": why, ...}."""
    t = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(failed=f"timed out after {timeout:.0f} s", cmd=cmd[-6:], process_s=round(time.time() - t, 3))
    except OSError as e:  # e.g. the carried driver is not executable
        return dict(failed=f"could not start: {e}", cmd=cmd[-6:])
    out, err = p.stdout.strip(), p.stderr.strip()
    if p.returncode != 0 or not out:
        tail = (err or out)[-1500:]
        why = describe_exit(p.returncode) + ("" if tail else " with no output") + (f": {tail}" if tail else "")
        return dict(failed=why, rc=p.returncode, cmd=cmd[-6:], process_s=round(time.time() - t, 3))
    try:
        rec = json.loads(out.splitlines()[-1])
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        return dict(failed=f"no JSON record in its output ({e}): {out[-500:]}", cmd=cmd[-6:])
    rec["process_s"] = round(time.time() - t, 3)
    return rec


def fraction_resident(exe, path, env):
    """The page-cache fraction, or None when the driver cannot say (recorded, never fatal)."""
    try:
        return resident(exe, path, env)
    except (OSError, ValueError, KeyError):
        return None


def warmed(exe, path, env):
    """Reads the file into the page cache; the fraction resident after, or None when the driver cannot say."""
    try:
        return warm(exe, path, env)
    except (OSError, ValueError, KeyError):
        return None


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
    budget = float(opt("--budget", "480"))
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
    m.update(reps=reps, gib=gib, sections=only, budget_s=budget,
             command="python3 benches/gpu/run.py " + " ".join(argv))
    print(f"machine: {json.dumps(m)}", flush=True)
    recs = []
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = f"gpu-{stamp}{'-stand-in' if stand_in else ''}-{'-'.join(only)}.json"
    target = os.path.join(out, name)

    def save():
        m["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
        m["wall_s"] = round(time.time() - t_start, 1)
        tmp = target + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(machine=m, records=recs), f, indent=1)
        os.replace(tmp, target)

    def add(r, **extra):
        r.update(extra)
        recs.append(r)
        brief = {k: r[k] for k in ("op", "impl", "gbps_first", "gbps_best", "ceiling_gbps_best", "gbps", "p50_s",
                                   "tokens_per_s", "anon_growth_kib", "outcome", "skipped", "failed") if k in r}
        print(json.dumps(dict(brief, **extra)), flush=True)
        save()

    longest = [30.0]  # seconds: the longest measurement so far (a first guess before any)

    def measure(cmd, **extra):
        """Runs one measurement if it fits the time left, else records it as skipped."""
        left = budget - (time.time() - t_start)
        if left < longest[0] * 1.2 + 5:
            add(dict(skipped=f"time budget: {left:.0f} s left of --budget {budget:.0f}, the longest measurement took "
                             f"{longest[0]:.0f} s", cmd=cmd[-6:]), **extra)
            return
        t = time.time()
        add(run1(cmd, env, timeout=min(400, left - 5)), **extra)
        longest[0] = max(longest[0], time.time() - t)

    nbytes = int(gib * GiB) // 2 * 2
    path = os.path.join(data, f"tokens-{nbytes // MiB}MiB.safetensors")
    if not os.path.exists(path) or os.path.getsize(path) < nbytes:
        t = time.time()
        write_single(path, nbytes)
        print(f"wrote {path} in {time.time() - t:.1f} s", flush=True)
    res = warmed(exe, path, env)

    if "put" in only:  # warm page cache: staging ring vs resident registration, the ceiling in the same process
        for r in range(reps):
            for mode in ("ring", "resident"):
                res = warmed(exe, path, env)
                measure([exe, "gpu-put", path, "tokens", "0", mode, "3", "0", "1" if r == 0 else "0"],
                        cache="warm", resident=res, rep=r)
    if "cold" in only:  # evicted and checked with mincore before each process
        for r in range(reps):
            for mode in ("ring", "resident"):
                res = evict(exe, path, env)
                measure([exe, "gpu-put", path, "tokens", "0", mode, "1", "0", "0"], cache="cold", resident=res, rep=r)
    if "peers" in only:
        for r in range(reps):
            for op in ("torch-load_file", "torch-safe_open", "torch-pin", "jax-flax", "jax-numpy"):
                res = warmed(exe, path, env)
                measure(py + [op, path, "tokens"], cache="warm", resident=res, rep=r)
    if "gather" in only:
        shapes = [(12, 1024, 200), (64, 1024, 200), (64, 8192, 60), (512, 1024, 60)]
        for r in range(min(reps, 3)):
            for b, t, iters in shapes:
                res = warmed(exe, path, env)
                for pf in ("0", "1"):
                    measure([exe, "gpu-gather", path, "tokens", "0", str(b), str(t), str(iters), str(1234 + r), pf],
                            resident=res, rep=r)
                measure(py + ["nanogpt-cuda", path, str(b), str(t), str(iters), str(1234 + r)], resident=res, rep=r)
    if "seeds" in only:  # the token file does not fit the GPU memory left free; it stays on the host
        leave = round(gib / 2, 3)
        measure([exe, "gpu-seeds", path, "tokens", "0", str(leave), "64", "1024", "200"], leave_gib=leave)
        measure(py + ["jax-seeds", path, str(leave)], leave_gib=leave)

    save()
    failed = [r for r in recs if "failed" in r]
    skipped = [r for r in recs if "skipped" in r]
    print(f"wrote {target} ({len(recs)} records, {len(failed)} failed, {len(skipped)} skipped, {m['wall_s']} s)")


if __name__ == "__main__":
    main()
