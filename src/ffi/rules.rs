//! Placement rules, plans, whole-file loads and the batch gather.

use super::devices::hostfirst_device;
use super::handle::{self, Handle};
use super::load::{hostfirst_file, hostfirst_view};
use super::place::hostfirst_buffer;
use super::{c_str, in_ref, opt_out, out_bytes, out_ptr};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::place::gather::{random_offsets, Gather};
use crate::place::{Placed, Placement, Plan, Rules};
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::Mutex;

/// An ordered list of placement rules (glob pattern on tensor names → target). Created by
/// `hostfirst_rules_new`, released by `hostfirst_rules_free`. Calls on one handle are serialised internally
/// and may come from any thread.
pub struct hostfirst_rules {
    _private: [u8; 0],
}

/// A placement plan: the dry run of rules over a file. Created by `hostfirst_plan_make`, released by
/// `hostfirst_plan_free`. Immutable: every call on it is thread-safe.
pub struct hostfirst_plan {
    _private: [u8; 0],
}

/// The result of a whole-file load: every tensor of the file by name, as a buffer or a host view. Created by
/// `hostfirst_load_run`, released by `hostfirst_load_free`. Immutable: every call on it is thread-safe.
pub struct hostfirst_load {
    _private: [u8; 0],
}

/// A reusable batch gather: a bounded ring of `[batch, window]` batches on one device (plus page-locked
/// staging and a stream for CUDA). Created by `hostfirst_gather_new`, released by `hostfirst_gather_free`.
/// Calls on one handle are serialised internally.
pub struct hostfirst_gather {
    _private: [u8; 0],
}

pub(crate) struct PlanC {
    plan: Plan,
    names: Vec<CString>,
    largest: Vec<CString>,
}

pub(crate) struct GatherC {
    gather: Gather,
}

impl Handle for hostfirst_rules {
    type Target = Mutex<Rules>;
    const NAME: &'static str = "hostfirst_rules";
}
impl Handle for hostfirst_plan {
    type Target = PlanC;
    const NAME: &'static str = "hostfirst_plan";
}
impl Handle for hostfirst_load {
    type Target = crate::place::Loaded;
    const NAME: &'static str = "hostfirst_load";
}
impl Handle for hostfirst_gather {
    type Target = Mutex<GatherC>;
    const NAME: &'static str = "hostfirst_gather";
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

/// Progress of a load: `done` and `total` bytes moved to devices so far; return nonzero to cancel.
pub type hostfirst_load_progress_fn = Option<unsafe extern "C" fn(done: u64, total: u64, user: *mut c_void) -> c_int>;

fn check_struct_size(got: usize, want: usize, ty: &str) -> Result<()> {
    if got < want {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("out->struct_size is {got}; set it to sizeof({ty}) ({want} in this version)"),
        ));
    }
    Ok(())
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

// ---- rules ---------------------------------------------------------------------------------------------

/// Creates an empty rule list and writes its handle to `*out`. With no rules every tensor stays on the host.
/// Free it with `hostfirst_rules_free`. Errors: `NULL_ARGUMENT`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_rules_new(out: *mut *mut hostfirst_rules) -> Status {
    hostfirst_boundary!("hostfirst_rules_new", {
        let out = out_ptr(out, "out")?;
        *out = handle::insert_new::<hostfirst_rules>(Mutex::new(Rules::new()));
        Ok(())
    })
}

/// Appends the rule `pattern` → `target` (lower priority than every rule already added: the first match
/// wins). `pattern` is a glob on tensor names: `*` any run of characters, `?` one character, `[a-z]`,
/// `[!a-z]` a character class, `\x` a literal `x`. `target` is a device spec (`cpu`, `cuda:0`, `cuda_host`,
/// ...), `default` (the default device, resolved through the calling thread's default stack when a plan is
/// made; strict mode refuses it) or `host` (stay a zero-copy view). Device presence is checked when a plan is
/// made, not here. Both strings are copied. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`
/// (empty or malformed pattern, unknown target). On error the list is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_rules_add(
    rules: *mut hostfirst_rules,
    pattern: *const c_char,
    target: *const c_char,
) -> Status {
    hostfirst_boundary!("hostfirst_rules_add", {
        let r = handle::get::<hostfirst_rules>(rules, "rules")?;
        let (p, t) = (c_str(pattern, "pattern")?, c_str(target, "target")?);
        let mut g = r.lock().unwrap_or_else(|e| e.into_inner());
        g.add(p, t)
    })
}

