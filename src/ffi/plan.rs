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
    largest: Vec<CString>,
    unmatched: Vec<UnmatchedC>,
}

/// The C strings of one unmatched rule, owned by the plan.
struct UnmatchedC {
    pattern: CString,
    target: CString,
    tensor: Option<CString>,
    message: CString,
}

impl Handle for hostfirst_plan {
    type Target = PlanC;
    const NAME: &'static str = "hostfirst_plan";
}

/// Where a plan puts a tensor (`hostfirst_plan_tensor_info.placement`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum hostfirst_placement {
    /// It stays a zero-copy host view of the file's mapping.
    Host = 1,
    /// It is copied into a buffer on a device.
    Device = 2,
}

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
    pub placement: hostfirst_placement,
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
    pub fits: i32,
    /// The largest tensor it receives (NUL-terminated UTF-8), valid until the plan is freed.
    pub largest_name: *const c_char,
    /// That tensor's size in bytes.
    pub largest_bytes: u64,
}

out_struct!(hostfirst_plan_device_info, largest_bytes);

/// A rule that places no tensor of the plan's file, filled by `hostfirst_plan_unmatched_rule`. Set
/// `struct_size = sizeof(hostfirst_plan_unmatched_rule_info)` before the call; fields may be appended in
/// later minor versions. Strings are NUL-terminated UTF-8, valid until the plan is freed.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_plan_unmatched_rule_info {
    /// In: the caller's `sizeof(hostfirst_plan_unmatched_rule_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// The rule's index in the rule list (the order of `hostfirst_rules_add`).
    pub rule: u32,
    /// The index of the earlier rule that takes every tensor this rule's pattern matches, or -1 when the
    /// pattern matches no tensor name at all.
    pub shadowed_by: i32,
    /// The rule's pattern.
    pub pattern: *const c_char,
    /// The rule's target as written (`host`, `default`, a device spec).
    pub target: *const c_char,
    /// Shadowed (`shadowed_by >= 0`): the first tensor the pattern matches. Otherwise a tensor whose name
    /// contains the pattern's text (patterns match whole names: `token` does not match `tokens`), or NULL.
    pub tensor: *const c_char,
    /// One line saying what is wrong and what to do, as the CLI prints it.
    pub message: *const c_char,
}

out_struct!(hostfirst_plan_unmatched_rule_info, message);

/// The `index`-th item of one of a plan's lists, or `OUT_OF_RANGE` saying how many there are.
fn nth<'a, T>(items: &'a [T], index: usize, what: &str) -> Result<&'a T, Error> {
    items.get(index).ok_or_else(|| {
        Error::new(Status::OutOfRange, format!("{what} index {index}: the plan has {} {what}s", items.len()))
    })
}

