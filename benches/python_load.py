#!/usr/bin/env python3
"""Whole-file load of many small tensors in Python, hostfirst vs safetensors, same process (issue 22).
A benchmark, not a test.

    python benches/python_load.py FILE [--rounds 11]

Each round times, back to back in this process (alternating which goes first):
  hostfirst.load(FILE, rules={"*": "cpu"})   (one hostfirst_load_run; a dict of Buffers)
  safetensors.numpy.load_file(FILE)          (a dict of numpy arrays)
and prints one JSON line: each side's median and the median of the per-round ratios. The first round is a
warm-up and is not counted. Run it with a Python where numpy and safetensors are installed and the hostfirst
package (bindings/python) is importable; benches/run.sh's venv has both, and sets PYTHONPATH.
"""

import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))

import hostfirst  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    n = len(out)
    del out
    return dt, n


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 11
    ours_f = lambda: hostfirst.load(path, rules={"*": "cpu"})  # noqa: E731
    theirs_f = lambda: load_file(path)  # noqa: E731
    a, b, r = [], [], []
    n = 0
    for i in range(rounds + 1):
        if i % 2 == 0:
            (x, n), (y, _) = timed(ours_f), timed(theirs_f)
        else:
            (y, _), (x, n) = timed(theirs_f), timed(ours_f)
        if i > 0:
            a.append(x)
            b.append(y)
            r.append(x / y)
    print(json.dumps(dict(op="python-load-paired", file=path, tensors=n, rounds=rounds,
                          hostfirst_s=statistics.median(a), peer_s=statistics.median(b),
                          paired_ratio=statistics.median(r), hostfirst_min_s=min(a), peer_min_s=min(b))))


if __name__ == "__main__":
    main()
