"""The C ABI this package speaks: struct mirrors, the constants it uses, and the one table of C signatures.

Every struct mirrors a `struct hostfirst_*` of include/hostfirst.h field by field (same names, same order);
`_c_name_` names the C type. tests/test_layout.py compiles a C probe against the header and checks every
mirror's size and field offsets, and every constant below, against it. tests/abi_check.py (run by the cargo
tests, tests/it/python_abi.rs, and by test_layout.py) parses the header and requires a signature below for
every function it declares and a mirror for every struct, with the ctypes types its C types call for.
"""

from __future__ import annotations

import ctypes

P = ctypes.POINTER
c_status = ctypes.c_uint32  # hostfirst_status
c_handle = ctypes.c_void_p  # every opaque handle (hostfirst_file*, hostfirst_view*, ...)


# ---- constants of include/hostfirst.h (values checked against the header by tests/test_layout.py) ----------
HOSTFIRST_DEVICE_CPU = 1
HOSTFIRST_DEVICE_CUDA = 2
HOSTFIRST_DEVICE_CUDA_HOST = 3
HOSTFIRST_DLPACK_MAJOR_VERSION = 1
HOSTFIRST_DLPACK_MINOR_VERSION = 1
HOSTFIRST_DLPACK_FLAG_READ_ONLY = 1
HOSTFIRST_DLPACK_FLAG_IS_COPIED = 2
HOSTFIRST_DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED = 4
HOSTFIRST_DLPACK_DEVICE_CPU = 1
HOSTFIRST_DLPACK_DEVICE_CUDA = 2
HOSTFIRST_DLPACK_DEVICE_CUDA_HOST = 3
HOSTFIRST_DLPACK_COPY_IF_NEEDED = 0
HOSTFIRST_DLPACK_COPY_ALWAYS = 1
HOSTFIRST_DLPACK_COPY_NEVER = 2
HOSTFIRST_GATHER_DEFAULT_RING_BOUND = 4
HOSTFIRST_PLACEMENT_HOST = 1
HOSTFIRST_PLACEMENT_DEVICE = 2
HOSTFIRST_LOADED_VIEW = 1
HOSTFIRST_LOADED_BUFFER = 2
HOSTFIRST_VERSION_MAJOR = 1
HOSTFIRST_VERSION_MINOR = 1
HOSTFIRST_VERSION_PATCH = 0

CONSTANTS = {k: v for k, v in dict(globals()).items() if k.startswith("HOSTFIRST_")}



class _Mirror(ctypes.Structure):
    """A ctypes mirror of one C struct of the header (`_c_name_`)."""

    _c_name_ = ""


class Device(_Mirror):
    _c_name_ = "hostfirst_device"
    _fields_ = [("kind", ctypes.c_int32), ("ordinal", ctypes.c_int32)]


class FitInfo(_Mirror):
    _c_name_ = "hostfirst_fit_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("needed", ctypes.c_uint64),
        ("free", ctypes.c_uint64),
        ("total", ctypes.c_uint64),
        ("device", Device),
    ]


class BackendInfo(_Mirror):
    _c_name_ = "hostfirst_backend_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("status", ctypes.c_uint32),
        ("reason", ctypes.c_char_p),
        ("driver_version", ctypes.c_char_p),
        ("device_count", ctypes.c_uint32),
    ]


class DeviceInfo(_Mirror):
    _c_name_ = "hostfirst_device_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device", Device),
        ("name", ctypes.c_char_p),
        ("total_memory", ctypes.c_uint64),
        ("uuid", ctypes.c_char_p),
        ("pci_bus_id", ctypes.c_char_p),
        ("compute_capability_major", ctypes.c_int32),
        ("compute_capability_minor", ctypes.c_int32),
        ("multiprocessor_count", ctypes.c_uint32),
    ]


class CarriedScope(_Mirror):
    _c_name_ = "hostfirst_carried_scope"
    _fields_ = [("device", Device), ("strict", ctypes.c_int32)]


