"""hostfirst for JAX users: `load_file` and `load`, the drop-ins for `safetensors.flax.load_file` and
`safetensors.flax.load` that put everything on the default device with named exceptions, JAX memory kinds, and
`jax.device_put`/`jnp.asarray` of hostfirst tensors and buffers.

    import hostfirst.jax
    params = hostfirst.jax.load_file("model.safetensors", rules={"tokens": "host"})
    params["tokens"]      # the exception: a numpy array in host RAM (owned; zero_copy=True: the file mapping)
    params["wte"]         # everything else: a jax.Array on JAX's device for hostfirst's default device

Rules name the exceptions. They take the forms people write: a dict {"tokens": "host"}, a list of
"pattern=target" strings (the CLI's form), one such string, or a list of (pattern, target) pairs; the first
match wins, and tensors no rule matches go to `default` ("default": hostfirst's default device, unless you
say otherwise). An explicit `"*": "host"` rule keeps the rest on the host. Targets and what each becomes:

    host        a numpy array in host RAM, not a jax.Array (nothing goes to JAX): owned and writable, read by
                hostfirst's parallel readers (with `zero_copy=True`: a read-only view of the file mapping, nothing
                read, and SIGBUS if the file is truncated while you hold it); the packed F4/F6 dtypes, which numpy
                cannot hold, stay a hostfirst Buffer (a View with zero_copy=True)
    cpu         a jax.Array on jax.devices("cpu")[0] (read into RAM by hostfirst, handed to JAX without a copy)
    cuda:N      a jax.Array on JAX's GPU N (jax.devices("gpu")[N]; put by hostfirst, handed over by DLPack)
    default     hostfirst's default device (HOSTFIRST_DEFAULT_DEVICE, scopes, ...), then as above
    cuda_host   a jax.Array in the pinned_host memory of JAX's GPU 0: read into hostfirst's page-locked memory and
                handed to JAX (which copies it: JAX takes no kDLCUDAHost DLPack capsule, jax#22346)

JAX memory kinds (`MEMORY_KINDS`: "device", "pinned_host", "unpinned_host") go alone, on hostfirst's default
device ("pinned_host"), or after a device ("cpu:pinned_host", "cuda:0:unpinned_host", "default:device"): the
jax.Array's sharding carries that memory_kind, and `jax.device_put(x, x.sharding.with_memory_kind("device"))`
moves it between kinds, also under `jit`. On a GPU, pinned_host tensors are read into hostfirst's page-locked
memory (cuda_host), unpinned_host ones into ordinary RAM, device ones onto the GPU. CPU JAX has all three kinds.

Before any byte moves, the plan is fit-checked on every device it uses (OutOfMemoryError, a MemoryError, with
the numbers), every device target is matched to a JAX device (UnavailableError when JAX has none) and every
device tensor's dtype to one JAX holds (TypeError). Importing this module also registers hostfirst's View and
Buffer with JAX as pytrees, so `jax.device_put(tensor_or_buffer)` gives a jax.Array (of a View: an owned copy
of its bytes, never an alias of the file mapping); `jax.dlpack.from_dlpack` and `jnp.asarray` take them
directly. A gather's batch stays unchanged while any array made from it lives.

Training batches: `hostfirst.jax.stream(gather, tokens, offsets, depth=2)` yields each batch as a jax.Array
while the next ones are read in the background (see `stream`).

Shard-on-read: `load_file(path, shardings={"layer.*.weight": NamedSharding(mesh, P("x", "y"))})` gives those
tensors as global jax.Arrays made from the addressable devices' shards only, each read from its own bytes (a
sharding with a memory kind puts every shard in that kind of memory).

Writing: `save_file(tensors, filename, metadata=None)` is the drop-in for `safetensors.flax.save_file` (the same
bytes), and `save_tree(tree, path)` saves a whole pytree of jax.Arrays by their key paths ("params.dense.kernel").
Sharded arrays are written shard by shard (each distinct shard once: those whose `replica_id` is 0) without
gathering them; under `jax.distributed` every process writes the shards it holds into the same files (a
directory all processes see) and one process the headers and index: call it on every process.
"""

