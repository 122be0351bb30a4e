#!/usr/bin/env bash
# BENCHMARKS.md sections 12 and 15 in one command (issue 44): hostfirst's Python drop-in against safetensors 0.8
# (pip) and safetensors' main branch (built from source), one process per library, warm and cold.
#
#   bash benches/python_vs_safetensors.sh [ARGS of benches/python_vs_safetensors.py]
#
# Makes, once, under target/: the release library, the native extension, a venv with safetensors 0.8 + numpy +
# jax[cpu] (target/bench-venv), and a venv with safetensors' main branch built by maturin from
# $SAFETENSORS_SRC (a checkout of github.com/huggingface/safetensors; default: cloned into
# target/st-main-src; its code is never part of this repository) (target/st-main-venv, made by
# benches/st_main_venv.sh, which benches/page_cache.sh shares). Then runs
# benches/python_vs_safetensors.py (section 12) and benches/python_calls.py (section 15), whose headers say what
# they measure. Cold rounds drop the page cache with
# /proc/sys/vm/drop_caches where the user may (root), else posix_fadvise(DONTNEED) after fsync.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"

nice cargo build --release --lib -q
PYTHON="$py" bash scripts/build-python-native.sh >/dev/null

if [ ! -x target/bench-venv/bin/python ] || ! target/bench-venv/bin/python -c "import safetensors, jax, numpy" 2>/dev/null; then
    "$py" -m venv target/bench-venv
    target/bench-venv/bin/pip install -q --disable-pip-version-check "safetensors==0.8.*" numpy ml_dtypes "jax[cpu]"
fi

bash benches/st_main_venv.sh "$py" >/dev/null

target/bench-venv/bin/python benches/python_vs_safetensors.py "$@"
# section 15: the per-call costs, one process, warm (safetensors 0.8 beside the package with and without its
# extension)
target/bench-venv/bin/python benches/python_calls.py --tensors 20000 --rounds 5 --no-cffi
