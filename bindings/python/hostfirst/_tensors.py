"""Host-first loading: files (a read-only mapping of name -> Tensor), zero-copy tensor views and row slices,
NumPy arrays and DLPack export.

Placement: `Tensor.to("cuda:0")` -> Buffer (DLPack-exportable), `hostfirst.load(path, rules=[...])`.
"""

import ctypes
from collections.abc import Mapping

from . import _lib
from ._core import check, lib, text

P = ctypes.POINTER
c_status = _lib.c_status


class ViewInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("shape", P(ctypes.c_uint64)),
        ("nbytes", ctypes.c_uint64),
        ("file_offset", ctypes.c_uint64),
        ("data_offset", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
        ("alignment", ctypes.c_uint64),
    ]


# DLPack 1.1 layouts (include/hostfirst.h: hostfirst_dlpack_*; identical to dlpack.h's).
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", P(ctypes.c_int64)),
        ("strides", P(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32),
    ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.c_void_p),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

DLPACK_FLAG_READ_ONLY = 1
KDLCPU = 1

_lib.declare_more(lib, {
    "hostfirst_file_open": (c_status, [ctypes.c_char_p, P(ctypes.c_void_p)]),
    "hostfirst_file_free": (c_status, [ctypes.c_void_p]),
    "hostfirst_file_tensor_count": (c_status, [ctypes.c_void_p, P(ctypes.c_size_t)]),
    "hostfirst_file_tensor_name": (c_status, [ctypes.c_void_p, ctypes.c_size_t, P(ctypes.c_char_p)]),
    "hostfirst_file_find": (c_status, [ctypes.c_void_p, ctypes.c_char_p, P(ctypes.c_size_t)]),
    "hostfirst_file_metadata_count": (c_status, [ctypes.c_void_p, P(ctypes.c_size_t)]),
    "hostfirst_file_metadata_get": (c_status, [ctypes.c_void_p, ctypes.c_size_t, P(ctypes.c_char_p), P(ctypes.c_char_p)]),
    "hostfirst_file_view": (c_status, [ctypes.c_void_p, ctypes.c_char_p, P(ctypes.c_void_p)]),
    "hostfirst_view_free": (c_status, [ctypes.c_void_p]),
    "hostfirst_view_describe": (c_status, [ctypes.c_void_p, P(ViewInfo)]),
    "hostfirst_view_slice_rows": (c_status, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, P(ctypes.c_void_p)]),
    "hostfirst_view_prefault": (c_status, [ctypes.c_void_p, P(ctypes.c_bool)]),
    "hostfirst_view_copy": (c_status, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, P(ctypes.c_uint64)]),
    "hostfirst_dtype_name": (ctypes.c_char_p, [ctypes.c_uint32]),
    "hostfirst_view_to_dlpack": (c_status, [ctypes.c_void_p, P(P(DLManagedTensorVersioned))]),
    "hostfirst_buffer_to_dlpack": (c_status, [ctypes.c_void_p, P(P(DLManagedTensorVersioned))]),
})

# ---- PyCapsule plumbing (pure ctypes) ------------------------------------------------------------------
_py = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)  # own function objects: never touch pythonapi's
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_py.PyCapsule_New.restype = ctypes.py_object
_py.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
_py.PyCapsule_IsValid.restype = ctypes.c_int
_py.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_py.PyCapsule_GetPointer.restype = ctypes.c_void_p
_py.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_VERSIONED = b"dltensor_versioned"  # module-lifetime storage: capsules keep pointing at these bytes


def _call_deleter(ptr):
    m = ctypes.cast(ptr, P(DLManagedTensorVersioned)).contents
    if m.deleter:
        _Deleter(m.deleter)(ptr)


@_CapsuleDestructor
def _capsule_destructor(capsule):
    # Runs when the capsule dies. A consumer that took the tensor renamed it to "used_dltensor_versioned"
    # and owns the deleter call; otherwise (never consumed) we release it here.
    try:
        if _py.PyCapsule_IsValid(capsule, _VERSIONED):
            _call_deleter(_py.PyCapsule_GetPointer(capsule, _VERSIONED))
    except Exception:  # noqa: BLE001 - at interpreter exit the module may be half torn down; never raise here
        pass