from __future__ import annotations

import ctypes
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Tuple, Union, cast, overload

try:
    import jax
except ImportError as e:  # pragma: no cover - tested in a venv without JAX (scripts/test-python.sh)
    raise ImportError(f"hostfirst.jax needs JAX: pip install hostfirst[jax] (or jax[cuda12] for GPUs) ({e})") from e
import numpy as np

from . import _abi, _dtypes, _page_cache
from ._core import Device, PathLike, c_string, check, check_backend, is_url, text
from ._devices import is_strict, resolve_target
from ._errors import OutOfMemoryError, error_named
from ._lib import lib
from ._owned import copy_view, host_arrays, memory_file, run_load
from ._owned import load_numpy as _load_numpy
from ._targets import MEMORY_KINDS, parse_target
from ._tensors import Buffer, File, RuleList, Rules, View, _Load, _LoadedBuffer, make_plan, rule_pairs, with_default
from . import _shard

__all__ = ["MEMORY_KINDS", "jax_device", "load", "load_file", "parse_target", "save", "save_file", "save_tree",
           "stream", "to_jax"]

HostArray = np.ndarray
#: What `load_file` gives a tensor when rules may keep some on the host: a jax.Array, a numpy array (a host
#: target) or a hostfirst View/Buffer (host targets of the packed F4/F6 dtypes, which numpy cannot hold).
Placed = Union["jax.Array", HostArray, View, Buffer]
#: `default=` values that place on a JAX device: without rules, `load_file` then gives only jax.Arrays.
OnDevice = Literal["default", "cpu", "cuda", "gpu", "cuda_host", "device", "pinned_host", "unpinned_host"]

def jax_device(device: Device) -> Any:
    """The JAX device a hostfirst device names: cpu -> jax.devices("cpu")[0], cuda:N -> JAX's GPU N, cuda_host
    (page-locked host memory, which belongs to no one GPU) -> JAX's GPU 0. UnavailableError when JAX has no
    such device."""
    if device.kind == "cpu":
        return jax.devices("cpu")[0]
    if device.kind in ("cuda", "cuda_host"):
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
class _Destination:
    """Where a rule's tensors end. `load_to`: the target hostfirst's plan loads them to; `host`: they stay numpy
    arrays (or hostfirst objects) in host memory; otherwise a jax.Array on the JAX device of `device` (None: the
    device the plan chose) in `memory_kind` (None: the device's default memory)."""

    load_to: str
    host: bool = False
    device: Optional[Device] = None
    memory_kind: Optional[str] = None


def _destination(target: str, zero_copy: bool) -> _Destination:
    spec, kind = parse_target(target)
    if spec.lower() == "host":
        return _Destination("host" if zero_copy else "cpu", host=True)
    if kind is None:
        if spec.lower() == "cuda_host":  # page-locked host memory: JAX's pinned_host
            return _Destination(spec, device=resolve_target(spec), memory_kind="pinned_host")
        return _Destination(spec)
    d = resolve_target(spec)  # the default device now (ImplicitPlacementError in strict mode)
    if d.kind == "cpu":
        return _Destination("cpu", device=d, memory_kind=kind)
    if d.kind == "cuda_host" and kind != "pinned_host":
        raise error_named("INVALID_ARGUMENT", f"target {target!r}: cuda_host is page-locked memory, JAX's "
                          "'pinned_host' kind (write 'cuda:N:unpinned_host' for ordinary host memory)")
    if d.kind == "cuda_host" or kind == "pinned_host":
        return _Destination("cuda_host", device=d if d.kind == "cuda" else Device._from_c(_abi.Device(
            _abi.HOSTFIRST_DEVICE_CUDA, 0)), memory_kind=kind)
    return _Destination("cpu" if kind == "unpinned_host" else str(d), device=d, memory_kind=kind)


