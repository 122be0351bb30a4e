#!/usr/bin/env python3
"""Regenerates tests/fixtures/: safetensors files written by the reference Python package (safetensors +
numpy, bf16 and fp8 via ml_dtypes), a sharded set, and expected.json, which records what the reference
Python reader says about each file (metadata, tensor names in file order, dtypes, shapes, and the 64-bit
FNV-1a of each tensor's bytes). tests/it/cli_inspect.rs compares `hostfirst inspect --json --checksum` with it.

    python3 -m pip install -r scripts/python-requirements.txt
    python3 scripts/gen_fixtures.py
"""
import json
import os
import sys

import ml_dtypes
import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def rng_array(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def write_f4(path, tensors, metadata):
    """Files with F4 tensors go through the binding's TensorSpec (numpy has no packed fp4 dtype)."""
    keep = []
    specs = {}
    for name, arr in tensors.items():
        if isinstance(arr, tuple):  # ("float4_e2m1fn_x2", packed uint8 array, storage shape)
            dtype, packed, shape = arr
            keep.append(packed)
            specs[name] = safetensors.TensorSpec(dtype=dtype, shape=shape, data_ptr=packed.ctypes.data, data_len=packed.nbytes)
        else:
            keep.append(arr)
            specs[name] = safetensors.TensorSpec(dtype=arr.dtype.name, shape=arr.shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes)
    safetensors.serialize_file(specs, path, metadata=metadata)


def describe(path):
    """What the reference Python reader says about one file."""
    with open(path, "rb") as fh:
        raw = {name: info for name, info in safetensors.deserialize(fh.read())}
    out = {"metadata": {}, "tensors": []}
    with safe_open(path, framework="numpy") as f:
        out["metadata"] = dict(f.metadata() or {})
        for name in f.offset_keys():
            sl = f.get_slice(name)
            data = bytes(raw[name]["data"])
            dtype = sl.get_dtype()
            if dtype in ("F64", "F32", "F16", "I64", "U64", "I32", "U32", "I16", "U16", "I8", "U8", "BOOL", "C64"):
                assert f.get_tensor(name).tobytes() == data, name  # the numpy path agrees with the raw bytes
            out["tensors"].append({"name": name, "dtype": dtype, "shape": list(sl.get_shape()), "fnv1a64": fnv1a64(data)})
    return out


def main():
    os.makedirs(os.path.join(ROOT, "sharded"), exist_ok=True)
    rng = np.random.default_rng(20240601)
    expected = {}

    basic = {
        "f32": rng_array(rng, (2, 2), np.float32),
        "f64": rng_array(rng, (3,), np.float64),
        "f16": rng_array(rng, (2, 3), np.float16),
        "i64": np.array([-(2**40), 0, 2**40], np.int64),
        "u64": np.array([2**63 + 5], np.uint64),
        "i32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
        "u32": np.array([1, 2**31], np.uint32),
        "i16": np.array([-7, 7], np.int16),
        "u16": np.array([65535], np.uint16),
        "i8": np.array([-128, 127], np.int8),
        "u8": np.arange(10, dtype=np.uint8),
        "bool": np.array([True, False, True, True, False]),
        "c64": np.array([1 + 2j, -3.5j], np.complex64),
        "scalar": np.array(3.25, np.float32),
        "empty": np.zeros((0, 3), np.float32),
        "rank8": np.arange(16, dtype=np.int16).reshape(1, 2, 1, 2, 1, 2, 1, 2),
    }
    save_file(basic, os.path.join(ROOT, "basic.safetensors"), metadata={"format": "pt", "note": 'unicode \u2713 "quoted" \\ slash'})

    lowp = {
        "bf16": rng_array(rng, (4, 4), ml_dtypes.bfloat16),
        "f8_e4m3": rng_array(rng, (8,), ml_dtypes.float8_e4m3fn),
        "f8_e5m2": rng_array(rng, (2, 4), ml_dtypes.float8_e5m2),
        "f8_e8m0": np.array([0.5, 1, 2, 4], np.float32).astype(ml_dtypes.float8_e8m0fnu),
        "f8_e4m3fnuz": rng_array(rng, (3,), ml_dtypes.float8_e4m3fnuz),
        "f8_e5m2fnuz": rng_array(rng, (3,), ml_dtypes.float8_e5m2fnuz),
        "f4": ("float4_e2m1fn_x2", np.array([0x21, 0x43, 0x65, 0x87], np.uint8), [2, 2]),  # storage shape; the header says [2, 4]
    }
    write_f4(os.path.join(ROOT, "lowp.safetensors"), lowp, {"format": "mlx", "quant": "mxfp4"})

    names = {
        "embed.\u6743\u91cd": np.arange(4, dtype=np.float32),
        'quote"and\\backslash': np.arange(2, dtype=np.int32),
        "tab\there/slash\nnewline": np.arange(3, dtype=np.uint8),
        "\u00e9\u00e8\u00ea": np.zeros((2, 0), np.float64),
    }
    save_file(names, os.path.join(ROOT, "names.safetensors"), metadata={"\u540d\u524d": "\u503c \U0001F600", "ctrl": "a\u0001b"})

    tokens = {"tokens": rng.integers(0, 50257, size=4096).astype(np.uint16)}
    save_file(tokens, os.path.join(ROOT, "tokens.safetensors"))

    save_file({}, os.path.join(ROOT, "empty.safetensors"))

    for name in ["basic.safetensors", "lowp.safetensors", "names.safetensors", "tokens.safetensors", "empty.safetensors"]:
        expected[name] = describe(os.path.join(ROOT, name))

    # A sharded set in the Hugging Face layout.
    shards = {
        "model-00001-of-00002.safetensors": {"layers.0.w": rng_array(rng, (4, 4), np.float32), "embed": rng_array(rng, (8, 2), ml_dtypes.bfloat16)},
        "model-00002-of-00002.safetensors": {"layers.1.w": rng_array(rng, (4, 4), np.float32), "head": rng_array(rng, (2,), np.float16)},
    }
    weight_map = {}
    total = 0
    set_expected = {"metadata": {}, "tensors": []}
    for shard, tensors in shards.items():
        path = os.path.join(ROOT, "sharded", shard)
        save_file(tensors, path, metadata={"format": "pt"})
        d = describe(path)
        set_expected["tensors"].extend(d["tensors"])
        for t in tensors:
            weight_map[t] = shard
            total += tensors[t].nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(ROOT, "sharded", "model.safetensors.index.json"), "w") as fh:
        json.dump(index, fh, indent=2)
        fh.write("\n")
    # The set's metadata: the index's (non-string values as JSON text), then shard keys not yet present.
    set_expected["metadata"] = {"total_size": str(total), "format": "pt"}
    expected["sharded/model.safetensors.index.json"] = set_expected

    with open(os.path.join(ROOT, "expected.json"), "w") as fh:
        json.dump(expected, fh, indent=1, ensure_ascii=False, sort_keys=True)
        fh.write("\n")
    print("wrote", len(expected), "fixtures to", os.path.normpath(ROOT), file=sys.stderr)


if __name__ == "__main__":
    main()
