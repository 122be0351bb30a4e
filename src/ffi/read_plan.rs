//! Declared read plans: `hostfirst_read_plan_*` (experimental tier).

use super::args::{
    c_str, in_slice, init_options, options_struct, out_ptr, out_struct, out_struct_size, read_options, write_out_struct,
};
use super::file::hostfirst_file;
use super::handle::{self, Handle};
use crate::engine::{Progress, ReadPlan, Request, Slice, Tuning};
use crate::error::{Error, Result, Status};
use crate::file::ReadPolicy;
use std::ffi::{c_char, c_void};

/// A declared read plan: the slices of a file's tensors a caller will read, turned into the file requests
/// that fetch them (neighbouring ranges merged under an over-read cap). Created by
/// `hostfirst_read_plan_make`, released by `hostfirst_read_plan_free`. Immutable: every call on it is
/// thread-safe, executing it from several threads at once included.
pub struct hostfirst_read_plan {
    _private: [u8; 0],
}

impl Handle for hostfirst_read_plan {
    type Target = ReadPlan;
    const NAME: &'static str = "hostfirst_read_plan";
}

/// One declared slice of `hostfirst_read_plan_make`: a tensor, and either the whole of it (`rank` 0) or the
/// range `[starts[d], starts[d] + lens[d])` of each of its `rank` dimensions. An element of an array: its
/// layout is fixed (it has no `struct_size`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_read_plan_slice {
    /// The tensor's name (NUL-terminated UTF-8).
    pub name: *const c_char,
    /// 0 for the whole tensor, else the tensor's rank (one range per dimension).
    pub rank: usize,
    /// `rank` first elements (NULL when `rank` is 0).
    pub starts: *const u64,
    /// `rank` lengths in elements (NULL when `rank` is 0).
    pub lens: *const u64,
}

/// Options of `hostfirst_read_plan_make`. Fill it with `hostfirst_read_plan_options_init` (or zero-initialise
/// and set `struct_size = sizeof(hostfirst_read_plan_options)`), then what you need; zero fields mean the
/// defaults. A smaller `struct_size` from an older header (at least its first layout) is accepted: fields past
/// it take their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_read_plan_options {
    /// `sizeof(hostfirst_read_plan_options)`.
    pub struct_size: usize,
    /// The over-read cap: the largest ratio of file pages one merged request may take to the pages its ranges
    /// need (0: 1.25; otherwise at least 1.0, or `INVALID_ARGUMENT` naming `max_over_read`). Neighbouring
    /// ranges are read with one request while the merged request stays within it.
    pub max_over_read: f64,
    /// Largest merged request in bytes (0: 1 MiB); a single range longer than this is cut into requests of it.
    pub max_read_bytes: u64,
    /// Reader threads of an execution (0: the CPUs available to the process, at most 16; at most 1024).
    pub threads: u32,
    /// Bytes of requests one thread claims at a time (0: 8 MiB).
    pub chunk_bytes: u64,
}

options_struct!(
    hostfirst_read_plan_options,
    first_version_ends_with = chunk_bytes,
    fields = [struct_size, max_over_read, max_read_bytes, threads, chunk_bytes]
);

impl Default for hostfirst_read_plan_options {
    fn default() -> Self {
        hostfirst_read_plan_options {
            struct_size: std::mem::size_of::<hostfirst_read_plan_options>(),
            max_over_read: 0.0,
            max_read_bytes: 0,
            threads: 0,
            chunk_bytes: 0,
        }
    }
}

/// What a read plan costs, filled by `hostfirst_read_plan_describe`. Set `struct_size =
/// sizeof(hostfirst_read_plan_stats)` before the call; fields may be appended in later minor versions.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_read_plan_stats {
    /// In: the caller's `sizeof(hostfirst_read_plan_stats)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// Declared slices.
    pub slices: u64,
    /// Bytes the slices hold (what the caller needs; the destinations of an execution).
    pub needed_bytes: u64,
    /// Bytes the requests read from the files (gaps merged into requests included).
    pub read_bytes: u64,
    /// File requests after coalescing.
    pub requests: u64,
    /// Largest memory an execution holds at once: the destinations plus the reader threads' scratch for
    /// merged requests.
    pub peak_memory_bytes: u64,
    /// Files of the set the requests read.
    pub files: u64,
}

out_struct!(hostfirst_read_plan_stats, files);

/// One request of a read plan, filled by `hostfirst_read_plan_request`. Set `struct_size =
/// sizeof(hostfirst_read_plan_request_info)` before the call; fields may be appended in later minor versions.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_read_plan_request_info {
    /// In: the caller's `sizeof(hostfirst_read_plan_request_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// The file it reads: 0 for a single file; for a sharded set, the index of the part file in the plan's
    /// order of first use.
    pub file: u64,
    /// Byte offset in that file.
    pub offset: u64,
    /// Bytes read.
    pub length: u64,
    /// Declared slices it serves bytes to.
    pub slices: u64,
}

