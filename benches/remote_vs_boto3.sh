#!/usr/bin/env bash
# BENCHMARKS.md section 17 in one command (issue 46, point 6): a 256 MiB safetensors object from moto's S3
# server on loopback, hostfirst.numpy.load_file("s3://...") beside boto3's 16-thread download + safetensors'
# load, and beside the server's own ceiling (plain parallel ranged GETs). A benchmark, not a test.
#
#   bash benches/remote_vs_boto3.sh [ARGS of benches/remote_vs_boto3.py, e.g. --rounds 5]
#
# Makes, once, under target/: the release library, the Python package's native extension, and the venv the
# tests use for moto (target/moto-venv, tests/it/remote_s3.rs) with what this needs added (moto[server],
# boto3, safetensors, numpy). Starts the server on a free loopback port and stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"

nice cargo build --release --lib -q
PYTHON="$py" bash scripts/build-python-native.sh >/dev/null

venv=target/moto-venv
if ! "$venv/bin/python" -c "import moto.server, boto3, safetensors, numpy" 2>/dev/null; then
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "moto[server]" safetensors numpy
fi

port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$venv/bin/python" -m moto.server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf target/remote-bench' EXIT
for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done

"$venv/bin/python" benches/remote_vs_boto3.py --endpoint "http://127.0.0.1:$port" "$@"
