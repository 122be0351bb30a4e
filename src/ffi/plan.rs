//! Placement plans, the dry run of rules over a file: `hostfirst_plan_*`.

use super::args::{cstring, out_ptr, out_struct, out_struct_size, write_out_struct};
use super::device::hostfirst_device;
use super::file::hostfirst_file;
use super::handle::{self, Handle};
use super::rules::hostfirst_rules;
use crate::error::{Error, Status};
use crate::place::{Placement, Plan};
use std::ffi::{c_char, CString};

/// A placement plan: the dry run of rules over a file. Created by `hostfirst_plan_make`, released by
/// `hostfirst_plan_free`. Immutable: every call on it is thread-safe.
pub struct hostfirst_plan {
    _private: [u8; 0],
}

pub(crate) struct PlanC {
    pub(crate) plan: Plan,
    names: Vec<CString>,
    largest: Vec<CString>,
}

impl Handle for hostfirst_plan {
    type Target = PlanC;
    const NAME: &'static str = "hostfirst_plan";
}

/// Placement of a tensor: it stays a zero-copy host view of the file's mapping.
pub const HOSTFIRST_PLACEMENT_HOST: u32 = 1;

/// Placement of a tensor: it is copied into a buffer on a device.
pub const HOSTFIRST_PLACEMENT_DEVICE: u32 = 2;

/// One tensor of a plan, filled by `hostfirst_plan_tensor`. Set `struct_size = sizeof(hostfirst_plan_tensor_info)`
/// before the call; fields may be appended in later minor versions.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_plan_tensor_info {
    /// In: the caller's `sizeof(hostfirst_plan_tensor_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// The tensor name (NUL-terminated UTF-8), valid until the plan is freed.
    pub name: *const c_char,
    /// `HOSTFIRST_PLACEMENT_HOST` or `HOSTFIRST_PLACEMENT_DEVICE`.
    pub placement: u32,
    /// The index of the rule that matched, or -1 when none did (the tensor stays on the host).
    pub rule: i32,
    /// The device for `HOSTFIRST_PLACEMENT_DEVICE` (`{0, 0}` for host).
    pub device: hostfirst_device,
    /// Size in bytes.
    pub nbytes: u64,
}

out_struct!(hostfirst_plan_tensor_info, nbytes);

/// One device of a plan, filled by `hostfirst_plan_device`. Set `struct_size` as for
/// `hostfirst_plan_tensor_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_plan_device_info {
    /// In: the caller's `sizeof(hostfirst_plan_device_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// The device.
    pub device: hostfirst_device,
    /// Bytes the plan puts on it.
    pub bytes: u64,
    /// Number of tensors the plan puts on it.
    pub tensors: u64,
    /// Bytes usable on it when the plan was made: free memory less the fit check's safety margin.
    pub usable: u64,
    /// Its total memory.
    pub total: u64,
    /// 1 when `bytes <= usable`, else 0.
    pub fits: u32,
    /// The largest tensor it receives (NUL-terminated UTF-8), valid until the plan is freed.
    pub largest_name: *const c_char,
    /// That tensor's size in bytes.
    pub largest_bytes: u64,
}

out_struct!(hostfirst_plan_device_info, largest_bytes);

/// Makes a plan (a dry run: nothing is allocated, no byte moves): applies `rules` to every tensor of
/// `file` — the first matching rule decides, unmatched tensors stay on the host — and takes, once per device
/// that receives tensors, its usable memory now. `default` targets resolve through the calling thread's
/// default stack. Writes a new handle to `*out` (free with `hostfirst_plan_free`); the plan does not keep
/// `file` or `rules` alive. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `IMPLICIT_PLACEMENT` (a tensor
/// matched a `default` rule in strict mode; the message names tensor and rule), `NO_SUCH_DEVICE` /
/// `UNAVAILABLE` (a rule's device is absent), `DEVICE_ERROR`. A plan that does not fit is not an error: see
/// `hostfirst_plan_device`'s `fits`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_make(
    file: *const hostfirst_file,
    rules: *const hostfirst_rules,
    out: *mut *mut hostfirst_plan,
) -> Status {
    hostfirst_boundary!("hostfirst_plan_make", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let r = handle::get::<hostfirst_rules>(rules, "rules")?;
        let out = out_ptr(out, "out")?;
        let rules = r.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let plan = Plan::make(&f, &rules)?;
        let names = plan.entries.iter().map(|e| cstring(&e.name)).collect();
        let largest = plan.devices.iter().map(|d| cstring(&d.largest.0)).collect();
        *out = handle::insert_new::<hostfirst_plan>(PlanC { plan, names, largest });
        Ok(())
    })
}

