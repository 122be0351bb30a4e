//! The size of every extensible struct (one that begins with `size_t struct_size`) in its 1.0 layout, as a
//! constant of the header, for bindings that cannot run `sizeof` (a ctypes or cgo layer that reads numbers
//! from hostfirst.h). The values are those of the 64-bit targets hostfirst builds for (LP64 Linux and macOS,
//! LLP64 Windows: the structs hold no `long`, so both lay them out alike); the compile-time checks below tie
//! each to the struct's real 1.0 layout ([`Extensible::MIN_SIZE`] rounded up to its alignment, which is its
//! `sizeof` today), so a change to a 1.0 field, or a build for a target that lays the structs out otherwise,
//! fails to compile instead of publishing a wrong number. Fields appended after 1.0 never change them.

use super::args::Extensible;

/// `sizeof(T)` of `T`'s 1.0 layout: the end of its last 1.0 field rounded up to its alignment.
const fn size_1_0<T: Extensible>() -> usize {
    T::MIN_SIZE.next_multiple_of(std::mem::align_of::<T>())
}

/// `sizeof(hostfirst_fit_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_FIT_INFO_SIZE_1_0: usize = 40;

/// `sizeof(hostfirst_backend_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_BACKEND_INFO_SIZE_1_0: usize = 48;

/// `sizeof(hostfirst_device_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_DEVICE_INFO_SIZE_1_0: usize = 64;

/// `sizeof(hostfirst_view_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_VIEW_INFO_SIZE_1_0: usize = 80;

/// `sizeof(hostfirst_buffer_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_BUFFER_INFO_SIZE_1_0: usize = 56;

/// `sizeof(hostfirst_put_options)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_PUT_OPTIONS_SIZE_1_0: usize = 56;

/// `sizeof(hostfirst_put_stats)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_PUT_STATS_SIZE_1_0: usize = 24;

/// `sizeof(hostfirst_plan_tensor_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_PLAN_TENSOR_INFO_SIZE_1_0: usize = 40;

/// `sizeof(hostfirst_plan_device_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_PLAN_DEVICE_INFO_SIZE_1_0: usize = 72;

/// `sizeof(hostfirst_plan_unmatched_rule_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_PLAN_UNMATCHED_RULE_INFO_SIZE_1_0: usize = 48;

/// `sizeof(hostfirst_load_options)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_LOAD_OPTIONS_SIZE_1_0: usize = 32;

/// `sizeof(hostfirst_load_entry)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_LOAD_ENTRY_SIZE_1_0: usize = 64;

/// `sizeof(hostfirst_dlpack_options)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_DLPACK_OPTIONS_SIZE_1_0: usize = 48;

/// `sizeof(hostfirst_shard_options)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_SHARD_OPTIONS_SIZE_1_0: usize = 48;

/// `sizeof(hostfirst_shard_run_options)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_SHARD_RUN_OPTIONS_SIZE_1_0: usize = 24;

/// `sizeof(hostfirst_shard_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_SHARD_INFO_SIZE_1_0: usize = 112;

/// `sizeof(hostfirst_read_plan_options)` in its first layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_READ_PLAN_OPTIONS_SIZE_1_0: usize = 40;

/// `sizeof(hostfirst_read_plan_stats)` in its first layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_READ_PLAN_STATS_SIZE_1_0: usize = 56;

/// `sizeof(hostfirst_read_plan_request_info)` in its first layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_READ_PLAN_REQUEST_INFO_SIZE_1_0: usize = 40;

/// `sizeof(hostfirst_writer_options)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_WRITER_OPTIONS_SIZE_1_0: usize = 80;

/// `sizeof(hostfirst_writer_info)` in its 1.0 layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_WRITER_INFO_SIZE_1_0: usize = 48;

/// `sizeof(hostfirst_remote_options)` in its first layout, on the 64-bit targets hostfirst supports: a `struct_size`
/// for bindings that cannot run `sizeof` (any value from this up to 4096 is accepted; C programs use `sizeof`).
pub const HOSTFIRST_REMOTE_OPTIONS_SIZE_1_0: usize = 48;