out_struct!(hostfirst_read_plan_request_info, slices);

fn plan_options(p: *const hostfirst_read_plan_options) -> Result<(ReadPolicy, Tuning)> {
    let o = read_options(p, hostfirst_read_plan_options::default(), "opts")?;
    let mut policy = ReadPolicy::default();
    if o.max_over_read != 0.0 {
        policy.max_over_read = o.max_over_read;
    }
    if o.max_read_bytes != 0 {
        policy.max_read = o.max_read_bytes;
    }
    if !(policy.max_over_read.is_finite() && policy.max_over_read >= 1.0) {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("opts->max_over_read is {}; the over-read cap must be 0 (1.25) or at least 1.0", o.max_over_read),
        ));
    }
    if o.threads > 1024 {
        return Err(Error::new(Status::InvalidArgument, format!("opts->threads is {}; at most 1024", o.threads)));
    }
    let chunk = usize::try_from(o.chunk_bytes).map_err(|_| {
        Error::new(Status::InvalidArgument, format!("opts->chunk_bytes {} is too large", o.chunk_bytes))
    })?;
    Ok((policy, Tuning { threads: o.threads as usize, chunk, staging: 0, queue_depth: 0 }))
}

/// Fills `*out` with the default read plan options (everything zero) and sets `out->struct_size =
/// struct_size`. Pass `sizeof *out`: `hostfirst_read_plan_options_init(&opts, sizeof opts)`. Only the fields
/// that lie wholly within the caller's `struct_size` bytes are written. Errors: `NULL_ARGUMENT`;
/// `INVALID_ARGUMENT` for a `struct_size` smaller than the struct's first layout (the message names both
/// sizes). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_read_plan_options_init(
    out: *mut hostfirst_read_plan_options,
    struct_size: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_read_plan_options_init", {
        init_options(out, struct_size, hostfirst_read_plan_options::default())
    })
}

/// Makes a read plan for `count` declared slices of `file` (nothing is read): each slice's byte ranges,
/// sorted by file offset, neighbouring ranges merged into one request while the merged request's pages stay
/// within `opts->max_over_read` times the pages it needs (slices of different tensors merge too), long ranges
/// cut at `opts->max_read_bytes`. `opts` may be NULL (the defaults). Writes a new handle to `*out` (free with
/// `hostfirst_read_plan_free`); the plan keeps the file's data alive, not the `file` handle. Errors:
/// `NULL_ARGUMENT` (`file`, `out`, `slices` with `count > 0`, a slice's name, or its `starts`/`lens` with
/// `rank > 0`); `INVALID_HANDLE`; `INVALID_ARGUMENT` (an over-read cap below 1.0, naming `max_over_read`; a
/// slice's `rank` that is not 0 or the tensor's rank; two slices that share bytes of the file, naming both;
/// `opts->struct_size`); `NOT_FOUND` (no tensor of that name; the message gives the slice's index);
/// `OUT_OF_RANGE` (a range past its dimension); `MISALIGNED_SLICE` (a range of a sub-byte tensor that starts
/// or ends inside a byte). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_read_plan_make(
    file: *const hostfirst_file,
    slices: *const hostfirst_read_plan_slice,
    count: usize,
    opts: *const hostfirst_read_plan_options,
    out: *mut *mut hostfirst_read_plan,
) -> Status {
    hostfirst_boundary!("hostfirst_read_plan_make", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let out = out_ptr(out, "out")?;
        let (policy, tuning) = plan_options(opts)?;
        let mut declared = Vec::with_capacity(count);
        for (i, s) in in_slice(slices, count, "slices")?.iter().enumerate() {
            let name = c_str(s.name, &format!("slices[{i}].name"))?;
            let starts = in_slice(s.starts, s.rank, &format!("slices[{i}].starts"))?;
            let lens = in_slice(s.lens, s.rank, &format!("slices[{i}].lens"))?;
            declared.push(Slice {
                name: name.to_string(),
                ranges: starts.iter().copied().zip(lens.iter().copied()).collect(),
            });
        }
        let plan = ReadPlan::new(&f, &declared, policy, tuning)?;
        *out = handle::insert_new::<hostfirst_read_plan>(plan);
        Ok(())
    })
}

