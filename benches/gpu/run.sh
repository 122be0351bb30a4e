#!/usr/bin/env bash
# The GPU section of the benchmarks (issue 6): hostfirst against torch / JAX / safetensors on a real GPU, in the
# same run. Not a test; the test suite never runs it. benches/gpu/README.md has the whole procedure.
#
#   bash benches/gpu/run.sh build              here (needs Rust): builds the benchmark driver and libhostfirst.so
#                                              into .gpu-carry/ (git-ignored), the folder the device tool carries to
#                                              the GPU machine, strips their debug info, and writes a manifest: the
#                                              sha256 of each (taken after stripping), mode, the newest glibc they
#                                              need, and what travels (tracked + untracked files + the carry), which
#                                              must stay <= 40 MiB (the device tool carries 64 MiB at most; else it
#                                              fails here, before any device is asked)
#   bash benches/gpu/run.sh first --out DIR    on the GPU machine: the first GPU run (benches/gpu/first.py: census,
#                                              checks, load check, Python checks, then speed, then memcheck), one
#                                              call within --budget (default 400 s); benches/gpu/README.md
#   bash benches/gpu/run.sh --dry-run first    here: exactly that, on the stand-in driver (run by the test command)
#   bash benches/gpu/run.sh [ARGS]             on the GPU machine: checks the carried driver (checksum, executable
#                                              bit - restored when the carry dropped it - and glibc), then
#                                              benches/gpu/run.py with it (ARGS: --gib 8 --reps 5 --budget 480
#                                              --only put,cold,peers,gather,seeds --out DIR)
#   bash benches/gpu/run.sh check              the checks alone (what a GPU machine does before running)
#   bash benches/gpu/run.sh --dry-run [ARGS]   here, without a GPU: the same against the stand-in CUDA driver
#                                              (tests/cuda_stub), a 256 MiB file, torch/JAX peers skipped; it proves
#                                              the harness runs, its numbers are no GPU figures. `--dry-run --only
#                                              check` is run by the test command (tests/it/gpu_harness.rs) and exits
#                                              non-zero when a check fails
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=${HOSTFIRST_GPU_CARRY:-.gpu-carry} # the tests point it elsewhere
if [ "${1:-}" = build ]; then
    # The driver, and the C library the Python checks (benches/gpu/check_py.py) load through HOSTFIRST_LIBRARY.
    exe=$(cargo build --release --lib --bench hostfirst-bench --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hostfirst-bench":
        print(m["executable"])' | tail -n 1)
    [ -n "$exe" ] || { echo "run.sh: the build failed (cargo build --release --lib --bench hostfirst-bench)" >&2; exit 1; }
    mkdir -p "$carry"
    rm -f "$carry/hostfirst-bench" "$carry/libhostfirst.so"
    cp "$exe" "$carry/hostfirst-bench"
    chmod 755 "$carry/hostfirst-bench"
    [ -f target/release/libhostfirst.so ] || { echo "run.sh: no target/release/libhostfirst.so after the build" >&2; exit 1; }
    cp target/release/libhostfirst.so "$carry/libhostfirst.so"
    # The release profile keeps full debug info (33 MB and 28 MB): it stays here; the carry gets the code and
    # the symbol tables (backtraces keep their names), about 2 MB each. Checksums are taken after this.
    objcopy --strip-debug "$carry/hostfirst-bench"
    objcopy --strip-debug "$carry/libhostfirst.so"
    git rev-parse --short HEAD > "$carry/git-rev"
    if ! git diff --quiet HEAD -- . ':!.gpu-carry' 2>/dev/null; then echo "+uncommitted" >> "$carry/git-rev"; fi
    # What the device tool carries: the tracked files, untracked files git does not ignore, and the carry.
    travels=$(python3 -c '
import os, subprocess, sys
files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True,
                       check=True).stdout.split(b"\0")
n = sum(os.path.getsize(f) for f in files if f and os.path.isfile(f))
for d, _, fs in os.walk(sys.argv[1]):
    n += sum(os.path.getsize(os.path.join(d, f)) for f in fs)
print(n)' "$carry")
    {
        echo "sha256=$(sha256sum "$carry/hostfirst-bench" | cut -d' ' -f1)"
        echo "lib_sha256=$(sha256sum "$carry/libhostfirst.so" | cut -d' ' -f1)"
        echo "mode=755"
        echo "glibc=$(bash scripts/glibc-needed.sh "$carry/hostfirst-bench")"
        echo "lib_glibc=$(bash scripts/glibc-needed.sh "$carry/libhostfirst.so")"
        echo "travels_bytes=$travels"
    } > "$carry/manifest"
    echo "built $carry/hostfirst-bench ($(stat -c %s "$carry/hostfirst-bench") B) and $carry/libhostfirst.so" \
        "($(stat -c %s "$carry/libhostfirst.so") B), stripped, from $(head -n 1 "$carry/git-rev");" \
        "needs glibc $(sed -n 's/^glibc=//p' "$carry/manifest") or newer (this machine: $(getconf GNU_LIBC_VERSION))"
    limit=$((40 << 20))
    echo "what travels (tracked and untracked files + $carry): $travels B ($((travels >> 20)) MiB; the limit is 40 MiB)"
    if [ "$travels" -gt "$limit" ]; then
        echo "run.sh: what travels is $travels B, over 40 MiB: remove large untracked files (git status) or shrink the" \
            "carry before asking for the device" >&2
        exit 1
    fi
    exit 0
fi

# Checks the carried driver before anything runs, and prints the path to run: the checksum against the manifest
# (a truncated or stale carry), the executable bit (a carry may drop mode bits: restored, or the file copied to a
# temporary folder where it can be), and that this machine's glibc is at least the one the build needs.
checked_bench() {
    local exe="$carry/hostfirst-bench" want sum need have
    [ -f "$exe" ] || { echo "run.sh: no $exe: run 'bash benches/gpu/run.sh build' where Rust is, and carry $carry" >&2; return 1; }
    if [ -f "$carry/manifest" ]; then
        want=$(sed -n 's/^sha256=//p' "$carry/manifest")
        sum=$(sha256sum "$exe" | cut -d' ' -f1)
        [ "$sum" = "$want" ] || { echo "run.sh: $exe does not match $carry/manifest (sha256 $sum, built $want): carry it again" >&2; return 1; }
        want=$(sed -n 's/^lib_sha256=//p' "$carry/manifest")
        if [ -n "$want" ]; then
            sum=$(sha256sum "$carry/libhostfirst.so" 2>/dev/null | cut -d' ' -f1)
            [ "$sum" = "$want" ] || { echo "run.sh: $carry/libhostfirst.so does not match $carry/manifest (sha256 ${sum:-missing}, built $want): carry it again" >&2; return 1; }
        fi
        need=$(sed -n 's/^glibc=//p' "$carry/manifest")
        have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
        if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -t. -k1,1n -k2,2n | tail -n 1)" != "$have" ]; then
            echo "run.sh: $exe needs glibc $need, this machine has $have: build it on an older system (or with cargo-zigbuild for that glibc)" >&2
            return 1
        fi
    else
        echo "run.sh: no $carry/manifest (built by an older run.sh): the checksum and glibc are not checked" >&2
    fi
    if [ ! -x "$exe" ]; then
        echo "run.sh: $exe lost its executable bit in the carry; restoring it" >&2
        if ! chmod u+x "$exe" 2>/dev/null; then
            local tmp
            tmp=$(mktemp -d)
            cp "$exe" "$tmp/hostfirst-bench"
            chmod 755 "$tmp/hostfirst-bench"
            exe="$tmp/hostfirst-bench"
        fi
    fi
    echo "$exe"
}
if [ "${1:-}" = --dry-run ]; then
    shift
    bash "$0" build
    dir=target/gpu-dry-run/stand-in
    mkdir -p "$dir"
    # Built aside and moved into place: dry runs at the same time never load a half-written library.
    cc -shared -fPIC -std=c11 -O1 -Wl,-soname,libcuda.so.1 -o "$dir/libcuda.so.1.$$" tests/cuda_stub/stand_in_cuda.c -lpthread
    mv -f "$dir/libcuda.so.1.$$" "$dir/libcuda.so.1"
    [ -L "$dir/libcuda.so" ] || ln -sf libcuda.so.1 "$dir/libcuda.so" 2>/dev/null || true
    [ -L "$dir/libnvidia-ml.so.1" ] || ln -sf libcuda.so.1 "$dir/libnvidia-ml.so.1" 2>/dev/null || true
    exe=$(checked_bench)
    if [ "${1:-}" = first ]; then
        shift
        # Exactly the device's call (first.py), against the stand-in (nothing installed: the Python checks
        # without numpy, torch or JAX are skipped with the reason): its own data folder, --out as given.
        PYTHONUNBUFFERED=1 exec python3 benches/gpu/first.py --bench "$exe" --stand-in "$dir" \
            --data target/gpu-dry-run/first-data "$@"
    fi
    # numpy writes the token file; the check section needs none (its Python checks say "skipped" without it).
    case " $* " in
        *" --only check "*) ;;
        *) python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q numpy safetensors \
            || echo "run.sh: numpy/safetensors could not be installed; sections needing them fail" >&2 ;;
    esac
    out=target/gpu-dry-run/$(date -u +%Y%m%dT%H%M%SZ)
    python3 benches/gpu/run.py --bench "$exe" --stand-in "$dir" \
        --data target/gpu-dry-run/data --out "$out" "$@"
    exec python3 benches/gpu/report_gpu.py "$out"/gpu-*.json
fi
exe=$(checked_bench)
if [ "${1:-}" = check ]; then
    echo "$exe"
    exit 0
fi
HOSTFIRST_GIT=$(tr '\n' ' ' < "$carry/git-rev" 2>/dev/null | sed 's/ $//' || echo '?')
export HOSTFIRST_GIT
if [ "${1:-}" = first ]; then
    shift
    PYTHONUNBUFFERED=1 exec python3 benches/gpu/first.py --bench "$exe" "$@"
fi
exec python3 benches/gpu/run.py --bench "$exe" "$@"