class ViewInfo(_Mirror):
    _c_name_ = "hostfirst_view_info"
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
        ("strides", P(ctypes.c_uint64)),
    ]


class BufferInfo(_Mirror):
    _c_name_ = "hostfirst_buffer_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device", Device),
        ("dtype", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("shape", P(ctypes.c_uint64)),
        ("nbytes", ctypes.c_uint64),
        ("address", ctypes.c_uint64),
        ("name", ctypes.c_char_p),
    ]


class LoadEntry(_Mirror):
    _c_name_ = "hostfirst_load_entry"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("device", Device),
        ("rank", ctypes.c_uint32),
        ("shape", P(ctypes.c_uint64)),
        ("nbytes", ctypes.c_uint64),
        ("address", ctypes.c_uint64),
    ]


class PlanTensorInfo(_Mirror):
    _c_name_ = "hostfirst_plan_tensor_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("placement", ctypes.c_uint32),
        ("rule", ctypes.c_int32),
        ("device", Device),
        ("nbytes", ctypes.c_uint64),
    ]


class PlanDeviceInfo(_Mirror):
    _c_name_ = "hostfirst_plan_device_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device", Device),
        ("bytes", ctypes.c_uint64),
        ("tensors", ctypes.c_uint64),
        ("usable", ctypes.c_uint64),
        ("total", ctypes.c_uint64),
        ("fits", ctypes.c_int32),
        ("largest_name", ctypes.c_char_p),
        ("largest_bytes", ctypes.c_uint64),
    ]


class PlanUnmatchedRuleInfo(_Mirror):
    _c_name_ = "hostfirst_plan_unmatched_rule_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("rule", ctypes.c_uint32),
        ("shadowed_by", ctypes.c_int32),
        ("pattern", ctypes.c_char_p),
        ("target", ctypes.c_char_p),
        ("tensor", ctypes.c_char_p),
        ("message", ctypes.c_char_p),
    ]


# DLPack 1.1 (the header's hostfirst_dlpack_*, layout-identical to dlpack.h's DL* structs).
class DLPackVersion(_Mirror):
    _c_name_ = "hostfirst_dlpack_version"
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLPackDevice(_Mirror):
    _c_name_ = "hostfirst_dlpack_device"
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]  # hostfirst_dlpack_device_type


class DLPackDtype(_Mirror):
    _c_name_ = "hostfirst_dlpack_dtype"
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLPackTensor(_Mirror):
    _c_name_ = "hostfirst_dlpack_tensor"
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLPackDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLPackDtype),
        ("shape", P(ctypes.c_int64)),
        ("strides", P(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackManagedTensorVersioned(_Mirror):
    _c_name_ = "hostfirst_dlpack_managed_tensor_versioned"
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # void (*)(hostfirst_dlpack_managed_tensor_versioned *)
        ("flags", ctypes.c_uint64),  # hostfirst_dlpack_flags: an OR of HOSTFIRST_DLPACK_FLAG_*
        ("dl_tensor", DLPackTensor),
    ]


class DLPackManagedTensor(_Mirror):
    """The unversioned ("legacy") form, dlpack.h's DLManagedTensor: the capsule "dltensor"."""

    _c_name_ = "hostfirst_dlpack_managed_tensor"
    _fields_ = [
        ("dl_tensor", DLPackTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # void (*)(hostfirst_dlpack_managed_tensor *)
    ]


class DLPackOptions(_Mirror):
    """What a DLPack consumer asked for (`__dlpack__`'s arguments)."""

    _c_name_ = "hostfirst_dlpack_options"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("max_version", DLPackVersion),
        ("stream", ctypes.c_int64),
        ("has_stream", ctypes.c_int32),
        ("copy", ctypes.c_uint32),  # hostfirst_dlpack_copy
        ("has_dl_device", ctypes.c_int32),
        ("dl_device", DLPackDevice),
        ("legacy", ctypes.c_int32),
    ]


class PutOptions(_Mirror):
    _c_name_ = "hostfirst_put_options"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("threads", ctypes.c_uint32),
        ("resident", ctypes.c_int32),
        ("staging_bytes", ctypes.c_uint64),
        ("chunk_bytes", ctypes.c_uint64),
        ("progress", ctypes.c_void_p),  # hostfirst_progress_fn
        ("user", ctypes.c_void_p),
        ("copy_on_write", ctypes.c_int32),
        ("page_cache", ctypes.c_uint64),  # a hostfirst_page_cache value (1.1)
    ]


