#!/usr/bin/env python3
"""hostfirst benchmarks against peers, measured in the same run (issue 6). Not a test.

    bash benches/run.sh [--quick] [--reps N] [--data DIR] [--keep]

Generates real-data safetensors files (deleted afterwards unless --keep), warms the page cache and checks residency
with mincore, runs every measurement in a fresh process (hostfirst and peers interleaved, >= 5 reps), writes raw
records to benches/results/<stamp>.json (and latest.json), the tables to BENCHMARKS.md, and the plot to
benches/plot.png. Every run (also --quick and --only) rewrites BENCHMARKS.md from latest.json: commit full runs. `python3 benches/run.py --peer OP ...` is the Python-peer side (one op per process).
"""
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB, GiB = 1 << 20, 1 << 30


# ---------------------------------------------------------------------------------------------- peers (child side)
def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def header_len(path):
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def nanogpt_get_batch(path, off, n, rng, B, T):
    """nanoGPT train.py's get_batch, minus torch: a new np.memmap per batch (nanoGPT does this to avoid a memory
    leak), B random windows, x and y stacked as int64. Also the peer of benches/python_gather.py."""
    import numpy as np

    data = np.memmap(path, dtype=np.uint16, mode="r", offset=off, shape=(n,))
    ix = rng.integers(0, len(data) - T - 1, size=B)
    x = np.stack([data[i:i + T].astype(np.int64) for i in ix])
    y = np.stack([data[i + 1:i + 1 + T].astype(np.int64) for i in ix])
    return x, y


def peer(op, args):
    import numpy as np

    if op == "safe_open":
        from safetensors import safe_open

        path = args[0]
        a0, f0, r0 = status_kib("RssAnon"), status_kib("RssFile"), status_kib("VmRSS")
        t = time.perf_counter()
        with safe_open(path, framework="np") as f:
            keys = list(f.keys())
            md = f.metadata()
            dt = time.perf_counter() - t
            a1, f1, r1 = status_kib("RssAnon"), status_kib("RssFile"), status_kib("VmRSS")
        rec = dict(op="open", impl="py-safe_open", file=path, tensors=len(keys), header_bytes=header_len(path),
                   t_open_list_meta_s=dt, rss_before_kib=r0, rss_after_kib=r1, anon_growth_kib=a1 - a0,
                   file_growth_kib=f1 - f0, meta=len(md or {}))
    elif op == "load_file":
        from safetensors.numpy import load_file

        path = args[0]
        r0 = status_kib("VmRSS")
        t = time.perf_counter()
        d = load_file(path)
        dt = time.perf_counter() - t
        nbytes = sum(v.nbytes for v in d.values())
        rec = dict(op=args[1] if len(args) > 1 else "put-cpu", impl="py-safetensors.numpy.load_file", file=path,
                   bytes=nbytes, tensors=len(d), t_s=dt, gbps=nbytes / 1e9 / dt, rss_before_kib=r0,
                   vmhwm_kib=status_kib("VmHWM"), us_per_tensor=dt * 1e6 / len(d))
    elif op == "get_tensor_loop":
        from safetensors import safe_open

        path = args[0]
        t = time.perf_counter()
        out = {}
        with safe_open(path, framework="np") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
        dt = time.perf_counter() - t
        nbytes = sum(v.nbytes for v in out.values())
        rec = dict(op="load-all", impl="py-safe_open.get_tensor", file=path, bytes=nbytes, tensors=len(out), t_s=dt,
                   us_per_tensor=dt * 1e6 / len(out), vmhwm_kib=status_kib("VmHWM"))
    elif op == "fromfile":
        path = args[0]
        hl = header_len(path)
        n = os.path.getsize(path) - 8 - hl
        r0 = status_kib("VmRSS")
        t = time.perf_counter()
        a = np.fromfile(path, dtype=np.uint8, count=n, offset=8 + hl)
        dt = time.perf_counter() - t
        rec = dict(op="put-cpu", impl="py-numpy.fromfile", file=path, bytes=a.nbytes, t_s=dt, gbps=a.nbytes / 1e9 / dt,
                   rss_before_kib=r0, vmhwm_kib=status_kib("VmHWM"))
    elif op == "get_batch":  # nanoGPT's get_batch (nanogpt_get_batch)
        path, B, T, iters, seed = args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4])
        off = 8 + header_len(path)
        n = (os.path.getsize(path) - off) // 2
        rng = np.random.default_rng(seed)
        lat = []
        for it in range(iters + 3):
            t = time.perf_counter()
            x, y = nanogpt_get_batch(path, off, n, rng, B, T)
            dt = time.perf_counter() - t
            if it >= 3:
                lat.append(dt)
        lat.sort()
        q = lambda p: lat[round((len(lat) - 1) * p)]
        rec = dict(op="gather", impl="py-nanoGPT-get_batch", B=B, T=T, iters=iters, p50_s=q(0.5), p99_s=q(0.99),
                   mean_s=sum(lat) / len(lat), checksum=int(x[0, 0] + y[-1, -1]))
    else:
        sys.exit(f"unknown peer op {op}")
    print(json.dumps(rec))


