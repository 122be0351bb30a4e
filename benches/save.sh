#!/usr/bin/env bash
# Saving safetensors files (issue 36): hostfirst's writer beside safetensors.numpy.save_file and fio's sequential
# write limit, in the same run. Not part of the test suite. Writes benches/results/save.json and the section of
# BENCHMARKS.md (through benches/report.py).
#   bash benches/save.sh [--reps N] [--mib M] [--rss-mib R] [--dir DIR]
# Runs under `flock /work/notes/bench.lock` when that lock exists (benchmarks of parallel engineers never overlap).
set -euo pipefail
cd "$(dirname "$0")/.."
lock=/work/notes/bench.lock
if [ -z "${HOSTFIRST_BENCH_LOCKED:-}" ] && [ -d "$(dirname "$lock")" ] && command -v flock >/dev/null; then
    HOSTFIRST_BENCH_LOCKED=1 exec flock "$lock" bash "$0" "$@"
fi
# fio: the disk's sequential write limit, measured in the same run.
# shellcheck source=scripts/apt.sh
. scripts/apt.sh   # apt_install: waits for another apt run's locks
command -v fio >/dev/null || apt_install fio
# numpy and the peer in a venv of the benchmark's own (the system Python is never pip-installed into).
venv="target/save-bench-venv"
want="numpy safetensors"
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null 2>&1 || {
        apt_install python3-venv
        rm -rf "$venv"
        python3 -m venv "$venv"
    }
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $want >&2
    echo "$want" > "$venv/.installed"
fi
# hostfirst: the release library of this checkout and its Python package from the source tree.
cargo build --release --lib --quiet >&2
# The stand-in CUDA driver (tests/cuda_stub) for the CUDA-source case: device memory simulated in host memory.
stand_in="$PWD/target/save-bench-stand-in"
mkdir -p "$stand_in"
cc -shared -fPIC -std=c11 -O2 -Wl,-soname,libcuda.so.1 -o "$stand_in/libcuda.so.1" tests/cuda_stub/stand_in_cuda.c -lpthread
ln -sf libcuda.so.1 "$stand_in/libcuda.so"
ln -sf libcuda.so.1 "$stand_in/libnvidia-ml.so.1"
export HOSTFIRST_LIBRARY="$PWD/target/release/libhostfirst.so" PYTHONPATH="$PWD/bindings/python" \
    HOSTFIRST_STAND_IN_DIR="$stand_in"
"$venv/bin/python" benches/save.py "$@"
# BENCHMARKS.md from the committed records and this section (benches/report.py includes save.json).
"$venv/bin/python" benches/report.py
