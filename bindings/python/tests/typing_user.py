"""A user's script that touches every public name of hostfirst, hostfirst.numpy and hostfirst.jax, written as a user
would with annotations: tests/test_typing.py runs `mypy --strict` over it (and runs it, where JAX is installed).

    python typing_user.py TOKENS.safetensors MODEL.safetensors
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple, Type, Union

import jax
import numpy as np
import numpy.typing as npt

import hostfirst
import hostfirst.jax
import hostfirst.numpy


def census() -> str:
    backends: List[hostfirst.Backend] = hostfirst.backends()
    devices: List[hostfirst.Device] = hostfirst.devices()
    info: hostfirst.DeviceInfo = devices[0].info()
    current: hostfirst.DefaultDevice = hostfirst.default_device()
    with hostfirst.default_device("cpu") as scoped:
        where: hostfirst.Device = hostfirst.resolve_target("default")
        assert where == scoped
    hostfirst.set_default_device("cpu")
    hostfirst.set_default_device(None)
    carried: hostfirst.CarriedScope = hostfirst.capture_scope()
    with carried as device:
        assert device.kind in ("cpu", "cuda")
    with hostfirst.strict():
        pass
    handles: int = hostfirst.handle_count()
    engine: str = hostfirst.read_engine()
    path: str = hostfirst.library_path
    return f"{backends[0].name} {info.name} {current.source} {handles} {engine} {path}"


def tensors(tokens_path: str, model_path: str) -> int:
    f: hostfirst.File = hostfirst.open(tokens_path)
    t: hostfirst.View = f["tokens"]
    dt: np.dtype[Any] = t.dtype  # always a numpy dtype (TypeError for F4/F6, which have none)
    raw: hostfirst.File = hostfirst.open_raw(model_path, "uint8", offset=8, name="all")  # any bytes as one tensor
    fmt: str = raw.format
    head: hostfirst.View = t[0:1024]
    owned: hostfirst.Buffer = head.to("cpu")
    placed: Dict[str, Union[hostfirst.View, hostfirst.Buffer]] = hostfirst.load(model_path, rules={"f32": "cpu"})
    pairs: List[Tuple[str, str]] = hostfirst.rule_pairs({"f32": "cpu", "*": "host"})
    shards: List[hostfirst.Shard] = hostfirst.load_shards(tokens_path, {"x": 1}, [("*", ("x",))], [0])
    g = hostfirst.Gather("cpu", t.dtype, batch=4, window=16, ring_bound=8)
    batch: hostfirst.Buffer = g.run(t, [0, 1, 2, 3])
    offsets = hostfirst.OffsetStream(1337, len(t), window=16, batch=4)
    seen = 0
    for step, b in zip(range(3), g.stream(t, offsets)):  # the usage Gather.stream's docstring shows
        seen += b.nbytes + step
    with hostfirst.safe_open(model_path, framework="numpy", backend="pread") as so:
        keys: List[str] = so.keys()
        md: Optional[Dict[str, str]] = so.metadata()
        first: npt.NDArray[Any] = so.get_tensor(keys[0])
        part: npt.NDArray[Any] = so.get_slice(keys[0])[...]
        every: Dict[str, Any] = so.get_tensors()
        plan: hostfirst.ReadPlan = so.read_plan([(keys[0], slice(0, 1))], max_over_read=1.25)
        cost: Tuple[int, int, int, int, float] = (plan.needed_bytes, plan.read_bytes, plan.requests,
                                                  plan.peak_memory_bytes, plan.over_read)
        fetched: Dict[str, Any] = dict(so.prefetch(plan))
        plan.close()
    arrays: Dict[str, npt.NDArray[Any]] = hostfirst.numpy.load_file(model_path)
    mapped: Dict[str, npt.NDArray[Any]] = hostfirst.numpy.load_file(model_path, zero_copy=True)
    with open(model_path, "rb") as fh:
        from_bytes: Dict[str, npt.NDArray[Any]] = hostfirst.numpy.load(fh.read())
    return (dt.itemsize + len(fmt) + len(placed) + len(pairs) + len(shards) + batch.nbytes + owned.nbytes + seen + len(md or {}) + first.ndim +
            part.ndim + len(every) + len(cost) + len(fetched) + len(arrays) + len(mapped) + len(from_bytes))


def with_jax(tokens_path: str, model_path: str) -> int:
    kinds: Tuple[str, ...] = hostfirst.jax.MEMORY_KINDS
    target: Tuple[str, Optional[str]] = hostfirst.jax.parse_target("cpu:pinned_host")
    params: Dict[str, Any] = hostfirst.jax.load_file(model_path, rules={"f32": "cpu:pinned_host"}, default="cpu")
    placed: Dict[str, Union[jax.Array, np.ndarray, hostfirst.View, hostfirst.Buffer]] = hostfirst.jax.load_file(
        model_path, rules={"f32": "host"})
    on_device: Dict[str, jax.Array] = hostfirst.jax.load_file(model_path, default="cpu")  # no rules: jax.Arrays
    with open(model_path, "rb") as fh:
        loaded: Dict[str, jax.Array] = hostfirst.jax.load(fh.read())
    import os

    out = os.path.join(os.path.dirname(model_path), "typing-user-saved.safetensors")
    hostfirst.jax.save_file(on_device, out)
    blob: bytes = hostfirst.jax.save(on_device)
    written: Dict[str, Any] = hostfirst.jax.save_tree({"params": on_device}, out)
    cpu: Any = hostfirst.jax.jax_device(hostfirst.Device("cpu"))
    x: jax.Array = hostfirst.jax.to_jax(np.arange(4, dtype=np.float32), "x", "cpu")
    t = hostfirst.open(tokens_path)["tokens"]
    g = hostfirst.Gather("cpu", t.dtype, batch=4, window=16)
    kept: List[jax.Array] = []
    for step, arr in zip(range(6), hostfirst.jax.stream(g, t, hostfirst.OffsetStream(7, len(t), window=16, batch=4))):
        kept.append(arr)  # gradient accumulation: every batch kept
    return (len(kinds) + len(target) + len(params) + len(placed) + len(loaded) + len(kept) + int(x.sum()) +
            len(str(cpu)) + len(blob) + len(written))


def errors() -> List[Type[BaseException]]:
    classes: List[Type[BaseException]] = [
        hostfirst.Error, hostfirst.HostfirstError, hostfirst.FormatError, hostfirst.MissingFileError,
        hostfirst.AlreadyUsedError, hostfirst.BufferTooSmallError, hostfirst.BusyError, hostfirst.CancelledError,
        hostfirst.DeviceErrorError, hostfirst.DuplicateTensorError, hostfirst.HeaderTooLargeError,
        hostfirst.HeaderTooSmallError, hostfirst.ImplicitPlacementError, hostfirst.IncompleteBufferError,
        hostfirst.InternalError, hostfirst.InvalidArgumentError, hostfirst.InvalidHandleError,
        hostfirst.InvalidHeaderJsonError, hostfirst.InvalidHeaderLengthError, hostfirst.InvalidHeaderUtf8Error,
        hostfirst.InvalidIndexError, hostfirst.InvalidOffsetError, hostfirst.IoError, hostfirst.LimitExceededError,
        hostfirst.MetadataLimitExceededError, hostfirst.MisalignedSliceError, hostfirst.NoSuchDeviceError,
        hostfirst.NotFoundError, hostfirst.NotReadyError, hostfirst.NotSafetensorsError, hostfirst.NullArgumentError,
        hostfirst.OutOfMemoryError, hostfirst.OutOfRangeError, hostfirst.PanicError, hostfirst.ScopeMismatchError,
        hostfirst.TensorInvalidInfoError, hostfirst.TruncatedError, hostfirst.UnavailableError,
        hostfirst.UnmatchedRuleError, hostfirst.UnsupportedError, hostfirst.ValidationOverflowError,
        hostfirst.UnmatchedRuleWarning, hostfirst.OtherFormatError, hostfirst.UnsupportedDtypeError,
        hostfirst.InvalidHeaderError, hostfirst.UnsupportedVersionError, hostfirst.UnsupportedLayoutError,
        hostfirst.NoSpaceError, hostfirst.PermissionDeniedError, hostfirst.NativeExtensionWarning,
    ]
    try:
        hostfirst.open("/nonexistent/model.safetensors")
    except hostfirst.MissingFileError as e:
        status: Optional[int] = e.status
        name: str = e.status_name
        assert status is not None and name == "IO"
    try:
        raise hostfirst.OutOfMemoryError("m", None)
    except hostfirst.OutOfMemoryError as e:
        needed: Optional[int] = e.needed
        assert needed is None
    return classes


def save(model_path: str) -> int:
    """The writer: one array and one tensor of the model saved to a file beside it; the tensor count back."""
    import os

    out = os.path.join(os.path.dirname(model_path), "typing-user-saved.safetensors")
    with hostfirst.Writer(out, sync=False) as w:
        w.add("zeros", np.zeros((2, 3), np.float32))
        w.add("f32", hostfirst.open(model_path)["f32"])  # a View: read through the engine
        w.metadata({"by": "typing_user"})
    info: Optional[Dict[str, Any]] = w.info
    assert info is not None
    count: int = info["tensors"]
    arrays: Dict[str, np.ndarray] = {"a": np.arange(6, dtype=np.int32)}
    hostfirst.numpy.save_file(arrays, out, metadata={"by": "typing_user"})
    blob: bytes = hostfirst.numpy.save(arrays)
    assert hostfirst.numpy.load(blob)["a"].tolist() == list(range(6))
    return count


def main(argv: List[str]) -> int:
    print(census())
    print(tensors(argv[1], argv[2]))
    print(with_jax(argv[1], argv[2]))
    print(len(errors()))
    print(save(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
