#!/usr/bin/env python3
"""The first GPU run (issue 32): one call, correctness before speed, within a time budget. Not a test; its dry run on
the stand-in driver is (tests/it/gpu_harness.rs). benches/gpu/README.md has the device call.

    python3 benches/gpu/first.py --bench EXE --out DIR [--budget 400] [--data DIR] [--stand-in DIR]

Steps, in this order, each a fresh process under its own time limit (and never past the budget):
  1. census     hostfirst's census, then under CUDA_VISIBLE_DEVICES empty, the first GPU's UUID, and 99
  2. check      gpu-check (benches/gpu_check.rs): puts of every kind byte for byte up to one tensor over 4 GiB,
                sub-views, a cancelled async put, buffer_to every way, the gather ring held and reused, consumers
                on other streams released by deleters on other threads, a release during a graph capture, out of
                memory refused before allocating, NVML against cuMemGetInfo, a forked child
  3. load       gpu-load-check: 4096 tensors to cuda:0 as one load, each byte-exact and 256-byte aligned, one
                DLPack part kept past the load's free while allocations churn, free memory back after
  4. python     check_py.py with numpy, torch and JAX (each skipped with its reason where missing)
  -- if any check failed: "CHECK FAILED" and the reasons are printed and the speed part is skipped --
  5. speed      gpu-put, ring and resident: H2D of the check's big tensor against the pinned copy peak measured
                in the same process
  6. memcheck   gpu-check again under compute-sanitizer memcheck (--report-api-errors no --leak-check full), when
                compute-sanitizer exists and time is left

Result files in --out (4, always the same names): gpu-first.json (every record, rewritten after each), gpu-first.log
(each step's command, outcome, time and its stderr), summary.txt (one line per step, the CHECK FAILED block, what to
do), sanitizer-memcheck.log (when memcheck ran). Exit status: 0 all passed, 1 a check failed, 2 could not run.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# benches/gpu/run.py (the other sections' driver) for its census expectations and machine description.
_spec = importlib.util.spec_from_file_location("gpu_run", os.path.join(HERE, "run.py"))
gpu_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_run)
census_expectations, describe_exit, machine = gpu_run.census_expectations, gpu_run.describe_exit, gpu_run.machine

MiB, GiB = 1 << 20, 1 << 30
# Per-step time limits in seconds (a GPU machine / the stand-in). The sum of the correctness steps stays well
# under the budget, so a hung step still leaves the summary written.
LIMITS = dict(census=30, check=150, load=90, python=90, speed=75, memcheck=150)
LOAD_TENSORS = 4096
RESERVE = 10  # seconds kept back for writing the summary


class Run:
    def __init__(self, out, budget, stand_in):
        self.t0 = time.time()
        self.out, self.budget, self.stand_in = out, budget, stand_in
        os.makedirs(out, exist_ok=True)
        self.json_path = os.path.join(out, "gpu-first.json")
        self.log = open(os.path.join(out, "gpu-first.log"), "w")
        self.records, self.steps, self.failed = [], [], []
        self.machine = {}

    def left(self):
        return self.budget - (time.time() - self.t0)

    def note(self, text):
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def save(self):
        self.machine["wall_s"] = round(time.time() - self.t0, 1)
        self.machine["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
        tmp = self.json_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(machine=self.machine, records=self.records), f, indent=1)
        os.replace(tmp, self.json_path)

    def add(self, rec, **extra):
        rec.update(extra)
        self.records.append(rec)
        self.save()
        return rec

    def proc(self, step, cmd, env, limit):
        """One process under min(limit, time left): its last stdout line is its JSON record. Never raises."""
        limit = min(limit, self.left() - RESERVE)
        if limit < 5:
            rec = dict(skipped=f"time budget: {self.left():.0f} s left of {self.budget:.0f}", cmd=cmd[-4:])
            self.note(f"[{step}] skipped: {rec['skipped']}")
            return rec
        self.note(f"[{step}] $ {' '.join(str(c) for c in cmd)}   (limit {limit:.0f} s)")
        t = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            self.log.write(err[-20000:] + "\n")
            rec = dict(failed=f"timed out after {limit:.0f} s", cmd=cmd[-4:], process_s=round(time.time() - t, 1))
            self.note(f"[{step}] TIMED OUT after {limit:.0f} s")
            return rec
        except OSError as e:
            self.note(f"[{step}] could not start: {e}")
            return dict(failed=f"could not start: {e}", cmd=cmd[-4:])
        secs = round(time.time() - t, 2)
        self.log.write(p.stderr[-20000:] + ("\n" if p.stderr else ""))
        out = p.stdout.strip()
        try:
            rec = json.loads(out.splitlines()[-1]) if out else None
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError:
            rec = None
        if p.returncode != 0 or rec is None:
            tail = (p.stderr.strip() or out)[-1500:]
            why = describe_exit(p.returncode) + (f": {tail}" if tail else " with no output")
            self.note(f"[{step}] FAILED in {secs} s: {why[:400]}")
            return dict(failed=why, rc=p.returncode, cmd=cmd[-4:], process_s=secs)
        rec["process_s"] = secs
        self.note(f"[{step}] {rec.get('outcome') or ('skipped: ' + rec['skipped'] if 'skipped' in rec else 'done')} "
                  f"in {secs} s")
        return rec

    def verdict(self, step, ok, detail):
        self.steps.append((step, ok, detail))
        if ok is False:
            self.failed.append(f"{step}: {detail}")


def main():
    argv = sys.argv[1:]
    # The last occurrence wins (run.sh --dry-run passes defaults before the caller's arguments).
    opt = lambda k, d: argv[len(argv) - 1 - argv[::-1].index(k) + 1] if k in argv[:-1] else d  # noqa: E731
    exe = os.path.abspath(opt("--bench", ""))
    out = os.path.abspath(opt("--out", os.path.join(ROOT, "bench-out", "gpu-first")))
    budget = float(opt("--budget", "400"))
    stand_in = opt("--stand-in", None)
    data = os.path.abspath(opt("--data", os.path.join(ROOT, "bench-out", "gpu-data")))
    if not os.path.exists(exe):
        print(f"first.py: no benchmark driver at {exe} (bash benches/gpu/run.sh build)", file=sys.stderr)
        return 2
    r = Run(out, budget, stand_in)
    cdir = os.path.join(data, "check")
    os.makedirs(cdir, exist_ok=True)
    env = dict(os.environ)
    if stand_in:
        env["LD_LIBRARY_PATH"] = os.path.abspath(stand_in) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    big = 64 * MiB + 3 if stand_in else 4 * GiB + 3 * MiB + 1  # the check's big tensor, put again for speed
    r.machine = machine(stand_in)
    r.machine.update(budget_s=budget, plan="first", gib=round(big / GiB, 3), reps=1, command="python3 benches/gpu/first.py " + " ".join(argv),
                     stand_in_mode=("deferred" if env.get("STAND_IN_DEFERRED", "0") not in ("", "0") else "immediate")
                     if stand_in else None, carry_manifest=carried_manifest(exe))
    r.save()
    r.note(f"first GPU run: budget {budget:.0f} s, out {out}, {'STAND-IN ' + r.machine['stand_in_mode'] if stand_in else r.machine['gpu']}")

    # 1. census
    base = r.add(r.proc("census", [exe, "gpu-census"], env, LIMITS["census"]), section="check", visible="(unset)")
    ok = "failed" not in base and "skipped" not in base and (base.get("cuda") or {}).get("available")
    r.verdict("census", bool(ok), f"cuda {(base.get('cuda') or {}).get('status')}, "
              f"{(base.get('cuda') or {}).get('count')} device(s)" if "cuda" in base else base.get("failed") or base.get("skipped"))
    uuid = ((base.get("devices") or [{}])[0]).get("uuid") or "GPU-00000000-0000-0000-0000-000000000000"
    for label, value in (("empty", ""), ("uuid", uuid), ("out-of-range", "99")):
        c = r.proc(f"census CUDA_VISIBLE_DEVICES={value!r}", [exe, "gpu-census"], dict(env, CUDA_VISIBLE_DEVICES=value),
                   LIMITS["census"])
        good = "failed" not in c and "skipped" not in c and "cuda" in c and census_expectations(base, value)(c)
        r.add(c, section="check", visible=label, ok=good)
        r.verdict(f"census CUDA_VISIBLE_DEVICES {label}", good, (c.get("cuda") or {}).get("status") or c.get("failed"))

    # 2. gpu-check
    c = r.add(r.proc("check", [exe, "gpu-check", cdir, str(big)], env, LIMITS["check"]), section="check")
    r.verdict("gpu-check", c.get("outcome") == "passed",
              f"{len(c.get('checks', []))} checks passed" if c.get("outcome") == "passed" else failures(c))

    # 3. the load check
    c = r.add(r.proc("load", [exe, "gpu-load-check", cdir, str(LOAD_TENSORS)], env, LIMITS["load"]), section="check")
    passed = c.get("outcome") == "passed"
    detail = next((x.get("detail") for x in c.get("checks", []) if x.get("name", "").startswith("load-every")), None)
    r.verdict("gpu-load-check", passed, detail if passed else failures(c))

    # 4. the Python consumers
    lib = os.path.join(os.path.dirname(exe), "libhostfirst.so")
    pyenv = dict(env, HOSTFIRST_LIBRARY=lib, PYTHONPATH=os.path.join(ROOT, "bindings", "python"))
    for fw in ("numpy", "torch", "jax"):
        pyexe = os.environ.get("HOSTFIRST_CHECK_PYTHON", sys.executable)
        c = r.add(r.proc(f"python {fw}", [pyexe, os.path.join(HERE, "check_py.py"), fw, cdir], pyenv, LIMITS["python"]),
                  section="check")
        if "skipped" in c and "op" in c:
            r.verdict(f"python {fw}", None, f"skipped: {c['skipped']}")
        else:
            r.verdict(f"python {fw}", c.get("outcome") == "passed",
                      f"{len(c.get('checks', []))} checks passed" if c.get("outcome") == "passed" else failures(c))

    if r.failed:
        r.note("CHECK FAILED:\n  " + "\n  ".join(str(x)[:600] for x in r.failed))
        r.add(dict(op="speed", skipped="a check failed: no speed measured over bytes that may be wrong"), section="speed")
        r.verdict("speed", None, "skipped: a check failed")
    else:
        # 5. speed: H2D against the pinned peak in the same process, ring then resident.
        path = os.path.join(cdir, f"check-{big}.safetensors")
        for mode in ("ring", "resident"):
            c = r.add(r.proc(f"speed {mode}", [exe, "gpu-put", path, "t", "0", mode, "3", "0", "1"], env, LIMITS["speed"]),
                      section="speed", cache="warm")
            ok = "failed" not in c and "skipped" not in c and c.get("verified") is not False
            r.verdict(f"speed {mode}", ok if "skipped" not in c else None,
                      f"first {c['gbps_first']:.2f} GB/s, best {c['gbps_best']:.2f} GB/s, pinned peak "
                      f"{c['ceiling_gbps_best']:.2f} GB/s (best/peak {c['ratio_best_to_ceiling']:.2f}x), verified "
                      f"{c.get('verified')}" if ok and "gbps_best" in c else c.get("failed") or c.get("skipped"))
            if not ok and "skipped" not in c:
                r.failed.append(f"speed {mode}: {c.get('failed') or 'the bytes put differ from the file'}")

    # 6. memcheck, when there is time left.
    cs = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
    if stand_in or not cs:
        r.add(dict(op="sanitizer", impl="compute-sanitizer-memcheck", tool="memcheck",
                   skipped="stand-in driver" if stand_in else "compute-sanitizer not found"), section="check")
        r.verdict("memcheck", None, "skipped: " + ("stand-in driver" if stand_in else "compute-sanitizer not found"))
    elif r.left() - RESERVE < 60:
        r.add(dict(op="sanitizer", impl="compute-sanitizer-memcheck", tool="memcheck",
                   skipped=f"time budget: {r.left():.0f} s left"), section="check")
        r.verdict("memcheck", None, f"skipped: {r.left():.0f} s left")
    else:
        log = os.path.join(out, "sanitizer-memcheck.log")
        cmd = [cs, "--tool", "memcheck", "--report-api-errors", "no", "--leak-check", "full", "--error-exitcode", "97",
               "--log-file", log, exe, "gpu-check", cdir, str(16 * MiB + 1), "--skip", "forked-child"]
        c = r.proc("memcheck", cmd, env, LIMITS["memcheck"])
        summary = ""
        if os.path.exists(log):
            lines = [x for x in open(log, errors="replace") if "ERROR SUMMARY" in x]
            summary = lines[-1].strip() if lines else ""
        c = r.add(dict(op="sanitizer", impl="compute-sanitizer-memcheck", tool="memcheck",
                       sanitizer_summary=summary, **c), section="check")
        ok = c.get("outcome") == "passed" and "0 errors" in summary
        if str(c.get("failed", "")).startswith("timed out"):
            # Inconclusive, not a failure: what it checked so far is in its log.
            r.verdict("memcheck", None, f"inconclusive: {c['failed']} ({summary or 'no summary yet'})")
        else:
            r.verdict("memcheck", ok, summary or c.get("failed") or c.get("skipped"))
            if not ok and "skipped" not in c:
                r.note(f"CHECK FAILED:\n  compute-sanitizer memcheck: {summary or c.get('failed')}")

    write_summary(r)
    r.log.close()
    return 1 if r.failed else 0


def failures(rec):
    """What failed in a record: each failed check as `name: error`, or why the process failed or was skipped."""
    bad = [f"{c.get('name')}: {c.get('error')}" for c in rec.get("checks", []) if not c.get("ok")]
    return "; ".join(bad) if bad else rec.get("failed") or rec.get("skipped") or "no outcome"


def carried_manifest(exe):
    p = os.path.join(os.path.dirname(exe), "manifest")
    try:
        return dict(line.strip().split("=", 1) for line in open(p) if "=" in line)
    except OSError:
        return None


def write_summary(r):
    lines = [f"hostfirst first GPU run: {'STAND-IN DRY RUN (not a GPU) ' if r.stand_in else ''}"
             f"{r.machine.get('gpu')}, git {r.machine.get('git')}, {time.time() - r.t0:.0f} s of {r.budget:.0f}", ""]
    for step, ok, detail in r.steps:
        mark = "PASS" if ok is True else "FAIL" if ok is False else "SKIP"
        lines.append(f"{mark}  {step}: {str(detail)[:300]}")
    lines.append("")
    if r.failed:
        lines.append("CHECK FAILED:")
        lines += [f"  {str(x)[:600]}" for x in r.failed]
        lines.append("")
        lines.append("What to do: the failing check's record in gpu-first.json (its 'error') and its stderr in gpu-first.log")
        lines.append("say what differed; record the failure in BENCHMARKS.md and benches/gpu/README.md as it is, fix it")
        lines.append("here against the stand-in (a knob that reproduces it), and run this same call again.")
    else:
        lines.append("ALL CHECKS PASSED" + (" (speed measured)" if any(s[0].startswith("speed") and s[1] for s in r.steps) else ""))
    with open(os.path.join(r.out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
