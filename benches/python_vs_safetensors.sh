#!/usr/bin/env bash
# BENCHMARKS.md sections 12 and 15 in one command (issue 44): hostfirst's Python drop-in against safetensors 0.8
# (pip) and safetensors' main branch (built from source), one process per library, warm and cold.
#
#   bash benches/python_vs_safetensors.sh [ARGS of benches/python_vs_safetensors.py]
#
# Makes, once, under target/: the release library, the native extension, a venv with safetensors 0.8 + numpy +
# jax[cpu] (target/bench-venv), and a venv with safetensors' main branch built by maturin from
# $SAFETENSORS_SRC (a checkout of github.com/huggingface/safetensors; default: cloned into
# target/st-main-src; its code is never part of this repository) (target/st-main-venv). Then runs
# benches/python_vs_safetensors.py (section 12) and benches/python_calls.py (section 15), whose headers say what
# they measure. Cold rounds drop the page cache with
# /proc/sys/vm/drop_caches where the user may (root), else posix_fadvise(DONTNEED) after fsync.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
py="${PYTHON:-python3}"

nice cargo build --release --lib -q
PYTHON="$py" bash scripts/build-python-native.sh >/dev/null

if [ ! -x target/bench-venv/bin/python ] || ! target/bench-venv/bin/python -c "import safetensors, jax, numpy" 2>/dev/null; then
    "$py" -m venv target/bench-venv
    target/bench-venv/bin/pip install -q --disable-pip-version-check "safetensors==0.8.*" numpy ml_dtypes "jax[cpu]"
fi

if [ ! -x target/st-main-venv/bin/python ] || ! target/st-main-venv/bin/python -c "import safetensors, numpy" 2>/dev/null; then
    src="${SAFETENSORS_SRC:-}"
    if [ -z "$src" ]; then
        src="$root/target/st-main-src"
        [ -d "$src" ] || git clone -q --depth 1 https://github.com/huggingface/safetensors "$src"
    fi
    "$py" -m venv target/st-main-venv
    target/st-main-venv/bin/pip install -q --disable-pip-version-check maturin numpy ml_dtypes "jax[cpu]"
    # maturin builds outside this workspace's Cargo.toml (a copy when the checkout lies under it)
    build_src="$src"
    case "$(realpath "$src")" in "$root"/*) build_src="$(mktemp -d)"; cp -r "$src/." "$build_src" ;; esac
    (cd "$build_src/bindings/python" && CARGO_TARGET_DIR="$root/target/st-main-build" nice \
        "$root/target/st-main-venv/bin/maturin" build --release -q -i "$root/target/st-main-venv/bin/python" \
        -o "$root/target/st-main-wheels")
    target/st-main-venv/bin/pip install -q --disable-pip-version-check --force-reinstall --no-deps target/st-main-wheels/safetensors-*.whl
fi

target/bench-venv/bin/python benches/python_vs_safetensors.py "$@"
# section 15: the per-call costs, one process, warm (safetensors 0.8 beside the package with and without its
# extension)
target/bench-venv/bin/python benches/python_calls.py --tensors 20000 --rounds 5 --no-cffi
