import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
if "HOSTFIRST_LIBRARY" not in os.environ:
    for profile in ("debug", "release"):
        p = ROOT / "target" / profile / "libhostfirst.so"
        if p.exists():
            os.environ["HOSTFIRST_LIBRARY"] = str(p)
            break
for k in ("HOSTFIRST_PLATFORMS", "HOSTFIRST_DEFAULT_DEVICE", "CUDA_VISIBLE_DEVICES"):
    os.environ.pop(k, None)