/// Fills `*out` with what the plan costs: slices, bytes needed, bytes read, requests after coalescing, peak
/// memory of an execution, files read. Set `out->struct_size` first. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (`struct_size` too small or too large). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_read_plan_describe(
    plan: *const hostfirst_read_plan,
    out: *mut hostfirst_read_plan_stats,
) -> Status {
    hostfirst_boundary!("hostfirst_read_plan_describe", {
        let p = handle::get::<hostfirst_read_plan>(plan, "plan")?;
        let size = out_struct_size(out, "out")?;
        write_out_struct(
            out,
            size,
            hostfirst_read_plan_stats {
                struct_size: 0,
                slices: p.views().len() as u64,
                needed_bytes: p.needed(),
                read_bytes: p.read_bytes(),
                requests: p.request_count(),
                peak_memory_bytes: p.peak_memory(),
                files: p.files().count() as u64,
            },
        );
        Ok(())
    })
}

/// Fills `*out` with the plan's `index`-th request (file by file, in file-offset order; `requests` of
/// `hostfirst_read_plan_describe` says how many). Set `out->struct_size` first. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `OUT_OF_RANGE` (the message gives the count), `INVALID_ARGUMENT` (`struct_size` too
/// small or too large). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_read_plan_request(
    plan: *const hostfirst_read_plan,
    index: u64,
    out: *mut hostfirst_read_plan_request_info,
) -> Status {
    hostfirst_boundary!("hostfirst_read_plan_request", {
        let p = handle::get::<hostfirst_read_plan>(plan, "plan")?;
        let size = out_struct_size(out, "out")?;
        let requests = p.requests();
        let r: Request = *usize::try_from(index).ok().and_then(|i| requests.get(i)).ok_or_else(|| {
            Error::new(Status::OutOfRange, format!("request index {index}: the plan has {} requests", requests.len()))
        })?;
        write_out_struct(
            out,
            size,
            hostfirst_read_plan_request_info {
                struct_size: 0,
                file: r.file as u64,
                offset: r.offset,
                length: r.length,
                slices: r.slices as u64,
            },
        );
        Ok(())
    })
}

/// Executes the plan: reads every declared slice into `dsts[i]` (host memory of `capacities[i]` bytes, one
/// per slice in declaration order), packed in C order, with the plan's requests and no other read. `count`
/// must be the plan's slice count and each capacity at least its slice's bytes (checked before anything is
/// read). Writes the file bytes read (the plan's `read_bytes`) to `*out_bytes_read` when it is not NULL. On
/// failure the destinations' contents are unspecified. Errors: `NULL_ARGUMENT` (`dsts` or `capacities` with
/// `count > 0`, a destination of a non-empty slice); `INVALID_HANDLE`; `INVALID_ARGUMENT` (`count` differs
/// from the slice count, or a capacity is too small: the message names the slice and both sizes);
/// `TRUNCATED` (a file ends before a request: it was truncated after opening); `IO`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_read_plan_execute(
    plan: *const hostfirst_read_plan,
    dsts: *const *mut c_void,
    capacities: *const u64,
    count: usize,
    out_bytes_read: *mut u64,
) -> Status {
    hostfirst_boundary!("hostfirst_read_plan_execute", {
        let p = handle::get::<hostfirst_read_plan>(plan, "plan")?;
        let ptrs = in_slice(dsts, count, "dsts")?;
        let caps = in_slice(capacities, count, "capacities")?;
        if count != p.views().len() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("count is {count}; the plan has {} slices (one destination each)", p.views().len()),
            ));
        }
        let mut out: Vec<&mut [u8]> = Vec::with_capacity(count);
        for (i, ((&d, &cap), v)) in ptrs.iter().zip(caps).zip(p.views()).enumerate() {
            let n = v.nbytes();
            if cap < n {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("capacities[{i}] is {cap} bytes; slice {i} ('{}') is {n} bytes", v.name()),
                ));
            }
            if n == 0 {
                out.push(&mut []);
                continue;
            }
            if d.is_null() {
                return Err(Error::new(
                    Status::NullArgument,
                    format!("dsts[{i}] is NULL (slice '{}', {n} bytes)", v.name()),
                ));
            }
            // SAFETY: non-NULL with the caller's promise of `cap >= n` writable bytes, not aliased by another
            // destination (the documented contract).
            out.push(unsafe { std::slice::from_raw_parts_mut(d as *mut u8, n as usize) });
        }
        let read = p.execute(&mut out, &mut Progress::new(None, p.needed()))?;
        if !out_bytes_read.is_null() {
            // SAFETY: non-NULL: the caller's writable u64.
            unsafe { out_bytes_read.write(read) };
        }
        Ok(())
    })
}

/// Frees a read plan. NULL is a no-op. Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is
/// freed). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_read_plan_free(plan: *mut hostfirst_read_plan) -> Status {
    hostfirst_boundary!("hostfirst_read_plan_free", { handle::remove(plan, "plan").map(|_| ()) })
}
