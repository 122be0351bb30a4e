#!/usr/bin/env bash
# Cold whole-file loads under each page-cache policy (issue 45, points 1 and 2) beside fio's direct sequential
# read of the same file (io_uring, 4 MiB blocks, queue depth 16), in the same run. Not part of the test suite.
#   bash benches/page_cache.sh [--mib M] [--reps N] [--dir DIR] [--profile release|debug]
# Defaults: a 2048 MiB file under target/ (a real disk, not tmpfs), 3 repetitions, the release build. Before
# every timed read the file is written back and dropped from the cache honestly (fsync + POSIX_FADV_DONTNEED,
# checked with fincore: a run whose file is still cached is reported as such). After each load, the share of
# the file left in the page cache (fincore) is printed beside its throughput.
# Runs under `flock /work/notes/bench.lock` when that lock exists (benchmarks of parallel engineers never overlap).
set -euo pipefail
cd "$(dirname "$0")/.."
lock=/work/notes/bench.lock
if [ -z "${HOSTFIRST_BENCH_LOCKED:-}" ] && [ -d "$(dirname "$lock")" ] && command -v flock >/dev/null; then
    HOSTFIRST_BENCH_LOCKED=1 exec flock "$lock" bash "$0" "$@"
fi
mib=2048 reps=3 dir="target/page-cache-bench" profile=release
while [ $# -gt 0 ]; do
    case "$1" in
        --mib) mib="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        *) echo "usage: bash benches/page_cache.sh [--mib M] [--reps N] [--dir DIR] [--profile release|debug]" >&2; exit 2 ;;
    esac
done
# shellcheck source=scripts/apt.sh
. scripts/apt.sh   # apt_install: waits for another apt run's locks
command -v fio >/dev/null || apt_install fio
command -v fincore >/dev/null || apt_install util-linux
if [ "$profile" = release ]; then cargo build --release --lib --quiet >&2; else cargo build --lib --quiet >&2; fi
lib="$PWD/target/$profile"
cli="$dir/hostfirst"
mkdir -p "$dir"
bash cli/build.sh "$cli" -L"$lib" -Wl,-rpath,"$lib"
file="$dir/cold.safetensors"
fs=$(stat -f -c %T "$dir")
# One U8 tensor of M MiB (incompressible bytes), written once.
if [ "$(stat -c %s "$file" 2>/dev/null || echo 0)" -lt $((mib << 20)) ]; then
    python3 - "$file" "$mib" <<'EOF'
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
fi
evict() {
    python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)' "$file"
}
cached_pct() {  # the share of the file's pages in the page cache now
    fincore -b -n -o RES,SIZE "$file" | awk '{ printf "%.1f", ($2 > 0 ? 100 * $1 / $2 : 0) }'
}
bytes=$(stat -c %s "$file")
echo "file: $file ($bytes bytes, file system $fs, $profile build, $(nproc) CPUs)"
printf "%-6s %-22s %10s %12s\n" rep what "GB/s" "cached after"
for r in $(seq 1 "$reps"); do
    evict
    fio_out=$(fio --name=seq --filename="$file" --rw=read --bs=4M --iodepth=16 --ioengine=io_uring --direct=1 \
        --readonly --output-format=json)
    fio_gbs=$(printf '%s' "$fio_out" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.3f" % (j["jobs"][0]["read"]["bw_bytes"]/1e9))')
    printf "%-6s %-22s %10s %12s\n" "$r" "fio direct seq (QD16)" "$fio_gbs" "$(cached_pct) %"
    for policy in keep drop bypass; do
        evict
        before=$(cached_pct)
        out=$("$cli" load "$file" --rule '*=cpu' --page-cache "$policy" --json)
        secs=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
        gbs=$(python3 -c "print('%.3f' % ($bytes / $secs / 1e9))")
        printf "%-6s %-22s %10s %12s%s\n" "$r" "hostfirst load $policy" "$gbs" "$(cached_pct) %" \
            "$([ "$before" = "0.0" ] || echo "  (not cold: $before % cached before)")"
    done
done
