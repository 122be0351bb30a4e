#!/usr/bin/env python3
"""Renders the GPU section of BENCHMARKS.md from the raw records of benches/gpu/run.py.

benches/report.py calls `section(paths)` with every benches/results/gpu-*.json made on a real GPU (stand-in runs are
refused there). Run directly, it prints the section for any file, a stand-in dry run included (with a banner saying
its numbers are host memcpy, not GPU figures):

    python3 benches/gpu/report_gpu.py FILE.json [FILE.json ...]
"""
import json
import os
import statistics
import sys
from collections import defaultdict

GiB = 1 << 30


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs, fmt):
    return f"{fmt(min(xs))}–{fmt(max(xs))}" if xs else "–"


def gb(x):
    return f"{x:.2f}"


def us(s):
    return f"{s * 1e6:,.0f} µs" if s < 0.01 else f"{s * 1e3:,.1f} ms"


# The fields each kind of record must carry to be rendered; a record lacking any is listed as not measured.
REQUIRED = {
    "gpu-put": ("bytes", "ceiling_gbps_best", "gbps_first", "gbps_best", "ratio_first_to_ceiling",
                "ratio_best_to_ceiling", "anon_growth_kib", "anon_growth_over_ring", "register_s"),
    "gpu-peer": ("gbps", "vmhwm_kib"),
    "gpu-gather": ("B", "T", "p50_s", "p99_s"),
    "gpu-seeds": ("bytes", "free_with_ballast", "put_status", "put_message", "free_after_failed_put", "iters", "B",
                  "T", "batches_per_s", "tokens_per_s", "batch_checked"),
}


def problem(r):
    """Why a record cannot be rendered (failed, skipped, incomplete), or None."""
    if "failed" in r or "skipped" in r:
        text = str(r.get("skipped") or r.get("failed") or "").strip()
        lines = text.splitlines()
        return lines[-1][:160] if lines else "failed with no output"
    if "op" not in r or "impl" not in r:
        return "a record without op and impl"
    if r["op"] == "gpu-peer" and r["impl"] == "jax-seeds":
        return None if "outcome" in r else "incomplete record (no outcome)"
    missing = [k for k in REQUIRED.get(r["op"], ()) if k not in r]
    return f"incomplete record (no {', '.join(missing)})" if missing else None


def load(paths):
    """The run documents and their records. A file that cannot be read (a run cut off while writing it) is
    reported on stderr and left out."""
    docs, kept = [], []
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
            d["machine"], d["records"]  # noqa: B018  (both must be there)
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.stderr.write(f"report_gpu: {p}: not a run file ({e}); left out\n")
            continue
        docs.append(d)
        kept.append(p)
    recs = []
    for p, d in zip(kept, docs):
        for r in d["records"]:
            if isinstance(r, dict):
                r["_file"] = os.path.basename(p)
                recs.append(r)
    return kept, docs, recs