def _capsule(managed_ptr):
    return _py.PyCapsule_New(ctypes.cast(managed_ptr, ctypes.c_void_p), _VERSIONED, _capsule_destructor)


def _check_dlpack_request(max_version, dl_device, copy, stream, expected_device):
    if max_version is None or tuple(max_version)[0] < 1:
        raise BufferError(
            "hostfirst exports versioned DLPack tensors only (DLPack >= 1.0, to carry the read-only flag); "
            "the consumer asked for the legacy unversioned format"
        )
    if dl_device is not None and tuple(dl_device) != tuple(expected_device):
        raise BufferError(f"cannot export to DLPack device {tuple(dl_device)}: the data is on {tuple(expected_device)}")
    if copy:
        raise BufferError("hostfirst exports zero-copy only (copy=True requested)")
    if stream is not None and expected_device[0] == KDLCPU:
        raise BufferError("stream must be None for a CPU tensor")


# ---- dtypes ----------------------------------------------------------------------------------------------
def _numpy_dtype(name):
    import numpy as np

    plain = {
        "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16, "I32": np.int32,
        "U32": np.uint32, "I64": np.int64, "U64": np.uint64, "F16": np.float16, "F32": np.float32,
        "F64": np.float64, "C64": np.complex64,
    }
    if name in plain:
        return np.dtype(plain[name])
    via_ml = {
        "BF16": "bfloat16", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
        "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    }
    if name in via_ml:
        try:
            import ml_dtypes
        except ImportError as e:
            raise TypeError(f"dtype {name} needs the ml_dtypes package for NumPy arrays") from e
        return np.dtype(getattr(ml_dtypes, via_ml[name]))
    raise TypeError(f"dtype {name} is packed below one byte per element; NumPy has no such dtype "
                    "(use __dlpack__ or tobytes())")


# ---- files and tensors -----------------------------------------------------------------------------------
class Tensor:
    """A zero-copy, read-only view of one tensor (or a row range of one) of an open file.

    `.name .dtype .shape .nbytes`; `t[a:b]` is a zero-copy row slice; `t.numpy()` a read-only NumPy array on
    the mapping; `numpy.from_dlpack(t)` (and any DLPack consumer) gets the same memory, read-only. The tensor,
    and every array made from it, keeps the file mapping alive on its own.
    """

    __slots__ = ("_h", "name", "dtype", "dtype_code", "shape", "nbytes", "data_ptr", "alignment", "__weakref__")

    def __init__(self, handle):
        self._h = handle
        i = ViewInfo()
        i.struct_size = ctypes.sizeof(i)
        check(lib.hostfirst_view_describe(handle, ctypes.byref(i)))
        self.name = text(i.name)
        self.dtype_code = i.dtype
        self.dtype = text(lib.hostfirst_dtype_name(i.dtype))
        self.shape = tuple(i.shape[k] for k in range(i.rank))
        self.nbytes = i.nbytes
        self.data_ptr = i.data or 0
        self.alignment = i.alignment

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.hostfirst_view_free(h)

    def __repr__(self):
        return f"Tensor('{self.name}', {self.dtype}, shape={self.shape})"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a scalar tensor")
        return self.shape[0]

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise TypeError("tensors support row slices t[a:b] only")
        if not self.shape:
            check(lib.hostfirst_view_slice_rows(self._h, 0, 0, ctypes.byref(ctypes.c_void_p())))  # UNSUPPORTED
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise ValueError("row slices must be contiguous (step 1)")
        out = ctypes.c_void_p()
        check(lib.hostfirst_view_slice_rows(self._h, start, max(start, stop), ctypes.byref(out)))
        return Tensor(out.value)

    def prefault(self):
        """Maps this tensor's pages now (before a training loop gathers from it), so reads through the mapping
        take no page faults. Returns True when the pages were mapped, False when the system offers only
        read-ahead advice or the tensor is over a memory buffer. Raises OutOfMemoryError (with the fit numbers)
        for a tensor larger than available memory, TruncatedError for a file that shrank."""
        populated = ctypes.c_bool(False)
        check(lib.hostfirst_view_prefault(self._h, ctypes.byref(populated)))
        return populated.value

    def tobytes(self):
        """A copy of the bytes, read with pread (a truncated file raises TruncatedError, never SIGBUS)."""
        buf = ctypes.create_string_buffer(max(self.nbytes, 1))
        check(lib.hostfirst_view_copy(self._h, buf, self.nbytes, None))
        return buf.raw[: self.nbytes]

    def numpy(self):
        """A read-only NumPy array straight on the mapping (zero-copy); bf16 and fp8 via ml_dtypes."""
        import numpy as np

        dt = _numpy_dtype(self.dtype)
        raw = (ctypes.c_char * self.nbytes).from_address(self.data_ptr) if self.nbytes else bytearray()
        if self.nbytes:
            raw._hostfirst_owner = self  # the array -> ctypes buffer -> this view -> the mapping
        a = np.frombuffer(raw, dtype=dt).reshape(self.shape)
        a.flags.writeable = False
        return a

    def __dlpack_device__(self):
        return (KDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        _check_dlpack_request(max_version, dl_device, copy, stream, (KDLCPU, 0))
        out = P(DLManagedTensorVersioned)()
        check(lib.hostfirst_view_to_dlpack(self._h, ctypes.byref(out)))
        return _capsule(out)

    def to(self, device="default"):
        """Puts this tensor on a device ("cpu", "cuda:0", "cuda_host", or "default" through the default stack;
        strict mode refuses "default"): fit-checked before allocating; returns a Buffer (DLPack-exportable)."""
        out = ctypes.c_void_p()
        if str(device).strip().lower() == "default":
            check(lib.hostfirst_put(self._h, None, None, ctypes.byref(out)))
        else:
            from ._devices import as_device

            d = as_device(device)._c()
            check(lib.hostfirst_put(self._h, ctypes.byref(d), None, ctypes.byref(out)))
        return Buffer(out.value)


class BufferInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device", _lib.Device),
        ("dtype", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("shape", P(ctypes.c_uint64)),
        ("nbytes", ctypes.c_uint64),
        ("address", ctypes.c_uint64),
        ("name", ctypes.c_char_p),
    ]


_lib.declare_more(lib, {
    "hostfirst_put": (ctypes.c_uint32, [ctypes.c_void_p, P(_lib.Device), ctypes.c_void_p, P(ctypes.c_void_p)]),
    "hostfirst_buffer_describe": (ctypes.c_uint32, [ctypes.c_void_p, P(BufferInfo)]),
    "hostfirst_buffer_free": (ctypes.c_uint32, [ctypes.c_void_p]),
    "hostfirst_buffer_copy_to_host": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]),
    "hostfirst_buffer_to_dlpack": (ctypes.c_uint32, [ctypes.c_void_p, P(P(DLManagedTensorVersioned))]),
    "hostfirst_rules_new": (ctypes.c_uint32, [P(ctypes.c_void_p)]),
    "hostfirst_rules_add": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    "hostfirst_rules_free": (ctypes.c_uint32, [ctypes.c_void_p]),
    "hostfirst_plan_make": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_void_p, P(ctypes.c_void_p)]),
    "hostfirst_plan_free": (ctypes.c_uint32, [ctypes.c_void_p]),
    "hostfirst_load_run": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, P(ctypes.c_void_p)]),
    "hostfirst_load_get": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_char_p, P(ctypes.c_uint32), P(ctypes.c_void_p), P(ctypes.c_void_p)]),
    "hostfirst_load_free": (ctypes.c_uint32, [ctypes.c_void_p]),
})