class PutStats(_Mirror):
    _c_name_ = "hostfirst_put_stats"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("register_seconds", ctypes.c_double),
        ("reused_registration", ctypes.c_int32),
        ("staged_instead", ctypes.c_int32),
    ]


class LoadOptions(_Mirror):
    _c_name_ = "hostfirst_load_options"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("copy_on_write", ctypes.c_int32),
        ("progress", ctypes.c_void_p),  # hostfirst_progress_fn
        ("user", ctypes.c_void_p),
        ("page_cache", ctypes.c_uint32),  # hostfirst_page_cache (1.1)
    ]


class ShardOptions(_Mirror):
    _c_name_ = "hostfirst_shard_options"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("max_over_read", ctypes.c_double),
        ("max_read_bytes", ctypes.c_uint64),
        ("threads", ctypes.c_uint32),
        ("chunk_bytes", ctypes.c_uint64),
        ("staging_bytes", ctypes.c_uint64),
    ]


class ShardRunOptions(_Mirror):
    _c_name_ = "hostfirst_shard_run_options"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("progress", ctypes.c_void_p),  # hostfirst_progress_fn
        ("user", ctypes.c_void_p),
        ("page_cache", ctypes.c_uint32),  # hostfirst_page_cache (1.1)
    ]


class ShardInfo(_Mirror):
    _c_name_ = "hostfirst_shard_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("tensor", ctypes.c_size_t),
        ("position", ctypes.c_uint64),
        ("device", Device),
        ("rule", ctypes.c_int32),
        ("rank", ctypes.c_uint32),
        ("shape", P(ctypes.c_uint64)),
        ("shard_shape", P(ctypes.c_uint64)),
        ("start", P(ctypes.c_uint64)),
        ("nbytes", ctypes.c_uint64),
        ("runs", ctypes.c_uint64),
        ("read_bytes", ctypes.c_uint64),
        ("copy_of", ctypes.c_int64),
        ("file", ctypes.c_char_p),
    ]


class ReadPlanSlice(_Mirror):
    _c_name_ = "hostfirst_read_plan_slice"
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("rank", ctypes.c_size_t),
        ("starts", P(ctypes.c_uint64)),
        ("lens", P(ctypes.c_uint64)),
    ]


class ReadPlanOptions(_Mirror):
    _c_name_ = "hostfirst_read_plan_options"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("max_over_read", ctypes.c_double),
        ("max_read_bytes", ctypes.c_uint64),
        ("threads", ctypes.c_uint32),
        ("chunk_bytes", ctypes.c_uint64),
    ]


class RemoteOptions(_Mirror):
    _c_name_ = "hostfirst_remote_options"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("max_concurrency", ctypes.c_uint32),
        ("max_retries", ctypes.c_int32),
        ("part_size", ctypes.c_uint64),
        ("request_timeout_ms", ctypes.c_uint32),
        ("connect_timeout_ms", ctypes.c_uint32),
        ("cache_dir", ctypes.c_char_p),
        ("cache_max_bytes", ctypes.c_uint64),
    ]


class ReadPlanStats(_Mirror):
    _c_name_ = "hostfirst_read_plan_stats"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("slices", ctypes.c_uint64),
        ("needed_bytes", ctypes.c_uint64),
        ("read_bytes", ctypes.c_uint64),
        ("requests", ctypes.c_uint64),
        ("peak_memory_bytes", ctypes.c_uint64),
        ("files", ctypes.c_uint64),
    ]


class ReadPlanRequestInfo(_Mirror):
    _c_name_ = "hostfirst_read_plan_request_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("file", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
        ("slices", ctypes.c_uint64),
    ]


