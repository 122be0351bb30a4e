#!/usr/bin/env python3
"""The Python half of the GPU correctness op (`check`, issue 23): hostfirst's Python bindings on the device with the
frameworks the machine has (for JAX also the memory kinds of hostfirst.jax.load_file, issue 34). One JSON record on stdout: {"op": "py-check", "framework": ..., "checks": [...]}, or
{"skipped": why} when the framework (or numpy, which the bindings need) is not installed. Not a test: run by
benches/gpu/run.py; the library comes from HOSTFIRST_LIBRARY (the carried libhostfirst.so).

    python3 benches/gpu/check_py.py torch|jax|numpy DIR

torch: a gathered batch imported with torch.from_dlpack while a consumer kernel (torch.cuda._sleep) is queued before
the read; the export's deleter run from another thread; an export for stream 2 (the per-thread default stream);
a forward/backward pass through an embedding of a gathered batch, its checksum against the same computation on
the CPU. jax: a batch through jax.dlpack, a jitted checksum against numpy. numpy: the bindings on the device alone
(a gather to cuda:0, the batch copied back and compared) - what the dry run can check on the stand-in.
"""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

B, T = 8, 257


def make_tokens(d):
    """A u16 token file of 1 Mi tokens (element i = (i * 7919) % 50257), written once."""
    import numpy as np
    from safetensors.numpy import save_file  # noqa: F401  (only to say clearly when safetensors is missing)

    path = os.path.join(d, "py-check-tokens.safetensors")
    if not os.path.exists(path):
        tok = ((np.arange(1 << 20, dtype=np.uint64) * 7919) % 50257).astype(np.uint16)
        save_file({"tokens": tok}, path)
    return path


class Checks:
    def __init__(self):
        self.items = []

    def run(self, name, fn):
        t = time.perf_counter()
        try:
            detail = fn()
            self.items.append(dict(name=name, ok=True, detail=str(detail), s=round(time.perf_counter() - t, 3)))
        except Exception as e:  # a failed check is recorded; the others still run
            self.items.append(dict(name=name, ok=False, error=f"{type(e).__name__}: {e}"[:800],
                                   s=round(time.perf_counter() - t, 3)))


