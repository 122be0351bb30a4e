#!/usr/bin/env python3
"""grain data sources (issue 43, point 16): hostfirst.grain.TokenWindows beside a 10-line numpy memmap source,
both driven by grain itself. Not a test. Run it from the checkout with a venv holding numpy and grain:

    HOSTFIRST_LIBRARY=target/release/libhostfirst.so PYTHONPATH=bindings/python \
        python benches/grain_sources.py [--tokens N] [--reps R] [--batches K] [--out benches/results/grain.json]

One process, one raw u16 token file (nanoGPT's train.bin layout; N tokens, default 32 Mi = 64 MiB, read once so
it is in the page cache), records of 1025 tokens (stride 1025). Contenders, alternating within each of R rounds
(default 9; the order rotates each round; the median is reported, with the min-max range):
- memmap: the numpy source below (np.memmap, one slice copied per record);
- hostfirst: hostfirst.grain.TokenWindows over the same file;
- hostfirst, gather per record: the same source with its numpy view dropped, so every record is a one-row
  gather (how every single-record read went before this change).
Cases, each timed per record: `src[i]` for random i; grain's pipelines `MapDataset.source(src).shuffle(seed)
.batch(64)`, `MapDataset.source(src).to_iter_dataset().batch(64)` and `DataLoader(data_source=src,
sampler=IndexSampler(shuffle=True), operations=[Batch(64)], worker_count=0)`, K batches each (default 150); and
the batched read `MapDataset.source(src)._getitems(64 keys)`, which grain's pipelines do not call (it is the
one hostfirst answers with a gather). Writes the JSON; benches/report.py puts `markdown(doc)` into BENCHMARKS.md
(section 14).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WINDOW, BATCH = 1025, 64


class MemmapWindows:  # the peer: what a grain user writes over np.memmap (10 lines)
    def __init__(self, path, window):
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
        self.window = window
        self.n = (len(self.tokens) - window) // window + 1

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        s = i * self.window
        return np.array(self.tokens[s:s + self.window])


def sources(path):
    import hostfirst.grain

    old = hostfirst.grain.TokenWindows(path, window=WINDOW, dtype="uint16")
    old._host = None  # every read a gather: the single-record read before this change
    return {"memmap": MemmapWindows(path, WINDOW),
            "hostfirst": hostfirst.grain.TokenWindows(path, window=WINDOW, dtype="uint16"),
            "hostfirst, gather per record": old}


def per_record(case, src, batches, rng):
    """Seconds per record of one case over `src`."""
    import grain

    n = len(src)
    if case == "src[i]":
        keys = rng.integers(0, n, batches * BATCH).tolist()
        held = []  # every record kept alive until the clock stops (freeing is not the read's cost)
        t = time.perf_counter()
        for k in keys:
            held.append(src[k])
        dt = time.perf_counter() - t
        del held
        return dt / len(keys)
    if case == "_getitems(64 keys)":
        ds = grain.MapDataset.source(src)
        keys = [rng.integers(0, n, BATCH).tolist() for _ in range(batches)]
        held = []
        t = time.perf_counter()
        for ks in keys:
            held.append(ds._getitems(ks))
        dt = time.perf_counter() - t
        del held
        return dt / (batches * BATCH)
    if case == "MapDataset.source().shuffle().batch(64)":
        it = iter(grain.MapDataset.source(src).shuffle(seed=int(rng.integers(1 << 30))).batch(BATCH))
    elif case == "to_iter_dataset().batch(64)":
        it = iter(grain.MapDataset.source(src).shuffle(seed=int(rng.integers(1 << 30))).to_iter_dataset()
                  .batch(BATCH))
    elif case == "DataLoader(Batch(64))":
        sampler = grain.samplers.IndexSampler(n, shuffle=True, seed=int(rng.integers(1 << 30)), num_epochs=1)
        loader = grain.DataLoader(data_source=src, sampler=sampler, operations=[grain.transforms.Batch(BATCH)],
                                  worker_count=0)
        it = iter(loader)
    else:
        raise ValueError(case)
    next(it)  # the pipeline's set-up is not a record's cost
    held = []
    t = time.perf_counter()
    for _ in range(batches):
        held.append(next(it))
    dt = time.perf_counter() - t
    assert all(b.shape == (BATCH, WINDOW) for b in held), [b.shape for b in held[:3]]
    del held
    return dt / (batches * BATCH)


CASES = ["src[i]", "MapDataset.source().shuffle().batch(64)", "to_iter_dataset().batch(64)",
         "DataLoader(Batch(64))", "_getitems(64 keys)"]


def check_same(srcs):
    ref = srcs["memmap"]
    for name, s in srcs.items():
        assert len(s) == len(ref), name
        for k in (0, 1, len(ref) // 2, len(ref) - 1):
            assert np.array_equal(s[k], ref[k]), (name, k)


def run(args):
    import grain

    import hostfirst

    d = tempfile.mkdtemp(dir=args.dir)
    path = os.path.join(d, "train.bin")
    np.random.default_rng(0).integers(0, 50257, args.tokens, dtype=np.uint16).tofile(path)
    with open(path, "rb") as f:  # into the page cache
        while f.read(64 << 20):
            pass
    srcs = sources(path)
    check_same(srcs)
    rng = np.random.default_rng(1)
    times = {c: {s: [] for s in srcs} for c in CASES}
    load0 = os.getloadavg()
    names = list(srcs)
    for rep in range(args.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]  # who goes first rotates round by round
        for c in CASES:
            for s in order:
                times[c][s].append(per_record(c, srcs[s], args.batches, rng))
    os.unlink(path)
    os.rmdir(d)
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "hostfirst": rev.stdout.strip(),
        "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
        "numpy": np.__version__, "grain": getattr(grain, "__version__", None) or _version("grain"),
        "library": hostfirst.library_path, "loadavg": list(load0) + list(os.getloadavg()),
        "tokens": args.tokens, "window": WINDOW, "batch": BATCH, "batches": args.batches, "reps": args.reps,
        "records": len(srcs["memmap"]), "seconds_per_record": times,
    }


def _version(dist):
    from importlib.metadata import version

    return version(dist)


def markdown(doc):
    """The BENCHMARKS.md section (benches/report.py includes it from benches/results/grain.json)."""
    la = doc["loadavg"]
    lines = [
        f"`python benches/grain_sources.py` ({doc['date']}, hostfirst {doc['hostfirst']}; {doc['cores']} cores, "
        f"kernel {doc['kernel']}, load {la[0]:.2f} at start and {la[3]:.2f} at end, a shared VM; Python "
        f"{doc['python']}, numpy {doc['numpy']}, grain {doc['grain']}). A raw u16 token file of {doc['tokens']:,} "
        f"tokens in the page cache, records of {doc['window']} tokens ({doc['records']:,} records); grain "
        f"pipelines of batch {doc['batch']}, {doc['batches']} batches a measurement; {doc['reps']} rounds, "
        "contenders alternating (the order rotating), median µs per record (min–max). memmap: a 10-line "
        "`np.memmap` source (one slice copied per record); hostfirst: `hostfirst.grain.TokenWindows`; gather per "
        "record: the same with every read a one-row gather, as every single-record read was before issue 43. "
        "grain's pipelines call `src[i]` once per record; `_getitems` with many keys (last row) only where called "
        "directly.", "",
        "| case | memmap | hostfirst | gather per record | hostfirst ÷ memmap |", "|---|---|---|---|---|",
    ]
    t = doc["seconds_per_record"]
    for case, by in t.items():
        def cell(s):
            xs = [x * 1e6 for x in by[s]]
            return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"
        ratios = [h / m for h, m in zip(by["hostfirst"], by["memmap"])]
        lines.append(f"| `{case}` | {cell('memmap')} | **{cell('hostfirst')}** | "
                     f"{cell('hostfirst, gather per record')} | {statistics.median(ratios):.2f}× |")
    one = {s: statistics.median(t["src[i]"][s]) * 1e6 for s in t["src[i]"]}
    lines += ["", f"The single-record read, the only read grain's pipelines make: {one['hostfirst']:.2f} µs for "
              f"hostfirst against {one['memmap']:.2f} µs for the memmap source (a slice of the file mapping's numpy "
              "view, copied; `np.memmap` pays for building a memmap subclass per slice), where the one-row gather "
              f"took {one['hostfirst, gather per record']:.2f} µs. In the pipelines, grain's own work per record "
              "(its prefetch threads, statistics and batching) is most of the time, so the sources differ by "
              "little there; ratios within a row's spread are noise of the shared machine. A batched read of 64 "
              "keys is one gather (last row), which grain calls only where a user calls `_getitems` directly.", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32 << 20)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "grain.json"))
    args = ap.parse_args()
    doc = run(args)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(markdown(doc))


if __name__ == "__main__":
    sys.exit(main())
