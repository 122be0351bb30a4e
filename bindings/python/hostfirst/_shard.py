"""Shard-on-read from Python over libhostfirst's hostfirst_shard_* API: a device mesh, partition specs chosen by
tensor-name patterns, and the shards of the mesh positions this process owns, read from the files without the
rest of each tensor. Engines (JAX, MPI, torch.distributed) do the communication; this reads."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _abi
from ._core import Device, PathLike, as_device, c_path, check, check_path, text
from ._lib import lib
from ._tensors import Buffer, File

_vp = ctypes.c_void_p


def spec_text(spec: Any) -> str:
    """The C text form of a partition spec: a str is taken as it is ("x,y", "_,y", "x+y", ""); a sequence is
    read like JAX's PartitionSpec, one entry per dimension: None (not split), an axis name, or a tuple of axis
    names (split over their product, the first major)."""
    if isinstance(spec, str):
        return spec
    parts = []
    for entry in spec:
        if entry is None:
            parts.append("_")
        elif isinstance(entry, str):
            parts.append(entry)
        else:
            parts.append("+".join(entry) if len(entry) else "_")
    return ",".join(parts)


@dataclass(eq=False)
class Shard:
    """One shard: the part of tensor `name` that mesh `position` holds, in its own `buffer` on `device`.
    `index` is the tuple of slices it covers in the whole tensor (of shape `shape`), `bytes_read` the file bytes
    read for it (0 when it was copied from another owned position's identical part, `copy_of`); `rule` is the
    index of the rule that matched (None: replicated)."""

    name: str
    position: int
    device: Device
    rule: Optional[int]
    shape: Tuple[int, ...]
    index: Tuple[slice, ...]
    buffer: Buffer
    bytes_read: int
    copy_of: Optional[int]

    def numpy(self) -> Any:
        """The shard as a numpy array: zero-copy on a host buffer (bf16/fp8 via ml_dtypes)."""
        return self.buffer.numpy()

    def __repr__(self) -> str:
        return f"Shard('{self.name}', position={self.position}, index={self.index}, device='{self.device}')"


SKIP = None
"""The spec of a rule whose tensors are left out (hostfirst_shard_rules_skip)."""


def _mesh_axes(mesh: Union[Mapping[str, int], Iterable[Tuple[str, int]]]) -> Tuple[List[str], List[int]]:
    items = list(mesh.items()) if isinstance(mesh, Mapping) else list(mesh)
    return [str(a) for a, _ in items], [int(n) for _, n in items]


def load_shards(path: Union[PathLike, File], mesh: Union[Mapping[str, int], Iterable[Tuple[str, int]]],
                rules: Sequence[Tuple[str, Any]], owned: Union[Mapping[int, Any], Iterable[int]], *,
                max_over_read: Optional[float] = None, threads: int = 0, page_cache: str = "keep") -> List[Shard]:
    """Loads the shards of the mesh positions this process owns from a file of named tensors: a path opened as
    `hostfirst.open` opens it (safetensors or a sharded set, .npy, an llm.c shard, a Megatron dataset), or a
    File already open (`hostfirst.open_raw` for a headerless token file; the File stays open and the caller's).

    mesh: {axis: size} in order (or a sequence of (axis, size)), like JAX's Mesh; positions are numbered
    row-major over the axes. rules: [(glob pattern, spec)], the first match wins, unmatched tensors are
    replicated; spec as in `spec_text`, or SKIP (None) to leave the tensors a rule matches out. owned:
    {position: device spec} (or a sequence of positions, all on "cpu"). Every device is fit-checked before anything moves; each shard is read from its byte runs only.
    Returns the shards, by tensor (file order), then by owned position (the order given).
    page_cache ("keep", the default; "drop"; "bypass": host parts read with direct I/O where the file system allows it): what the run leaves in the page
    cache (hostfirst_shard_run_options.page_cache); anything else is InvalidArgumentError naming page_cache."""
    from ._page_cache import page_cache_value

    policy = page_cache_value(page_cache)  # checked before anything is opened
    names, sizes = _mesh_axes(mesh)
    where: Dict[int, Any] = dict(owned) if isinstance(owned, Mapping) else {int(p): "cpu" for p in owned}
    positions = (ctypes.c_uint64 * max(len(where), 1))(*[int(p) for p in where])
    devices = (_abi.Device * max(len(where), 1))(*[as_device(d)._c() for d in where.values()])
    opts = _abi.ShardOptions()
    check(lib.hostfirst_shard_options_init(ctypes.byref(opts), ctypes.sizeof(opts)))
    opts.max_over_read = float(max_over_read or 0.0)
    opts.threads = int(threads)
    fh, mh, rh, ph, res = _vp(), _vp(), _vp(), _vp(), _vp()
    try:
        if isinstance(path, File):
            fp: Any = path._handle()  # the caller's: used, never freed here
        else:
            check_path(lib.hostfirst_file_open(c_path(path), ctypes.byref(fh)), path)
            fp = fh
        c_names = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
        check(lib.hostfirst_shard_mesh_new(c_names, (ctypes.c_uint64 * len(sizes))(*sizes), len(names),
                                           ctypes.byref(mh)))
        check(lib.hostfirst_shard_rules_new(mh, ctypes.byref(rh)))
        for pattern, spec in rules:
            if spec is SKIP:
                check(lib.hostfirst_shard_rules_skip(rh, str(pattern).encode()))
            else:
                check(lib.hostfirst_shard_rules_add(rh, str(pattern).encode(), spec_text(spec).encode()))
        check(lib.hostfirst_shard_plan_make(fp, rh, positions, devices, len(where), ctypes.byref(opts),
                                            ctypes.byref(ph)))
        ro = _abi.ShardRunOptions()
        check(lib.hostfirst_shard_run_options_init(ctypes.byref(ro), ctypes.sizeof(ro)))
        ro.page_cache = policy
        check(lib.hostfirst_shard_run(ph, ctypes.byref(ro), ctypes.byref(res)))
        n = ctypes.c_size_t()
        check(lib.hostfirst_shard_plan_count(ph, ctypes.byref(n)))
        out: List[Shard] = []
        for i in range(n.value):
            info = _abi.ShardInfo()
            info.struct_size = ctypes.sizeof(info)
            check(lib.hostfirst_shard_plan_describe(ph, i, ctypes.byref(info)))
            b, read = _vp(), ctypes.c_uint64()
            check(lib.hostfirst_shard_result_get(res, i, ctypes.byref(b), ctypes.byref(read)))
            buf = Buffer(b.value)
            s = Shard(
                name=text(info.name),
                position=info.position,
                device=buf.device,
                rule=info.rule if info.rule >= 0 else None,
                shape=tuple(info.shape[k] for k in range(info.rank)),
                index=tuple(slice(info.start[k], info.start[k] + info.shard_shape[k]) for k in range(info.rank)),
                buffer=buf,
                bytes_read=read.value,
                copy_of=info.copy_of if info.copy_of >= 0 else None,
            )
            out.append(s)
        return out
    finally:
        for h, free in ((res, lib.hostfirst_shard_result_free), (ph, lib.hostfirst_shard_plan_free),
                        (rh, lib.hostfirst_shard_rules_free), (mh, lib.hostfirst_shard_mesh_free),
                        (fh, lib.hostfirst_file_free)):
            if h.value:
                free(h)


def load_jax(path: Union[PathLike, File], shardings: Mapping[str, Any], *, max_over_read: Optional[float] = None) -> Dict[str, Any]:
    """{glob pattern: jax Sharding} -> {name: jax.Array} for every tensor a pattern matches (the first pattern
    wins; tensors no pattern matches are not loaded); `path` as for `load_shards`. Each array is global, built with
    `jax.make_array_from_single_device_arrays` from the shards of this process's addressable devices only:
    each is read from its byte runs into host memory by libhostfirst and put on its JAX device. Works in one
    process and under `jax.distributed` (each process reads its own shards; no communication here).

    Shardings: `NamedSharding` (any mesh and PartitionSpec; several meshes may be mixed, one plan each) and
    `SingleDeviceSharding`. Other kinds raise TypeError. Splits must be even (JAX's rule too): an uneven
    dimension raises InvalidArgumentError naming the tensor, the dimension, its size and the mesh axes. A
    sharding with a memory kind (`NamedSharding(mesh, spec, memory_kind="pinned_host")`) gives an array whose
    shards are in that kind of memory."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

    rules = []  # (pattern, the caller's sharding, an equivalent NamedSharding)
    for pattern, sh in shardings.items():
        if isinstance(sh, NamedSharding):
            named = sh
        elif isinstance(sh, SingleDeviceSharding):
            (dev,) = sh.device_set
            named = NamedSharding(Mesh(np.array([dev]), ("one",)), PartitionSpec())  # type: ignore[no-untyped-call]
        else:
            raise TypeError(f"hostfirst: sharding for '{pattern}' is a {type(sh).__name__}; use a NamedSharding "
                            "(Mesh + PartitionSpec) or a SingleDeviceSharding")
        rules.append((pattern, sh, named))
    # One plan per (mesh, the mesh axes a spec splits over): its own patterns split, every other pattern
    # skipped. Devices that differ only along the other axes hold the same part of each tensor the plan places
    # (P(None, "y") on an (x, y) mesh: the x pairs): one of them is read into host memory and `jax.device_put`
    # copies it to each (a host copy per replica would be one more copy of those bytes).
    groups: List[Tuple[Any, FrozenSet[str]]] = []
    for pattern, _, named in rules:
        key = (named.mesh, _split_axes(named.spec, named.mesh.axis_names))
        if not any(m == key[0] and u == key[1] for m, u in groups):
            groups.append(key)
    me = jax.process_index()
    out = {}
    for mesh, used in groups:
        flat = list(mesh.devices.flat)

        def mine_rule(n: Any) -> bool:
            return bool(n.mesh == mesh and _split_axes(n.spec, mesh.axis_names) == used)

        specs = [(p, tuple(n.spec) if mine_rule(n) else SKIP) for p, _, n in rules] + [("*", SKIP)]
        mine = [k for k, d in enumerate(flat) if d.process_index == me]
        if not mine:
            continue
        same = _replica_of(mine, mesh, used)
        owned = {k: "cpu" for k in mine if same[k] == k}
        axes = list(zip(mesh.axis_names, mesh.devices.shape))
        by_name: Dict[str, Dict[int, Shard]] = {}
        for s in load_shards(path, axes, specs, owned, max_over_read=max_over_read):
            by_name.setdefault(s.name, {})[s.position] = s
        for name, parts in by_name.items():
            first = next(iter(parts.values()))
            assert first.rule is not None, "the plan holds only tensors its rules name (a last skip rule '*')"
            sharding = rules[first.rule][1]
            host = {k: s.numpy() for k, s in parts.items()}
            kind = getattr(sharding, "memory_kind", None)  # a sharding with a memory kind: each shard in that kind
            arrays = [jax.device_put(host[same[k]], flat[k] if kind is None else
                                     SingleDeviceSharding(flat[k], memory_kind=kind)) for k in mine]
            out[name] = jax.make_array_from_single_device_arrays(first.shape, sharding, arrays)
    return out


def _split_axes(spec: Any, axis_names: Sequence[str]) -> FrozenSet[str]:
    """The mesh axes a JAX PartitionSpec splits over. An entry that is not None, an axis name or a tuple of
    names counts as splitting over every axis."""
    used = set()
    for entry in spec:
        if entry is None:
            continue
        if isinstance(entry, str):
            used.add(entry)
        elif isinstance(entry, (tuple, list)) and all(isinstance(a, str) for a in entry):
            used.update(entry)
        else:
            used.update(axis_names)
    return frozenset(used)


def _replica_of(positions: List[int], mesh: Any, used: FrozenSet[str]) -> Dict[int, int]:
    """{position: the first of `positions` whose coordinates agree with it on every mesh axis in `used`}:
    positions mapped to one hold the same part of every tensor whose spec splits over just those axes."""
    import numpy as np

    keep = [i for i, a in enumerate(mesh.axis_names) if a in used]
    shape = tuple(mesh.devices.shape)
    first: Dict[Tuple[int, ...], int] = {}
    out = {}
    for k in positions:
        coords = [int(c) for c in np.unravel_index(k, shape)] if shape else []
        out[k] = first.setdefault(tuple(coords[i] for i in keep), k)
    return out