def sharding_for(device: Device, memory_kind: Optional[str] = None) -> Any:
    """The JAX placement of a hostfirst device and memory kind: the JAX device itself when no kind is named,
    else a SingleDeviceSharding carrying the kind (UnavailableError where that device lacks the kind)."""
    dev = jax_device(device)
    if memory_kind is None:
        return dev
    kinds = {m.kind for m in dev.addressable_memories()}
    if memory_kind not in kinds:
        raise error_named("UNAVAILABLE", f"JAX device {dev} has no '{memory_kind}' memory (it has: "
                          f"{', '.join(sorted(kinds))})")
    return jax.sharding.SingleDeviceSharding(dev, memory_kind=memory_kind)


@dataclass
class _Tensor:
    """One tensor of a load: its name, where it ends (`dest`) and the hostfirst device the plan put it on."""

    name: str
    dest: _Destination
    device: Optional[Device]
    code: int = 0


def _plan(file: File, rules: Optional[Rules], default: str, zero_copy: bool,
          keep_host: Sequence[str] = ()) -> Tuple[List[_Tensor], Any, Any]:
    """Applies `rules` (then `default`) to every tensor of `file` (file order) and checks, before anything moves,
    that every device fits its tensors, that JAX has every device (and memory kind) it needs, and that every
    tensor bound for JAX has a dtype JAX holds. Returns the tensors, the plan handle (the caller frees it) and the
    rule list it was made from. `keep_host`: names loaded by other means (shard-on-read), left as views."""
    pairs = [(_glob_literal(n), "host") for n in keep_host] + rule_pairs(rules)
    dests = [_destination("host", True) for _ in keep_host] + \
        [_destination(t, zero_copy) for _, t in pairs[len(keep_host):]]
    c_pairs = [(p, d.load_to) for (p, _), d in zip(pairs, dests)]
    if len(with_default(file, c_pairs, "cpu")) > len(c_pairs):  # some tensor no rule matches: `default` is used
        default_dest = _destination(default, zero_copy)  # (resolved only then: strict mode refuses it only then)
        if default_dest.load_to != "host":
            c_pairs.append(("*", default_dest.load_to))
            dests.append(default_dest)
    unmatched = _destination("host", True)  # no rule and a zero-copy "host" default: stays a view
    rl = RuleList(c_pairs)
    ph = make_plan(file, rl)
    try:
        tensors: List[_Tensor] = []
        n = ctypes.c_size_t()
        check(lib.hostfirst_plan_tensor_count(ph, ctypes.byref(n)))
        for i in range(n.value):
            t = _abi.PlanTensorInfo()
            t.struct_size = ctypes.sizeof(t)
            check(lib.hostfirst_plan_tensor(ph, i, ctypes.byref(t)))
            on_device = t.placement == _abi.HOSTFIRST_PLACEMENT_DEVICE
            tensors.append(_Tensor(text(t.name), dests[t.rule] if t.rule >= 0 else unmatched,
                                   Device._from_c(t.device) if on_device else None))
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
        _check_jax(file, tensors)
    except BaseException:
        lib.hostfirst_plan_free(ph)
        raise
    return tensors, ph, rl