def main(framework, d):
    rec = dict(op="py-check", impl=f"python-{framework}", framework=framework)
    try:
        import numpy as np
    except ImportError:
        return dict(rec, skipped="numpy is not installed (hostfirst's Python bindings need it)")
    try:
        import safetensors  # noqa: F401
    except ImportError:
        return dict(rec, skipped="safetensors is not installed (the check writes its token file with it)")
    if framework == "torch":
        try:
            import torch
        except ImportError:
            return dict(rec, skipped="torch is not installed")
        if not torch.cuda.is_available():
            return dict(rec, skipped="torch is installed but sees no CUDA device")
        rec.update(torch=torch.__version__)
    elif framework == "jax":
        try:
            import jax
            import jax.numpy as jnp
        except ImportError:
            return dict(rec, skipped="jax is not installed")
        gpus = [x for x in jax.devices() if x.platform == "gpu"]
        if not gpus:
            return dict(rec, skipped=f"jax is installed but has no GPU backend ({jax.devices()})")
        rec.update(jax=jax.__version__)
    import hostfirst

    path = make_tokens(d)
    ref = np.asarray(hostfirst.open(path)["tokens"])
    want = lambda offs: np.stack([ref[o:o + T] for o in offs])
    rng = hostfirst.OffsetStream(7)
    draw = lambda: rng.next(len(ref), T, B)
    c = Checks()
    g = hostfirst.Gather("cuda:0", "uint16", batch=B, window=T)
    tokens = hostfirst.open(path)["tokens"]

    if framework == "numpy":
        def round_trip():
            for _ in range(3):
                offs = draw()
                b = g.run(tokens, offs)
                got = np.frombuffer(b.tobytes(), dtype=np.uint16).reshape(B, T)
                if not np.array_equal(got, want(offs)):
                    raise AssertionError("a batch copied back differs from the file")
            return f"3 batches of [{B}, {T}] on {b.device}, byte-exact"
        c.run("gather-on-device-round-trip", round_trip)

    if framework == "torch":
        import torch

        def sleep_then_read():
            offs = draw()
            b = g.run(tokens, offs)
            torch.cuda._sleep(50_000_000)  # a consumer kernel queued before the read, on torch's current stream
            t = torch.from_dlpack(b)
            s = int(t.to(torch.int64).sum().item())
            if s != int(want(offs).astype(np.int64).sum()):
                raise AssertionError(f"checksum {s} differs")
            return f"checksum {s} after a queued sleep kernel (stream {torch.cuda.current_stream().cuda_stream})"
        c.run("consumer-kernel-queued-before-read", sleep_then_read)

        def deleter_from_another_thread():
            offs = draw()
            b = g.run(tokens, offs)
            addr = b.address
            t = torch.from_dlpack(b)
            torch.cuda._sleep(50_000_000)  # the sum below is still queued when the release happens
            total = t.to(torch.int64).sum()
            holder = [t]
            del t, b
            th = threading.Thread(target=lambda: holder.clear())  # the last reference dies on another thread
            th.start()
            th.join()
            import gc
            gc.collect()
            reused = False
            for _ in range(6):  # the ring reuses the released batch: its rewrite must wait for the sum
                o = draw()
                nb = g.run(tokens, o)
                reused |= nb.address == addr
                if not np.array_equal(np.frombuffer(nb.tobytes(), dtype=np.uint16).reshape(B, T), want(o)):
                    raise AssertionError("a batch after the release differs from the file")
                del nb
            if int(total.item()) != int(want(offs).astype(np.int64).sum()):
                raise AssertionError("the sum queued before the release saw a rewritten batch")
            if not reused:
                raise AssertionError(f"the released batch was never reused (ring {g.ring()})")
            return f"ring {g.ring()}, the released batch reused"
        c.run("deleter-from-another-thread", deleter_from_another_thread)

        def stream_2():
            # The consumer works on this thread's per-thread default stream (DLPack stream 2); the deleter runs
            # on another thread, whose per-thread stream knows nothing of that work: the release must still
            # cover it (hostfirst records it on the legacy stream), so the rewrites below wait for the sum.
            offs = draw()
            b = g.run(tokens, offs)
            cap = b.__dlpack__(stream=2)
            t = torch.utils.dlpack.from_dlpack(cap)
            per_thread = torch.cuda.ExternalStream(2)  # cudaStreamPerThread
            with torch.cuda.stream(per_thread):
                torch.cuda._sleep(50_000_000)
                total = t.to(torch.int64).sum()
            holder = [t]
            del t, b, cap
            th = threading.Thread(target=lambda: holder.clear())
            th.start()
            th.join()
            import gc
            gc.collect()
            for _ in range(4):
                g.run(tokens, draw())
            per_thread.synchronize()
            s = int(total.item())
            if s != int(want(offs).astype(np.int64).sum()):
                raise AssertionError("the sum on stream 2 saw a rewritten batch")
            return "export for stream 2, work on this thread's per-thread stream, deleter on another thread"
        c.run("stream-2", stream_2)

        def embedding_forward_backward():
            torch.manual_seed(0)
            emb = torch.nn.Embedding(50257, 64)
            emb_gpu = torch.nn.Embedding(50257, 64).cuda()
            emb_gpu.load_state_dict(emb.state_dict())
            offs = draw()
            b = g.run(tokens, offs)
            x = torch.from_dlpack(b).to(torch.int64)
            loss = emb_gpu(x).float().pow(2).mean()
            loss.backward()
            xc = torch.from_numpy(want(offs).astype(np.int64))
            loss_c = emb(xc).pow(2).mean()
            loss_c.backward()
            g1, g2 = float(emb_gpu.weight.grad.sum().item()), float(emb.weight.grad.sum().item())
            if abs(float(loss.item()) - float(loss_c.item())) > 1e-4 or abs(g1 - g2) > 1e-3:
                raise AssertionError(f"loss {loss.item()} vs {loss_c.item()}, grad sum {g1} vs {g2}")
            return f"loss {loss.item():.6f}, grad checksum {g1:.6f} (CPU: {g2:.6f})"
        c.run("embedding-forward-backward", embedding_forward_backward)

    if framework == "jax":
        import jax
        import jax.numpy as jnp

        def through_dlpack():
            offs = draw()
            b = g.run(tokens, offs)
            addr = b.address
            x = jax.dlpack.from_dlpack(b)
            s = int(jax.jit(lambda a: jnp.sum(a.astype(jnp.int32)))(x))
            if s != int(want(offs).astype(np.int64).sum()):
                raise AssertionError(f"checksum {s} differs")
            dev = list(x.devices())[0]
            x.block_until_ready()
            del x, b
            import gc
            gc.collect()
            reused = False
            for _ in range(6):  # once JAX lets go of the batch, the ring fills it again
                nb = g.run(tokens, draw())
                reused |= nb.address == addr
                del nb
            return f"checksum {s} on {dev}; the batch {'was' if reused else 'was NOT yet'} reused after JAX let go"
        c.run("jax-dlpack-checksum", through_dlpack)

        def memory_kinds():
            # Issue 34: hostfirst.jax.load_file with JAX memory kinds on a real GPU. cuda_host and cuda:0:pinned_host
            # are read into hostfirst's page-locked memory and handed over as GPU 0's pinned_host arrays (numpy ->
            # jax.device_put: JAX refuses kDLCUDAHost capsules, jax#22346); unpinned_host goes through ordinary RAM;
            # cuda:0:device through DLPack. Each array's sharding must carry its kind and its bytes be the file's;
            # a pinned_host array moved to device memory must compute there under jit.
            import hostfirst.jax
            from safetensors.numpy import save_file

            kinds_path = os.path.join(d, "py-check-kinds.safetensors")
            rng = np.random.default_rng(34)
            ref_k = {n: rng.standard_normal((256, 64), dtype=np.float32) for n in ("a", "b", "c", "e")}
            save_file(ref_k, kinds_path)
            got = hostfirst.jax.load_file(kinds_path, rules={"a": "cuda_host", "b": "cuda:0:pinned_host",
                                                             "c": "cuda:0:unpinned_host", "e": "cuda:0:device"})
            want_kinds = {"a": "pinned_host", "b": "pinned_host", "c": "unpinned_host", "e": "device"}
            for n, kind in want_kinds.items():
                x = got[n]
                if x.sharding.memory_kind != kind or list(x.devices())[0].platform != "gpu":
                    raise AssertionError(f"{n}: {x.sharding} (wanted {kind} on the GPU)")
                if not np.array_equal(np.asarray(x), ref_k[n]):
                    raise AssertionError(f"{n}: bytes differ from the file")
            moved = jax.device_put(got["a"], got["a"].sharding.with_memory_kind("device"))
            s = float(jax.jit(lambda v: jnp.sum(v * 2))(moved))
            if abs(s - float((ref_k["a"] * 2).sum())) > 1e-2 * max(1.0, abs(s)):
                raise AssertionError(f"jit sum {s} on the moved array differs")
            return f"kinds {want_kinds} on {list(got['a'].devices())[0]}; moved to device memory, jit sum {s:.3f}"
        c.run("jax-memory-kinds", memory_kinds)

    failed = [x["name"] for x in c.items if not x["ok"]]
    return dict(rec, checks=c.items, failed_checks=failed, outcome="failed" if failed else "passed")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
