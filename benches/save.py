#!/usr/bin/env python3
"""Saving safetensors files: hostfirst's writer beside `safetensors.numpy.save_file`, and beside the disk's own
sequential write limit measured by fio, in the same run (issue 36). Not a test. Run it with `bash benches/save.sh`.

    python3 benches/save.py [--reps N] [--mib M] [--rss-mib R] [--dir DIR]

Every measurement runs in a fresh process (`--child OP ...`), contenders alternating within each round:
- durable: a float32 tensor of M MiB (default 1024) already in memory, saved, then the file and its directory
  fsynced by the caller (both contenders: hostfirst's own fsyncs make that last sync cheap, the peer pays it);
  `sync` before each round so no earlier dirty data is written on anyone's clock;
- no sync: the same saves without any fsync (hostfirst `sync=False`);
- peak RSS of a save of an R MiB tensor (default 2048): VmHWM of the process (the tensor itself included) ÷ the
  tensor's size, for hostfirst and the peer; and for a CUDA source on the stand-in driver (device memory is
  simulated in host memory, so the growth across the save is measured: peak during the save, after resetting
  the high-water mark through /proc/self/clear_refs, minus the RSS before it) against the staging size.
fio (installed by save.sh): sequential 1 MiB writes of M MiB, buffered with a final fsync (what a save pays) and
O_DIRECT at queue depth 16; the limit is the faster of the two.
Writes benches/results/save.json; benches/report.py puts `markdown(doc)` into BENCHMARKS.md.
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tensor(mib):
    import numpy as np

    a = np.empty(mib * MiB // 4, dtype=np.float32)
    a[:] = np.arange(a.size, dtype=np.float32)  # every page touched, not zero
    return a


def child(op, path, mib):
    """One measurement; prints one JSON line."""
    import numpy as np  # noqa: F401

    out = {"op": op}
    if op.startswith("rss-device"):
        import hostfirst

        src = hostfirst.open(path)
        buf = src["t"].to("cuda:0")  # the device memory of the stand-in lives in this process
        hostfirst.native.hostfirst_release_cached_memory()  # the put's pooled staging slabs: not the save's
        rss0 = status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        w = hostfirst.Writer(path + ".out", sync=False)
        w.add("t", buf)
        t = time.perf_counter()
        w.finish()
        out["seconds"] = time.perf_counter() - t
        w.close()
        out["growth_kib"] = status_kib("VmHWM") - rss0
        out["staging_kib"] = 64 * 1024
        out["tensor_kib"] = buf.nbytes // 1024
        os.unlink(path + ".out")
        print(json.dumps(out))
        return
    a = tensor(mib)
    d = os.path.dirname(path)
    # Imports outside the timed span (the library's load and tables are a one-time cost of either package).
    if op.endswith("hostfirst"):
        import hostfirst.numpy
    else:
        import safetensors.numpy
    if op.startswith("rss-"):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    else:
        os.sync()
    t = time.perf_counter()
    if op.endswith("hostfirst"):
        hostfirst.numpy.save_file({"t": a}, path, sync=not op.startswith("nosync"))
    else:
        safetensors.numpy.save_file({"t": a}, path)
    if op.startswith("durable"):
        fsync_path(path)
        fsync_path(d)
    out["seconds"] = time.perf_counter() - t
    out["hwm_kib"] = status_kib("VmHWM")
    out["tensor_kib"] = a.nbytes // 1024
    out["bytes"] = os.path.getsize(path)
    if not op.startswith("rss-hostfirst"):  # that one is the CUDA case's source
        os.unlink(path)
    print(json.dumps(out))


def run_child(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], capture_output=True, text=True,
                       env=e)
    if p.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{p.stderr[-3000:]}")
    return json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])


def fio(dirname, mib):
    """Sequential 1 MiB writes: buffered + a final fsync, and O_DIRECT at depth 16. MiB/s each."""
    res = {}
    for name, extra in (("buffered_fsync", ["--ioengine=psync", "--end_fsync=1"]),
                        ("direct_qd16", ["--ioengine=libaio", "--direct=1", "--iodepth=16"])):
        f = os.path.join(dirname, "fio.bin")
        p = subprocess.run(["fio", "--name=seqwrite", f"--filename={f}", "--rw=write", "--bs=1M", f"--size={mib}M",
                            "--output-format=json", *extra], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"fio failed: {p.stderr}")
        job = json.loads(p.stdout)["jobs"][0]
        # bw_bytes: bytes per second of the job's run time, which includes the end fsync with --end_fsync=1
        secs = job["job_runtime"] / 1000 if job.get("job_runtime") else job["write"]["runtime"] / 1000
        res[name] = {"mib_s": mib / secs, "seconds": secs, "version": json.loads(p.stdout).get("fio version", "")}
        os.unlink(f)
        os.sync()
    return res


def fs_of(dirname):
    best = ("", "", "")
    real = os.path.realpath(dirname)
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            if (real + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best[1]):
                best = (dev, mnt, fstype)
    return {"device": best[0], "mount": best[1], "type": best[2]}


def median_ratio(xs, ys):
    r = [x / y for x, y in zip(xs, ys)]
    return {"median": statistics.median(r), "min": min(r), "max": max(r)}


def main():
    args = sys.argv[1:]
    if args and args[0] == "--child":
        child(args[1], args[2], int(args[3]))
        return
    opt = {"--reps": "5", "--mib": "1024", "--rss-mib": "2048", "--dir": os.path.join(ROOT, "bench-out", "save")}
    i = 0
    while i < len(args):
        opt[args[i]] = args[i + 1]
        i += 2
    reps, mib, rss_mib, d = int(opt["--reps"]), int(opt["--mib"]), int(opt["--rss-mib"]), opt["--dir"]
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "save.safetensors")
    import hostfirst
    import numpy
    import safetensors

    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "reps": reps, "mib": mib, "rss_mib": rss_mib,
           "fs": fs_of(d), "kernel": platform.release(), "cores": os.cpu_count(), "loadavg": os.getloadavg(),
           "numpy": numpy.__version__, "safetensors": safetensors.__version__, "engine": hostfirst.read_engine(),
           "hostfirst": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True).stdout.strip()}
    print(f"save bench: {mib} MiB on {doc['fs']}", file=sys.stderr)
    doc["fio"] = fio(d, mib)
    rounds = {k: [] for k in ("durable-hostfirst", "durable-peer", "nosync-hostfirst", "nosync-peer")}
    for r in range(reps):
        order = list(rounds) if r % 2 == 0 else list(reversed(rounds))
        for op in order:
            rounds[op].append(run_child([op, path, str(mib)]))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]['seconds']:.2f} s" for k, v in rounds.items()),
              file=sys.stderr)
    doc["rounds"] = rounds
    sec = {k: [x["seconds"] for x in v] for k, v in rounds.items()}
    doc["durable_ratio"] = median_ratio(sec["durable-hostfirst"], sec["durable-peer"])
    doc["nosync_ratio"] = median_ratio(sec["nosync-hostfirst"], sec["nosync-peer"])
    med = {k: statistics.median(v) for k, v in sec.items()}
    doc["median_s"] = med
    limit = max(v["mib_s"] for v in doc["fio"].values())
    doc["fio_limit_mib_s"] = limit
    doc["durable_mib_s"] = {k: mib / med[k] for k in ("durable-hostfirst", "durable-peer")}
    doc["throughput_vs_fio"] = doc["durable_mib_s"]["durable-hostfirst"] / limit
    # Peak RSS, 2 GiB: hostfirst, the peer, and a CUDA source on the stand-in.
    rss = {"rss-hostfirst": [], "rss-peer": []}
    for r in range(2):
        for op in (rss if r == 0 else reversed(list(rss))):
            rss[op].append(run_child([op, path + "." + op, str(rss_mib)]))
    doc["rss"] = {k: min(x["hwm_kib"] for x in v) / v[0]["tensor_kib"] for k, v in rss.items()}
    stand_in = os.environ.get("HOSTFIRST_STAND_IN_DIR")
    if stand_in:
        dev = run_child(["rss-device", path + ".rss-hostfirst", str(rss_mib)],
                        env={"LD_LIBRARY_PATH": stand_in, "STAND_IN_TOTAL_MEMORY": "64G"})
        doc["rss_device"] = dev
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    out = os.path.join(HERE, "results", "save.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(markdown(doc))


def markdown(doc):
    """The BENCHMARKS.md section (benches/report.py includes it from benches/results/save.json)."""
    f = doc["fio"]
    med, dr, nr = doc["median_s"], doc["durable_ratio"], doc["nosync_ratio"]
    mib = doc["mib"]
    fs = doc["fs"]
    lines = [
        f"`bash benches/save.sh` ({doc['date']}, hostfirst {doc['hostfirst']}; {doc['cores']} cores, kernel "
        f"{doc['kernel']}, load {' '.join(f'{x:.2f}' for x in doc['loadavg'])} at start, a shared VM; numpy "
        f"{doc['numpy']}, safetensors {doc['safetensors']}; hostfirst's engine: {doc['engine']}). File system: "
        f"**{fs['type']}** on {fs['device']} (mounted at {fs['mount']}). A float32 tensor of {mib} MiB already in "
        f"memory, saved by `hostfirst.numpy.save_file` and by `safetensors.numpy.save_file`, each in a fresh process, "
        f"alternating, {doc['reps']} rounds, `sync` before each; ratios hostfirst ÷ peer within a round, median "
        f"(range). Durable: the save, then fsync of the file and its directory by the caller (both: hostfirst has "
        f"synced already, the peer has not). fio {f['buffered_fsync']['version']}: sequential 1 MiB writes of "
        f"{mib} MiB, buffered with a final fsync {f['buffered_fsync']['mib_s']:.0f} MiB/s, O_DIRECT at depth 16 "
        f"{f['direct_qd16']['mib_s']:.0f} MiB/s; the limit is the faster.", "",
        "| case | hostfirst | peer | hostfirst ÷ peer | target |", "|---|---|---|---|---|",
        f"| time to a durable file, {mib} MiB | {med['durable-hostfirst']:.2f} s "
        f"({doc['durable_mib_s']['durable-hostfirst']:.0f} MiB/s) | {med['durable-peer']:.2f} s "
        f"({doc['durable_mib_s']['durable-peer']:.0f} MiB/s) | **{dr['median']:.2f}×** ({dr['min']:.2f}–"
        f"{dr['max']:.2f}) | ≤ 0.7× |",
        f"| durable throughput ÷ fio's limit ({doc['fio_limit_mib_s']:.0f} MiB/s) | "
        f"**{doc['throughput_vs_fio']:.2f}×** | {doc['durable_mib_s']['durable-peer'] / doc['fio_limit_mib_s']:.2f}× "
        f"| | ≥ 0.8× |",
        f"| no sync (page cache only), {mib} MiB | {med['nosync-hostfirst']:.2f} s | {med['nosync-peer']:.2f} s | "
        f"{nr['median']:.2f}× ({nr['min']:.2f}–{nr['max']:.2f}) | |",
        f"| peak RSS of a {doc['rss_mib']} MiB save ÷ the tensor (host source, the tensor included) | "
        f"**{doc['rss']['rss-hostfirst']:.3f}×** | {doc['rss']['rss-peer']:.3f}× | | ≤ 1.1× |",
    ]
    dev = doc.get("rss_device")
    if dev:
        lines.append(
            f"| RSS growth of a {dev['tensor_kib'] // 1024} MiB save from a CUDA buffer (stand-in driver) | "
            f"**{dev['growth_kib'] / 1024:.0f} MiB** ({dev['seconds']:.2f} s) | | | ≤ staging "
            f"({dev['staging_kib'] // 1024} MiB) |")
    return "\n".join(lines) + "\n"


def verdicts(doc):
    """(target, met) pairs for the targets table."""
    out = [("time to a durable file ≤ 0.7× safetensors.numpy.save_file", doc["durable_ratio"]["median"] <= 0.7),
           ("durable throughput ≥ 0.8× fio's sequential write limit", doc["throughput_vs_fio"] >= 0.8),
           ("peak RSS of a host-source save ≤ 1.1× the tensor", doc["rss"]["rss-hostfirst"] <= 1.1)]
    if doc.get("rss_device"):
        d = doc["rss_device"]
        out.append(("RSS growth of a CUDA-source save ≤ the staging size", d["growth_kib"] <= d["staging_kib"]))
    return out


if __name__ == "__main__":
    main()