def _check_jax(file: File, tensors: List[_Tensor]) -> None:
    """JAX has every device and memory kind the tensors bound for it need, and can hold their dtypes (from a
    load of views only: one bulk call, nothing read); 64-bit ones with x64 off warn (TypeError when strict)."""
    probe = run_load(file, [("*", "host")])
    by_name = dict(zip(probe.names(), probe.columns()["d"].tolist()))
    codes = [by_name[t.name] for t in tensors]
    del probe
    seen = set()
    narrowed = []
    for t, code in zip(tensors, codes):
        t.code = code
        if t.dest.host or t.device is None:
            continue
        where = (t.dest.device or t.device, t.dest.memory_kind)
        if where not in seen:
            sharding_for(*where)  # UnavailableError before anything moves
            seen.add(where)
        try:
            dt = _dtypes.require_numpy_dtype(code)
        except TypeError as e:
            raise TypeError(f"{file.path}: tensor '{t.name}' ({_dtypes.NAMES.get(code, '?')}) cannot become a JAX "
                            f"array on {t.device}: {e}. Give it a host rule, e.g. rules="
                            f"{{{_glob_literal(t.name)!r}: 'host'}}, to keep it in host memory as a hostfirst "
                            "object") from None
        if dt.itemsize == 8 and dt.kind in "iuf" and not _x64():
            narrowed.append(f"'{t.name}' ({_dtypes.NAMES.get(code, '?')})")
    if narrowed:
        what = (f"{file.path}: {len(narrowed)} 64-bit tensor(s) would become 32-bit because JAX's x64 mode is "
                f"off: {', '.join(narrowed)}. Enable it (jax.config.update('jax_enable_x64', True) or "
                f"JAX_ENABLE_X64=1) to keep 64 bits, or give them a host rule to keep them numpy arrays")
        if is_strict():
            raise TypeError(what + " (strict mode: nothing was moved)")
        warnings.warn(what, UserWarning, stacklevel=4)


def _narrowing(dtypes: Sequence[Any], names: Sequence[str], stacklevel: int) -> None:
    """The x64 warning (TypeError in strict mode) for 64-bit numpy dtypes bound for JAX with x64 off."""
    if _x64():
        return
    wide = [f"'{n}' ({dt})" for n, dt in zip(names, dtypes) if dt.itemsize == 8 and dt.kind in "iuf"]
    if not wide:
        return
    what = (f"tensor {', '.join(wide)} would become 32-bit because JAX's x64 mode is off; enable it "
            "(jax.config.update('jax_enable_x64', True) or JAX_ENABLE_X64=1) to keep 64 bits")
    if is_strict():
        raise TypeError(what + " (strict mode)")
    warnings.warn(what, UserWarning, stacklevel=stacklevel + 1)


def to_jax(array: np.ndarray, name: str, device: Union[Device, str] = "default") -> Any:
    """A host numpy array as a jax.Array on the JAX device of hostfirst target `device`, which may name a
    memory kind ("cpu:pinned_host"); `safe_open`'s jax framework. A 64-bit array with x64 off warns first
    (TypeError in strict mode), as `load_file` does. JAX may alias the array's memory (on CPU): pass memory of
    your own (an owned array), not a view of a file mapping."""
    _narrowing([array.dtype], [name], stacklevel=2)
    spec, kind = parse_target(device)
    return jax.device_put(array, sharding_for(resolve_target(spec), kind))


def host_to_jax(arrays: Dict[str, np.ndarray], device: Union[Device, str] = "default") -> Dict[str, Any]:
    """Owned host arrays as jax.Arrays on one device (and memory kind), in one `jax.device_put` of the lot."""
    _narrowing([a.dtype for a in arrays.values()], list(arrays), stacklevel=2)
    spec, kind = parse_target(device)
    put = jax.device_put(list(arrays.values()), sharding_for(resolve_target(spec), kind))
    return dict(zip(arrays, put))


def _x64() -> bool:
    """Whether JAX keeps 64-bit types now (its x64 flag, or an enable_x64 context)."""
    return bool(jax.dtypes.canonicalize_dtype(np.int64) == np.dtype(np.int64))


