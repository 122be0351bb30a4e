#!/usr/bin/env bash
# Cold whole-file loads under each page-cache policy (issue 45, points 1 and 2; issue 44, point 2) beside fio's
# direct sequential read of the same file (io_uring, 4 MiB blocks, queue depth 16) and beside safetensors 0.8
# (pip) and safetensors' main branch (built from source), in the same run. Not part of the test suite.
#   bash benches/page_cache.sh [--mib M] [--reps N] [--dir DIR] [--profile release|debug]
#                              [--safetensors-main PYTHON | --no-safetensors-main] [--drop-caches]
# Defaults: a 2048 MiB file under target/ (a real disk, not tmpfs), 3 repetitions, the release build.
# Rows of each repetition, in an order rotated from one repetition to the next (none always runs first):
#   fio direct seq (QD16)     fio --rw=read --bs=4M --iodepth=16 --ioengine=io_uring --direct=1: the disk's limit
#   dd buffered 8M            dd bs=8M into one reused buffer: the page cache's own cold sequential read, the
#                             floor of any buffered load here (no destination memory to fault in)
#   hostfirst load P          the C CLI's `load FILE --rule '*=cpu' --page-cache P`, P = keep, drop, bypass (its
#                             own clock: open, plan, load; the process start is outside it)
#   hostfirst.numpy P         hostfirst.numpy.load_file(FILE, page_cache=P), P = keep, bypass (a fresh Python;
#                             the clock around the call)
#   safetensors 0.8 numpy     safetensors.numpy.load_file(FILE) (pip's 0.8; a fresh Python; the clock around it)
#   safetensors main numpy    the same with safetensors built from its main branch: the venv
#                             benches/python_vs_safetensors.sh uses (target/st-main-venv, made once by
#                             benches/st_main_venv.sh: $SAFETENSORS_SRC or a clone), or the Python given with
#                             --safetensors-main PYTHON; --no-safetensors-main leaves the row out
# Before every timed read the file is written back and dropped from the cache honestly (fsync +
# POSIX_FADV_DONTNEED; with --drop-caches, as root, `echo 1 > /proc/sys/vm/drop_caches` as well: it empties the
# whole machine's cache, which slows whoever shares it), then checked with fincore: a row whose file was still
# cached says so. After each row the share of the file left in the page cache is printed.
# The summary gives each row's median GB/s and the median of its per-repetition ratios to fio's figure.
# The Python peers live in a venv of this script's own under target/ (numpy, safetensors 0.8), made once.
# Runs under `flock /work/notes/bench.lock` when that lock exists (benchmarks of parallel engineers never overlap).
set -euo pipefail
cd "$(dirname "$0")/.."
lock=/work/notes/bench.lock
if [ -z "${HOSTFIRST_BENCH_LOCKED:-}" ] && [ -d "$(dirname "$lock")" ] && command -v flock >/dev/null; then
    HOSTFIRST_BENCH_LOCKED=1 exec flock "$lock" bash "$0" "$@"
fi
mib=2048 reps=3 dir="target/page-cache-bench" profile=release st_main="" no_main=0 drop_all=0
while [ $# -gt 0 ]; do
    case "$1" in
        --mib) mib="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        --safetensors-main) st_main="$2"; shift 2 ;;
        --no-safetensors-main) no_main=1; shift ;;
        --drop-caches) drop_all=1; shift ;;
        *) echo "usage: bash benches/page_cache.sh [--mib M] [--reps N] [--dir DIR] [--profile release|debug]" \
                "[--safetensors-main PYTHON | --no-safetensors-main] [--drop-caches]" >&2; exit 2 ;;
    esac
done
# shellcheck source=scripts/apt.sh
. scripts/apt.sh   # apt_install: waits for another apt run's locks
command -v fio >/dev/null || apt_install fio
command -v fincore >/dev/null || apt_install util-linux
venv="target/page-cache-venv"
want="numpy safetensors>=0.8,<0.9"
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null 2>&1 || { apt_install python3-venv; rm -rf "$venv"; python3 -m venv "$venv"; }
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $want >&2
    echo "$want" > "$venv/.installed"
fi
py="$venv/bin/python"
# safetensors' main branch: the shared venv of benches/python_vs_safetensors.sh, made once.
if [ -z "$st_main" ] && [ "$no_main" = 0 ]; then st_main=$(bash benches/st_main_venv.sh); fi
if [ "$profile" = release ]; then cargo build --release --lib --quiet >&2; else cargo build --lib --quiet >&2; fi
lib="$PWD/target/$profile"
cli="$dir/hostfirst"
mkdir -p "$dir"
bash cli/build.sh "$cli" -L"$lib" -Wl,-rpath,"$lib"
file="$dir/cold-$mib.safetensors"
fs=$(stat -f -c %T "$dir")
# One U8 tensor of M MiB (incompressible bytes), written once.
if [ ! -s "$file" ]; then
    python3 - "$file.part" "$mib" <<'EOF'