/// Appends a rule written `pattern=target` (the CLI's `--rule` form; the last `=` separates the two), with
/// the rules of `hostfirst_rules_add`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_rules_add_spec(rules: *mut hostfirst_rules, spec: *const c_char) -> Status {
    hostfirst_boundary!("hostfirst_rules_add_spec", {
        let r = handle::get::<hostfirst_rules>(rules, "rules")?;
        let s = c_str(spec, "spec")?;
        let mut g = r.lock().unwrap_or_else(|e| e.into_inner());
        g.add_spec(s)
    })
}

/// Frees a rule list. NULL is a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Plans made from it
/// are independent of it. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_rules_free(rules: *mut hostfirst_rules) -> Status {
    hostfirst_boundary!("hostfirst_rules_free", { handle::remove(rules, "rules").map(|_| ()) })
}

// ---- plans ---------------------------------------------------------------------------------------------

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
        let out = out_ptr(out, "out")?;
        check_struct_size(
            out.struct_size,
            std::mem::size_of::<hostfirst_plan_tensor_info>(),
            "hostfirst_plan_tensor_info",
        )?;
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
        *out = hostfirst_plan_tensor_info {
            struct_size: std::mem::size_of::<hostfirst_plan_tensor_info>(),
            name: p.names[index].as_ptr(),
            placement,
            rule: e.rule.map_or(-1, |r| r as i32),
            device,
            nbytes: e.nbytes,
        };
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
        let out = out_ptr(out, "out")?;
        check_struct_size(
            out.struct_size,
            std::mem::size_of::<hostfirst_plan_device_info>(),
            "hostfirst_plan_device_info",
        )?;
        let d = p.plan.devices.get(index).ok_or_else(|| {
            Error::new(
                Status::OutOfRange,
                format!("device index {index}: the plan uses {} devices", p.plan.devices.len()),
            )
        })?;
        *out = hostfirst_plan_device_info {
            struct_size: std::mem::size_of::<hostfirst_plan_device_info>(),
            device: d.device.into(),
            bytes: d.bytes,
            tensors: d.tensors as u64,
            usable: d.usable,
            total: d.total,
            fits: d.fits as u32,
            largest_name: p.largest[index].as_ptr(),
            largest_bytes: d.largest.1,
        };
        Ok(())
    })
}

/// Frees a plan. NULL is a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_plan_free(plan: *mut hostfirst_plan) -> Status {
    hostfirst_boundary!("hostfirst_plan_free", { handle::remove(plan, "plan").map(|_| ()) })
}

// ---- loads ---------------------------------------------------------------------------------------------

/// Loads a tensor through `hostfirst_load_get`: it is a zero-copy host view.
pub const HOSTFIRST_LOADED_VIEW: u32 = 1;
/// Loads a tensor through `hostfirst_load_get`: it is a buffer on a device.
pub const HOSTFIRST_LOADED_BUFFER: u32 = 2;

/// Applies `plan` (made from `file`) and writes a new load handle to `*out` (free with `hostfirst_load_free`).
///
/// Before the first byte moves, every device of the plan is fit-checked against its memory free *now*; the
/// first that does not fit gives `OUT_OF_MEMORY` naming the device with the numbers (structured: `hostfirst_last_fit`),
/// and nothing is allocated. Then each device tensor is
/// put (fit check, allocation, parallel reads / pinned staging); host tensors become views.
///
/// `progress` (may be NULL) is called on the calling thread at a bounded rate with the bytes moved to
/// devices so far and in all, at least once, last with `done == total`; returning nonzero cancels:
/// `CANCELLED`, and everything the load had allocated is freed. Any other failure also frees everything.
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (the plan was made for another file),
/// `OUT_OF_MEMORY`, `CANCELLED`, `DEVICE_ERROR`, `IO`, `TRUNCATED`. On error `*out` is unchanged.
/// Thread-safe; `user` is passed through untouched.
#[no_mangle]
pub extern "C" fn hostfirst_load_run(
    file: *const hostfirst_file,
    plan: *const hostfirst_plan,
    progress: hostfirst_load_progress_fn,
    user: *mut c_void,
    out: *mut *mut hostfirst_load,
) -> Status {
    hostfirst_boundary!("hostfirst_load_run", { load_run(file, plan, progress, user, false, out) })
}

