#!/usr/bin/env python3
"""hostfirst's Python drop-in against safetensors 0.8 and safetensors' main branch, one process per library, warm
and cold (issue 44, point 3). A benchmark, not a test. BENCHMARKS.md sections 12 and 15 are its output.

    bash benches/python_vs_safetensors.sh          # the one-line command: builds what it needs, then runs this

    python benches/python_vs_safetensors.py [--main PYTHON] [--rounds 3] [--reps 1] [--dir DIR] [--keep] [--only CASE]

This Python (numpy, jax, safetensors 0.8 installed; the hostfirst package importable from bindings/python with
its extension built and target/release/libhostfirst.so) runs hostfirst and safetensors 0.8; `--main PYTHON`
(default target/st-main-venv/bin/python when it exists) runs safetensors' main branch, with its default
backend ("mmap") and with backend="pread". Every measurement is a fresh process for one library, one pattern,
one file, warm or cold, timing `--rounds` calls after one untimed call (which pays the one-time costs and, for
warm, puts the file in the page cache; cold: the file's pages dropped before each call: `echo 1 > /proc/sys/vm/drop_caches` after `sync` where
this user may, else fsync + posix_fadvise(DONTNEED) of the file, which the script says it used). The libraries'
processes alternate, `--reps` times, the order rotating. Timing boundary: the pattern's call until its result
exists (for JAX every array ready); freeing the arrays is outside it. ratio = median of hostfirst's times ÷
median of the peer's.

Patterns (the issue's table): get_all = `with safe_open(f, "numpy"): [f.get_tensor(k) for k in f.keys()]`;
open10 = open the file and get_tensor 10 tensors spread over it (names known, no keys()); numpy =
`numpy.load_file(f)`; jax = `hostfirst.jax.load_file(f)` vs `safetensors.flax.load_file(f)`. Files (written once
with hostfirst.numpy.save_file into DIR, default target/pyvs, removed at the end unless --keep): 20,000 and
100,000 × f32[1024], a GPT-2-small-shaped file (148 f32 tensors, 498 MB), one u16[256 Mi] (512 MiB).
`floor` (reference, not a library): one `readinto` of the whole file's bytes into fresh numpy memory, one
thread: what page faults plus one copy out of the page cache (warm) or off the disk (cold) cost on this machine.
Prints one JSON line per measurement, then a Markdown table of the ratios.
"""

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FILES = {  # name -> (description, how to make its arrays)
    "20k": "20,000 × f32[1024] (80 MiB)",
    "100k": "100,000 × f32[1024] (400 MiB)",
    "gpt2": "GPT-2-small-shaped, 148 × f32 (498 MB)",
    "u16": "one u16[256 Mi] (512 MiB)",
}
CASES = [  # (pattern, file)
    ("get_all", "20k"), ("get_all", "100k"), ("get_all", "gpt2"), ("open10", "100k"),
    ("numpy", "20k"), ("numpy", "gpt2"), ("numpy", "u16"), ("jax", "20k"),
]
TARGETS = {("get_all", "20k"): 1.0, ("get_all", "100k"): 1.0, ("get_all", "gpt2"): 0.7, ("open10", "100k"): 0.7,
           ("numpy", "20k"): 0.5, ("numpy", "gpt2"): 0.7, ("numpy", "u16"): 0.7, ("jax", "20k"): 0.5}


def gpt2_arrays(np):
    d, v, n, layers = 768, 50257, 1024, 12
    a = {"wte.weight": (v, d), "wpe.weight": (n, d)}
    for i in range(layers):
        p = f"h.{i}."
        a.update({p + "ln_1.weight": (d,), p + "ln_1.bias": (d,), p + "attn.c_attn.weight": (d, 3 * d),
                  p + "attn.c_attn.bias": (3 * d,), p + "attn.c_proj.weight": (d, d), p + "attn.c_proj.bias": (d,),
                  p + "ln_2.weight": (d,), p + "ln_2.bias": (d,), p + "mlp.c_fc.weight": (d, 4 * d),
                  p + "mlp.c_fc.bias": (4 * d,), p + "mlp.c_proj.weight": (4 * d, d), p + "mlp.c_proj.bias": (d,)})
    a.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(s, dtype=np.float32) for k, s in a.items()}


def make_file(name, path):
    import numpy as np

    import hostfirst.numpy

    if name in ("20k", "100k"):
        n = 20_000 if name == "20k" else 100_000
        arrays = {f"t{i}": np.full(1024, i, np.float32) for i in range(n)}
    elif name == "gpt2":
        arrays = gpt2_arrays(np)
    else:
        arrays = {"tokens": np.arange(256 << 20, dtype=np.uint16)}
    hostfirst.numpy.save_file(arrays, path + ".tmp", sync=False)
    os.replace(path + ".tmp", path)


# ---- the child: one library, one pattern, one file, warm or cold