import json, os, struct, sys
path, mib = sys.argv[1], int(sys.argv[2])
n = mib << 20
h = json.dumps({"data": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in range(mib):
        f.write(os.urandom(1 << 20))
EOF
    mv "$file.part" "$file"
fi
evict() {
    python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)' "$file"
    if [ "$drop_all" = 1 ]; then sync "$file"; echo 1 > /proc/sys/vm/drop_caches; fi
}
cached_pct() {  # the share of the file's pages in the page cache now
    fincore -b -n -o RES,SIZE "$file" | awk '{ printf "%.1f", ($2 > 0 ? 100 * $1 / $2 : 0) }'
}
# A Python load in a fresh process: prints its seconds (the clock around the call only).
py_load() {  # py_load PYTHON WHAT [POLICY]
    HOSTFIRST_LIBRARY="$lib/libhostfirst.so" PYTHONPATH="$PWD/bindings/python" "$1" - "$file" "$2" "${3:-}" <<'EOF'
import sys, time, warnings
path, what, policy = sys.argv[1], sys.argv[2], sys.argv[3]
warnings.simplefilter("ignore")  # the ctypes fallback's warning, where the native extension is not built
if what == "safetensors":
    from safetensors.numpy import load_file
    t = time.perf_counter(); out = load_file(path); s = time.perf_counter() - t
else:
    from hostfirst.numpy import load_file
    t = time.perf_counter(); out = load_file(path, page_cache=policy); s = time.perf_counter() - t
assert sum(a.nbytes for a in out.values()) > 0
print("%.6f" % s)
EOF
}
bytes=$(stat -c %s "$file")
rows=("fio" "dd" "load keep" "load drop" "load bypass" "numpy keep" "numpy bypass" "st08")
[ -n "$st_main" ] && rows+=("stmain")
label() {
    case "$1" in
        fio) echo "fio direct seq (QD16)" ;; dd) echo "dd buffered 8M" ;;
        "load "*) echo "hostfirst load ${1#load }" ;; "numpy "*) echo "hostfirst.numpy ${1#numpy }" ;;
        st08) echo "safetensors 0.8 numpy" ;; stmain) echo "safetensors main numpy" ;;
    esac
}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "file: $file ($bytes bytes, file system $fs, $profile build, $(nproc) CPUs, $(uname -r))"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "safetensors: $("$py" -c 'import safetensors; print(safetensors.__version__)')${st_main:+; main: $("$st_main" -c 'import safetensors; print(safetensors.__version__)')}"
echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- core src || echo ' (with local changes)')"
printf "%-4s %-26s %8s %14s\n" rep what "GB/s" "cached after"
n=${#rows[@]}
for r in $(seq 1 "$reps"); do
    for k in $(seq 0 $((n - 1))); do
        row=${rows[$(((k + r - 1) % n))]}
        evict
        before=$(cached_pct)
        case "$row" in
            fio)
                secs=$(fio --name=seq --filename="$file" --rw=read --bs=4M --iodepth=16 --ioengine=io_uring --direct=1 \
                    --readonly --output-format=json | python3 -c 'import json,sys; r=json.load(sys.stdin)["jobs"][0]["read"]; print(r["io_bytes"]/r["bw_bytes"])') ;;
            dd)
                t0=$(date +%s.%N); dd if="$file" of=/dev/null bs=8M status=none; t1=$(date +%s.%N)
                secs=$(python3 -c "print($t1 - $t0)") ;;
            "load "*)
                secs=$("$cli" load "$file" --rule '*=cpu' --page-cache "${row#load }" --json \
                    | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])') ;;
            "numpy "*) secs=$(py_load "$py" hostfirst "${row#numpy }") ;;
            st08) secs=$(py_load "$py" safetensors) ;;
            stmain) secs=$(py_load "$st_main" safetensors) ;;
        esac
        gbs=$(python3 -c "print('%.3f' % ($bytes / $secs / 1e9))")
        echo "$r|$row|$gbs" >> "$results"
        printf "%-4s %-26s %8s %12s %%%s\n" "$r" "$(label "$row")" "$gbs" "$(cached_pct)" \
            "$([ "$before" = "0.0" ] || echo "  (not cold: $before % cached before)")"
    done
done
echo
echo "summary over $reps repetitions (median GB/s; median of the per-repetition ratios to fio's GB/s):"
python3 - "$results" "${rows[@]}" <<'EOF'
import statistics, sys
path, rows = sys.argv[1], sys.argv[2:]
got = {}
for line in open(path):
    r, row, g = line.strip().split("|")
    got.setdefault(row, {})[int(r)] = float(g)
fio = got.get("fio", {})
for row in rows:
    v = got.get(row, {})
    ratios = [v[r] / fio[r] for r in v if r in fio and fio[r] > 0]
    print("  %-16s %7.3f GB/s  %5.2fx fio  (%s)" % (row, statistics.median(v.values()), statistics.median(ratios),
          ", ".join("%.2f" % x for x in ratios)))
EOF