class Buffer:
    """Memory owned on one device (cpu, cuda:N, cuda_host) holding a tensor's bytes. `.device .dtype .shape
    .nbytes .address`; `tobytes()` copies back to the host; `__dlpack__` exports it (writable) to torch, JAX,
    CuPy or NumPy (host kinds)."""

    def __init__(self, handle):
        self._h = handle
        i = BufferInfo()
        i.struct_size = ctypes.sizeof(i)
        check(lib.hostfirst_buffer_describe(handle, ctypes.byref(i)))
        from ._devices import Device

        self.device = Device._from_c(i.device)
        self.name = text(i.name)
        self.dtype = text(lib.hostfirst_dtype_name(i.dtype))
        self.shape = tuple(i.shape[k] for k in range(i.rank))
        self.nbytes = i.nbytes
        self.address = i.address

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None and getattr(self, "_owner", None) is None:
            lib.hostfirst_buffer_free(h)

    def __repr__(self):
        return f"Buffer('{self.name}', {self.dtype}, shape={self.shape}, device='{self.device}')"

    def tobytes(self):
        buf = ctypes.create_string_buffer(max(self.nbytes, 1))
        check(lib.hostfirst_buffer_copy_to_host(self._h, buf, self.nbytes))
        return buf.raw[: self.nbytes]

    def __dlpack_device__(self):
        return self.device.dlpack_device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        _check_dlpack_request(max_version, dl_device, copy, stream, self.device.dlpack_device)
        out = P(DLManagedTensorVersioned)()
        check(lib.hostfirst_buffer_to_dlpack(self._h, ctypes.byref(out)))
        return _capsule(out)