/// Options of `hostfirst_load_run_ex`. Zero-initialise, set `struct_size = sizeof(hostfirst_load_options)`,
/// then set what you need; a smaller `struct_size` from an older header is accepted (later fields take their
/// defaults).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct hostfirst_load_options {
    /// `sizeof(hostfirst_load_options)`.
    pub struct_size: usize,
    /// 1: tensors the plan puts on `cpu` become copy-on-write mappings of their pages in the file instead of
    /// copies (`hostfirst_put` documents the contract: writable, never written back, pages not yet written
    /// tied to the file). 0 (the default): copies. Other devices always copy.
    pub copy_on_write: i32,
    /// Progress callback (as for `hostfirst_load_run`), or NULL.
    pub progress: hostfirst_load_progress_fn,
    /// Passed to `progress` unchanged.
    pub user: *mut c_void,
}

impl Default for hostfirst_load_options {
    fn default() -> Self {
        hostfirst_load_options {
            struct_size: std::mem::size_of::<hostfirst_load_options>(),
            copy_on_write: 0,
            progress: None,
            user: std::ptr::null_mut(),
        }
    }
}

/// `hostfirst_load_run` with options (`opts` NULL: the defaults, no progress callback): with
/// `opts->copy_on_write = 1`, tensors placed on `cpu` are mapped copy-on-write instead of copied; the fit
/// check still runs before anything is mapped. Errors as for `hostfirst_load_run`, plus `INVALID_ARGUMENT`
/// for a bad `opts` (struct_size, copy_on_write not 0 or 1). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_run_ex(
    file: *const hostfirst_file,
    plan: *const hostfirst_plan,
    opts: *const hostfirst_load_options,
    out: *mut *mut hostfirst_load,
) -> Status {
    hostfirst_boundary!("hostfirst_load_run_ex", {
        let o = super::read_options(opts, hostfirst_load_options::default(), "opts")?;
        if o.copy_on_write != 0 && o.copy_on_write != 1 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("opts->copy_on_write is {}; expected 0 or 1", o.copy_on_write),
            ));
        }
        load_run(file, plan, o.progress, o.user, o.copy_on_write == 1, out)
    })
}

fn load_run(
    file: *const hostfirst_file,
    plan: *const hostfirst_plan,
    progress: hostfirst_load_progress_fn,
    user: *mut c_void,
    copy_on_write: bool,
    out: *mut *mut hostfirst_load,
) -> Result<()> {
    let f = handle::get::<hostfirst_file>(file, "file")?;
    let p = handle::get::<hostfirst_plan>(plan, "plan")?;
    let out = out_ptr(out, "out")?;
    let mut cb = |done: u64, total: u64| match progress {
        // SAFETY: the caller's callback with the caller's user pointer, as documented.
        Some(f) => unsafe { f(done, total, user) != 0 },
        None => false,
    };
    let progress = if progress.is_some() { Some(&mut cb as &mut dyn FnMut(u64, u64) -> bool) } else { None };
    let opts = crate::place::LoadOptions { copy_on_write, progress };
    let loaded = crate::place::load_with(&f, &p.plan, opts)?;
    *out = handle::insert_new::<hostfirst_load>(loaded);
    Ok(())
}

/// Writes the number of tensors of a load (every tensor of the file) to `*out_count`. Errors:
/// `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_count(load: *const hostfirst_load, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_load_count", {
        let l = handle::get::<hostfirst_load>(load, "load")?;
        *out_ptr(out_count, "out_count")? = l.len();
        Ok(())
    })
}