def _place(file: File, tensors: List[_Tensor], ph: Any, opts: Optional[_abi.LoadOptions] = None) -> Dict[str, Placed]:
    """Runs the load (one job per device: cpu tensors in one host allocation, cuda:N ones in one device
    allocation) and hands each tensor over: host -> numpy (owned, a slice of the load's cpu allocation; or the
    zero-copy view), cpu -> jax.device_put of those arrays in one batch per device and memory kind (no copy on
    CPU), cuda:N -> DLPack, cuda_host -> the page-locked buffer as numpy, put in the GPU's pinned_host memory."""
    lh = ctypes.c_void_p()
    check(lib.hostfirst_load_run(file._handle(), ph, _page_cache.options_ref(opts), ctypes.byref(lh)))
    load = _Load(lh.value)
    at = {name: i for i, name in enumerate(load.names())}  # the load's index of each tensor (file order)
    owned = host_arrays(load, [at[t.name] for t in tensors if t.device is not None and t.device.kind == "cpu"])
    out: Dict[str, Placed] = {}
    batches: Dict[Tuple[Device, Optional[str]], List[str]] = {}
    for t in tensors:
        i = at[t.name]
        if t.device is None:  # a view (zero-copy host): numpy on the mapping, or the View for packed dtypes
            view = _load_view(load, t.name)
            out[t.name] = view if _dtypes.numpy_dtype(t.code) is None else view.numpy()
        elif t.dest.host:
            out[t.name] = owned[i] if i in owned else _LoadedBuffer(load, i, t.name)
        elif t.device.kind == "cpu":
            out[t.name] = owned[i]
            batches.setdefault((t.dest.device or t.device, t.dest.memory_kind), []).append(t.name)
        elif t.device.kind == "cuda_host":
            out[t.name] = _pinned_handover(_LoadedBuffer(load, i, t.name), t.dest.device or t.device)
        else:
            out[t.name] = jax.dlpack.from_dlpack(_LoadedBuffer(load, i, t.name))
    for (device, kind), names in batches.items():
        for name, array in zip(names, jax.device_put([out[n] for n in names], sharding_for(device, kind))):
            out[name] = array
    return out


def _pinned_handover(buffer: Buffer, device: Device) -> Any:
    """A cuda_host buffer (hostfirst's page-locked memory) as a jax.Array in the pinned_host memory of the JAX
    device of `device` (GPU N; JAX's GPU 0 for cuda_host itself). JAX refuses kDLCUDAHost DLPack capsules
    (jax#22346), so the buffer goes over as a numpy array and JAX copies it into its own pinned memory."""
    return jax.device_put(buffer.numpy(), sharding_for(device, "pinned_host"))


def _load_view(load: _Load, name: str) -> View:
    kind, view = ctypes.c_uint32(), ctypes.c_void_p()
    check(lib.hostfirst_load_get(load.h, c_string(name), ctypes.byref(kind), None, ctypes.byref(view)))
    return View(view.value)


@overload
def load_file(path: Union[PathLike, File], rules: None = None, shardings: Optional[Mapping[str, Any]] = None,
              default: OnDevice = "default", *, backend: str = "mmap",
              zero_copy: bool = False, page_cache: str = "keep") -> Dict[str, "jax.Array"]: ...


@overload
def load_file(path: Union[PathLike, File], rules: Optional[Rules] = None,
              shardings: Optional[Mapping[str, Any]] = None, default: str = "default", *,
              backend: str = "mmap", zero_copy: bool = False,
              page_cache: str = "keep") -> Dict[str, Placed]: ...


