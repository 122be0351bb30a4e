"""What a user holds survives the file changing under it (issue 34): from every entry point, arrays are loaded, then
the file is rewritten in place (`open(path, "wb")`: O_TRUNC, then new bytes of the same size), truncated to
nothing, and replaced by a rename, and after each change every held array is read in full and compared with the
bytes it was loaded with.

Each entry point runs in a child process of its own: a SIGBUS (what a zero-copy view of a truncated file gets)
ends the child with that signal, which the parent sees in the exit status; the child writes what it read to a
results file (never to stdout, which JAX or numpy may also write to), one line per step, so the last line says how
far it got. The zero-copy opt-ins are run too, to show their documented hazard is what the docs say: a rewrite
shows through, a truncation kills the process with SIGBUS, a rename leaves them alone."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hostfirst

HERE = Path(__file__).resolve().parent

CHILD = textwrap.dedent(r"""
    import json, os, sys
    import numpy as np
    import hostfirst, hostfirst.numpy

    path, results, entry = sys.argv[1], sys.argv[2], sys.argv[3]
    want = {k: bytes.fromhex(v) for k, v in json.load(open(sys.argv[4])).items()}
    out = open(results, "w")

    def say(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    if "jax" in entry:
        import jax, jax.numpy as jnp, hostfirst.jax
        jax.config.update("jax_enable_x64", True)
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def load(entry):
        # name -> what the user holds (numpy arrays, jax.Arrays, hostfirst Buffers)
        if entry == "numpy.load_file":
            return hostfirst.numpy.load_file(path)
        if entry == "numpy.load_file(backend=pread)":
            return hostfirst.numpy.load_file(path, backend="pread")
        if entry == "numpy.load":
            return hostfirst.numpy.load(open(path, "rb").read())
        if entry in ("safe_open.get_tensor", "safe_open(jax).get_tensor"):
            with hostfirst.safe_open(path, framework="jax" if "jax" in entry else "numpy", device="cpu") as f:
                return {k: f.get_tensor(k) for k in f.keys()}
        if entry in ("safe_open.get_tensors", "safe_open(jax).get_tensors"):
            with hostfirst.safe_open(path, framework="flax" if "jax" in entry else "np", device="cpu") as f:
                return f.get_tensors()
        if entry in ("safe_open.get_slice", "safe_open(jax).get_slice"):
            with hostfirst.safe_open(path, framework="jax" if "jax" in entry else "numpy", device="cpu") as f:
                return {k + "[...]": f.get_slice(k)[...] for k in f.keys()}
        if entry == "jax.load_file":
            return hostfirst.jax.load_file(path, default="cpu")
        if entry == "jax.load_file(host rule) + jnp.asarray":  # the issue's reproduction
            out = hostfirst.jax.load_file(path, rules={"w": "host"}, default="cpu")
            out["w"] = jnp.asarray(out["w"])
            return out
        if entry == "jax.load_file(host rules)":
            return hostfirst.jax.load_file(path, rules={"*": "host"})
        if entry == "jax.load_file(memory kinds)":
            return hostfirst.jax.load_file(path, rules={"w": "cpu:pinned_host", "t": "unpinned_host"}, default="cpu")
        if entry == "jax.load_file(shardings)":
            mesh = Mesh(np.array(jax.devices("cpu")[:1]), ("x",))
            return hostfirst.jax.load_file(path, shardings={"w": NamedSharding(mesh, PartitionSpec("x"))},
                                           default="cpu")
        if entry == "jax.load":
            with hostfirst.default_device("cpu"):
                return hostfirst.jax.load(open(path, "rb").read())
        if entry == "jax.device_put(View)":
            f = hostfirst.open(path)
            return {k: jax.device_put(f[k]) for k in f}
        if entry == "hostfirst.load(cpu)":
            return dict(hostfirst.load(path, rules={"*": "cpu"}))
        if entry == "View.to(cpu)":
            f = hostfirst.open(path)
            return {k: f[k].to("cpu") for k in f}
        if entry == "np.array(View)":  # the copy the docs name as the way out of the mapping
            f = hostfirst.open(path)
            return {k: np.array(f[k]) for k in f}
        if entry == "Gather.run":
            t = hostfirst.open(path)["t"]
            g = hostfirst.Gather("cpu", t.dtype, batch=2, window=t.shape[0] // 2)
            return {"t": g.run(t, [0, t.shape[0] // 2])}
        if entry == "load_shards":
            shards = hostfirst.load_shards(path, {"x": 1}, [("*", ("x",))], [0])
            return {s.name: s.buffer for s in shards}
        # the zero-copy opt-ins
        if entry == "zero_copy numpy.load_file":
            return hostfirst.numpy.load_file(path, zero_copy=True)
        if entry == "zero_copy safe_open.get_tensor":
            with hostfirst.safe_open(path, zero_copy=True) as f:
                return {k: f.get_tensor(k) for k in f.keys()}
        if entry == "zero_copy jax.load_file(host rule)":
            return hostfirst.jax.load_file(path, rules={"*": "host"}, zero_copy=True)
        raise SystemExit(f"unknown entry {entry}")

    def contents(x):
        if isinstance(x, (hostfirst.Buffer, hostfirst.View)):
            return x.tobytes() if x.device.kind != "cpu" or isinstance(x, hostfirst.View) else np.asarray(x).tobytes()
        return np.ascontiguousarray(np.asarray(x)).tobytes()

    held = load(entry)
    say(step="loaded", names=sorted(held))

    def check(step):
        same = {}
        for k, x in held.items():
            name = k.split("[")[0]
            b = contents(x)  # reads every byte of what is held
            same[k] = b == want[name]
        say(step=step, same=same)

    data = open(path, "rb").read()
    head = 8 + int.from_bytes(data[:8], "little")
    for step in sys.argv[5].split(","):
        if step == "rewritten":  # in place: O_TRUNC, then other bytes of the same size (as np.save, open(p, "wb"))
            with open(path, "wb") as fh:
                fh.write(data[:head] + (np.frombuffer(data, np.uint8, offset=head) ^ 0xFF).tobytes())
        elif step == "truncated":
            os.truncate(path, 0)
        elif step == "replaced":  # a new file renamed over the path
            with open(path + ".new", "wb") as fh:
                fh.write(data[:head] + bytes(len(data) - head))
            os.replace(path + ".new", path)
        check(step)
    say(step="done")
""")

OWNED = ["numpy.load_file", "numpy.load_file(backend=pread)", "numpy.load", "safe_open.get_tensor",
         "safe_open.get_tensors", "safe_open.get_slice", "hostfirst.load(cpu)", "View.to(cpu)", "np.array(View)",
         "Gather.run", "load_shards"]
OWNED_JAX = ["safe_open(jax).get_tensor", "safe_open(jax).get_tensors", "safe_open(jax).get_slice", "jax.load_file",
             "jax.load_file(host rule) + jnp.asarray", "jax.load_file(host rules)", "jax.load_file(memory kinds)",
             "jax.load_file(shardings)", "jax.load", "jax.device_put(View)"]


def make_model(path):
    """A file of a 1 MiB f32 matrix, a bias and a u16 token array (several pages each); its tensors' bytes."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(34)
    tensors = {"w": rng.standard_normal((256, 1024), dtype=np.float32), "b": rng.standard_normal(1024).astype(np.float32),
               "t": rng.integers(0, 50257, size=100_000, dtype=np.uint16).astype(np.uint16)}
    save_file(tensors, str(path))
    return {k: v.tobytes().hex() for k, v in tensors.items()}


def run_child(path, want, entry, tmp_path, steps="rewritten,truncated,replaced"):
    results, wanted = tmp_path / "results.jsonl", tmp_path / "want.json"
    wanted.write_text(json.dumps(want))
    results.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(Path(hostfirst.__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(results), entry, str(wanted), steps],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    lines = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    return proc.returncode, lines, proc.stderr


@pytest.mark.parametrize("entry", OWNED + OWNED_JAX)
def test_held_arrays_survive_rewrite_truncation_and_replacement(tmp_path, entry):
    if entry in OWNED_JAX:
        pytest.importorskip("jax")
    path = tmp_path / "model.safetensors"
    want = make_model(path)
    rc, steps, err = run_child(path, want, entry, tmp_path)
    last = steps[-1]["step"] if steps else "nothing"
    assert rc == 0, f"{entry}: the child ended with status {rc} (-{int(signal.SIGBUS)}: SIGBUS) after '{last}'\n{err}"
    assert [s["step"] for s in steps] == ["loaded", "rewritten", "truncated", "replaced", "done"], err
    for s in steps[1:4]:
        assert s["same"] and all(s["same"].values()), (entry, s)  # every byte as it was loaded


ZERO_COPY = ["zero_copy numpy.load_file", "zero_copy safe_open.get_tensor", "zero_copy jax.load_file(host rule)"]


@pytest.mark.parametrize("entry", ZERO_COPY)
def test_zero_copy_opt_ins_have_the_documented_hazard(tmp_path, entry):
    """zero_copy=True is the mapping: a file replaced by a rename leaves the views alone; a rewrite in place shows
    through; and the truncation after it kills the process with SIGBUS, before it can say anything. What the
    docstrings and the README say, checked."""
    if "jax" in entry:
        pytest.importorskip("jax")
    path = tmp_path / "model.safetensors"
    want = make_model(path)
    rc, steps, err = run_child(path, want, entry, tmp_path, steps="replaced")
    assert rc == 0 and [s["step"] for s in steps] == ["loaded", "replaced", "done"], (rc, steps, err)
    assert all(steps[1]["same"].values()), steps  # the views keep the old file
    want = make_model(path)
    rc, steps, err = run_child(path, want, entry, tmp_path)
    assert rc == -signal.SIGBUS, (rc, steps, err)
    assert [s["step"] for s in steps] == ["loaded", "rewritten"], steps
    assert not any(steps[1]["same"].values()), steps  # the new bytes show through