/// Finds the tensor `name` of a load. Writes `HOSTFIRST_LOADED_VIEW` or `HOSTFIRST_LOADED_BUFFER` to
/// `*out_kind`; then, for a buffer, a **new** `hostfirst_buffer` handle to `*out_buffer` (when non-NULL),
/// and for a view a **new** `hostfirst_view` handle to `*out_view` (when non-NULL); the other output is set
/// to NULL. The caller frees each returned handle (`hostfirst_buffer_free`, `hostfirst_view_free`); a
/// returned buffer shares its memory with the load, and that memory is released when the load and every
/// handle to it are freed, in any order. Pass NULL for both to ask only for the kind. Errors:
/// `NULL_ARGUMENT` (load, name, out_kind), `INVALID_HANDLE`, `NOT_FOUND`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_get(
    load: *const hostfirst_load,
    name: *const c_char,
    out_kind: *mut u32,
    out_buffer: *mut *mut hostfirst_buffer,
    out_view: *mut *mut hostfirst_view,
) -> Status {
    hostfirst_boundary!("hostfirst_load_get", {
        let l = handle::get::<hostfirst_load>(load, "load")?;
        let name = c_str(name, "name")?;
        let kind = out_ptr(out_kind, "out_kind")?;
        let placed =
            l.get(name).ok_or_else(|| Error::new(Status::NotFound, format!("no tensor '{name}' in this load")))?;
        let (k, b, v) = match placed {
            Placed::View(view) => {
                let v = if out_view.is_null() {
                    std::ptr::null_mut()
                } else {
                    handle::insert_new::<hostfirst_view>(view.clone())
                };
                (HOSTFIRST_LOADED_VIEW, std::ptr::null_mut(), v)
            }
            Placed::Buffer(buf) => {
                let b = if out_buffer.is_null() {
                    std::ptr::null_mut()
                } else {
                    handle::insert::<hostfirst_buffer>(buf.clone())
                };
                (HOSTFIRST_LOADED_BUFFER, b, std::ptr::null_mut())
            }
        };
        *kind = k;
        if let Some(o) = opt_out(out_buffer) {
            *o = b;
        }
        if let Some(o) = opt_out(out_view) {
            *o = v;
        }
        Ok(())
    })
}

/// Frees a load. NULL is a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Buffers and views
/// obtained with `hostfirst_load_get` stay valid. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_free(load: *mut hostfirst_load) -> Status {
    hostfirst_boundary!("hostfirst_load_free", { handle::remove(load, "load").map(|_| ()) })
}

// ---- gather --------------------------------------------------------------------------------------------

/// Creates a reusable gather of `[batch, window]` elements of `dtype` (a `HOSTFIRST_DTYPE_*` of whole bytes)
/// on `device`: allocates, after a fit check, the first batch (and for CUDA one page-locked staging buffer
/// of the same size and a stream). Writes a new handle to `*out` (free with `hostfirst_gather_free`).
///
/// **Batch ownership: the ring.** Each run fills a batch that no one else holds and makes it the gather's
/// current batch. A batch handed out — a `hostfirst_buffer` handle from `hostfirst_gather_run_batch` or
/// `hostfirst_gather_batch`, or a DLPack export of one — is never rewritten while any such reference to it
/// remains (the handle not freed, the export's deleter not run), on cpu or on CUDA; on CUDA the rewrite also
/// waits, on the device, for the events recorded on the consumers' streams when they released it (see
/// `hostfirst_buffer_to_dlpack_ex` and `hostfirst_buffer_record_stream`). When every batch is held, the ring
/// grows by one batch (fit-checked: `OUT_OF_MEMORY` if it does not fit) up to its bound,
/// `HOSTFIRST_GATHER_DEFAULT_RING_BOUND` (4) unless set with `hostfirst_gather_set_ring_bound`; at the bound
/// a run returns `HOSTFIRST_STATUS_BUSY` and changes nothing. A consumer that releases each batch before the
/// next run keeps one batch; one that holds the previous batch while the next is filled keeps two. Once the
/// ring has grown to what the consumer holds at once, runs allocate nothing. Batches are the only memory
/// hostfirst both reuses and hands out: its staging slabs, resident registrations and the gather's staging
/// buffer are internal and never reach a consumer; every other buffer it hands out is never rewritten.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (batch or window 0, unknown or sub-byte dtype, bad device
/// value), `NO_SUCH_DEVICE`, `UNAVAILABLE`, `OUT_OF_MEMORY`, `DEVICE_ERROR`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_new(
    device: hostfirst_device,
    dtype: u32,
    batch: u64,
    window: u64,
    out: *mut *mut hostfirst_gather,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_new", {
        let out = out_ptr(out, "out")?;
        let d = device.to_device("device")?;
        let dt = DType::from_u32(dtype).ok_or_else(|| {
            Error::new(Status::InvalidArgument, format!("dtype {dtype} is not a HOSTFIRST_DTYPE_* value"))
        })?;
        let g = Gather::new(d, dt, batch, window)?;
        *out = handle::insert_new::<hostfirst_gather>(Mutex::new(GatherC { gather: g }));
        Ok(())
    })
}