def load_file(path: Union[PathLike, File], rules: Optional[Rules] = None,
              shardings: Optional[Mapping[str, Any]] = None, default: str = "default", *,
              backend: str = "mmap", zero_copy: bool = False, page_cache: str = "keep") -> Dict[str, Any]:
    """Loads a safetensors file (or a sharded set's index) by placement rules: a dict name -> jax.Array (device
    targets) or numpy array (host targets), in file order. `path` may be any file `hostfirst.open` opens (.npy,
    an llm.c shard, a Megatron dataset), or a File already open (`hostfirst.open_raw` for a headerless token
    file; it stays open). Like `safetensors.flax.load_file` (the drop-in:
    `load_file(path)` puts everything on the default device) but with the fit check first.

    `rules` name the exceptions (dict, "pattern=target" strings, one such string, or pairs; the first match
    wins): `rules={"tokens": "host"}` keeps the tokens a numpy array in host memory and puts every other tensor
    on `default`. `default` is where tensors no rule matches go: "default" (hostfirst's default device:
    HOSTFIRST_DEFAULT_DEVICE, scopes, ...), "host", "cpu", "cuda:N", or any of these with a JAX memory kind
    ("cpu:pinned_host"; see the module doc). An explicit "*" rule of yours is matched first, so
    `{"embed.*": "default", "*": "host"}` keeps all but the embeddings on the host.

    Host arrays are owned and writable by default (read by hostfirst's parallel readers into one allocation
    they share): rewriting, truncating or replacing the file afterwards cannot change them or crash the
    process. `zero_copy=True` makes host targets read-only views of the file's mapping instead (nothing read:
    the way to keep a token file larger than RAM "in host memory"), with the mapping's hazard: **a read of a
    view after the file was truncated kills the process with SIGBUS**, and a rewrite in place shows through.
    jax.Arrays never alias the mapping either way.

    On JAX's CPU device there is one copy, not two: hostfirst's readers fill the load's arena (one owned
    allocation, each tensor 64-byte aligned, the alignment below which XLA's CPU client copies) and each
    jax.Array is its tensor's part of that arena (`arr.unsafe_buffer_pointer()` is the arena's address; JAX
    keeps a reference that keeps the arena alive while any of the arrays lives). jax.Arrays are immutable and
    nothing rewrites the arena while they live: it is memory of the load's own, not the file's mapping, so a
    change to the file cannot reach them, and host-target numpy arrays of the same load live in their own
    parts of it. A 64-bit tensor JAX narrows (x64 off) is converted into a new array; other devices (a GPU)
    get the bytes by DLPack or JAX's own copy, as before.

    64-bit tensors (I64, U64, F64) placed on a JAX device while JAX's x64 mode is off would become 32-bit:
    a UserWarning names them first (as `jnp.asarray` warns), and in strict mode (`hostfirst.strict()`) it is
    a TypeError before anything moves. Tensors of a dtype JAX cannot hold (F4, F6) raise TypeError naming the
    tensor unless a host rule keeps them.

    `shardings`: {glob pattern: jax Sharding} (a NamedSharding on any mesh, or a SingleDeviceSharding, with or
    without a memory kind). The tensors a pattern matches (the first pattern wins) become global jax.Arrays
    built with `jax.make_array_from_single_device_arrays` from the shards of this process's addressable devices
    only, each read from its own bytes in the file (shard-on-read; under `jax.distributed` every process reads
    just its shards); `rules` places the other tensors. Splits must be even (InvalidArgumentError naming the
    tensor, the dimension, its size and the mesh axes).

    `backend` ("mmap" or "pread"): safetensors 0.8's keyword, checked; both read the same way here.

    `page_cache` ("keep", the default; "drop"; "bypass"): what the load leaves in the page cache (the C
    header's hostfirst_page_cache; shard-on-read tensors keep it as it is for now); anything else is
    InvalidArgumentError naming page_cache.

    Typing: without `rules` (and with `default` left alone or naming a JAX device or memory kind literally:
    "cpu", "cuda", "pinned_host", ...), every value is a jax.Array and the result is typed
    `Dict[str, jax.Array]`, as `safetensors.flax.load_file`'s is; with rules (or another `default`, such as
    "host" or a variable) it is `Dict[str, jax.Array | np.ndarray | View | Buffer]`."""
    check_backend(backend)
    opts = _page_cache.load_options(page_cache)
    sharded = _shard.load_jax(path, shardings) if shardings else {}
    f = path if isinstance(path, File) else File(path)
    try:
        tensors, ph, _rules = _plan(f, rules, default, zero_copy, keep_host=list(sharded))
        try:
            placed = _place(f, tensors, ph, opts)
        finally:
            lib.hostfirst_plan_free(ph)
    finally:
        if f is not path:
            f._release()
    return {t.name: sharded[t.name] if t.name in sharded else placed[t.name] for t in tensors}