def drop(path):
    """Drops `path`'s pages from the page cache; says how."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        try:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
            return "drop_caches"
        except OSError:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return "fadvise"
    finally:
        os.close(fd)


def pattern_fn(lib, pattern, path):
    import numpy as np

    backend = {"pread": "pread"}.get(lib.split(":")[-1])
    kw = {"backend": backend} if backend else {}
    if lib == "floor":
        size = os.path.getsize(path)

        def floor():
            out = np.empty(size, np.uint8)
            with open(path, "rb", buffering=0) as f:
                f.readinto(out)
            return {"all": out}
        return floor, False
    if lib == "hostfirst":
        import hostfirst as m
        import hostfirst.numpy as m_numpy
        if pattern == "jax":
            import hostfirst.jax as m_jax
            load_jax = m_jax.load_file
    else:
        import safetensors as m
        import safetensors.numpy as m_numpy
        if pattern == "jax":
            import safetensors.flax as m_flax
            load_jax = m_flax.load_file
    if pattern == "get_all":
        def get_all():
            with m.safe_open(path, framework="numpy", **kw) as f:
                return {k: f.get_tensor(k) for k in f.keys()}
        return get_all, False
    if pattern == "open10":
        n = 100_000 if "100k" in os.path.basename(path) else 20_000
        names = [f"t{i * (n // 10)}" for i in range(10)]

        def open10():
            with m.safe_open(path, framework="numpy", **kw) as f:
                return {k: f.get_tensor(k) for k in names}
        return open10, False
    if pattern == "numpy":
        return (lambda: m_numpy.load_file(path, **kw)), False
    if pattern == "jax":
        return (lambda: load_jax(path, **kw)), True
    raise SystemExit(f"unknown pattern {pattern}")


def child(lib, pattern, path, cache, rounds):
    if lib == "hostfirst":
        sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
        os.environ.setdefault("HOSTFIRST_LIBRARY", os.path.join(ROOT, "target", "release", "libhostfirst.so"))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    fn, wait = pattern_fn(lib, pattern, path)
    if wait:
        import jax
    how = None
    times = []
    for i in range(rounds + 1):  # the first call untimed: it pays the one-time costs (imports, JAX's start)
        if cache == "cold":
            how = drop(path)
        gc.collect()
        t = time.perf_counter()
        out = fn()
        if wait:
            jax.block_until_ready(list(out.values()))
        dt = time.perf_counter() - t
        n = len(out)
        del out
        gc.collect()
        if i > 0:
            times.append(dt)
    version = None
    if lib != "floor":
        version = (sys.modules.get("hostfirst") or sys.modules["safetensors"]).__version__
    native = None
    if lib == "hostfirst":
        from hostfirst import _fast
        native = _fast.native is not None
    print(json.dumps(dict(times=times, tensors=n, drop=how, version=version, native=native)))


# ---- the parent

def run_child(python, lib, pattern, path, cache, rounds):
    cmd = [python, os.path.abspath(__file__), "--child", lib, pattern, path, cache, str(rounds)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        lib, pattern, path, cache, rounds = sys.argv[2:7]
        child(lib, pattern, path, cache, int(rounds))
        return
    ap = argparse.ArgumentParser()
    main_default = os.path.join(ROOT, "target", "st-main-venv", "bin", "python")
    ap.add_argument("--main", default=main_default if os.path.exists(main_default) else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--dir", default=os.path.join(ROOT, "target", "pyvs"))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--only", action="append", help="PATTERN:FILE (repeatable), e.g. numpy:u16")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    os.environ.setdefault("HOSTFIRST_LIBRARY", os.path.join(ROOT, "target", "release", "libhostfirst.so"))
    os.makedirs(args.dir, exist_ok=True)
    cases = [c for c in CASES if not args.only or f"{c[0]}:{c[1]}" in args.only]
    libs = [("hostfirst", sys.executable), ("0.8", sys.executable)]
    if args.main:
        libs += [("main", args.main), ("main:pread", args.main)]
    started = time.time()
    load = os.getloadavg()
    print(json.dumps(dict(op="python-vs-safetensors", start=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                          cpus=os.cpu_count(), machine=platform.platform(), python=platform.python_version(),
                          load=load, libs=[n for n, _ in libs])), flush=True)
    paths = {}
    for _, name in cases:
        p = paths[name] = os.path.join(args.dir, f"{name}.safetensors")
        if not os.path.exists(p):
            make_file(name, p)
    results = {}
    for pattern, name in cases:
        case_libs = libs + ([("floor", sys.executable)] if pattern in ("numpy", "get_all") else [])
        for cache in ("warm", "cold"):
            times = {lib: [] for lib, _ in case_libs}
            for rep in range(args.reps):
                k = rep % len(case_libs)
                for lib, python in case_libs[k:] + case_libs[:k]:
                    child_lib = "st" + lib[len("main"):] if lib.startswith("main") else lib
                    child_lib = "st" if lib == "0.8" else child_lib
                    r = run_child(python, child_lib, pattern, paths[name], cache, args.rounds)
                    times[lib] += r["times"]
                    print(json.dumps(dict(pattern=pattern, file=name, cache=cache, lib=lib, rep=rep, **r)),
                          flush=True)
            med = {lib: statistics.median(t) for lib, t in times.items()}
            results[(pattern, name, cache)] = med
    took = time.time() - started
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {took / 60:.1f} min; load average at the "
          f"start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs\n")
    peers = [n for n, _ in libs if n != "hostfirst"]
    head = ["pattern", "file", "cache", "hostfirst"] + peers + [f"÷ {p}" for p in peers] + ["floor", "target"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (pattern, name, cache), med in results.items():
        h = med["hostfirst"]
        row = [pattern, FILES[name], cache, f"{h * 1e3:.1f} ms"]
        row += [f"{med[p] * 1e3:.1f} ms" for p in peers]
        row += [f"**{h / med[p]:.2f}×**" for p in peers]
        row += [f"{med['floor'] * 1e3:.1f} ms" if "floor" in med else "–", f"≤ {TARGETS[(pattern, name)]}×"]
        print("| " + " | ".join(row) + " |")
    if not args.keep:
        for p in paths.values():
            os.remove(p)


if __name__ == "__main__":
    main()