class File(Mapping):
    """An open safetensors file or sharded set: a read-only mapping of tensor name -> Tensor, in file order.

    `len(f)`, `name in f`, `f[name]`, iteration, `.metadata` (dict of str), `.path`. Tensors stay valid after
    the file is closed. Use as a context manager or call `close()`; garbage collection closes it too.
    """

    def __init__(self, path):
        self.path = str(path)
        h = ctypes.c_void_p()
        check(lib.hostfirst_file_open(self.path.encode(), ctypes.byref(h)))
        self._h = h.value
        n = ctypes.c_size_t()
        check(lib.hostfirst_file_tensor_count(self._h, ctypes.byref(n)))
        names = []
        for i in range(n.value):
            p = ctypes.c_char_p()
            check(lib.hostfirst_file_tensor_name(self._h, i, ctypes.byref(p)))
            names.append(p.value.decode())
        self._names = names
        self._set = set(names)
        m = ctypes.c_size_t()
        check(lib.hostfirst_file_metadata_count(self._h, ctypes.byref(m)))
        md = {}
        for i in range(m.value):
            k, v = ctypes.c_char_p(), ctypes.c_char_p()
            check(lib.hostfirst_file_metadata_get(self._h, i, ctypes.byref(k), ctypes.byref(v)))
            md[text(k.value)] = text(v.value)
        self.metadata = md

    def _handle(self):
        if self._h is None:
            from ._errors import error_for

            raise error_for(3, f"{self.path}: file is closed")
        return self._h

    def __getitem__(self, name):
        if name not in self._set:
            raise KeyError(name)
        out = ctypes.c_void_p()
        check(lib.hostfirst_file_view(self._handle(), str(name).encode(), ctypes.byref(out)))
        return Tensor(out.value)

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def __contains__(self, name):
        return name in self._set

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            check(lib.hostfirst_file_free(h))

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"hostfirst.File('{self.path}', {len(self)} tensors)"


def open(path):  # noqa: A001 - hostfirst.open, like builtins.open for tensors
    """Opens a safetensors file (or a sharded set through its *.safetensors.index.json): reads the header only,
    maps the data read-only. Returns a File, a mapping of name -> Tensor in file order."""
    return File(path)


def load(path, rules=None):
    """Places a whole file by rules: `rules` is a list of (glob pattern, target) with targets a device spec,
    "default" or "host"; the first match wins and unmatched tensors stay on the host (zero-copy views).
    Every device is fit-checked before the first byte moves. Returns a dict name -> Tensor (host) or Buffer."""
    f = File(path)
    rh, ph, lh = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    try:
        check(lib.hostfirst_rules_new(ctypes.byref(rh)))
        for pattern, target in rules or []:
            check(lib.hostfirst_rules_add(rh, str(pattern).encode(), str(target).encode()))
        check(lib.hostfirst_plan_make(f._handle(), rh, ctypes.byref(ph)))
        check(lib.hostfirst_load_run(f._handle(), ph, None, None, ctypes.byref(lh)))
        out = {}
        for name in f:
            kind, buf, view = ctypes.c_uint32(), ctypes.c_void_p(), ctypes.c_void_p()
            check(lib.hostfirst_load_get(lh, name.encode(), ctypes.byref(kind), ctypes.byref(buf), ctypes.byref(view)))
            out[name] = Buffer(buf.value) if buf.value else Tensor(view.value)
        return out
    finally:
        for h, free in ((lh, lib.hostfirst_load_free), (ph, lib.hostfirst_plan_free), (rh, lib.hostfirst_rules_free)):
            if h.value:
                free(h)
        f.close()