def section(paths, allow_stand_in=False):
    """(markdown lines, verdict rows) for the GPU section; verdict rows are (target, measured, verdict)."""
    paths, docs, recs = load(paths)
    if not docs:
        raise SystemExit("report_gpu: no readable run file")
    if not allow_stand_in and any(d["machine"].get("stand_in") for d in docs):
        raise SystemExit("report_gpu: stand-in records are not GPU figures; pass only files made on a real GPU")
    out, verdict = [], []
    w = out.append
    ok = [r for r in recs if problem(r) is None]
    bad = [r for r in recs if problem(r) is not None]
    w("## 5. GPU\n")
    if docs[0]["machine"].get("stand_in"):
        w("**STAND-IN DRY RUN: host memory behind the CUDA entry points. These are not GPU figures.**\n")
    w("Measured on the GPU machine with the driver built here and carried there (`benches/gpu/README.md`). Each row is the")
    w("median over fresh processes (spread = min–max). Timing starts after the CUDA context exists (hostfirst: its")
    w("creation is reported apart; peers: a first tiny allocation) and ends with the data on the device, synchronised.\n")
    w("| run | machine | |\n|---|---|---|")
    for p, d in zip(paths, docs):
        m = d["machine"]
        v = m.get("versions", {})
        w(f"| `{os.path.basename(p)}` | GPU ({m.get('gpu_fields', '')}) | {m['gpu']} |")
        w(f"| | host | {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, kernel {m['kernel']} |")
        w(f"| | software | Python {m['python']}, " + ", ".join(f"{k} {x}" for k, x in v.items() if x) + f"; hostfirst {m['git']} |")
        w(f"| | date, command | {m.get('date_utc')}, {m.get('wall_s')} s: `{m.get('command')}` (tensor {m.get('gib')} GiB, "
          f"{m.get('reps')} reps) |")
    w("")

    by = defaultdict(list)
    for r in ok:
        by[(r["op"], r["impl"], r.get("cache"), r.get("B"), r.get("T"))].append(r)

    # ---- correctness first (the `check` section)
    checks = [r for r in ok if r["op"] in ("gpu-check", "gpu-load-check", "py-check")]
    sanitizers = [r for r in ok if r["op"] == "sanitizer"]
    census = [r for r in ok if r["op"] == "gpu-census"]
    if checks or census:
        w("### Correctness (`check`, run before any timing)\n")
        w("| check | outcome | detail |\n|---|---|---|")
        for r in checks:
            for c in r.get("checks", []):
                label = {"gpu-check": c["name"], "gpu-load-check": f"load ({r.get('tensors')} tensors): {c['name']}"}.get(
                    r["op"], f"python/{r.get('framework')}: {c['name']}")
                w(f"| {label} | {'ok' if c['ok'] else '**FAILED**'} | {str(c.get('detail') or c.get('error'))[:160]} |")
        for r in census:
            cu = r.get("cuda") or {}
            w(f"| census, CUDA_VISIBLE_DEVICES {r.get('visible')} | {'ok' if r.get('ok', True) else '**FAILED**'} | "
              f"cuda {cu.get('status')}, {cu.get('count')} device(s) {[d.get('uuid') for d in r.get('devices', [])]} |")
        for r in sanitizers:
            good = r.get("outcome") == "passed" and "0 errors" in str(r.get("sanitizer_summary"))
            w(f"| compute-sanitizer {r.get('tool')} (gpu-check) | {'ok' if good else '**FAILED**'} | "
              f"{r.get('sanitizer_summary') or r.get('failed_checks')} |")
        w("")
    ceil = [r for r in ok if r["op"] == "ceiling"]
    if ceil:
        w("Independent ceiling (`benches/gpu/ceiling.c`: the driver alone, pinned `cuMemcpyHtoD_v2`/`cuMemcpyDtoH_v2`, "
          f"{ceil[0]['bytes'] / GiB:.2f} GiB, best of 5 per process, {len(ceil)} processes): H2D "
          f"{gb(med([r['h2d_gbps_best'] for r in ceil]))} GB/s, D2H {gb(med([r['d2h_gbps_best'] for r in ceil]))} GB/s.\n")
    sweep = [r for r in ok if r["op"] == "gpu-put" and r.get("sweep")]
    if sweep:
        w("Staging size × reader threads (ring mode, warm, best of 2 puts, GB/s):\n")
        st = sorted({r["staging_ring_bytes"] for r in sweep})
        th = sorted({r.get("threads", 0) for r in sweep})
        w("| staging | " + " | ".join(f"{t} threads" for t in th) + " |\n|---|" + "---|" * len(th))
        for sb in st:
            cells = [next((gb(r["gbps_best"]) for r in sweep if r["staging_ring_bytes"] == sb and r.get("threads", 0) == t), "–")
                     for t in th]
            w(f"| {sb >> 20} MiB | " + " | ".join(cells) + " |")
        w("")
    many = [r for r in ok if r["op"] == "gpu-load"]
    many_peer = [r for r in ok if r["op"] == "gpu-peer" and r.get("tensors")]
    if many:
        w(f"Many-tensor load ({many[0]['tensors']} tensors, {many[0]['bytes'] / GiB:.2f} GiB) to cuda:0: hostfirst "
          f"{gb(med([r['gbps'] for r in many]))} GB/s ({med([r['us_per_tensor'] for r in many]):,.0f} µs per tensor)"
          + (f"; `safetensors.torch.load_file(device=\"cuda\")` {gb(med([r['gbps'] for r in many_peer]))} GB/s" if many_peer else "")
          + ".\n")
    by = defaultdict(list)  # the sweep and the many-tensor peer have their own lines above
    for r in ok:
        if not r.get("sweep") and not (r["op"] == "gpu-peer" and r.get("tensors")):
            by[(r["op"], r["impl"], r.get("cache"), r.get("B"), r.get("T"))].append(r)

    # ---- H2D of one large tensor
    puts = {k: v for k, v in by.items() if k[0] == "gpu-put"}
    if puts:
        any_put = next(iter(puts.values()))[0]
        n = any_put["bytes"]
        w(f"### H2D of one {n / GiB:.2f} GiB u16 tensor\n")
        w("`ceiling`: pinned host → device copy (`cuMemcpyHtoDAsync`, waited for) of min(tensor, 1 GiB), best of 5, in the same process as the")
        w("put. `first`: the process's first put (it also pays the staging ring's page-locked allocation, or the")
        w("registration in resident mode); `best`: best of 3 puts in the process. Anonymous RSS growth: the peak of")
        w("`RssAnon` (sampled every ms) during the puts, over its value before, against the 256 MiB staging ring; the")
        w("verdict below adds the growth of `RssShmem` (the driver may map page-locked memory as shared) and shows")
        w("`VmLck` / `VmPin` after the puts.\n")
        w("| hostfirst | cache | processes | ceiling GB/s | first GB/s | first ÷ ceiling | best GB/s | best ÷ ceiling | registration | anon RSS growth | ÷ ring | verified |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for impl in ("hostfirst-put-ring", "hostfirst-put-resident"):
            for cache in ("warm", "cold"):
                g = by.get(("gpu-put", impl, cache, None, None), [])
                if not g:
                    continue
                c = [r["ceiling_gbps_best"] for r in g]
                f1 = [r["gbps_first"] for r in g]
                b = [r["gbps_best"] for r in g]
                rf = [r["ratio_first_to_ceiling"] for r in g]
                rb = [r["ratio_best_to_ceiling"] for r in g]
                a = [r["anon_growth_kib"] for r in g]
                ar = [r["anon_growth_over_ring"] for r in g]
                reg = [r["register_s"] for r in g]
                ver = [r["verified"] for r in g if r.get("verified") is not None]
                res = [r["resident"] for r in g if isinstance(r.get("resident"), (int, float))]
                res_text = f"{min(res):.3f}–{max(res):.3f}" if res else "?"
                label = "staging ring" if impl.endswith("ring") else "resident (registered mapping)"
                w(f"| {label} | {cache} (resident {res_text}) | {len(g)} | {gb(med(c))} | {gb(med(f1))} ({spread(f1, gb)}) | "
                  f"{med(rf):.2f}× | {gb(med(b))} | {med(rb):.2f}× | {med(reg):.3f} s | {med(a) / 1024:,.0f} MiB (max {max(a) / 1024:,.0f}) | "
                  f"{max(ar):.2f}× | {'yes' if ver and all(ver) else ('NO' if ver else '–')} |")
        w("")
        ring = by.get(("gpu-put", "hostfirst-put-ring", "warm", None, None), [])
        if ring:
            rb = med([r["ratio_best_to_ceiling"] for r in ring])
            rf = med([r["ratio_first_to_ceiling"] for r in ring])
            verdict.append(("GPU: warm H2D ≥ 0.92× the pinned host-to-device copy peak (same process)",
                            f"staging ring, best of 3 puts: {rb:.2f}×; first put of a process: {rf:.2f}×",
                            "met" if rb >= 0.92 else "missed"))
            # Anonymous and shared growth together (the driver may map page-locked memory either way); the
            # kernel's locked / pinned counts after the puts are shown beside (records before they were taken
            # give anonymous growth only).
            mx = max(r.get("host_growth_over_ring", r["anon_growth_over_ring"]) for r in ring)
            lck = max((r.get("vm_lck_kib_after", 0) for r in ring), default=0) / 1024
            pin = max((r.get("vm_pin_kib_after", 0) for r in ring), default=0) / 1024
            verdict.append(("GPU: host RSS the put adds (anonymous + shared) ≤ the staging ring",
                            f"largest growth {mx:.2f}× the ring over {len(ring)} warm processes; VmLck {lck:,.0f} MiB, "
                            f"VmPin {pin:,.0f} MiB after the puts (largest)", "met" if mx <= 1.0 else "missed"))

        # peers
        peers = [(k, v) for k, v in by.items() if k[0] == "gpu-peer" and k[1] != "jax-seeds"]
        if peers and ring:
            hf = med([r["gbps_first"] for r in ring])
            w("Peers on the same file, warm, one process each (`first` put of hostfirst's staging ring for the ratio: a whole")
            w("process's single load, one-time costs included, as for the peers):\n")
            w("| peer | processes | GB/s | spread | landed on | peak RSS (VmHWM) | anon RSS growth | hostfirst ÷ peer |")
            w("|---|---|---|---|---|---|---|---|")
            ratios = []
            for (_, impl, *_), g in sorted(peers):
                s = [r["gbps"] for r in g]
                ratios.append((hf / med(s), impl))
                w(f"| `{impl}` | {len(g)} | {gb(med(s))} | {spread(s, gb)} | {g[0].get('landed', '?')} | "
                  f"{med([r['vmhwm_kib'] for r in g]) / 1024:,.0f} MiB | {med([r.get('anon_growth_kib', 0) for r in g]) / 1024:,.0f} MiB | "
                  f"**{hf / med(s):.1f}×** |")
            w("")
            lo = min(ratios)
            verdict.append(("GPU: ≥ 5× the torch and JAX safetensors paths",
                            f"{lo[0]:.1f}× (lowest, vs `{lo[1]}`) – {max(ratios)[0]:.1f}×", "met" if lo[0] >= 5 else "missed"))

    # ---- gather to cuda
    gat = [k for k in by if k[0] == "gpu-gather"]
    if gat:
        w("### Gather B × (T+1) random windows to cuda:0\n")
        w("hostfirst: `place::Gather` to cuda:0, pinned staging + one async copy, returned when the copy completed; `prefaulted`")
        w("after one `View::prefault`. nanoGPT: `get_batch` with `x.pin_memory().to('cuda', non_blocking=True)` (and y),")
        w("then `torch.cuda.synchronize()`; it ships x and y as int64.\n")
        w("| B | T | nanoGPT p50 | hostfirst p50 | p99 | nanoGPT ÷ hostfirst | prefaulted p50 | nanoGPT ÷ prefaulted | tokens/s (hostfirst) |")
        w("|---|---|---|---|---|---|---|---|---|")
        for B, T in sorted({(k[3], k[4]) for k in gat}):
            fair = by.get(("gpu-gather", "py-hostfirst-gather-cuda", None, B, T), [])
            if fair:
                w(f"| {B} | {T} | (Python, int64 x and y like nanoGPT) | `hostfirst` Python gather p50 "
                  f"{us(med([r['p50_s'] for r in fair]))} | {us(med([r['p99_s'] for r in fair]))} | | | | |")
            n = by.get(("gpu-gather", "py-nanoGPT-get_batch-cuda", None, B, T), [])
            h = by.get(("gpu-gather", "hostfirst-gather-cuda", None, B, T), [])
            p = by.get(("gpu-gather", "hostfirst-gather-cuda-prefaulted", None, B, T), [])
            n50 = med([r["p50_s"] for r in n]) if n else float("nan")
            h50 = med([r["p50_s"] for r in h]) if h else float("nan")
            p50 = med([r["p50_s"] for r in p]) if p else float("nan")
            w(f"| {B} | {T} | {us(n50) if n else '–'} | {us(h50) if h else '–'} | {us(med([r['p99_s'] for r in h])) if h else '–'} | "
              f"{n50 / h50:.1f}× | {us(p50) if p else '–'} | {n50 / p50:.1f}× | {B * T / h50 / 1e6:,.1f} M |")
        w("")

    # ---- the seeds' scenario
    seeds = by.get(("gpu-seeds", "hostfirst", None, 64, 1024), [])
    jseeds = by.get(("gpu-peer", "jax-seeds", None, None, None), [])
    if seeds:
        s = seeds[0]
        w("### The seeds' scenario: a token file larger than the GPU memory left free\n")
        w(f"GPU memory filled by one ballast allocation until {s['free_with_ballast'] / GiB:.2f} GiB were free; the token tensor is "
          f"{s['bytes'] / GiB:.2f} GiB.\n")
        w(f"- hostfirst put of the whole tensor: `{s['put_status']}`, \"{s['put_message']}\"; free memory after it "
          f"{s['free_after_failed_put'] / GiB:.2f} GiB (nothing allocated).")
        w(f"- The tensor stays on the host and batches flow: {s['iters']} batches of {s['B']} × {s['T'] + 1} tokens at "
          f"{s['batches_per_s']:,.0f} batches/s ({s['tokens_per_s'] / 1e6:,.0f} M tokens/s); a batch checked against the file: "
          f"{'yes' if s['batch_checked'] else 'NO'}.")
        for j in jseeds:
            w(f"- JAX `safetensors.flax.load_file` with the same memory left: {j['outcome']}"
              + (f" (`{j['error_type']}`: {j['error'][:200]})" if j.get("outcome") == "failed" else f", on {j.get('landed')}") + ".")
        w("")
    if bad:
        why = {}
        for r in bad:
            key = r.get("impl") or " ".join(os.path.basename(str(c)) for c in (r.get("cmd") or [])[:3]) or "?"
            why.setdefault(str(key), problem(r))
        w("Not measured in these runs: " + "; ".join(f"`{k}`: {v}" for k, v in why.items()) + "\n")
    return out, verdict


if __name__ == "__main__":
    lines, verdicts = section(sys.argv[1:], allow_stand_in=True)
    print("\n".join(lines))
    for v in verdicts:
        print(f"| {v[0]} | {v[1]} | **{v[2]}** |")