/// Makes a plan (a dry run: nothing is allocated, no byte moves): applies `rules` to every tensor of
/// `file` — the first matching rule decides, unmatched tensors stay on the host — and takes, once per device
/// that receives tensors, its usable memory now. `default` targets resolve through the calling thread's
/// default stack. Writes a new handle to `*out` (free with `hostfirst_plan_free`); the plan does not keep
/// `file` or `rules` alive. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `IMPLICIT_PLACEMENT` (a tensor
/// matched a `default` rule in strict mode; the message names tensor and rule), `UNMATCHED_RULE` (strict
/// mode: a rule places no tensor; the message names each such rule and why), `NO_SUCH_DEVICE` /
/// `UNAVAILABLE` (a rule's device is absent), `DEVICE_ERROR`. A plan that does not fit is not an error: see
/// `hostfirst_plan_device`'s `fits`. Neither is a rule that places no tensor outside strict mode (a typo such
/// as `token=host` for a tensor `tokens` sends that tensor where the other rules say): the plan lists such
/// rules, see `hostfirst_plan_unmatched_rule_count`; check it, as the CLI does. Thread-safe.
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
        let largest = plan.devices.iter().map(|d| cstring(&d.largest.0)).collect();
        let unmatched = plan
            .unmatched
            .iter()
            .map(|u| UnmatchedC {
                pattern: cstring(&u.pattern),
                target: cstring(&u.target),
                tensor: u.shadowed.as_ref().map(|(t, _)| t).or(u.near.as_ref()).map(|t| cstring(t)),
                message: cstring(&u.to_string()),
            })
            .collect();
        *out = handle::insert_new::<hostfirst_plan>(PlanC { plan, largest, unmatched });
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
        let e = nth(&p.plan.entries, index, "tensor")?;
        let (placement, device) = match e.placement {
            Placement::Host => (hostfirst_placement::Host, hostfirst_device { kind: 0, ordinal: 0 }),
            Placement::Device(d) => (hostfirst_placement::Device, d.into()),
        };
        write_out_struct(
            out,
            size,
            hostfirst_plan_tensor_info {
                struct_size: 0,
                name: e.name.as_ptr(), // a tensor name has no NUL (the header parser refuses one)
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
/// memory when the plan was made, whether it fits, the largest tensor. Set `out->struct_size` first. Errors:
/// (as for `hostfirst_plan_tensor`) `NULL_ARGUMENT`, `INVALID_HANDLE`, `OUT_OF_RANGE`, `INVALID_ARGUMENT`
/// (`struct_size` too small or too large). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_device(
    plan: *const hostfirst_plan,
    index: usize,
    out: *mut hostfirst_plan_device_info,
) -> Status {
    hostfirst_boundary!("hostfirst_plan_device", {
        let p = handle::get::<hostfirst_plan>(plan, "plan")?;
        let size = out_struct_size(out, "out")?;
        let d = nth(&p.plan.devices, index, "device")?;
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
                fits: d.fits as i32,
                largest_name: p.largest[index].as_ptr(),
                largest_bytes: d.largest.1,
            },
        );
        Ok(())
    })
}

/// Writes the number of rules that place no tensor of the plan's file to `*out_count`: rules whose pattern
/// matches no tensor name, and rules behind an earlier rule that takes every tensor they match. Outside
/// strict mode such a plan is made anyway (in strict mode `hostfirst_plan_make` refuses it with
/// `UNMATCHED_RULE`); a count above 0 is almost always a mistake worth reporting. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_unmatched_rule_count(plan: *const hostfirst_plan, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_plan_unmatched_rule_count", {
        let p = handle::get::<hostfirst_plan>(plan, "plan")?;
        *out_ptr(out_count, "out_count")? = p.plan.unmatched.len();
        Ok(())
    })
}

/// Fills `*out` with the `index`-th rule that places no tensor (in rule order): its index, pattern and
/// target, the rule that shadows it or -1, a tensor it was probably meant for, and a one-line message. Set
/// `out->struct_size` first. Errors: (as for `hostfirst_plan_tensor`) `NULL_ARGUMENT`, `INVALID_HANDLE`,
/// `OUT_OF_RANGE`, `INVALID_ARGUMENT` (`struct_size` too small or too large). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_unmatched_rule(
    plan: *const hostfirst_plan,
    index: usize,
    out: *mut hostfirst_plan_unmatched_rule_info,
) -> Status {
    hostfirst_boundary!("hostfirst_plan_unmatched_rule", {
        let p = handle::get::<hostfirst_plan>(plan, "plan")?;
        let size = out_struct_size(out, "out")?;
        let (u, c) = (nth(&p.plan.unmatched, index, "unmatched rule")?, &p.unmatched[index]);
        write_out_struct(
            out,
            size,
            hostfirst_plan_unmatched_rule_info {
                struct_size: 0,
                rule: u.rule as u32,
                shadowed_by: u.shadowed.as_ref().map_or(-1, |(_, by)| *by as i32),
                pattern: c.pattern.as_ptr(),
                target: c.target.as_ptr(),
                tensor: c.tensor.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
                message: c.message.as_ptr(),
            },
        );
        Ok(())
    })
}

/// Frees a plan. NULL is a no-op. Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_free(plan: *mut hostfirst_plan) -> Status {
    hostfirst_boundary!("hostfirst_plan_free", { handle::remove(plan, "plan").map(|_| ()) })
}
