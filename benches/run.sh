#!/usr/bin/env bash
# hostfirst benchmarks vs peers (issue 6). Not part of the test suite.
#   bash benches/run.sh            # full run (~4 min on 2 cores), writes benches/results/, BENCHMARKS.md, benches/plot.png
#   bash benches/run.sh --quick    # fewer sizes, 3 reps
# Options: --reps N, --data DIR (scratch for generated files, default bench-out/data), --keep (keep the files),
#          --only open,put,gather,many,cow,shard,coldgather,job,tokens,dropin (re-run sections into latest.json).
set -euo pipefail
cd "$(dirname "$0")/.."
# The Python peers (safetensors, numpy) and matplotlib live in a venv of the benchmarks' own, made once under
# target/ and re-made when this list changes; the system Python is never pip-installed into (PEP 668).
venv="target/bench-venv"
want="numpy safetensors matplotlib jax[cpu]"  # jax: the shard section's JAX peer (benches/cold_shard.py)
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
    echo "benches/run.sh: installing $want into $venv" >&2
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then  # Debian's python3 needs python3-venv for ensurepip
        . scripts/apt.sh && apt_install python3-venv   # waits for another apt run's locks (scripts/apt.sh)
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $want >&2
    echo "$want" > "$venv/.installed"
fi
exec "$venv/bin/python" benches/run.py "$@"
