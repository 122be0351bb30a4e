#!/usr/bin/env bash
# hostfirst benchmarks vs peers (issue 6). Not part of the test suite.
#   bash benches/run.sh            # full run (~4 min on 2 cores), writes benches/results/, BENCHMARKS.md, benches/plot.png
#   bash benches/run.sh --quick    # fewer sizes, 3 reps
# Options: --reps N, --data DIR (scratch for generated files, default bench-out/data), --keep (keep the files),
#          --only open,put,gather,many,cow,shard,coldgather (re-run sections into latest.json).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import safetensors, numpy" 2>/dev/null || pip install safetensors numpy
python3 -c "import matplotlib" 2>/dev/null || pip install matplotlib
exec python3 benches/run.py "$@"