/// Writes the number of tensors of the plan (the file's tensors, in file order) to `*out_count`.
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_tensor_count(plan: *const hostfirst_plan, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_plan_tensor_count", {
        let p = handle::get::<hostfirst_plan>(plan, "plan")?;
        *out_ptr(out_count, "out_count")? = p.plan.entries.len();
        Ok(())
    })
}

/// Fills `*out` for the plan's `index`-th tensor (file order). Set `out->struct_size` first. Strings stay
/// valid until the plan is freed. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `OUT_OF_RANGE`,
/// `INVALID_ARGUMENT` (struct_size too small). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_tensor(
    plan: *const hostfirst_plan,
    index: usize,
    out: *mut hostfirst_plan_tensor_info,
) -> Status {
    hostfirst_boundary!("hostfirst_plan_tensor", {
        let p = handle::get::<hostfirst_plan>(plan, "plan")?;
        let size = out_struct_size(out, "out")?;
        let e = p.plan.entries.get(index).ok_or_else(|| {
            Error::new(
                Status::OutOfRange,
                format!("tensor index {index}: the plan has {} tensors", p.plan.entries.len()),
            )
        })?;
        let (placement, device) = match e.placement {
            Placement::Host => (HOSTFIRST_PLACEMENT_HOST, hostfirst_device { kind: 0, ordinal: 0 }),
            Placement::Device(d) => (HOSTFIRST_PLACEMENT_DEVICE, d.into()),
        };
        write_out_struct(
            out,
            size,
            hostfirst_plan_tensor_info {
                struct_size: 0,
                name: p.names[index].as_ptr(),
                placement,
                rule: e.rule.map_or(-1, |r| r as i32),
                device,
                nbytes: e.nbytes,
            },
        );
        Ok(())
    })
}

/// Writes the number of devices receiving at least one tensor to `*out_count`. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_device_count(plan: *const hostfirst_plan, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_plan_device_count", {
        let p = handle::get::<hostfirst_plan>(plan, "plan")?;
        *out_ptr(out_count, "out_count")? = p.plan.devices.len();
        Ok(())
    })
}

/// Fills `*out` with the `index`-th device summary (order of first use): bytes, tensors, usable and total
/// memory when the plan was made, whether it fits, the largest tensor. Set `out->struct_size` first. Errors
/// as for `hostfirst_plan_tensor`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_device(
    plan: *const hostfirst_plan,
    index: usize,
    out: *mut hostfirst_plan_device_info,
) -> Status {
    hostfirst_boundary!("hostfirst_plan_device", {
        let p = handle::get::<hostfirst_plan>(plan, "plan")?;
        let size = out_struct_size(out, "out")?;
        let d = p.plan.devices.get(index).ok_or_else(|| {
            Error::new(
                Status::OutOfRange,
                format!("device index {index}: the plan uses {} devices", p.plan.devices.len()),
            )
        })?;
        write_out_struct(
            out,
            size,
            hostfirst_plan_device_info {
                struct_size: 0,
                device: d.device.into(),
                bytes: d.bytes,
                tensors: d.tensors as u64,
                usable: d.usable,
                total: d.total,
                fits: d.fits as u32,
                largest_name: p.largest[index].as_ptr(),
                largest_bytes: d.largest.1,
            },
        );
        Ok(())
    })
}

/// Frees a plan. NULL is a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_free(plan: *mut hostfirst_plan) -> Status {
    hostfirst_boundary!("hostfirst_plan_free", { handle::remove(plan, "plan").map(|_| ()) })
}