# ---------------------------------------------------------------------------------------------- driver
def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def machine():
    mem = sh("awk '/MemTotal/{print $2}' /proc/meminfo")
    import numpy, safetensors

    return dict(
        cpu=sh("lscpu | sed -n 's/^Model name: *//p'") or platform.processor(),
        cores=os.cpu_count(), mem_gib=round(int(mem) / 1024 / 1024, 1) if mem else None,
        kernel=platform.release(), date_utc=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        rustc=sh("rustc --version"), python=platform.python_version(), numpy=numpy.__version__,
        safetensors_py=safetensors.__version__, safetensors_rust="0.8.0 (crate)",
        loadavg_start=open("/proc/loadavg").read().split()[:3],
        gpu="none (no GPU was available to this task)", git=sh(f"git -C {ROOT} rev-parse --short HEAD"))


def build():
    p = subprocess.run(["cargo", "build", "--release", "--bench", "hostfirst-bench", "--message-format=json"],
                       cwd=ROOT, capture_output=True, text=True)
    exe = None
    for line in p.stdout.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "hostfirst-bench":
            exe = m.get("executable") or exe
    if p.returncode != 0 or not exe:
        sys.stderr.write(p.stderr)
        sys.exit("build failed")
    return exe


def write_single(path, nbytes, name="tokens"):
    """One u16 tensor of nbytes real (non-sparse) bytes."""
    import numpy as np

    hdr = {"__metadata__": {"format": "np", "source": "hostfirst benches"},
           name: {"dtype": "U16", "shape": [nbytes // 2], "data_offsets": [0, nbytes]}}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    rng = np.random.default_rng(1)
    block = rng.integers(0, 50257, size=min(nbytes, 64 * MiB) // 2, dtype=np.uint16)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        left, i = nbytes, 0
        while left:
            b = (block ^ np.uint16(i & 0xFFFF)).tobytes()[:left]
            f.write(b)
            left -= len(b)
            i += 1


def write_many(path, count, elems):
    """count f32[elems] tensors, names t.000000..."""
    import numpy as np

    nb = elems * 4
    hdr = {"__metadata__": {"format": "np"}}
    for i in range(count):
        hdr[f"t.{i:06d}"] = {"dtype": "F32", "shape": [elems], "data_offsets": [i * nb, (i + 1) * nb]}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    data = np.arange(count * elems, dtype=np.float32).tobytes()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.write(data)


def write_model(path, layers=12, d=768, vocab=50257, ctx=1024):
    """A model-shaped f32 file of real values: GPT-2 small's 148 tensors (wte, wpe, 12 blocks of 12, ln_f), 498 MB."""
    import numpy as np

    shapes = [("wte.weight", (vocab, d)), ("wpe.weight", (ctx, d))]
    for i in range(layers):
        for name, shape in [("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("attn.c_attn.weight", (d, 3 * d)),
                            ("attn.c_attn.bias", (3 * d,)), ("attn.c_proj.weight", (d, d)), ("attn.c_proj.bias", (d,)),
                            ("ln_2.weight", (d,)), ("ln_2.bias", (d,)), ("mlp.c_fc.weight", (d, 4 * d)),
                            ("mlp.c_fc.bias", (4 * d,)), ("mlp.c_proj.weight", (4 * d, d)), ("mlp.c_proj.bias", (d,))]:
            shapes.append((f"h.{i}.{name}", shape))
    shapes += [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]
    hdr, at = {"__metadata__": {"format": "np", "source": "hostfirst benches (model-shaped)"}}, 0
    for name, shape in shapes:
        nb = int(np.prod(shape)) * 4
        hdr[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + nb]}
        at += nb
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    rng = np.random.default_rng(3)
    block = rng.standard_normal(16 * MiB // 4, dtype=np.float32)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, shape in shapes:
            left = int(np.prod(shape))
            while left:
                k = min(left, block.size)
                f.write(block[:k].tobytes())
                left -= k


def write_sharded(path, tensors, rows, cols):
    """tensors x f32[rows, cols] of real bytes (the shard section's file: rows of cols * 4 bytes)."""
    import numpy as np

    nb = rows * cols * 4
    hdr = {"__metadata__": {"format": "np", "source": "hostfirst benches (shard)"}}
    for i in range(tensors):
        hdr[f"layer.{i:02d}.weight"] = {"dtype": "F32", "shape": [rows, cols], "data_offsets": [i * nb, (i + 1) * nb]}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    rng = np.random.default_rng(2)
    block = rng.standard_normal(nb // 4, dtype=np.float32)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for i in range(tensors):
            f.write((block + np.float32(i)).tobytes())


def drop_cache(exe, path):
    """Evicts the file from the page cache (sync, posix_fadvise DONTNEED, and as root the whole page cache:
    `echo 1 > /proc/sys/vm/drop_caches`) and returns the resident fraction left (mincore), which must be <= 1 %
    for a cold measurement."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if os.geteuid() == 0:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    return resident(exe, path)


def resident(exe, path, env=None):
    """Fraction of the file's pages in the page cache (the driver's mincore op); env: for a stand-in driver."""
    out = subprocess.run([exe, "resident", path], capture_output=True, text=True, env=env).stdout
    return json.loads(out)["fraction"]


def warm(exe, path, env=None):
    with open(path, "rb", buffering=0) as f:
        while f.read(64 * MiB):
            pass
    return resident(exe, path, env)


def run1(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(f"FAILED {cmd}: {p.stderr[-2000:]}\n")
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == "--peer":
        return peer(argv[1], argv[2:])
    quick = "--quick" in argv
    keep = "--keep" in argv
    reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else (3 if quick else 5)
    data = argv[argv.index("--data") + 1] if "--data" in argv else os.path.join(ROOT, "bench-out", "data")
    os.makedirs(data, exist_ok=True)
    py = [sys.executable, os.path.abspath(__file__), "--peer"]
    t_start = time.time()
    only = set(argv[argv.index("--only") + 1].split(",")) if "--only" in argv else {"open", "put", "gather", "many", "cow",
                                                                                  "shard", "coldgather", "job",
                                                                                  "dropin", "tokens"}
    exe = build()
    m = machine()
    m["reps"] = reps
    m["quick"] = quick
    m["command"] = "bash benches/run.sh" + (" --quick" if quick else "") + (
        f" --only {','.join(sorted(only))}" if "--only" in argv else "")
    print(f"machine: {m}", flush=True)
    recs = []

    def add(r, **extra):
        if r:
            r.update(extra)
            recs.append(r)

    sizes = [2 * MiB, 64 * MiB, 512 * MiB, 2 * GiB, 4 * GiB] if not quick else [2 * MiB, 64 * MiB, 2 * GiB]
    counts = [10, 100, 1000, 10000, 100000] if not quick else [10, 1000, 100000]
    if "open" not in only:  # the other sections use only the 2 GiB token file (and "many" its own)
        sizes, counts = [2 * GiB], []
    files = {}
    if only <= {"shard", "coldgather", "job", "dropin", "tokens"}:  # these sections write their own files
        sizes, counts = [], []
    print("generating files ...", flush=True)
    for s in sizes:
        p = os.path.join(data, f"single-{s // MiB}MiB.safetensors")
        if not os.path.exists(p) or os.path.getsize(p) < s:
            write_single(p, s)
        files[("size", s)] = p
    for c in counts:
        p = os.path.join(data, f"count-{c}.safetensors")
        if not os.path.exists(p):
            write_many(p, c, 16)
        files[("count", c)] = p
    many = os.path.join(data, "many-20000x4KiB.safetensors")
    if "many" in only and not os.path.exists(many):
        write_many(many, 20000, 1024)
    big = files.get(("size", 2 * GiB))  # the put tensor and the token file (u16, 1 Gi tokens)

    # 1. open vs size and vs count
    print("1. open ...", flush=True)
    for key, path in files.items() if "open" in only else []:
        res = warm(exe, path)
        for r in range(reps):
            add(run1([exe, "open", path]), series=key[0], x=key[1], rep=r, resident=res)
            add(run1([exe, "rust-safetensors", path]), series=key[0], x=key[1], rep=r, resident=res)
            add(run1(py + ["safe_open", path]), series=key[0], x=key[1], rep=r, resident=res)

    # 2. host materialise of the 2 GiB tensor
    print("2. put-cpu ...", flush=True)
    n = os.path.getsize(big) - 8 - header_len(big) if big else 0
    thr = str(os.cpu_count())
    put_reps = reps if quick else max(reps, 7)  # the noisiest section on a shared VM: two more processes
    for r in range(put_reps) if "put" in only else []:
        res = warm(exe, big)
        add(run1([exe, "put-cpu", big, "tokens"]), rep=r, resident=res)
        add(run1([exe, "fill-cpu", big, "tokens"]), rep=r, resident=res)
        add(run1([exe, "memcpy", str(n), thr]), rep=r)
        add(run1([exe, "memcpy", str(n), thr, "fresh"]), rep=r)
        add(run1([exe, "memcpy", str(n), thr, "fresh-thp"]), rep=r)
        add(run1([exe, "pread", big, thr]), rep=r, resident=res)
        add(run1(py + ["fromfile", big]), rep=r, resident=res)
        add(run1(py + ["load_file", big]), rep=r, resident=res)

    # 3. gather: nanoGPT get_batch vs hostfirst's gather primitive (and a read_at loop for comparison)
    print("3. gather ...", flush=True)
    if "gather" in only:
        warm(exe, big)
    for B in (12, 64, 512) if "gather" in only else ():
        for T in (1024, 8192):
            iters = 200 if B * T <= 64 * 1024 else (60 if B * T <= 64 * 8192 else 25)
            if quick:
                iters = max(10, iters // 4)
            for r in range(reps):
                add(run1(py + ["get_batch", big, str(B), str(T), str(iters), str(r + 1)]), rep=r)
                add(run1([exe, "gather", big, "tokens", str(B), str(T), str(iters), str(r + 1)]), rep=r)
                add(run1([exe, "gather1", big, "tokens", str(B), str(T), str(iters), str(r + 1)]), rep=r)
                add(run1([exe, "gather1p", big, "tokens", str(B), str(T), str(iters), str(r + 1)]), rep=r)
                add(run1([exe, "gather-readat", big, "tokens", str(B), str(T), str(iters), str(r + 1)]), rep=r)

    # 4. many-tensor whole-file load to cpu
    print("4. many-tensor ...", flush=True)
    res = warm(exe, many) if "many" in only else None
    for r in range(reps) if "many" in only else []:
        add(run1([exe, "load-rules", many]), rep=r, resident=res)
        add(run1([exe, "load-all", many]), rep=r, resident=res)
        add(run1([exe, "rust-safetensors-load-all", many]), rep=r, resident=res)
        add(run1(py + ["load_file", many, "load-all"]), rep=r, resident=res)
        add(run1(py + ["get_tensor_loop", many]), rep=r, resident=res)

    # 6. copy-on-write put to cpu vs the best copy into fresh memory vs Python (issue 15), interleaved
    print("6. copy-on-write put ...", flush=True)
    for r in range(put_reps) if "cow" in only else []:
        res = warm(exe, big)
        add(run1([exe, "put-cow", big, "tokens"]), rep=r, resident=res, series="cow")
        add(run1([exe, "put-cpu", big, "tokens"]), rep=r, resident=res, series="cow")
        add(run1([exe, "memcpy", str(n), thr, "fresh"]), rep=r, series="cow")
        add(run1([exe, "pread", big, thr, "fresh"]), rep=r, resident=res, series="cow")
        add(run1(py + ["load_file", big]), rep=r, resident=res, series="cow")

    # 7. shard-on-read: one rank of 4 (rank 1) loads its shards of a 2 GiB file of 16 f32 [2048, 16384] tensors
    # (64 KiB rows), split along dim 0 or dim 1, vs reading every tensor whole and slicing it in memory.
    shard_file = os.path.join(data, "shard-16x2048x16384-f32.safetensors")
    if "shard" in only:
        print("7. shard ...", flush=True)
        if not os.path.exists(shard_file):
            write_sharded(shard_file, 16, 2048, 16384)
        size = os.path.getsize(shard_file)
        for r in range(reps):
            for dim in (0, 1):
                # Cold: bytes taken from the file = pages resident afterwards (the file was evicted first).
                for op in ("shard-load", "read-then-slice"):
                    left = drop_cache(exe, shard_file)
                    rec = run1([exe, op, shard_file, "4", "1", str(dim)])
                    after = resident(exe, shard_file)
                    add(rec, rep=r, state="cold", resident_before=left, resident_after=after,
                        taken_bytes=round(after * size))
                # Warm: time one rank's shards vs a full load, alternating, in this run.
                res = warm(exe, shard_file)
                add(run1([exe, "shard-load", shard_file, "4", "1", str(dim)]), rep=r, state="warm", resident=res)
                add(run1([exe, "load-all", shard_file]), rep=r, state="warm", resident=res, dim=dim, op="shard",
                    impl="full-load")
                add(run1([exe, "read-then-slice", shard_file, "4", "1", str(dim)]), rep=r, state="warm", resident=res)
        # Cold P(None, "y") on a 2x4 JAX mesh vs numpy memmap slicing + jax.device_put, fio beside (issue 22): its
        # own script, in this Python (jax[cpu] is in the benchmarks' venv) with the checkout's package and release
        # library; results/cold-shard.json, read by report.py.
        subprocess.run(["cargo", "build", "--release", "--lib"], cwd=ROOT, check=True, capture_output=True)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bindings", "python"),
                   HOSTFIRST_LIBRARY=os.path.join(ROOT, "target", "release", "libhostfirst.so"))
        cmd = [sys.executable, os.path.join(HERE, "cold_shard.py"), "--data", data, "--reps", str(reps)]
        if subprocess.run(cmd + (["--keep"] if keep else []), env=env).returncode != 0:
            sys.stderr.write("FAILED: benches/cold_shard.py\n")

    # 9. cold training batches through the transfer engine, fio's limits, prefetch (issue 22): its own script, in
    # this Python with the checkout's package and release library; results/cold-gather.json, read by report.py.
    if "coldgather" in only:
        print("9. cold gather ...", flush=True)
        subprocess.run(["cargo", "build", "--release", "--lib"], cwd=ROOT, check=True, capture_output=True)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bindings", "python"),
                   HOSTFIRST_LIBRARY=os.path.join(ROOT, "target", "release", "libhostfirst.so"))
        cmd = [sys.executable, os.path.join(HERE, "cold_gather.py"), "--data", data, "--reps", str(reps)]
        if subprocess.run(cmd + (["--batches", "20"] if quick else []), env=env).returncode != 0:
            sys.stderr.write("FAILED: benches/cold_gather.py\n")

    # 10. issue 22: a plan's load as one job, and the open cost, against the safetensors crate in ONE process
    # (paired rounds, alternating order; benches/paired_ops.rs), and hostfirst.load in Python against
    # safetensors.numpy.load_file, also in one process (benches/python_load.py).
    job_files = []
    if "job" in only:
        print("10. one-job loads and open cost ...", flush=True)
        subprocess.run(["cargo", "build", "--release", "--lib"], cwd=ROOT, check=True, capture_output=True)
        one, lots = os.path.join(data, "count-1.safetensors"), os.path.join(data, "count-100000.safetensors")
        for p, c, e in ((one, 1, 16), (lots, 100000, 16), (many, 20000, 1024)):
            if not os.path.exists(p):
                write_many(p, c, e)
            job_files.append(p)
        for r in range(reps):
            res = warm(exe, many)
            add(run1([exe, "many-paired", many, "11"]), rep=r, resident=res)
            add(run1([exe, "open-paired", one, "401"]), rep=r, series="open-1")
            add(run1([exe, "open-paired", lots, "11"]), rep=r, series="open-100000", resident=warm(exe, lots))
            rec = run1([sys.executable, os.path.join(HERE, "python_load.py"), many, "--rounds", "7"])
            add(rec, rep=r, resident=res, impl="python")
    # 11. token files (issue 35): nanoGPT's get_batch vs a hostfirst gather (warm, cold, RSS over many batches) and
    # opening 10 GiB files: its own script, in this Python with the checkout's package and release library;
    # results/tokens.json, read by report.py.
    if "tokens" in only:
        print("11. token files ...", flush=True)
        subprocess.run(["cargo", "build", "--release", "--lib"], cwd=ROOT, check=True, capture_output=True)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bindings", "python"),
                   HOSTFIRST_LIBRARY=os.path.join(ROOT, "target", "release", "libhostfirst.so"))
        cmd = [sys.executable, os.path.join(HERE, "tokens.py"), "--data", os.path.join(data, "tokens"),
               "--command", m["command"]]
        if subprocess.run(cmd + (["--quick"] if quick else []), env=env).returncode != 0:
            sys.stderr.write("FAILED: benches/tokens.py\n")

    # 12. issue 34: the drop-ins (owned arrays, filled by the parallel engine) against safetensors' numpy and flax
    # loaders, paired in one process (benches/python_dropin.py), on a many-tensor file, a model-shaped file and one
    # large tensor; hostfirst's package and release library from the checkout, JAX on its CPU.
    dropin_files = []
    if "dropin" in only:
        print("12. drop-in load_file ...", flush=True)
        subprocess.run(["cargo", "build", "--release", "--lib"], cwd=ROOT, check=True, capture_output=True)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bindings", "python"), JAX_PLATFORMS="cpu",
                   HOSTFIRST_LIBRARY=os.path.join(ROOT, "target", "release", "libhostfirst.so"))
        model = os.path.join(data, "model-gpt2-small-f32.safetensors")
        one = os.path.join(data, f"single-{512 if not quick else 64}MiB.safetensors")
        for p, write in ((many, lambda p: write_many(p, 20000, 1024)), (model, write_model),
                         (one, lambda p: write_single(p, (512 if not quick else 64) * MiB))):
            if not os.path.exists(p):
                write(p)
            dropin_files.append(p)
        labels = {many: "20,000 × f32[1024] (80 MiB)", model: "GPT-2-small-shaped, 148 × f32 (498 MB)",
                  one: f"one u16 tensor ({512 if not quick else 64} MiB)"}
        for r in range(reps):
            for p in dropin_files:
                res = warm(exe, p)
                cmd = [sys.executable, os.path.join(HERE, "python_dropin.py"), p, "--rounds",
                       "7" if p == many else "5", "--label", labels[p]]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    sys.stderr.write(f"FAILED {cmd}: {out.stderr[-2000:]}\n")
                    continue
                for line in out.stdout.strip().splitlines():
                    add(json.loads(line), rep=r, resident=res, impl="python-dropin")
    m["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    m["wall_s"] = round(time.time() - t_start, 1)
    outdir = os.path.join(HERE, "results")
    os.makedirs(outdir, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    doc = dict(machine=m, records=recs)
    latest = os.path.join(outdir, "latest.json")
    if "--only" in argv and os.path.exists(latest):
        # A partial re-run replaces those sections' records in latest.json and is noted in its machine block.
        prev = json.load(open(latest))
        ops = {"open": {"open"}, "put": {"put-cpu", "memcpy", "pread"}, "gather": {"gather"}, "many": {"load-all"},
               "cow": set(), "shard": {"shard"}, "coldgather": set(), "tokens": set(),
               "job": {"many-paired", "open-paired", "python-load-paired"}, "dropin": {"python-dropin-paired"}}
        drop = set().union(*(ops[o] for o in only))

        def dropped(r):  # the cow section's records are its series (it shares ops with the put section)
            if r.get("series") == "cow":
                return "cow" in only
            return r["op"] in drop

        m_prev = prev["machine"]
        m_prev.setdefault("partial_reruns", []).append(m)
        doc = dict(machine=m_prev, records=[r for r in prev["records"] if not dropped(r)] + recs)
    raw = f"{stamp}{'-quick' if quick else ''}{'-only-' + '-'.join(sorted(only)) if '--only' in argv else ''}.json"
    with open(os.path.join(outdir, raw), "w") as f:
        json.dump(dict(machine=m, records=recs), f, indent=1)
    with open(latest, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote benches/results/{raw} ({len(recs)} records, {m['wall_s']} s)")
    if not keep:
        for p in list(files.values()) + [many, shard_file, os.path.join(data, f"single-{2 * GiB // MiB}MiB.safetensors")] + job_files + dropin_files:
            if os.path.exists(p):
                os.remove(p)
    subprocess.run([sys.executable, os.path.join(HERE, "report.py"), os.path.join(outdir, "latest.json")], check=True)


if __name__ == "__main__":
    main()
