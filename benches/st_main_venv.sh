#!/usr/bin/env bash
# Makes, once, target/st-main-venv: a venv whose safetensors is built by maturin from its main branch, from
# $SAFETENSORS_SRC (a checkout of github.com/huggingface/safetensors; default: cloned into target/st-main-src;
# its code is never part of this repository), with numpy, ml_dtypes and jax[cpu] beside it (a venv that
# already imports safetensors and numpy is kept as it is). Prints the venv's python. Used by
# benches/python_vs_safetensors.sh and benches/page_cache.sh.
#   bash benches/st_main_venv.sh [PYTHON]      (PYTHON: the interpreter the venv is made from; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
py="${1:-python3}"
venv="target/st-main-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import safetensors, numpy" 2>/dev/null; then
    src="${SAFETENSORS_SRC:-}"
    if [ -z "$src" ]; then
        src="$root/target/st-main-src"
        [ -d "$src" ] || git clone -q --depth 1 https://github.com/huggingface/safetensors "$src" >&2
    fi
    "$py" -m venv "$venv" >&2
    "$venv/bin/pip" install -q --disable-pip-version-check maturin numpy ml_dtypes "jax[cpu]" >&2
    # maturin builds outside this workspace's Cargo.toml (a copy when the checkout lies under it)
    build_src="$src"
    case "$(realpath "$src")" in "$root"/*) build_src="$(mktemp -d)"; cp -r "$src/." "$build_src" ;; esac
    (cd "$build_src/bindings/python" && CARGO_TARGET_DIR="$root/target/st-main-build" nice \
        "$root/$venv/bin/maturin" build --release -q -i "$root/$venv/bin/python" -o "$root/target/st-main-wheels") >&2
    "$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
        target/st-main-wheels/safetensors-*.whl >&2
fi
echo "$root/$venv/bin/python"
