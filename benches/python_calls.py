#!/usr/bin/env python3
"""Per-call cost of the Python binding's hot paths, by how it calls the C ABI (issue 44, point 1). A benchmark,
not a test.

    python benches/python_calls.py [--tensors 20000] [--rounds 7] [--no-cffi]

Writes a safetensors file of N tensors f32[1024] (in the page cache: warm) and times, in this one process,
interleaved round by round (the order rotating), the arrays kept alive until the timed span ends and freed
outside it:
  get_tensor: `with safe_open(f): [f.get_tensor(k) for k in f.keys()]`
    - hostfirst, native extension (hostfirst/_native.c, one C call per tensor)
    - hostfirst, ctypes (the extension switched off, as HOSTFIRST_PYTHON_NATIVE=0 does)
    - hostfirst, cffi in API mode (a module compiled here doing the ctypes path's calls through cffi), when cffi
      is installed
    - safetensors.safe_open(..., framework="numpy")
  keys: `safe_open(f).keys()` (each side's open included)
  open10: open the file and get_tensor 10 tensors
  get_slice: `[f.get_slice(k)[:10] for k in f.keys()]` (the first 10 elements of every tensor, owned arrays);
    also with the extension but the index parsed in Python (View._select), as before the extension parsed it
  view: `[f[k] for k in f]` on `hostfirst.open(path)` (zero-copy Views; safetensors' side: its get_tensor)
Prints per-pattern medians (ms and per tensor µs) and ratios to safetensors, one JSON line each. Needs numpy and
safetensors, and the hostfirst package importable (bindings/python) with its extension built
(scripts/build-python-native.sh) and the library (cargo build --release).
"""

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
os.environ.setdefault("HOSTFIRST_LIBRARY", os.path.join(ROOT, "target", "release", "libhostfirst.so"))

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import safetensors.numpy  # noqa: E402

import hostfirst  # noqa: E402
from hostfirst import _fast, _owned, _safe_open  # noqa: E402

NATIVE = _fast.native


def use_native(on):
    """Switches the extension on or off for this process (what HOSTFIRST_PYTHON_NATIVE=0 does at import)."""
    _fast.native = _owned.native = NATIVE if on else None