// The constants are the structs' 1.0 sizes on the targets hostfirst builds for; on any other layout the build
// fails here, naming the constant, rather than publishing a wrong number.
const _: () = {
    assert!(
        HOSTFIRST_FIT_INFO_SIZE_1_0 == size_1_0::<super::status::hostfirst_fit_info>(),
        "HOSTFIRST_FIT_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_BACKEND_INFO_SIZE_1_0 == size_1_0::<super::backend::hostfirst_backend_info>(),
        "HOSTFIRST_BACKEND_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_DEVICE_INFO_SIZE_1_0 == size_1_0::<super::device::hostfirst_device_info>(),
        "HOSTFIRST_DEVICE_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_VIEW_INFO_SIZE_1_0 == size_1_0::<super::view::hostfirst_view_info>(),
        "HOSTFIRST_VIEW_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_BUFFER_INFO_SIZE_1_0 == size_1_0::<super::buffer::hostfirst_buffer_info>(),
        "HOSTFIRST_BUFFER_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_PUT_OPTIONS_SIZE_1_0 == size_1_0::<super::put::hostfirst_put_options>(),
        "HOSTFIRST_PUT_OPTIONS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_PUT_STATS_SIZE_1_0 == size_1_0::<super::put::hostfirst_put_stats>(),
        "HOSTFIRST_PUT_STATS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_PLAN_TENSOR_INFO_SIZE_1_0 == size_1_0::<super::plan::hostfirst_plan_tensor_info>(),
        "HOSTFIRST_PLAN_TENSOR_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_PLAN_DEVICE_INFO_SIZE_1_0 == size_1_0::<super::plan::hostfirst_plan_device_info>(),
        "HOSTFIRST_PLAN_DEVICE_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_PLAN_UNMATCHED_RULE_INFO_SIZE_1_0 == size_1_0::<super::plan::hostfirst_plan_unmatched_rule_info>(),
        "HOSTFIRST_PLAN_UNMATCHED_RULE_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_LOAD_OPTIONS_SIZE_1_0 == size_1_0::<super::load::hostfirst_load_options>(),
        "HOSTFIRST_LOAD_OPTIONS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_LOAD_ENTRY_SIZE_1_0 == size_1_0::<super::load_bulk::hostfirst_load_entry>(),
        "HOSTFIRST_LOAD_ENTRY_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_DLPACK_OPTIONS_SIZE_1_0 == size_1_0::<super::dlpack::hostfirst_dlpack_options>(),
        "HOSTFIRST_DLPACK_OPTIONS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_SHARD_OPTIONS_SIZE_1_0 == size_1_0::<super::shard::hostfirst_shard_options>(),
        "HOSTFIRST_SHARD_OPTIONS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_SHARD_RUN_OPTIONS_SIZE_1_0 == size_1_0::<super::shard::hostfirst_shard_run_options>(),
        "HOSTFIRST_SHARD_RUN_OPTIONS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_SHARD_INFO_SIZE_1_0 == size_1_0::<super::shard::hostfirst_shard_info>(),
        "HOSTFIRST_SHARD_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_READ_PLAN_OPTIONS_SIZE_1_0 == size_1_0::<super::read_plan::hostfirst_read_plan_options>(),
        "HOSTFIRST_READ_PLAN_OPTIONS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_READ_PLAN_STATS_SIZE_1_0 == size_1_0::<super::read_plan::hostfirst_read_plan_stats>(),
        "HOSTFIRST_READ_PLAN_STATS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_READ_PLAN_REQUEST_INFO_SIZE_1_0 == size_1_0::<super::read_plan::hostfirst_read_plan_request_info>(),
        "HOSTFIRST_READ_PLAN_REQUEST_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_WRITER_OPTIONS_SIZE_1_0 == size_1_0::<super::writer::hostfirst_writer_options>(),
        "HOSTFIRST_WRITER_OPTIONS_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_WRITER_INFO_SIZE_1_0 == size_1_0::<super::writer::hostfirst_writer_info>(),
        "HOSTFIRST_WRITER_INFO_SIZE_1_0"
    );
    assert!(
        HOSTFIRST_REMOTE_OPTIONS_SIZE_1_0 == size_1_0::<super::remote::hostfirst_remote_options>(),
        "HOSTFIRST_REMOTE_OPTIONS_SIZE_1_0"
    );
};