/// The ring bound of a new gather (`hostfirst_gather_new`).
pub const HOSTFIRST_GATHER_DEFAULT_RING_BOUND: usize = 4;
/// The largest bound `hostfirst_gather_set_ring_bound` accepts.
pub const HOSTFIRST_GATHER_MAX_RING_BOUND: usize = 1024;
const _: () = assert!(
    HOSTFIRST_GATHER_DEFAULT_RING_BOUND == crate::place::gather::DEFAULT_RING_BOUND
        && HOSTFIRST_GATHER_MAX_RING_BOUND == crate::place::gather::MAX_RING_BOUND
);

fn offsets_arg<'a>(offsets: *const u64, n: usize) -> Result<&'a [u64]> {
    if n == 0 {
        return Ok(&[]);
    }
    in_ref(offsets, "offsets")?;
    // SAFETY: non-NULL with the caller's promise of `n` readable values.
    Ok(unsafe { std::slice::from_raw_parts(offsets, n) })
}

/// Writes a new buffer handle for `batch` to `*out` when `out` is non-NULL.
fn hand_out(batch: crate::place::gather::Batch, out: *mut *mut hostfirst_buffer) {
    if let Some(o) = opt_out(out) {
        *o = handle::insert::<hostfirst_buffer>(batch);
    }
}

/// Assembles one batch: row `i` = elements `offsets[i] .. offsets[i] + window` of the 1-D tensor `source`,
/// for `i < n` (`n` must equal the batch), into a batch of the ring no one holds (see `hostfirst_gather_new`),
/// which becomes the gather's current batch. The windows are read into the batch (cpu and cuda_host) or into
/// the staging buffer followed by one asynchronous copy (cuda). Returns once the batch is in place.
///
/// How windows are read: if `hostfirst_view_prefault` populated the source's pages (on this view or another
/// view of the same file) or the source is over a memory buffer, each window is a memcpy from the mapping,
/// the fastest way — but a file truncated under the mapping raises SIGBUS (see `hostfirst_view_info.data`).
/// Otherwise each window is one positioned read (`pread`), which avoids a page fault per window and turns a
/// file truncated after opening into `TRUNCATED` instead of SIGBUS. **For a training loop over a tensor that
/// fits in memory, the fast and truncation-proof way** is to put it to cpu once (an eager copy,
/// `hostfirst_put`) and gather from that buffer with `hostfirst_gather_run_from_buffer`: memcpy speed, and
/// nothing done to the file can fault or fail it. BENCHMARKS.md section 3 has the speeds.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (source not 1-D, dtype differs, `n`
/// differs from the batch), `OUT_OF_RANGE` (a window longer than the tensor, or the first offset — index and
/// value — whose window runs past the end), `BUSY` (every batch held at the ring's bound), `OUT_OF_MEMORY`
/// (growing the ring): with these no batch changed. `TRUNCATED` or `IO` while reading, `DEVICE_ERROR` while
/// copying: a batch no one holds then has a partly assembled batch and the current batch stays the previous
/// one. Calls on one gather are serialised. `hostfirst_gather_run_batch` also hands out the batch.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run", { gather_view(gather, source, offsets, n, std::ptr::null_mut()) })
}

