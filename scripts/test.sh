#!/usr/bin/env bash
# The whole hostfirst test suite, on a fresh machine: installs what the tests need when it is missing
# (a C and C++ compiler, binutils, cmake and pkg-config, Python packages), then runs every test:
#   formatting, clippy and every target building; Rust unit and property tests, C ABI programs (-Wall -Wextra -Werror), header checks, the stand-in CUDA
#   driver tests (twice: immediate and deferred), the CLI, the fuzz corpus replay, the install tests (tests/it/install.rs),
#   the ABI check against the committed baseline and the symbol versions (tests/it/abi.rs), the Go binding against
#   the installed library (tests/it/go.rs), the C programs again under valgrind memcheck (tests/it/valgrind.rs),
#   the Python wheel and its tests in fresh venvs (scripts/test-python.sh), and the Windows build under Wine
#   (scripts/test-windows.sh: the zip and the win_amd64 wheel, C programs, CLI, corpus, package consumers; it
#   installs mingw-w64, Wine and Debian's rust-src matching rust-toolchain.toml itself).
set -euo pipefail
cd "$(dirname "$0")/.."

# Every scratch file of the run (Rust unit and integration tests, C programs, pytest's basetemp, Go's work
# folders) goes under target/test-tmp, emptied at the start and removed at the end: the run leaves nothing in the
# machine's /tmp, which may be small or shared between runs. (MPI alone keeps /tmp: tests/it/mpi.rs.)
export TMPDIR="$PWD/target/test-tmp"
rm -rf "$TMPDIR"
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
# Under CI (a clean clone, built once) incremental compilation's caches (about 1 GiB) buy nothing.
# Nor does pip's download cache (JAX and numpy twice, about 1 GiB).
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0 PIP_NO_CACHE_DIR=1; fi
echo "test.sh: disk space before the run:" >&2
df -h . /tmp >&2 || true

have() { command -v "$1" >/dev/null 2>&1; }
# apt_install: apt-get update and install, waiting for another apt run's locks (an upgrade at boot), failing with
# a clear message (scripts/apt.sh, the one apt helper of every script).
# shellcheck source=scripts/apt.sh
. scripts/apt.sh
have cc && have c++ && have nm && have readelf && have cmake && have pkg-config \
    || apt_install gcc g++ binutils cmake pkg-config
have cargo || { echo "test.sh: cargo (Rust) is required" >&2; exit 1; }
# OpenMPI for the MPI shard-on-read example (tests/it/mpi.rs); the library itself never links MPI.
have mpicc && have mpirun || apt_install openmpi-bin libopenmpi-dev
# valgrind: the C programs run again under memcheck (tests/it/valgrind.rs).
have valgrind || apt_install valgrind
# objcopy splits the debug info off the installed library (scripts/install.sh).
have objcopy || apt_install binutils
# libabigail's abidiff: the ABI check against the committed baseline abi/<SONAME>.abi (tests/it/abi.rs).
have abidiff && have abidw || apt_install abigail-tools
# Go (cgo): the Go binding's tests against the installed library (tests/it/go.rs; offline, stdlib only).
have go || apt_install golang-go
# bindfs (FUSE): the per-file read engine on a real user-space file system (tests/it/file_engine.rs, as root).
have bindfs || apt_install bindfs

# The house rules: formatted, clippy-clean on every target, every target (benches included) builds, in both
# crates of the workspace (the C API at the root, the core in core/).
cargo fmt --all --check
cargo clippy --workspace --all-targets --features test-hooks -- -D warnings 2>&1
cargo build --workspace --all-targets 2>&1
cargo bench --no-run 2>&1

# Both crates: the core's unit tests (cargo test -p hostfirst-core), the C API's unit and integration tests.
cargo test --workspace --features test-hooks --no-fail-fast 2>&1

# The CUDA tests again on the deferred stand-in driver: queued work runs only at synchronisation points, and
# only as far as they need, in an order shuffled across streams (tests/cuda_stub/stand_in_cuda.c). Ordering bugs
# the immediate stand-in cannot see fail here. Tests using the stand-in have `cuda` or `stand_in` in their path
# (a test checks that). STAND_IN_SEED picks another shuffle.
STAND_IN_DEFERRED=1 STAND_IN_SEED="${STAND_IN_SEED:-20261201}" \
    cargo test --features test-hooks --no-fail-fast --test it -- cuda stand_in 2>&1
# The GPU harness's dry runs leave their generated data (hundreds of MiB) under target/gpu-dry-run; the later
# phases need none of it, and CI's disk is small.
if [ "${CI:-}" = true ]; then rm -rf target/gpu-dry-run; fi
echo "test.sh: disk space after the Rust tests:" >&2
df -h . >&2 || true

# Python: the manylinux wheel, installed into fresh venvs (numpy 2 with JAX, and numpy 1.26), tested as users get it.
have python3 || apt_install python3 python3-venv
bash scripts/test-python.sh
echo "test.sh: disk space after the Python tests:" >&2
df -h . >&2 || true

# Windows: hostfirst.dll cross-built for x86_64-pc-windows-gnu, packaged, and its tests run under Wine.
bash scripts/test-windows.sh
