#!/usr/bin/env python3
"""The GPU peers of issue 6, one operation per process, one JSON line on stdout. Driven by benches/gpu/run.py.

    python3 benches/gpu/peers.py OP ARGS...

Ops (FILE holds one u16 tensor named NAME; every timing starts after the framework has created its CUDA context
and ends after the data is on the device and the device is synchronised):
  torch-load_file FILE                 safetensors.torch.load_file(FILE, device="cuda:0")
  torch-safe_open FILE NAME            safe_open(FILE, "pt", device="cpu").get_tensor(NAME).to("cuda:0")
  torch-pin FILE NAME                  numpy (safe_open "np" get_tensor) -> torch.from_numpy(...).pin_memory().cuda()
  jax-flax FILE                        safetensors.flax.load_file(FILE) + jax.device_put(..., gpu 0)
  jax-numpy FILE                       safetensors.numpy.load_file(FILE) + jax.device_put(..., gpu 0) (host first)
  nanogpt-cuda FILE B T ITERS SEED     nanoGPT get_batch + x.pin_memory().to("cuda", non_blocking=True); p50/p99
  jax-seeds FILE LEAVE_GIB             the seeds' story: with LEAVE_GIB GiB of GPU memory left free (ballast),
                                       safetensors.flax.load_file(FILE); records whether it fails and how
A framework that is missing or has no GPU gives {"skipped": "<why>"} (exit 0), so a dry run on a machine without
a GPU exercises the driver.
"""
import json
import os
import struct
import sys
import threading
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX: allocate what is used, not 75 % up front
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from run import status_kib  # noqa: E402  (benches/run.py: /proc/self/status fields in KiB)


class RssPeak:
    """Peak RssAnon (KiB) seen every millisecond while the block runs."""

    def __enter__(self):
        self.before, self.peak, self.stop = status_kib("RssAnon"), 0, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        return self

    def run(self):
        while True:
            self.peak = max(self.peak, status_kib("RssAnon"))
            if self.stop:
                return
            time.sleep(0.001)

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()
        self.growth_kib = max(0, self.peak - self.before)


def check(fn):
    """A cheap sanity value of the loaded data, computed after the timing; never fails the measurement."""
    try:
        return int(fn())
    except Exception as e:  # e.g. an op a framework lacks for uint16
        return f"unavailable: {type(e).__name__}: {str(e)[:120]}"