def load(data: bytes) -> Dict[str, "jax.Array"]:
    """Every tensor of a safetensors image in memory (the bytes of a file) as a jax.Array on hostfirst's default
    device, in file order (`safetensors.flax.load`). The image is validated as files are (a FormatError, a
    ValueError, names what is wrong); TypeError for anything but bytes, and for dtypes JAX cannot hold."""
    f = memory_file(data)
    try:
        arrays = _load_numpy(f)
    finally:
        f._release()
    return cast(Dict[str, "jax.Array"], host_to_jax(arrays, "default"))


def stream(gather: Any, source: Any, offsets: Any, depth: int = 2, device: Any = None) -> Iterator["jax.Array"]:
    """`Gather.stream` yielding jax.Arrays: the batches of `gather` (a hostfirst.Gather) for each offset array of
    `offsets`, prefetched `depth` ahead by a background thread while the step runs. CUDA batches reach JAX
    through DLPack on the gather's device (no copy; the batch stays out of the ring while the array lives, so
    keep at most the gather's `ring_bound` of them, or make the Gather with a larger one). Host batches (cpu,
    cuda_host) are copied into memory of JAX's own on `device` (default: JAX's device for the gather's device,
    jax.devices("cpu")[0] for host memory), so the batch goes back to the ring at once and any number of the
    arrays can be kept (gradient accumulation). Closing the generator cancels the prefetch."""
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
            yield jax.device_put(np.array(b.numpy()), dev)  # a copy: device_put would alias the batch on CPU
        del b


def _glob_literal(name: str) -> str:
    """A rule pattern matching exactly `name` (glob metacharacters escaped)."""
    return "".join("\\" + c if c in "*?[\\" else c for c in name)


def _leaf(x: Union[View, Buffer]) -> Any:
    """The pytree child JAX places: a View's bytes as an owned copy (never the file mapping, which JAX would
    alias on CPU), host buffers as zero-copy numpy arrays, CUDA buffers through DLPack."""
    if isinstance(x, View):
        return ((copy_view(x),), None)
    if not x.device.is_host:
        return ((jax.dlpack.from_dlpack(x),), None)
    return ((x.numpy(),), None)


def _register() -> None:
    for cls in (View, Buffer, _LoadedBuffer):  # by exact type: hostfirst.load's Buffers too
        try:
            jax.tree_util.register_pytree_node(cls, _leaf, lambda _aux, children: children[0])  # type: ignore
        except ValueError:  # registered already (the module was reloaded)
            pass


_register()


# ---- writing ----------------------------------------------------------------------------------------------

_SAVES = [0]  # collective saves made by this process (the same count on every process of a job)


def _distributed_agree(path: str) -> Any:
    """An agreement callback over jax.distributed's key-value store: every process posts its flag, waits at a
    barrier, reads every flag. Keys are unique per collective save (a per-process count, equal on every
    process because every process makes the same saves) and per step."""
    from jax._src import distributed  # the coordination service jax.distributed.initialize started

    client = distributed.global_state.client
    if client is None:
        raise error_named("UNAVAILABLE", "a save by several processes needs jax.distributed.initialize() first")
    _SAVES[0] += 1
    import hashlib
    token = f"hostfirst/save/{_SAVES[0]}/{hashlib.sha1(path.encode()).hexdigest()[:12]}"
    n, me = jax.process_count(), jax.process_index()
    steps = [0]
    timeout_ms = 10 * 60 * 1000

    def agree(ok: bool) -> bool:
        steps[0] += 1
        key = f"{token}/{steps[0]}"
        client.key_value_set(f"{key}/{me}", "1" if ok else "0")
        client.wait_at_barrier(f"{key}/barrier", timeout_ms)
        return all(client.blocking_key_value_get(f"{key}/{r}", timeout_ms) == "1" for r in range(n))

    return agree


def _key_name(path: Any, sep: str) -> str:
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return sep.join(parts)


