#!/usr/bin/env python3
"""The GPU section of issue 6: hostfirst and its peers on a real GPU, measured in the same run. Not a test.

Run it on the GPU machine (it has CUDA, PyTorch, JAX, safetensors and CuPy but no Rust): build the benchmark driver
here, carry it, and run this script there (benches/gpu/README.md has the commands). One call writes one JSON file
of raw records to --out; `python3 benches/report.py` renders every benches/results/gpu-*.json into BENCHMARKS.md.

    python3 benches/gpu/run.py --bench EXE [--gib 8] [--reps 5] [--only check,put,cold,peers,gather,seeds,...]
                               [--budget 480] [--data DIR] [--out DIR] [--stand-in DIR] [--check-big BYTES]

Sections: check (correctness, run first: benches/gpu_check.rs, check_py.py, the census under CUDA_VISIBLE_DEVICES,
compute-sanitizer where it exists; the call exits 1 when a check failed), put, cold, peers, gather, seeds, and the
fair speed sections: ceiling (benches/gpu/ceiling.c, the driver alone, built here with cc), fair (nanoGPT's
get_batch in Python against hostfirst's Python gather, both ending in int64 x, y on the device), sweep (staging size
x reader threads), many (a many-tensor file: hostfirst against safetensors.torch.load_file(device="cuda")).

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
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCHES)
sys.path.insert(0, BENCHES)
from run import resident, sh, warm, write_single  # noqa: E402  (the same token file and cache helpers as the cpu sections)

MiB, GiB = 1 << 20, 1 << 30
SECTIONS = ("check", "put", "cold", "peers", "gather", "seeds", "ceiling", "fair", "sweep", "many")
TOKEN_SECTIONS = ("put", "cold", "peers", "gather", "seeds", "fair", "sweep")  # those that need the token file


def write_many(path, count, total):
    """A many-tensor model-like file without numpy: `count` F16 tensors of a byte pattern, `total` bytes in all."""
    each = max(2, total // count // 2 * 2)
    hdr, off = {}, 0
    for i in range(count):
        hdr[f"layers.{i // 8}.w{i % 8}"] = {"dtype": "F16", "shape": [each // 2], "data_offsets": [off, off + each]}
        off += each
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    block = bytes((i * 37 + 11) % 251 for i in range(each))
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for _ in range(count):
            f.write(block)


def write_tokens(path, nbytes):
    """The token file: benches/run.py's writer (numpy), or without numpy the same layout with random bytes."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        import random

        hdr = {"__metadata__": {"format": "np", "source": "hostfirst benches"},
               "tokens": {"dtype": "U16", "shape": [nbytes // 2], "data_offsets": [0, nbytes]}}
        h = json.dumps(hdr, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        rng = random.Random(1)
        with open(path, "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h)
            left = nbytes
            while left:
                k = min(left, 64 * MiB)
                f.write(rng.randbytes(k))
                left -= k
        return
    write_single(path, nbytes)


def census_expectations(base, visible):
    """What the census must say under CUDA_VISIBLE_DEVICES=visible, given the unrestricted census `base`."""
    devs = base.get("devices") or []
    if visible == "":
        return lambda r: not r["cuda"]["available"] or r["cuda"]["count"] == 0
    if visible.startswith("GPU-") or visible.startswith("MIG-"):
        return lambda r: r["cuda"]["count"] == 1 and r["devices"][0]["uuid"] == visible
    return lambda r: (not r["cuda"]["available"] or r["cuda"]["count"] == 0) if int(visible) >= len(devs) else True


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
        git=os.environ.get("HOSTFIRST_GIT") or sh(f"git -C {ROOT} rev-parse --short HEAD") or "?",
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

    def measure(cmd, env_=None, **extra):
        """Runs one measurement if it fits the time left, else records it as skipped. Returns the record."""
        left = budget - (time.time() - t_start)
        if left < longest[0] * 1.2 + 5:
            r = dict(skipped=f"time budget: {left:.0f} s left of --budget {budget:.0f}, the longest measurement took "
                             f"{longest[0]:.0f} s", cmd=cmd[-6:])
            add(r, **extra)
            return r
        t = time.time()
        r = run1(cmd, env_ or env, timeout=min(400, left - 5))
        add(r, **extra)
        longest[0] = max(longest[0], time.time() - t)
        return r

    check_failed = []
    if "check" in only:  # correctness first: nothing else means anything if this fails
        cdir = os.path.join(data, "check")
        os.makedirs(cdir, exist_ok=True)
        big = int(opt("--check-big", str(64 * MiB + 3 if stand_in else 4 * GiB + 3 * MiB + 1)))
        r = measure([exe, "gpu-check", cdir, str(big)], section="check")
        if r.get("outcome") != "passed":
            check_failed.append(f"gpu-check: {r.get('failed_checks') or r.get('failed') or r.get('skipped')}")
        base = run1([exe, "gpu-census"], env)
        add(dict(base), section="check", visible="(unset)")
        uuid = ((base.get("devices") or [{}])[0]).get("uuid") or "GPU-00000000-0000-0000-0000-000000000000"
        for label, value in (("empty", ""), ("uuid", uuid), ("out-of-range", "99")):
            r = run1([exe, "gpu-census"], dict(env, CUDA_VISIBLE_DEVICES=value))
            ok = "failed" not in r and "cuda" in r and census_expectations(base, value)(r)
            add(r, section="check", visible=label, ok=ok)
            if not ok:
                check_failed.append(f"census with CUDA_VISIBLE_DEVICES={value!r}: {r}")
        lib = os.path.join(os.path.dirname(exe), "libhostfirst.so")
        pyenv = dict(env, HOSTFIRST_LIBRARY=lib, PYTHONPATH=os.path.join(ROOT, "bindings", "python"))
        for fw in ("numpy", "torch", "jax"):
            if not os.path.exists(lib):
                add(dict(op="py-check", impl=f"python-{fw}", framework=fw, skipped=f"no {lib} (run.sh build carries it)"),
                    section="check")
                continue
            pyexe = os.environ.get("HOSTFIRST_CHECK_PYTHON", sys.executable)  # e.g. a venv with numpy and torch
            r = measure([pyexe, os.path.join(HERE, "check_py.py"), fw, cdir], env_=pyenv, section="check")
            if "skipped" not in r and r.get("outcome") != "passed":
                check_failed.append(f"py-check {fw}: {r.get('failed_checks') or r.get('failed')}")
        cs = shutil.which("compute-sanitizer") or next(
            (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
        # memcheck only: synccheck looks inside kernels, and hostfirst launches none. API errors are not reported:
        # gpu-check makes cuMemAlloc fail on purpose (its out-of-memory check).
        for tool in ("memcheck",):
            if stand_in or not cs:
                add(dict(op="sanitizer", impl=f"compute-sanitizer-{tool}", tool=tool,
                         skipped="stand-in driver" if stand_in else "compute-sanitizer not found"),
                    section="check")
                continue
            log = os.path.join(cdir, f"sanitizer-{tool}.log")
            r = measure([cs, "--tool", tool, "--report-api-errors", "no", "--leak-check", "full", "--error-exitcode", "97",
                         "--log-file", log, exe, "gpu-check", cdir, str(16 * MiB + 1), "--skip", "forked-child"],
                        section="check", tool=tool)
            summary = sh(f"grep -h 'ERROR SUMMARY' {log} | tail -n 1")
            recs[-1]["sanitizer_summary"] = summary
            save()
            if r.get("outcome") != "passed" or "0 errors" not in summary:
                check_failed.append(f"compute-sanitizer {tool}: {summary or r.get('failed')}")
    if check_failed:
        print("CHECK FAILED:\n  " + "\n  ".join(check_failed), flush=True)

    nbytes = int(gib * GiB) // 2 * 2
    path = os.path.join(data, f"tokens-{nbytes // MiB}MiB.safetensors")
    if any(x in only for x in TOKEN_SECTIONS) and (not os.path.exists(path) or os.path.getsize(path) < nbytes):
        t = time.time()
        write_tokens(path, nbytes)
        print(f"wrote {path} in {time.time() - t:.1f} s", flush=True)
    res = warmed(exe, path, env) if os.path.exists(path) else None

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

    if "ceiling" in only:  # the driver alone, no hostfirst code: built here
        cbin = os.path.join(data, "ceiling")
        p = subprocess.run(["cc", "-O2", "-o", cbin, os.path.join(HERE, "ceiling.c"), "-ldl"], capture_output=True, text=True)
        if p.returncode != 0:
            add(dict(op="ceiling", failed=f"cc: {p.stderr[-800:]}"))
        else:
            for r in range(reps):
                measure([cbin, str(min(nbytes, GiB) if not stand_in else 64 * MiB), "5"], rep=r)
    if "fair" in only:  # Python against Python, the same dtypes (int64 x, y on the device)
        lib = os.path.join(os.path.dirname(exe), "libhostfirst.so")
        pyenv = dict(env, HOSTFIRST_LIBRARY=lib, PYTHONPATH=os.path.join(ROOT, "bindings", "python"))
        for r in range(min(reps, 3)):
            for b, t, iters in [(12, 1024, 200), (64, 1024, 200), (512, 1024, 60)]:
                warmed(exe, path, env)
                measure(py + ["nanogpt-cuda", path, str(b), str(t), str(iters), str(1234 + r)], rep=r)
                measure(py + ["hostfirst-py-gather", path, str(b), str(t), str(iters), str(1234 + r)], env_=pyenv, rep=r)
    if "sweep" in only:  # staging size x reader threads, ring mode, one process each
        for staging in (16, 64, 256, 1024):
            for threads in (1, 2, 4, 8, 16):
                warmed(exe, path, env)
                measure([exe, "gpu-put", path, "tokens", "0", "ring", "2", str(staging), "0", str(threads)],
                        cache="warm", sweep=True)
    if "many" in only:  # a model-like file of many tensors
        count = 2048 if stand_in else 16384
        total = min(nbytes, 64 * MiB if stand_in else 4 * GiB)
        mpath = os.path.join(data, f"many-{count}-{total // MiB}MiB.safetensors")
        if not os.path.exists(mpath):
            write_many(mpath, count, total)
        for r in range(reps):
            warmed(exe, mpath, env)
            measure([exe, "gpu-load", mpath, "0"], rep=r, tensors=count)
            warmed(exe, mpath, env)
            measure(py + ["torch-load_file", mpath, "-"], rep=r, tensors=count)

    save()
    failed = [r for r in recs if "failed" in r]
    skipped = [r for r in recs if "skipped" in r]
    print(f"wrote {target} ({len(recs)} records, {len(failed)} failed, {len(skipped)} skipped, {m['wall_s']} s)")
    if check_failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