/// `hostfirst_gather_run`, and writes a **new** `hostfirst_buffer` handle for the batch it filled to
/// `*out_batch` (NULL: not wanted). The handle is the caller's (free it with `hostfirst_buffer_free`); while it
/// lives — or any DLPack export made from it — that batch is never rewritten, so the data a consumer took
/// cannot change under it. Free it when done, or the ring grows to its bound and then reports `BUSY`. On
/// failure `*out_batch` is unchanged. Thread-safe; calls on one gather are serialised.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run_batch(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n: usize,
    out_batch: *mut *mut hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run_batch", { gather_view(gather, source, offsets, n, out_batch) })
}

fn gather_view(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_view,
    offsets: *const u64,
    n: usize,
    out: *mut *mut hostfirst_buffer,
) -> Result<()> {
    let g = handle::get::<hostfirst_gather>(gather, "gather")?;
    let v = handle::get::<hostfirst_view>(source, "source")?;
    let offsets = offsets_arg(offsets, n)?;
    let batch = g.lock().unwrap_or_else(|e| e.into_inner()).gather.run(&v, offsets)?;
    hand_out(batch, out);
    Ok(())
}

/// Gathers from a 1-D host buffer (`cpu` or `cuda_host`) instead of a view: rows as for
/// `hostfirst_gather_run`, each window a memcpy from the buffer. The truncation-proof fast path: put the token
/// tensor to cpu once with an eager copy (`hostfirst_put`), then gather from that buffer at memory speed;
/// nothing done to the file afterwards can fault or fail the gather (a copy-on-write buffer,
/// `opts->copy_on_write`, is as fast but keeps its file's SIGBUS hazard for pages not written). The source
/// buffer is only read. Writes a new handle for the filled batch to `*out_batch` (NULL: not wanted; see
/// `hostfirst_gather_run_batch`). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`,
/// `OUT_OF_RANGE`, `BUSY`, `OUT_OF_MEMORY` as for `hostfirst_gather_run`; `UNSUPPORTED` for a CUDA source
/// buffer; `DEVICE_ERROR` while copying to CUDA. Thread-safe; calls on one gather are serialised.
#[no_mangle]
pub extern "C" fn hostfirst_gather_run_from_buffer(
    gather: *mut hostfirst_gather,
    source: *const hostfirst_buffer,
    offsets: *const u64,
    n: usize,
    out_batch: *mut *mut hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_run_from_buffer", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let src = handle::get::<hostfirst_buffer>(source, "source")?;
        let offsets = offsets_arg(offsets, n)?;
        let batch = {
            let src = src.lock().unwrap_or_else(|e| e.into_inner());
            let mut g = g.lock().unwrap_or_else(|e| e.into_inner());
            g.gather.run_from_buffer(&src, offsets)?
        };
        hand_out(batch, out_batch);
        Ok(())
    })
}

/// Writes a **new** `hostfirst_buffer` handle for the gather's current batch (the one the last successful run
/// filled; before the first run, the first batch, zero-filled) to `*out`. The caller frees it with
/// `hostfirst_buffer_free`; while it lives that batch is not rewritten (see `hostfirst_gather_new`).
/// (This replaces 0.1's `hostfirst_gather_buffer`, which lent one borrowed handle whose contents changed
/// with every run.) Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_batch(gather: *const hostfirst_gather, out: *mut *mut hostfirst_buffer) -> Status {
    hostfirst_boundary!("hostfirst_gather_batch", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let out = out_ptr(out, "out")?;
        let batch = g.lock().unwrap_or_else(|e| e.into_inner()).gather.current();
        *out = handle::insert::<hostfirst_buffer>(batch);
        Ok(())
    })
}

