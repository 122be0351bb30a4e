"""A fresh process's get_all rounds, first round included: `safe_open(f, "numpy")` then `get_tensor` of every
tensor of a 20,000 x f32[1024] file, one process per library, ROUNDS rounds each (arrays freed between rounds),
printed in microseconds a tensor. Section 12's method makes one untimed call first; this shows what that call
costs a program that loads once.

    python benches/python_first_call.py [--rounds 8] [--repeat 2] [--dir DIR]

Needs hostfirst (HOSTFIRST_LIBRARY or an installed wheel) and safetensors in the running interpreter."""

import argparse
import os
import subprocess
import sys
import tempfile

CHILD = """
import sys, time
if sys.argv[1] == "hostfirst":
    from hostfirst import safe_open
else:
    from safetensors import safe_open
path, rounds = sys.argv[2], int(sys.argv[3])
out = []
for _ in range(rounds):
    t = time.perf_counter()
    with safe_open(path, "numpy") as f:
        d = {k: f.get_tensor(k) for k in f.keys()}
    out.append((time.perf_counter() - t) * 1e6 / len(d))
    del d
print(" ".join(f"{x:.1f}" for x in out))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    import numpy as np
    import hostfirst.numpy as hn

    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        path = os.path.join(d, "20k.safetensors")
        hn.save_file({f"t{i}": np.full(1024, i, np.float32) for i in range(20000)}, path)
        for _ in range(a.repeat):
            for lib in ("hostfirst", "safetensors"):
                r = subprocess.run([sys.executable, "-c", CHILD, lib, path, str(a.rounds)], capture_output=True,
                                   text=True, check=True)
                print(f"{lib:12s} us/tensor by round: {r.stdout.strip()}")


if __name__ == "__main__":
    main()
