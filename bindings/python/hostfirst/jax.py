"""hostfirst for JAX users: `load_file`, the drop-in for `safetensors.flax.load_file` that puts everything on the
default device with named exceptions, and `jax.device_put`/`jnp.asarray` of hostfirst tensors and buffers.

    import hostfirst.jax
    params = hostfirst.jax.load_file("model.safetensors", rules={"tokens": "host", "*": "default"})
    params["tokens"]      # a read-only numpy array on the file mapping (zero-copy, in host RAM)
    params["wte"]         # a jax.Array on JAX's device for hostfirst's default device

Rules take the forms people write: a dict {"tokens": "host", "*": "default"}, a list of "pattern=target"
strings (the CLI's form) or a list of (pattern, target) pairs; the first match wins, tensors no rule matches
stay on the host. Targets and the JAX device each becomes:

    host        a zero-copy, read-only numpy array on the file mapping (not a jax.Array: nothing moves); the
                packed F4/F6 dtypes, which numpy cannot hold, stay a hostfirst Tensor (DLPack, tobytes())
    cpu         a jax.Array on jax.devices("cpu")[0] (read into RAM by hostfirst, handed to JAX by DLPack)
    cuda:N      a jax.Array on JAX's GPU N (jax.devices("gpu")[N]; put by hostfirst, handed over by DLPack)
    default     hostfirst's default device (HOSTFIRST_DEFAULT_DEVICE, scopes, ...), then as above
    cuda_host   a writable numpy array in hostfirst's page-locked host memory

Before any byte moves, the plan is fit-checked on every device it uses (OutOfMemoryError, a MemoryError, with
the numbers), every device target is matched to a JAX device (UnavailableError when JAX has none) and every
device tensor's dtype to one JAX holds (TypeError). Importing this module also registers hostfirst's Tensor and
Buffer with JAX as pytrees, so `jax.device_put(tensor_or_buffer)` gives a jax.Array; `jax.dlpack.from_dlpack`
and `jnp.asarray` take them directly. A gather's batch stays unchanged while any array made from it lives.

Training batches: `hostfirst.jax.stream(gather, tokens, offsets, depth=2)` yields each batch as a jax.Array
while the next ones are read in the background (see `stream`).

Shard-on-read: `load_file(path, shardings={"layer.*.weight": NamedSharding(mesh, P("x", "y"))})` gives those
tensors as global jax.Arrays made from the addressable devices' shards only, each read from its own bytes.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

import jax
import numpy as np

from . import _abi, _dtypes
from ._core import Device, PathLike, check, text
from ._errors import OutOfMemoryError, error_named
from ._lib import lib
from ._tensors import Buffer, File, RuleList, Rules, Tensor, make_plan, rule_pairs
from . import _shard

HostArray = np.ndarray
Placed = Union["jax.Array", HostArray, Tensor]


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
    tensor: Tensor
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
    for p in placements:
        if p.device is None:
            continue
        if p.device.kind != "cuda_host":
            p.jax_device = jax_device(p.device)
        _dtypes.require_numpy_dtype(p.tensor.dtype_code)
    return placements


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


def load_file(path: PathLike, rules: Optional[Rules] = None,
              shardings: Optional[Mapping[str, Any]] = None) -> Dict[str, Placed]:
    """Loads a safetensors file (or a sharded set's index) by placement rules: a dict name -> jax.Array (device
    targets) or numpy array (host targets), in file order. Without rules everything goes to the default
    device (`{"*": "default"}`), like `safetensors.flax.load_file` but with the fit check first.

    `shardings`: {glob pattern: jax Sharding} (a NamedSharding on any mesh, or a SingleDeviceSharding). The
    tensors a pattern matches (the first pattern wins) become global jax.Arrays built with
    `jax.make_array_from_single_device_arrays` from the shards of this process's addressable devices only,
    each read from its own bytes in the file (shard-on-read; under `jax.distributed` every process reads just
    its shards); `rules` places the other tensors. Splits must be even (InvalidArgumentError naming the
    tensor, the dimension, its size and the mesh axes)."""
    sharded = _shard.load_jax(path, shardings) if shardings else {}
    rules = {"*": "default"} if rules is None else rules
    if sharded:  # the sharded tensors stay out of the placement (host views, not read)
        rules = [(_glob_literal(n), "host") for n in sharded] + rule_pairs(rules)
    with File(path) as f:
        placements = plan(f, rules)
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


def _leaf(x: Union[Tensor, Buffer]) -> Any:
    """The pytree child JAX places: host memory as a zero-copy numpy array, CUDA buffers through DLPack."""
    if isinstance(x, Buffer) and not x.device.is_host:
        return ((jax.dlpack.from_dlpack(x),), None)
    return ((x.numpy(),), None)


def _register() -> None:
    for cls in (Tensor, Buffer):
        try:
            jax.tree_util.register_pytree_node(cls, _leaf, lambda _aux, children: children[0])  # type: ignore
        except ValueError:  # registered already (the module was reloaded)
            pass


_register()