/// Sets the most batches the gather's ring may hold (1 to `HOSTFIRST_GATHER_MAX_RING_BOUND`; a new gather
/// has `HOSTFIRST_GATHER_DEFAULT_RING_BOUND`). 1 gives one batch, rewritten by every run and `BUSY` while it
/// is held. Lowering the bound drops batches beyond it from the ring, idle ones first: idle ones are freed
/// now, held ones when their last reference is released; the current batch stays. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (bound out of range; nothing changed). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_set_ring_bound(gather: *mut hostfirst_gather, bound: usize) -> Status {
    hostfirst_boundary!("hostfirst_gather_set_ring_bound", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let r = g.lock().unwrap_or_else(|e| e.into_inner()).gather.set_ring_bound(bound);
        r
    })
}

/// Describes the gather's ring: its bound, the batches allocated now, and how many of them are held by
/// consumers (buffer handles not freed, DLPack exports not deleted). Each output may be NULL. Errors:
/// `NULL_ARGUMENT` (gather), `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_ring(
    gather: *const hostfirst_gather,
    out_bound: *mut usize,
    out_allocated: *mut usize,
    out_held: *mut usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_ring", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let g = g.lock().unwrap_or_else(|e| e.into_inner());
        let (bound, len, held) = (g.gather.ring_bound(), g.gather.ring_len(), g.gather.held());
        drop(g);
        for (p, v) in [(out_bound, bound), (out_allocated, len), (out_held, held)] {
            if let Some(o) = opt_out(p) {
                *o = v;
            }
        }
        Ok(())
    })
}

/// Copies the current batch (`batch * window * element size` bytes, C order) into `dst`, which holds `cap`
/// bytes. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `BUFFER_TOO_SMALL`, `DEVICE_ERROR`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_copy_to_host(
    gather: *const hostfirst_gather,
    dst: *mut c_void,
    cap: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_copy_to_host", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        let dst = out_bytes(dst as *mut u8, cap, "dst")?;
        let batch = g.lock().unwrap_or_else(|e| e.into_inner()).gather.current();
        let r = batch.lock().unwrap_or_else(|e| e.into_inner()).copy_to_host(dst);
        r
    })
}

/// Writes the size of one batch in bytes to `*out_nbytes`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_nbytes(gather: *const hostfirst_gather, out_nbytes: *mut u64) -> Status {
    hostfirst_boundary!("hostfirst_gather_nbytes", {
        let g = handle::get::<hostfirst_gather>(gather, "gather")?;
        *out_ptr(out_nbytes, "out_nbytes")? = g.lock().unwrap_or_else(|e| e.into_inner()).gather.nbytes();
        Ok(())
    })
}

/// Frees a gather: its staging and stream, and the batches no one holds. Batches still held (buffer handles,
/// DLPack exports) stay valid and are freed with their last reference. NULL is a no-op; a freed or foreign
/// handle gives `INVALID_HANDLE`. Memory is released once no call in flight uses it. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_free(gather: *mut hostfirst_gather) -> Status {
    hostfirst_boundary!("hostfirst_gather_free", { handle::remove(gather, "gather").map(|_| ()) })
}

/// Draws `n` start offsets uniform in `[0, len - window)` into `out` (nanoGPT's `get_batch`: each window
/// and its one-shifted target fit), from the splitmix64 stream whose state is `*state` (seed it with any
/// value; it advances, so successive calls give successive batches, reproducibly). Errors:
/// `NULL_ARGUMENT`, `INVALID_ARGUMENT` (`window >= len`). Thread-safe (each caller owns its state).
#[no_mangle]
pub extern "C" fn hostfirst_random_offsets(state: *mut u64, len: u64, window: u64, out: *mut u64, n: usize) -> Status {
    hostfirst_boundary!("hostfirst_random_offsets", {
        let st = out_ptr(state, "state")?;
        let out: &mut [u64] = if n == 0 {
            &mut []
        } else {
            out_ptr(out, "out")?;
            // SAFETY: non-NULL with the caller's promise of room for `n` values.
            unsafe { std::slice::from_raw_parts_mut(out, n) }
        };
        random_offsets(st, len, window, out)
    })
}