_lib.declare_more(lib, {
    "hostfirst_dtype_from_name": (ctypes.c_uint32, [ctypes.c_char_p, P(ctypes.c_uint32)]),
    "hostfirst_gather_new": (ctypes.c_uint32, [_lib.Device, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64,
                                               P(ctypes.c_void_p)]),
    "hostfirst_gather_run": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_void_p, P(ctypes.c_uint64), ctypes.c_size_t]),
    "hostfirst_gather_run_batch": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_void_p, P(ctypes.c_uint64),
                                                     ctypes.c_size_t, P(ctypes.c_void_p)]),
    "hostfirst_gather_free": (ctypes.c_uint32, [ctypes.c_void_p]),
    "hostfirst_random_offsets": (ctypes.c_uint32, [P(ctypes.c_uint64), ctypes.c_uint64, ctypes.c_uint64,
                                                   P(ctypes.c_uint64), ctypes.c_size_t]),
})


class Gather:
    """The data-loader primitive: B windows of T elements of a 1-D host tensor, assembled as a [B, T] batch on
    `device` in one transfer, into a small ring of batches reused once released (no allocation per step).

        g = hostfirst.Gather("cuda:0", "U16", batch=64, window=1025)   # or "cpu", "default"
        tokens.prefault()                      # once: later batches take no page faults
        batch = g.run(tokens, offsets)         # a Buffer; jax.dlpack.from_dlpack(batch), torch.from_dlpack(...)

    Each `run` returns the batch it filled, a Buffer of its own: it (and anything exported from it) never changes
    while it lives; the gather fills batches no one holds (a small ring, see hostfirst_gather_new in the C header).
    `device` may be "default" (resolved now through the default stack)."""

    def __init__(self, device, dtype, batch, window):
        from ._devices import resolve_target

        d = resolve_target(device)
        code = ctypes.c_uint32()
        check(lib.hostfirst_dtype_from_name(str(dtype).encode(), ctypes.byref(code)))
        h = ctypes.c_void_p()
        check(lib.hostfirst_gather_new(d._c(), code.value, int(batch), int(window), ctypes.byref(h)))
        self._h = h.value
        self.device, self.dtype, self.batch, self.window = d, str(dtype), int(batch), int(window)
        self._offsets = (ctypes.c_uint64 * self.batch)()

    def run(self, tensor, offsets):
        """Row i = tensor[offsets[i] : offsets[i] + window] for every i; returns the batch (a new Buffer) once in
        place. OutOfRangeError names the first offset whose window runs past the end."""
        if len(offsets) != self.batch:
            raise ValueError(f"{len(offsets)} offsets for a batch of {self.batch}")
        for i, o in enumerate(offsets):
            self._offsets[i] = int(o)
        b = ctypes.c_void_p()
        check(lib.hostfirst_gather_run_batch(self._h, tensor._h, self._offsets, self.batch, ctypes.byref(b)))
        return Buffer(b.value)

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.hostfirst_gather_free(h)

    def __repr__(self):
        return f"Gather([{self.batch}, {self.window}] {self.dtype} on '{self.device}')"


class OffsetStream:
    """nanoGPT's `torch.randint(len - window, (n,))`, reproducible: successive `next(...)` calls draw from one
    seeded splitmix64 stream (the same numbers as `hostfirst_random_offsets` and the CLI's `--seed`)."""

    def __init__(self, seed):
        self._state = ctypes.c_uint64(int(seed))

    def next(self, length, window, n):
        out = (ctypes.c_uint64 * int(n))()
        check(lib.hostfirst_random_offsets(ctypes.byref(self._state), int(length), int(window), out, int(n)))
        return list(out)