class WriterOptions(_Mirror):
    _c_name_ = "hostfirst_writer_options"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("max_part_bytes", ctypes.c_uint64),
        ("no_sync", ctypes.c_int32),
        ("threads", ctypes.c_uint32),
        ("queue_depth", ctypes.c_uint32),
        ("chunk_bytes", ctypes.c_uint64),
        ("staging_bytes", ctypes.c_uint64),
        ("rank", ctypes.c_uint32),
        ("world", ctypes.c_uint32),
        ("agree", ctypes.c_void_p),  # hostfirst_agree_fn
        ("progress", ctypes.c_void_p),  # hostfirst_progress_fn
        ("user", ctypes.c_void_p),
    ]


class WriterInfo(_Mirror):
    _c_name_ = "hostfirst_writer_info"
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("parts", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
        ("written", ctypes.c_uint64),
        ("tensors", ctypes.c_uint64),
        ("index", ctypes.c_char_p),
    ]


MIRRORS = [c for c in list(globals().values()) if isinstance(c, type) and issubclass(c, _Mirror) and c._c_name_]

# ---- the one table of C signatures: name -> (restype, argtypes) -------------------------------------------
_u32, _i32, _u64, _size, _str = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_char_p
_h, _ph = c_handle, P(c_handle)
SIGNATURES = {
    # library, statuses, errors
    "hostfirst_version": (_str, []),
    "hostfirst_version_number": (_u32, []),
    "hostfirst_read_engine": (c_status, [ctypes.c_char_p, _size, P(_size)]),
    "hostfirst_status_name": (_str, [_u32]),
    "hostfirst_status_is_format_error": (_i32, [_u32]),
    "hostfirst_status_count": (_size, []),
    "hostfirst_last_error_message": (_str, []),
    "hostfirst_last_error_status": (c_status, []),
    "hostfirst_last_error_fit": (c_status, [P(FitInfo)]),
    "hostfirst_handle_count": (c_status, [P(_size)]),
    "hostfirst_build_info": (c_status, [_str, _size, P(_size)]),
    # backends, devices
    "hostfirst_backend_count": (_size, []),
    "hostfirst_backend_describe": (c_status, [_size, P(BackendInfo)]),
    "hostfirst_backend_status_name": (_str, [_u32]),
    "hostfirst_census_warning_count": (_size, []),
    "hostfirst_census_warning": (_str, [_size]),
    "hostfirst_devices": (c_status, [P(Device), _size, P(_size)]),
    "hostfirst_device_describe": (c_status, [Device, P(DeviceInfo)]),
    "hostfirst_device_memory": (c_status, [Device, P(_u64), P(_u64)]),
    "hostfirst_device_parse": (c_status, [_str, P(Device)]),
    "hostfirst_target_parse": (c_status, [_str, P(Device)]),
    "hostfirst_device_format": (c_status, [Device, _str, _size, P(_size)]),
    "hostfirst_device_equal": (_i32, [P(Device), P(Device)]),
    # the default device, scopes, strict mode
    "hostfirst_default_device": (c_status, [P(Device), P(_u32), P(_u32)]),
    "hostfirst_default_source_name": (_str, [_u32]),
    "hostfirst_default_device_set": (c_status, [Device]),
    "hostfirst_default_device_clear": (c_status, []),
    "hostfirst_default_resolve": (c_status, [P(Device)]),
    "hostfirst_scope_push": (c_status, [Device, P(_u64)]),
    "hostfirst_scope_pop": (c_status, [_u64]),
    "hostfirst_scope_capture": (c_status, [P(CarriedScope)]),
    "hostfirst_scope_enter": (c_status, [P(CarriedScope), P(_u64)]),
    "hostfirst_scope_leave": (c_status, [_u64]),
    "hostfirst_strict_thread_set": (c_status, [_i32]),
    "hostfirst_strict_process_set": (c_status, [_i32]),
    "hostfirst_strict_get": (c_status, [P(_i32), P(_i32)]),
    # dtypes
    "hostfirst_dtype_name": (_str, [_u32]),
    "hostfirst_dtype_bits": (_u32, [_u32]),
    "hostfirst_dtype_from_name": (c_status, [_str, P(_u32)]),
    # files and views
    "hostfirst_file_open": (c_status, [_str, _ph]),
    "hostfirst_file_open_format": (c_status, [_str, _u32, _ph]),
    "hostfirst_file_open_raw": (c_status, [_str, _u32, P(_u64), _size, _u64, _str, _ph]),
    "hostfirst_file_format": (c_status, [_h, P(_u32)]),
    "hostfirst_format_name": (_str, [_u32]),
    "hostfirst_file_sequence_spans": (c_status, [_h, P(_u64), _size, P(_u64), P(_u64)]),
    
    "hostfirst_file_open_memory": (c_status, [ctypes.c_void_p, _size, _ph]),
    "hostfirst_file_free": (c_status, [_h]),
    "hostfirst_file_find": (c_status, [_h, _str, P(_size)]),
    "hostfirst_file_read_engine": (c_status, [_h, ctypes.c_char_p, _size, P(_size)]),
    "hostfirst_file_metadata_find": (c_status, [_h, _str, P(_str)]),
    "hostfirst_file_data_bytes": (c_status, [_h, P(_u64)]),
    "hostfirst_file_path": (c_status, [_h, P(_str)]),
    "hostfirst_file_view_at": (c_status, [_h, _size, _ph]),
    "hostfirst_view_read": (c_status, [_h, _u64, ctypes.c_void_p, _size]),
    "hostfirst_file_tensor_count": (c_status, [_h, P(_size)]),
    "hostfirst_file_tensor_name": (c_status, [_h, _size, P(_str)]),
    "hostfirst_file_metadata_count": (c_status, [_h, P(_size)]),
    "hostfirst_file_metadata_get": (c_status, [_h, _size, P(_str), P(_str)]),
    "hostfirst_file_view": (c_status, [_h, _str, _ph]),
    "hostfirst_view_free": (c_status, [_h]),
    "hostfirst_view_describe": (c_status, [_h, P(ViewInfo)]),
    "hostfirst_view_slice_rows": (c_status, [_h, _u64, _u64, _ph]),
    "hostfirst_view_prefault": (c_status, [_h, P(ctypes.c_int32)]),
    "hostfirst_view_copy": (c_status, [_h, ctypes.c_void_p, _size, P(_u64)]),
    "hostfirst_dlpack_options_init": (c_status, [P(DLPackOptions), _size]),
    "hostfirst_view_to_dlpack": (c_status, [_h, P(DLPackOptions), P(P(DLPackManagedTensorVersioned)),
                                            P(P(DLPackManagedTensor))]),
    # placement: buffers, rules, plans, whole-file loads
    "hostfirst_put_options_init": (c_status, [P(PutOptions), _size]),
    "hostfirst_put": (c_status, [_h, P(Device), P(PutOptions), _ph, P(PutStats)]),
    "hostfirst_put_start": (c_status, [_h, P(Device), P(PutOptions), _ph]),
    "hostfirst_put_poll": (c_status, [_h]),
    "hostfirst_put_wait": (c_status, [_h, _ph]),
    "hostfirst_put_op_free": (c_status, [_h]),
    "hostfirst_release_cached_memory": (c_status, []),
    "hostfirst_buffer_is_file_backed": (c_status, [_h, P(_i32)]),
    "hostfirst_buffer_to": (c_status, [_h, P(Device), _ph]),
    "hostfirst_buffer_describe": (c_status, [_h, P(BufferInfo)]),
    "hostfirst_buffer_free": (c_status, [_h]),
    "hostfirst_buffer_copy_to_host": (c_status, [_h, ctypes.c_void_p, _size]),
    "hostfirst_buffer_to_dlpack": (c_status, [_h, P(DLPackOptions), P(P(DLPackManagedTensorVersioned)),
                                              P(P(DLPackManagedTensor))]),
    "hostfirst_dtype_to_dlpack": (c_status, [_u32, P(DLPackDtype)]),
    "hostfirst_dlpack_capsule_destructor": (None, [ctypes.c_void_p]),
    "hostfirst_buffer_sync_stream": (c_status, [_h, ctypes.c_int64]),
    "hostfirst_buffer_record_stream": (c_status, [_h, ctypes.c_int64]),
    "hostfirst_rules_new": (c_status, [_ph]),
    "hostfirst_rules_add": (c_status, [_h, _str, _str]),
    "hostfirst_rules_add_spec": (c_status, [_h, _str]),
    "hostfirst_rules_free": (c_status, [_h]),
    "hostfirst_plan_make": (c_status, [_h, _h, _ph]),
    "hostfirst_plan_tensor_count": (c_status, [_h, P(_size)]),
    "hostfirst_plan_tensor": (c_status, [_h, _size, P(PlanTensorInfo)]),
    "hostfirst_plan_device_count": (c_status, [_h, P(_size)]),
    "hostfirst_plan_device": (c_status, [_h, _size, P(PlanDeviceInfo)]),
    "hostfirst_plan_unmatched_rule_count": (c_status, [_h, P(_size)]),
    "hostfirst_plan_unmatched_rule": (c_status, [_h, _size, P(PlanUnmatchedRuleInfo)]),
    "hostfirst_plan_free": (c_status, [_h]),
    "hostfirst_load_options_init": (c_status, [P(LoadOptions), _size]),
    "hostfirst_load_run": (c_status, [_h, _h, P(LoadOptions), _ph]),
    "hostfirst_load_count": (c_status, [_h, P(_size)]),
    "hostfirst_load_get": (c_status, [_h, _str, P(_u32), _ph, _ph]),
    "hostfirst_load_free": (c_status, [_h]),
    "hostfirst_load_entries": (c_status, [_h, P(LoadEntry), _size, _size, P(_size)]),
    "hostfirst_load_names": (c_status, [_h, ctypes.c_char_p, _size, P(_size)]),
    # gather
    "hostfirst_gather_new": (c_status, [Device, _u32, _u64, _u64, _ph]),
    "hostfirst_gather_run": (c_status, [_h, _h, P(_u64), _size, _ph]),
    "hostfirst_gather_run_from_buffer": (c_status, [_h, _h, P(_u64), _size, _ph]),
    "hostfirst_gather_run_sequences": (c_status, [_h, _h, P(_u64), _size, _u64, P(_u64), _ph]),
    "hostfirst_gather_batch": (c_status, [_h, _ph]),
    "hostfirst_gather_set_ring_bound": (c_status, [_h, _size]),
    "hostfirst_gather_set_page_cache": (c_status, [_h, _u32]),
    "hostfirst_gather_ring": (c_status, [_h, P(_size), P(_size), P(_size)]),
    "hostfirst_gather_copy_to_host": (c_status, [_h, ctypes.c_void_p, _size]),
    "hostfirst_gather_nbytes": (c_status, [_h, P(_u64)]),
    "hostfirst_gather_free": (c_status, [_h]),
    "hostfirst_gather_stream_start": (c_status, [_h, _h, P(_u64), _size, _size, _ph]),
    "hostfirst_gather_stream_start_from_buffer": (c_status, [_h, _h, P(_u64), _size, _size, _ph]),
    "hostfirst_gather_stream_next": (c_status, [_h, _ph]),
    "hostfirst_gather_stream_free": (c_status, [_h]),
    "hostfirst_gather_stream_open": (c_status, [_h, _h, _size, _ph]),
    "hostfirst_gather_stream_open_from_buffer": (c_status, [_h, _h, _size, _ph]),
    "hostfirst_gather_stream_push": (c_status, [_h, P(_u64), _size]),
    "hostfirst_gather_stream_end_input": (c_status, [_h]),
    "hostfirst_random_offsets": (c_status, [P(_u64), _u64, _u64, P(_u64), _size]),
    # shard-on-read
    "hostfirst_view_narrow": (c_status, [_h, _u32, _u64, _u64, _ph]),
    "hostfirst_shard_mesh_new": (c_status, [P(_str), P(_u64), _size, _ph]),
    "hostfirst_shard_mesh_free": (c_status, [_h]),
    "hostfirst_shard_mesh_positions": (c_status, [_h, P(_u64)]),
    "hostfirst_shard_mesh_position": (c_status, [_h, P(_u64), _size, P(_u64)]),
    "hostfirst_shard_options_init": (c_status, [P(ShardOptions), _size]),
    "hostfirst_shard_rules_new": (c_status, [_h, _ph]),
    "hostfirst_shard_rules_add": (c_status, [_h, _str, _str]),
    "hostfirst_shard_rules_skip": (c_status, [_h, _str]),
    "hostfirst_shard_rules_free": (c_status, [_h]),
    "hostfirst_shard_plan_make": (c_status, [_h, _h, P(_u64), P(Device), _size, P(ShardOptions), _ph]),
    "hostfirst_shard_plan_count": (c_status, [_h, P(_size)]),
    "hostfirst_shard_plan_describe": (c_status, [_h, _size, P(ShardInfo)]),
    "hostfirst_shard_plan_totals": (c_status, [_h, P(_u64), P(_u64), P(_i32)]),
    "hostfirst_shard_plan_free": (c_status, [_h]),
    "hostfirst_shard_run_options_init": (c_status, [P(ShardRunOptions), _size]),
    "hostfirst_shard_run": (c_status, [_h, P(ShardRunOptions), _ph]),
    "hostfirst_shard_result_count": (c_status, [_h, P(_size)]),
    "hostfirst_shard_result_bytes_read": (c_status, [_h, P(_u64)]),
    "hostfirst_shard_result_get": (c_status, [_h, _size, _ph, P(_u64)]),
    "hostfirst_shard_result_free": (c_status, [_h]),
    # declared read plans
    "hostfirst_read_plan_options_init": (c_status, [P(ReadPlanOptions), _size]),
    "hostfirst_read_plan_make": (c_status, [_h, P(ReadPlanSlice), _size, P(ReadPlanOptions), _ph]),
    "hostfirst_read_plan_describe": (c_status, [_h, P(ReadPlanStats)]),
    "hostfirst_read_plan_request": (c_status, [_h, _u64, P(ReadPlanRequestInfo)]),
    "hostfirst_read_plan_execute": (c_status, [_h, P(ctypes.c_void_p), P(_u64), _size, P(_u64)]),
    "hostfirst_read_plan_free": (c_status, [_h]),
    # remote settings
    "hostfirst_remote_options_init": (c_status, [P(RemoteOptions), _size]),
    "hostfirst_remote_configure": (c_status, [P(RemoteOptions)]),
    # the writer
    "hostfirst_writer_options_init": (c_status, [P(WriterOptions), _size]),
    "hostfirst_writer_open": (c_status, [_str, P(WriterOptions), _ph]),
    "hostfirst_writer_open_fd": (c_status, [_i32, P(WriterOptions), _ph]),
    "hostfirst_writer_add_view": (c_status, [_h, _str, _h]),
    "hostfirst_writer_add_buffer": (c_status, [_h, _str, _h]),
    "hostfirst_writer_add_host": (c_status, [_h, _str, _u32, P(_u64), _size, ctypes.c_void_p, _size]),
    "hostfirst_writer_declare": (c_status, [_h, _str, _u32, P(_u64), _size]),
    "hostfirst_writer_add_piece_host": (c_status, [_h, _str, P(_u64), P(_u64), _size, ctypes.c_void_p, _size]),
    "hostfirst_writer_add_piece_buffer": (c_status, [_h, _str, P(_u64), _size, _h]),
    "hostfirst_writer_add_piece_view": (c_status, [_h, _str, P(_u64), _size, _h]),
    "hostfirst_writer_set_metadata": (c_status, [_h, P(_str), P(_str), _size]),
    "hostfirst_writer_finish": (c_status, [_h, P(WriterInfo)]),
    "hostfirst_writer_part_path": (c_status, [_h, _size, P(_str)]),
    "hostfirst_writer_free": (c_status, [_h]),
}
