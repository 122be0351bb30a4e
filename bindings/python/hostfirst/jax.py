"""hostfirst for JAX users: `load_file`, the drop-in for `safetensors.flax.load_file` that puts everything on the
default device with named exceptions, and `jax.device_put`/`jnp.asarray` of hostfirst tensors and buffers.

    import hostfirst.jax
    params = hostfirst.jax.load_file("model.safetensors", rules={"tokens": "host"})
    params["tokens"]      # the exception: a read-only numpy array on the file mapping (zero-copy, in host RAM)
    params["wte"]         # everything else: a jax.Array on JAX's device for hostfirst's default device

Rules name the exceptions. They take the forms people write: a dict {"tokens": "host"}, a list of
"pattern=target" strings (the CLI's form), one such string, or a list of (pattern, target) pairs; the first
match wins, and tensors no rule matches go to `default` ("default": hostfirst's default device, unless you
say otherwise). An explicit `"*": "host"` rule keeps the rest on the host. Targets and the JAX device each
becomes:

    host        a zero-copy, read-only numpy array on the file mapping (not a jax.Array: nothing moves); the
                packed F4/F6 dtypes, which numpy cannot hold, stay a hostfirst View (DLPack, tobytes())
    cpu         a jax.Array on jax.devices("cpu")[0] (read into RAM by hostfirst, handed to JAX by DLPack)
    cuda:N      a jax.Array on JAX's GPU N (jax.devices("gpu")[N]; put by hostfirst, handed over by DLPack)
    default     hostfirst's default device (HOSTFIRST_DEFAULT_DEVICE, scopes, ...), then as above
    cuda_host   a writable numpy array in hostfirst's page-locked host memory

Before any byte moves, the plan is fit-checked on every device it uses (OutOfMemoryError, a MemoryError, with
the numbers), every device target is matched to a JAX device (UnavailableError when JAX has none) and every
device tensor's dtype to one JAX holds (TypeError). Importing this module also registers hostfirst's View and
Buffer with JAX as pytrees, so `jax.device_put(tensor_or_buffer)` gives a jax.Array; `jax.dlpack.from_dlpack`
and `jnp.asarray` take them directly. A gather's batch stays unchanged while any array made from it lives.

Training batches: `hostfirst.jax.stream(gather, tokens, offsets, depth=2)` yields each batch as a jax.Array
while the next ones are read in the background (see `stream`).

Shard-on-read: `load_file(path, shardings={"layer.*.weight": NamedSharding(mesh, P("x", "y"))})` gives those
tensors as global jax.Arrays made from the addressable devices' shards only, each read from its own bytes.
"""

from __future__ import annotations

import ctypes
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

try:
    import jax
except ImportError as e:  # pragma: no cover - tested in a venv without JAX (scripts/test-python.sh)
    raise ImportError(f"hostfirst.jax needs JAX: pip install hostfirst[jax] (or jax[cuda12] for GPUs) ({e})") from e
import numpy as np

from . import _abi, _dtypes
from ._core import Device, PathLike, check, text
from ._devices import is_strict, resolve_target
from ._errors import OutOfMemoryError, error_named
from ._lib import lib
from ._tensors import Buffer, File, RuleList, Rules, View, _LoadedBuffer, make_plan, rule_pairs, with_default
from . import _shard

HostArray = np.ndarray
Placed = Union["jax.Array", HostArray, View]


def jax_device(device: Device) -> Any:
    """The JAX device a hostfirst device names: cpu -> jax.devices("cpu")[0], cuda:N -> JAX's GPU N.
    UnavailableError when JAX has no such device."""
    if device.kind == "cpu":
        return jax.devices("cpu")[0]
    if device.kind == "cuda":
        try:
            gpus = jax.devices("gpu")
        except RuntimeError as e:
            raise error_named("UNAVAILABLE", f"hostfirst target {device} has no JAX device: JAX has no GPU backend "
                                             f"here ({e})") from None
        if device.ordinal >= len(gpus):
            raise error_named("UNAVAILABLE", f"hostfirst target {device} has no JAX device: JAX sees {len(gpus)} GPUs")
        return gpus[device.ordinal]
    raise error_named("UNSUPPORTED", f"{device} has no JAX device")


@dataclass
class Placement:
    """One tensor of a load: where its rule sends it (`device` None: stays on the host) and, for a device, the
    JAX device it becomes an array on."""

    name: str
    tensor: View
    device: Optional[Device]
    jax_device: Optional[Any] = None