def cffi_module(tmp):
    """A cffi API-mode module over libhostfirst with the calls get_tensor makes; None without cffi."""
    try:
        import cffi
    except ImportError:
        return None
    ffi = cffi.FFI()
    ffi.cdef("""
        typedef uint32_t hostfirst_status;
        typedef struct hostfirst_file hostfirst_file;
        typedef struct hostfirst_view hostfirst_view;
        typedef struct hostfirst_view_info { size_t struct_size; const char *name; uint32_t dtype; uint32_t rank;
            const uint64_t *shape; uint64_t nbytes; uint64_t file_offset; uint64_t data_offset; const void *data;
            uint64_t alignment; const uint64_t *strides; } hostfirst_view_info;
        hostfirst_status hostfirst_file_view(const hostfirst_file *file, const char *name, hostfirst_view **out);
        hostfirst_status hostfirst_view_describe(const hostfirst_view *view, hostfirst_view_info *out);
        hostfirst_status hostfirst_view_copy(const hostfirst_view *view, void *dst, size_t cap, uint64_t *written);
        hostfirst_status hostfirst_view_free(hostfirst_view *view);
    """)
    libdir = os.path.dirname(os.environ["HOSTFIRST_LIBRARY"])
    ffi.set_source("_hf_cffi_bench", '#include "hostfirst.h"', include_dirs=[os.path.join(ROOT, "include")],
                   libraries=["hostfirst"], library_dirs=[libdir], extra_link_args=[f"-Wl,-rpath,{libdir}"])
    path = ffi.compile(tmpdir=tmp, verbose=False)
    import importlib.util

    spec = importlib.util.spec_from_file_location("_hf_cffi_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cffi_get_tensor(mod, dtypes):
    ffi, lib = mod.ffi, mod.lib

    def get(f, name):
        fh = ffi.cast("hostfirst_file *", f._file._h)
        out = ffi.new("hostfirst_view **")
        if lib.hostfirst_file_view(fh, name.encode(), out):
            raise KeyError(name)
        v = out[0]
        try:
            info = ffi.new("hostfirst_view_info *")
            info.struct_size = ffi.sizeof("hostfirst_view_info")
            lib.hostfirst_view_describe(v, info)
            a = np.empty(tuple(info.shape[0:info.rank]), dtypes[info.dtype])
            if info.nbytes:
                lib.hostfirst_view_copy(v, ffi.from_buffer(a), info.nbytes, ffi.NULL)
            return a
        finally:
            lib.hostfirst_view_free(v)
    return get


def median_ms(xs):
    return statistics.median(xs) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-cffi", action="store_true")
    a = ap.parse_args()
    assert NATIVE is not None, "the native extension is not built: bash scripts/build-python-native.sh"
    tmp = tempfile.mkdtemp(prefix="hf-calls-")
    path = os.path.join(tmp, "many.safetensors")
    rng = np.random.default_rng(0)
    safetensors.numpy.save_file({f"t{i:06d}": rng.random(1024, dtype=np.float32) for i in range(a.tensors)}, path)
    mod = None if a.no_cffi else cffi_module(tmp)
    dtypes = {code: dt for code in hostfirst._dtypes.NAMES if (dt := hostfirst._dtypes.numpy_dtype(code)) is not None}

    def hf_all(native):
        def run():
            use_native(native)
            with hostfirst.safe_open(path, framework="numpy") as f:
                return [f.get_tensor(k) for k in f.keys()]
        return run

    def hf_cffi():
        get = cffi_get_tensor(mod, dtypes)
        with hostfirst.safe_open(path, framework="numpy") as f:
            return [get(f, k) for k in f.keys()]

    def st_all():
        with safetensors.safe_open(path, framework="numpy") as f:
            return [f.get_tensor(k) for k in f.keys()]

    def keys(native):
        def run():
            use_native(native)
            with hostfirst.safe_open(path, framework="numpy") as f:
                return f.keys()
        return run

    def st_keys():
        with safetensors.safe_open(path, framework="numpy") as f:
            return f.keys()

    some = [f"t{i:06d}" for i in range(0, a.tensors, max(1, a.tensors // 10))][:10]

    def open10(native):
        def run():
            use_native(native)
            with hostfirst.safe_open(path, framework="numpy") as f:
                return [f.get_tensor(k) for k in some]
        return run

    def st_open10():
        with safetensors.safe_open(path, framework="numpy") as f:
            return [f.get_tensor(k) for k in some]

    def slices(native, native_index=True):
        def run():
            use_native(native)
            # native_index=False: the index parsed in Python (View._select), as before issue 44's get_slice work
            _safe_open.index_named = _owned.index_named if native_index else (lambda view, key: None)
            try:
                with hostfirst.safe_open(path, framework="numpy") as f:
                    return [f.get_slice(k)[:10] for k in f.keys()]
            finally:
                _safe_open.index_named = _owned.index_named
        return run

    def st_slices():
        with safetensors.safe_open(path, framework="numpy") as f:
            return [f.get_slice(k)[:10] for k in f.keys()]

    def views(native):
        def run():
            use_native(native)
            f = hostfirst.open(path)
            return [f[k] for k in f]
        return run

    # The results agree before anything is timed.
    ref = st_all()
    for fn in (hf_all(True), hf_all(False)) + ((hf_cffi,) if mod else ()):
        got = fn()
        assert len(got) == len(ref) and all(np.array_equal(x, y) for x, y in zip(got, ref))
    del ref, got

    patterns = {
        "get_tensor": {"native": hf_all(True), "ctypes": hf_all(False), **({"cffi": hf_cffi} if mod else {}),
                       "safetensors": st_all},
        "keys": {"native": keys(True), "ctypes": keys(False), "safetensors": st_keys},
        "open10": {"native": open10(True), "ctypes": open10(False), "safetensors": st_open10},
        "get_slice": {"native": slices(True), "native, index parsed in Python": slices(True, False),
                      "ctypes": slices(False), "safetensors": st_slices},
        "view": {"native": views(True), "ctypes": views(False), "safetensors": st_all},
    }
    for pattern, sides in patterns.items():
        times = {k: [] for k in sides}
        names = list(sides)
        for r in range(a.rounds + 1):
            order = names[r % len(names):] + names[:r % len(names)]
            for k in order:
                gc.collect()
                t = time.perf_counter()
                out = sides[k]()
                dt = time.perf_counter() - t
                del out
                if r:
                    times[k].append(dt)
        use_native(True)
        st = median_ms(times["safetensors"])
        print(json.dumps({
            "pattern": pattern, "tensors": a.tensors, "rounds": a.rounds,
            "median_ms": {k: round(median_ms(v), 3) for k, v in times.items()},
            "per_tensor_us": {k: round(median_ms(v) * 1e3 / a.tensors, 3) for k, v in times.items()}
            if pattern in ("get_tensor", "get_slice", "view") else None,
            "ratio_to_safetensors": {k: round(median_ms(v) / st, 3) for k, v in times.items() if k != "safetensors"},
            "load": os.getloadavg()[0], "safetensors": safetensors.__version__, "numpy": np.__version__,
        }))


if __name__ == "__main__":
    main()