def _save_arrays(named: List[Any], path: Any, metadata: Optional[Dict[str, str]], max_part_bytes: int,
                 sync: bool) -> Dict[str, Any]:
    """Saves (name, array) pairs: jax.Arrays shard by shard (the shards whose replica_id is 0, each at its place
    in the global array), anything else as numpy; collectively under jax.distributed when an array spans
    processes."""
    from ._save import Writer, check_metadata

    pairs = check_metadata(metadata)
    multi = jax.process_count() > 1 and any(isinstance(a, jax.Array) and not a.is_fully_addressable
                                            for _, a in named)
    kw: Dict[str, Any] = {}
    if multi:
        import os
        kw = dict(rank=jax.process_index(), world=jax.process_count(),
                  agree=_distributed_agree(os.path.abspath(os.fsdecode(path))))
    # An upload to object storage is a stream in file order and takes whole tensors: a sharded array of this
    # process is gathered to host one tensor at a time (memory: the largest tensor, never the whole file).
    remote = is_url(path)
    with Writer(path, max_part_bytes=max_part_bytes, sync=sync, **kw) as w:
        for name, a in named:
            if not isinstance(name, str):
                raise TypeError(f"tensor names must be str, got {name!r}")
            if isinstance(a, jax.Array) and (multi or len(a.sharding.device_set) > 1) and not (remote and not multi):
                # Shard by shard: each distinct shard once (replica 0), by the process that holds it.
                w.declare(name, np.dtype(a.dtype), a.shape)
                for s in a.addressable_shards:
                    if s.replica_id != 0:
                        continue
                    start = [sl.start or 0 for sl in s.index] if a.ndim else []
                    w.add_piece(name, start, np.asarray(s.data))
            elif multi and jax.process_index() != 0:
                # A host value every process has: the first process writes it.
                arr = np.asarray(a)
                w.declare(name, arr.dtype, arr.shape)
            else:
                w.add(name, np.asarray(a))
        if pairs is not None:
            w.metadata(dict(pairs))
        return w.finish()


def save_file(tensors: Dict[str, Any], filename: Any, metadata: Optional[Dict[str, str]] = None, *,
              max_part_bytes: int = 0, sync: bool = True) -> None:
    """`safetensors.flax.save_file`'s drop-in: the same bytes (metadata in the dict's order), written through a
    temporary file renamed over `filename` (never a half-written file). Sharded jax.Arrays are written shard by
    shard without being gathered; arrays that span processes make it collective (call it on every process). To a
    URL (`s3://...`, one process) each sharded array is gathered to host, one tensor at a time."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"expected a dict of name -> array, got {type(tensors).__name__}")
    _save_arrays(list(tensors.items()), filename, metadata, max_part_bytes, sync)


def save(tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """`safetensors.flax.save`'s drop-in: the bytes of the file (arrays copied to host by JAX)."""
    from ._save import save as save_numpy

    return save_numpy({k: np.asarray(v) for k, v in tensors.items()}, metadata)


def save_tree(tree: Any, path: Any, metadata: Optional[Dict[str, str]] = None, *, sep: str = ".",
              max_part_bytes: int = 0, sync: bool = True) -> Dict[str, Any]:
    """Saves every leaf of a pytree of jax.Arrays (and numpy arrays) under its key path joined by `sep`
    ({"params": {"dense": {"kernel": k}}} -> "params.dense.kernel", as flax's flatten_dict). Sharded arrays are
    written shard by shard from the devices that hold them, each distinct shard once; under jax.distributed
    every process writes its own shards into the same files (call it on every process, on a path all of them
    see) and the first process the headers and index. Returns what was written (`parts`, `index`, ...)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    named = [(_key_name(p, sep), leaf) for p, leaf in leaves]
    seen: Dict[str, int] = {}
    for n, _ in named:
        seen[n] = seen.get(n, 0) + 1
    dup = [n for n, c in seen.items() if c > 1]
    if dup:
        raise error_named("INVALID_ARGUMENT", f"two leaves of the tree have the name {dup[0]!r} (choose another sep)")
    return _save_arrays(named, path, metadata, max_part_bytes, sync)