def plan(file: File, rules: Optional[Rules] = None) -> List[Placement]:
    """Applies `rules` to every tensor of `file` (file order) and checks, before anything moves, that every
    device fits its tensors, has a JAX device, and that every device tensor has a dtype JAX holds."""
    ph = make_plan(file, RuleList(rules))
    try:
        placements = []
        n = ctypes.c_size_t()
        check(lib.hostfirst_plan_tensor_count(ph, ctypes.byref(n)))
        for i in range(n.value):
            t = _abi.PlanTensorInfo()
            t.struct_size = ctypes.sizeof(t)
            check(lib.hostfirst_plan_tensor(ph, i, ctypes.byref(t)))
            name = text(t.name)
            on_device = t.placement == _abi.HOSTFIRST_PLACEMENT_DEVICE
            placements.append(Placement(name, file[name], Device._from_c(t.device) if on_device else None))
        check(lib.hostfirst_plan_device_count(ph, ctypes.byref(n)))
        for i in range(n.value):
            d = _abi.PlanDeviceInfo()
            d.struct_size = ctypes.sizeof(d)
            check(lib.hostfirst_plan_device(ph, i, ctypes.byref(d)))
            if not d.fits:
                err = OutOfMemoryError(
                    f"{file.path}: the tensors placed on {Device._from_c(d.device)} need {d.bytes} bytes but "
                    f"{d.usable} are usable there ({d.total} total; largest: '{text(d.largest_name)}', "
                    f"{d.largest_bytes} bytes); nothing was moved", OutOfMemoryError.status)
                err.needed, err.free, err.total, err.device = d.bytes, d.usable, d.total, Device._from_c(d.device)
                raise err
    finally:
        lib.hostfirst_plan_free(ph)
    narrowed = []
    for p in placements:
        if p.device is None:
            continue
        if p.device.kind != "cuda_host":
            p.jax_device = jax_device(p.device)
        try:
            dt = _dtypes.require_numpy_dtype(p.tensor.dtype_code)
        except TypeError as e:
            raise TypeError(f"{file.path}: tensor '{p.name}' ({p.tensor.dtype_name}) cannot become a JAX array on "
                            f"{p.device}: {e}. Give it a host rule, e.g. rules={{{_glob_literal(p.name)!r}: "
                            f"'host'}}, to keep it a hostfirst View on the file mapping") from None
        if p.jax_device is not None and dt.itemsize == 8 and dt.kind in "iuf" and not _x64():
            narrowed.append(f"'{p.name}' ({p.tensor.dtype_name})")
    if narrowed:
        what = (f"{file.path}: {len(narrowed)} 64-bit tensor(s) would become 32-bit because JAX's x64 mode is "
                f"off: {', '.join(narrowed)}. Enable it (jax.config.update('jax_enable_x64', True) or "
                f"JAX_ENABLE_X64=1) to keep 64 bits, or give them a host rule to keep them numpy arrays")
        if is_strict():
            raise TypeError(what + " (strict mode: nothing was moved)")
        warnings.warn(what, UserWarning, stacklevel=3)
    return placements


def to_jax(array: np.ndarray, name: str, device: Union[Device, str] = "default") -> Any:
    """A host numpy array as a jax.Array on the JAX device of hostfirst target `device` (`safe_open`'s jax
    framework); a 64-bit array with x64 off warns first (TypeError in strict mode), as `load_file` does."""
    if array.dtype.itemsize == 8 and array.dtype.kind in "iuf" and not _x64():
        what = (f"tensor '{name}' ({array.dtype}) would become 32-bit because JAX's x64 mode is off; enable it "
                "(jax.config.update('jax_enable_x64', True) or JAX_ENABLE_X64=1) to keep 64 bits")
        if is_strict():
            raise TypeError(what + " (strict mode)")
        warnings.warn(what, UserWarning, stacklevel=3)
    return jax.device_put(array, jax_device(resolve_target(device)))


def _x64() -> bool:
    """Whether JAX keeps 64-bit types now (its x64 flag, or an enable_x64 context)."""
    return bool(jax.dtypes.canonicalize_dtype(np.int64) == np.dtype(np.int64))


def place(p: Placement) -> Placed:
    """Places one tensor of a plan: host -> the zero-copy read-only numpy view; cuda_host -> hostfirst's
    pinned buffer as numpy; cpu and cuda:N -> hostfirst puts it there (fit-checked; to CUDA through the pinned
    staging ring) and JAX takes that buffer through DLPack, without a copy where JAX can."""
    if p.device is None:
        return p.tensor if _dtypes.numpy_dtype(p.tensor.dtype_code) is None else p.tensor.numpy()
    buffer = p.tensor.to(p.device)
    if p.device.kind == "cuda_host":
        return buffer.numpy()
    return jax.dlpack.from_dlpack(buffer)