def tensor_len(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    (name, info), = hdr.items()
    return name, 8 + n + info["data_offsets"][0], info["shape"][0]


def need_torch():
    try:
        import torch
    except ImportError as e:
        return None, f"torch not importable: {e}"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA device here"
    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize()
    return torch, None


def need_jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        return None, f"jax not importable: {e}"
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError as e:
        return None, f"jax has no GPU backend here: {e}"
    jax.device_put(jnp.zeros(1), gpu).block_until_ready()
    return (jax, gpu), None


def timed(rec, nbytes, t0):
    dt = time.perf_counter() - t0
    rec.update(t_s=dt, bytes=nbytes, gbps=nbytes / 1e9 / dt, vmhwm_kib=status_kib("VmHWM"))
    return rec


def main(op, a):
    rec = dict(op="gpu-peer", impl=op)
    if op.startswith("torch") or op in ("nanogpt-cuda", "hostfirst-py-gather"):
        torch, why = need_torch()
        if why:
            return dict(rec, skipped=why)
        rec.update(torch=torch.__version__, device=torch.cuda.get_device_name(0))
    if op.startswith("jax"):
        j, why = need_jax()
        if why:
            return dict(rec, skipped=why)
        jax, gpu = j
        import jaxlib

        rec.update(jax=jax.__version__, jaxlib=jaxlib.__version__, device=str(gpu))
    import safetensors

    rec["safetensors"] = safetensors.__version__
    path = a[0]
    if op == "torch-load_file":
        from safetensors.torch import load_file

        with RssPeak() as r:
            t0 = time.perf_counter()
            d = load_file(path, device="cuda:0")
            torch.cuda.synchronize()
            timed(rec, sum(v.numel() * v.element_size() for v in d.values()), t0)
        v = next(iter(d.values()))
        rec.update(anon_growth_kib=r.growth_kib, landed=str(v.device), check=check(lambda: v[:1].cpu().numpy()[0]))
    elif op in ("torch-safe_open", "torch-pin"):
        from safetensors import safe_open

        with RssPeak() as r:
            t0 = time.perf_counter()
            if op == "torch-safe_open":
                with safe_open(path, "pt", device="cpu") as f:
                    v = f.get_tensor(a[1]).to("cuda:0")
            else:
                with safe_open(path, "np") as f:
                    n = f.get_tensor(a[1])
                v = torch.from_numpy(n).pin_memory().cuda()
            torch.cuda.synchronize()
            timed(rec, v.numel() * v.element_size(), t0)
        rec.update(anon_growth_kib=r.growth_kib, landed=str(v.device), check=check(lambda: v[:1].cpu().numpy()[0]))
    elif op in ("jax-flax", "jax-numpy"):
        if op == "jax-flax":
            from safetensors.flax import load_file
        else:
            from safetensors.numpy import load_file
        with RssPeak() as r:
            t0 = time.perf_counter()
            d = load_file(path)
            out = {k: jax.device_put(v, gpu) for k, v in d.items()}
            for v in out.values():
                v.block_until_ready()
            timed(rec, sum(v.nbytes for v in out.values()), t0)
        v = next(iter(out.values()))
        first = next(iter(d.values()))
        rec.update(anon_growth_kib=r.growth_kib, landed=str(list(v.devices())[0]),
                   loaded_on=str(list(first.devices())[0]) if hasattr(first, "devices") else "host (numpy)",
                   check=check(lambda: v[0]))
    elif op == "nanogpt-cuda":
        import numpy as np

        B, T, iters, seed = int(a[1]), int(a[2]), int(a[3]), int(a[4])
        _, off, n = tensor_len(path)
        torch.manual_seed(seed)
        lat = []
        for it in range(iters + 3):
            t0 = time.perf_counter()
            # nanoGPT train.py get_batch (a new memmap per batch), device_type == "cuda"
            data = np.memmap(path, dtype=np.uint16, mode="r", offset=off, shape=(n,))
            ix = torch.randint(len(data) - T, (B,))
            x = torch.stack([torch.from_numpy((data[i:i + T]).astype(np.int64)) for i in ix])
            y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + T]).astype(np.int64)) for i in ix])
            x, y = x.pin_memory().to("cuda:0", non_blocking=True), y.pin_memory().to("cuda:0", non_blocking=True)
            torch.cuda.synchronize()
            if it >= 3:
                lat.append(time.perf_counter() - t0)
        lat.sort()
        q = lambda p: lat[round((len(lat) - 1) * p)]
        rec.update(op="gpu-gather", impl="py-nanoGPT-get_batch-cuda", B=B, T=T, iters=iters, p50_s=q(0.5),
                   p99_s=q(0.99), mean_s=sum(lat) / len(lat), tokens_per_s=B * T / q(0.5),
                   check=check(lambda: x[0, 0] + y[-1, -1]))
    elif op == "hostfirst-py-gather":
        # hostfirst's Python gather feeding the same loop: [B, T+1] u16 windows in one transfer, then x, y as int64
        # on the device - the dtypes nanoGPT's get_batch produces - through torch.from_dlpack (zero-copy).
        import hostfirst

        B, T, iters, seed = int(a[1]), int(a[2]), int(a[3]), int(a[4])
        tokens = hostfirst.open(path)["tokens"]
        n = tokens.shape[0]
        g = hostfirst.Gather("cuda:0", "uint16", batch=B, window=T + 1)
        offs = hostfirst.OffsetStream(seed)
        lat = []
        for it in range(iters + 3):
            t0 = time.perf_counter()
            xy = torch.from_dlpack(g.run(tokens, offs.next(n, T + 1, B)))
            x, y = xy[:, :-1].to(torch.int64), xy[:, 1:].to(torch.int64)
            torch.cuda.synchronize()
            if it >= 3:
                lat.append(time.perf_counter() - t0)
        lat.sort()
        q = lambda p: lat[round((len(lat) - 1) * p)]
        rec.update(op="gpu-gather", impl="py-hostfirst-gather-cuda", B=B, T=T, iters=iters, p50_s=q(0.5),
                   p99_s=q(0.99), mean_s=sum(lat) / len(lat), tokens_per_s=B * T / q(0.5), x_dtype=str(x.dtype),
                   check=check(lambda: x[0, 0] + y[-1, -1]))
    elif op == "jax-seeds":
        import jax.numpy as jnp
        from safetensors.flax import load_file

        leave = float(a[1]) * (1 << 30)
        stats = gpu.memory_stats() or {}
        limit = stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0)
        ballast = None
        if limit > leave:
            ballast = jax.device_put(jnp.zeros(int((limit - leave) // 4), dtype=jnp.float32), gpu)
            ballast.block_until_ready()
        stats = gpu.memory_stats() or {}
        rec.update(gpu_limit=stats.get("bytes_limit"), gpu_in_use=stats.get("bytes_in_use"),
                   file_bytes=os.path.getsize(path))
        t0 = time.perf_counter()
        try:
            d = load_file(path)
            for v in d.values():
                v.block_until_ready()
            rec.update(outcome="loaded", landed=str(list(next(iter(d.values())).devices())[0]))
        except Exception as e:  # the failure is the measurement
            rec.update(outcome="failed", error_type=type(e).__name__, error=str(e).splitlines()[0][:400])
        rec.update(t_s=time.perf_counter() - t0, vmhwm_kib=status_kib("VmHWM"))
    else:
        sys.exit(f"unknown op {op}")
    return rec


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2:])))