def load_file(path: Union[PathLike, File], rules: Optional[Rules] = None,
              shardings: Optional[Mapping[str, Any]] = None, default: str = "default") -> Dict[str, Placed]:
    """Loads a safetensors file (or a sharded set's index) by placement rules: a dict name -> jax.Array (device
    targets) or numpy array (host targets), in file order. `path` may be any file `hostfirst.open` opens (.npy,
    an llm.c shard, a Megatron dataset), or a File already open (`hostfirst.open_raw` for a headerless token
    file; it stays open). Like `safetensors.flax.load_file` (the drop-in:
    `load_file(path)` puts everything on the default device) but with the fit check first.

    `rules` name the exceptions (dict, "pattern=target" strings, one such string, or pairs; the first match
    wins): `rules={"tokens": "host"}` keeps the tokens a zero-copy numpy array on the host and puts every
    other tensor on `default`. `default` is where tensors no rule matches go: "default" (hostfirst's default
    device: HOSTFIRST_DEFAULT_DEVICE, scopes, ...), "host", "cpu" or "cuda:N". An explicit "*" rule of yours
    is matched first, so `{"embed.*": "default", "*": "host"}` keeps all but the embeddings on the host.

    64-bit tensors (I64, U64, F64) placed on a JAX device while JAX's x64 mode is off would become 32-bit:
    a UserWarning names them first (as `jnp.asarray` warns), and in strict mode (`hostfirst.strict()`) it is
    a TypeError before anything moves. Tensors of a dtype JAX cannot hold (F4, F6) raise TypeError naming the
    tensor unless a host rule keeps them.

    `shardings`: {glob pattern: jax Sharding} (a NamedSharding on any mesh, or a SingleDeviceSharding). The
    tensors a pattern matches (the first pattern wins) become global jax.Arrays built with
    `jax.make_array_from_single_device_arrays` from the shards of this process's addressable devices only,
    each read from its own bytes in the file (shard-on-read; under `jax.distributed` every process reads just
    its shards); `rules` places the other tensors. Splits must be even (InvalidArgumentError naming the
    tensor, the dimension, its size and the mesh axes)."""
    sharded = _shard.load_jax(path, shardings) if shardings else {}
    pairs = rule_pairs(rules)
    if sharded:  # the sharded tensors stay out of the placement (host views, not read)
        pairs = [(_glob_literal(n), "host") for n in sharded] + pairs
    if isinstance(path, File):
        placements = plan(path, with_default(path, pairs, default))
    else:
        with File(path) as f:
            placements = plan(f, with_default(f, pairs, default))
    return {p.name: sharded[p.name] if p.name in sharded else place(p) for p in placements}


def stream(gather: Any, source: Any, offsets: Any, depth: int = 2, device: Any = None) -> Iterator["jax.Array"]:
    """`Gather.stream` yielding jax.Arrays: the batches of `gather` (a hostfirst.Gather) for each offset array of
    `offsets`, prefetched `depth` ahead by a background thread while the step runs. CUDA batches reach JAX
    through DLPack on the gather's device (no copy; the batch stays out of the ring while the array lives);
    host batches (cpu, cuda_host) are given to `jax.device_put` on `device` (default: JAX's device for the
    gather's device, jax.devices("cpu")[0] for host memory), which copies or aliases them as JAX decides -
    either way the batch is not refilled while an array made from it lives. Closing the generator cancels the
    prefetch."""
    kind = gather.device.kind
    dev = device
    if dev is None and kind != "cuda":
        dev = jax.devices("cpu")[0] if kind == "cuda_host" else jax_device(gather.device)
    for b in gather.stream(source, offsets, depth=depth):
        if kind == "cuda" and device is None:
            yield jax.dlpack.from_dlpack(b)
        elif kind == "cuda":
            yield jax.device_put(jax.dlpack.from_dlpack(b), dev)
        else:
            yield jax.device_put(b.numpy(), dev)


def _glob_literal(name: str) -> str:
    """A rule pattern matching exactly `name` (glob metacharacters escaped)."""
    return "".join("\\" + c if c in "*?[\\" else c for c in name)


def _leaf(x: Union[View, Buffer]) -> Any:
    """The pytree child JAX places: host memory as a zero-copy numpy array, CUDA buffers through DLPack."""
    if isinstance(x, Buffer) and not x.device.is_host:
        return ((jax.dlpack.from_dlpack(x),), None)
    return ((x.numpy(),), None)


def _register() -> None:
    for cls in (View, Buffer, _LoadedBuffer):  # by exact type: hostfirst.load's Buffers too
        try:
            jax.tree_util.register_pytree_node(cls, _leaf, lambda _aux, children: children[0])  # type: ignore
        except ValueError:  # registered already (the module was reloaded)
            pass


_register()
