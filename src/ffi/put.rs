//! Puts of one tensor onto a device, synchronous and asynchronous: `hostfirst_put_*`.

use super::args::{
    init_options, options_struct, out_ptr, out_struct, out_struct_size, page_cache_arg, read_options, write_out_struct,
};
use super::buffer::hostfirst_buffer;
use super::device::{hostfirst_device, target_of};
use super::handle::{self, Handle};
use super::view::hostfirst_view;
use crate::error::{Error, Result, Status};
use crate::place::op::{AsyncPutOptions, PutOp};
use crate::place::{PutOptions, PutStats};
use std::ffi::c_void;

/// An asynchronous put in progress (`hostfirst_put_start`); released with `hostfirst_put_op_free`.
/// `hostfirst_put_poll` and `hostfirst_put_wait` may be called from any thread.
pub struct hostfirst_put_op {
    _private: [u8; 0],
}

impl Handle for hostfirst_put_op {
    type Target = PutOp;
    const NAME: &'static str = "hostfirst_put_op";
}

/// The one progress callback of the library (puts, loads, shard runs): `done` of `total` bytes have reached
/// their destination. Return 0 to go on, nonzero to cancel (the operation then frees everything it took and
/// returns `HOSTFIRST_STATUS_CANCELLED`). Called at most every 50 ms, with `done` non-decreasing, and once at
/// the end with `done == total` (cancelling then still cancels). `user` is the pointer given beside the
/// callback, passed unchanged. Synchronous operations call it on the calling thread; asynchronous puts on the
/// put's worker thread. It must not call `hostfirst_put_wait` or `hostfirst_put_op_free` on its own operation.
pub type hostfirst_progress_fn = Option<unsafe extern "C" fn(done: u64, total: u64, user: *mut c_void) -> i32>;

/// Options of `hostfirst_put` and `hostfirst_put_start`. Fill it with `hostfirst_put_options_init` (or
/// zero-initialise and set `struct_size = sizeof(hostfirst_put_options)`), then set what you need; zero fields
/// mean the defaults; a NULL options pointer means all defaults. The way to make one:
/// `hostfirst_put_options opts; hostfirst_put_options_init(&opts, sizeof opts); opts.threads = 4;`. A smaller
/// `struct_size` from an older header (at least its 1.0 layout) is accepted: fields past it take their
/// defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_put_options {
    /// `sizeof(hostfirst_put_options)`.
    pub struct_size: usize,
    /// Reader threads (0: the CPUs available to the process, at most 16).
    pub threads: u32,
    /// 1: resident mode for CUDA targets — page-lock the tensor's mapped range once (read-only
    /// registration, cached until `hostfirst_release_cached_memory`) and copy straight from it. Pays off only
    /// for data transferred many times (registration costs ≥ 0.1 s/GB); the default is the staging ring. Where
    /// registration is unsupported or refused the put goes through the staging ring instead and says so
    /// (`hostfirst_put_stats.staged_instead`).
    pub resident: i32,
    /// Total bytes of page-locked staging for CUDA puts (0: 256 MiB). Host memory used by a put to CUDA stays
    /// within this bound whatever the tensor size.
    pub staging_bytes: u64,
    /// Bytes per read / per staging slab (0: 8 MiB reads for host targets, 16 MiB slabs for CUDA).
    pub chunk_bytes: u64,
    /// Progress callback, or NULL.
    pub progress: hostfirst_progress_fn,
    /// Passed to `progress` unchanged.
    pub user: *mut c_void,
    /// 1: copy-on-write host put. When the target is `cpu` and the view reads from a file, the buffer is a
    /// private, writable mapping of the tensor's pages in the file (`MAP_PRIVATE`) instead of a copy: it costs
    /// a page table, not a copy (milliseconds for gigabytes in the page cache). 0 (the default): an eager
    /// copy. Other targets, and views over memory (`hostfirst_file_open_memory`), always copy. The file stays
    /// tied to the buffer: on Linux, truncating it makes pages past the new end raise SIGBUS, and extending it
    /// again replaces them, written or not, with the file's new content (what was written there is lost,
    /// silently); Windows refuses to shrink the file while the buffer lives (a `FILE_MAP_COPY` view).
    /// See `hostfirst_put` for the contract and `hostfirst_buffer_is_file_backed` to ask a buffer which it got.
    pub copy_on_write: i32,
    /// (1.1) What the put leaves in the page cache: `HOSTFIRST_PAGE_CACHE_KEEP` (0, the default),
    /// `HOSTFIRST_PAGE_CACHE_DROP` (the pages of the view's file the put brought in are dropped when it
    /// ends; pages cached before stay) or `HOSTFIRST_PAGE_CACHE_BYPASS` (a contiguous view of a file put on
    /// `cpu` or `cuda_host` is read with `O_DIRECT` into aligned staging where the file system allows it;
    /// otherwise as DROP). Another value is `INVALID_ARGUMENT` naming `opts->page_cache`. A 64-bit integer
    /// holding a `hostfirst_page_cache` value: a 32-bit field would lie in the 1.0 struct's tail padding,
    /// which an older caller's `sizeof` covers with bytes it never set.
    pub page_cache: u64,
}

impl Default for hostfirst_put_options {
    fn default() -> Self {
        hostfirst_put_options {
            struct_size: std::mem::size_of::<hostfirst_put_options>(),
            threads: 0,
            resident: 0,
            staging_bytes: 0,
            chunk_bytes: 0,
            progress: None,
            user: std::ptr::null_mut(),
            copy_on_write: 0,
            page_cache: 0,
        }
    }
}

/// What a put did. Set `struct_size = sizeof(hostfirst_put_stats)` before passing it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hostfirst_put_stats {
    /// `sizeof(hostfirst_put_stats)`.
    pub struct_size: usize,
    /// Resident mode: seconds spent faulting in and registering the mapped range (0 when reused or not resident).
    pub register_seconds: f64,
    /// Resident mode: 1 when a cached registration was reused.
    pub reused_registration: i32,
    /// Resident mode: 1 when the put went through the staging ring instead, because the tensor shares
    /// memory pages with cached registrations that do not cover it (a slice registered before the whole
    /// tensor, or a neighbouring tensor), because the view is strided (`hostfirst_view_narrow` on an inner
    /// dimension), because the device cannot register host memory (`HOST_REGISTER_SUPPORTED` = 0, or
    /// `READ_ONLY_HOST_REGISTER_SUPPORTED` = 0 for a file's read-only mapping), or because the driver refused
    /// the registration (`cuMemHostRegister`: some filesystems, kernels, containers, the locked-memory limit,
    /// very large ranges); the copy is complete and correct either way.
    pub staged_instead: i32,
}

out_struct!(hostfirst_put_stats, staged_instead);

options_struct!(
    hostfirst_put_options,
    first_version_ends_with = copy_on_write,
    fields = [struct_size, threads, resident, staging_bytes, chunk_bytes, progress, user, copy_on_write],
    appended = [page_cache]
);

struct CProgress {
    f: unsafe extern "C" fn(u64, u64, *mut c_void) -> i32,
    user: *mut c_void,
}

// SAFETY: the C caller promises (hostfirst_progress_fn's contract) that the callback and its user pointer
// may be used from the put's worker thread.
unsafe impl Send for CProgress {}

impl CProgress {
    fn call(&self, done: u64, total: u64) -> bool {
        // SAFETY: a function pointer given by the caller with this signature.
        unsafe { (self.f)(done, total, self.user) != 0 }
    }
}

struct Opts {
    tuning: crate::engine::Tuning,
    resident: bool,
    copy_on_write: bool,
    progress: Option<CProgress>,
    page_cache: crate::cache::PageCache,
}

fn read_opts(p: *const hostfirst_put_options) -> Result<Opts> {
    let o = read_options(p, hostfirst_put_options::default(), "opts")?;
    let to_usize = |v: u64, what: &str| {
        usize::try_from(v).map_err(|_| Error::new(Status::InvalidArgument, format!("opts->{what} {v} is too large")))
    };
    if o.resident != 0 && o.resident != 1 {
        return Err(Error::new(Status::InvalidArgument, format!("opts->resident is {}; expected 0 or 1", o.resident)));
    }
    if o.copy_on_write != 0 && o.copy_on_write != 1 {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("opts->copy_on_write is {}; expected 0 or 1", o.copy_on_write),
        ));
    }
    if o.threads > 1024 {
        return Err(Error::new(Status::InvalidArgument, format!("opts->threads is {}; at most 1024", o.threads)));
    }
    Ok(Opts {
        tuning: crate::engine::Tuning {
            threads: o.threads as usize,
            chunk: to_usize(o.chunk_bytes, "chunk_bytes")?,
            staging: to_usize(o.staging_bytes, "staging_bytes")?,
            queue_depth: 0,
        },
        resident: o.resident == 1,
        copy_on_write: o.copy_on_write == 1,
        progress: o.progress.map(|f| CProgress { f, user: o.user }),
        page_cache: page_cache_arg(u32::try_from(o.page_cache).unwrap_or(u32::MAX), "opts->page_cache").map_err(
            |_| {
                Error::new(
                    Status::InvalidArgument,
                    format!("opts->page_cache {} is not a hostfirst_page_cache value", o.page_cache),
                )
            },
        )?,
    })
}

/// Checks the optional `out_stats` struct before a put (NULL: not wanted); returns its `struct_size`.
fn stats_size(out: *mut hostfirst_put_stats) -> Result<Option<usize>> {
    if out.is_null() {
        return Ok(None);
    }
    out_struct_size(out, "out_stats").map(Some)
}

fn write_stats(out: *mut hostfirst_put_stats, size: Option<usize>, s: PutStats) {
    if let Some(size) = size {
        let stats = hostfirst_put_stats {
            struct_size: 0,
            register_seconds: s.register_seconds,
            reused_registration: s.reused_registration as i32,
            staged_instead: s.staged_instead as i32,
        };
        write_out_struct(out, size, stats);
    }
}

/// Fills `*out` with the default options (everything zero/NULL) and sets `out->struct_size = struct_size`.
/// Pass `sizeof *out`: `hostfirst_put_options_init(&opts, sizeof opts)`. Only the fields that lie wholly
/// within the caller's `struct_size` bytes are written (a program built against an older, smaller struct
/// gets nothing written past it). Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a `struct_size` smaller
/// than the struct's 1.0 layout (the message names both sizes). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_put_options_init(out: *mut hostfirst_put_options, struct_size: usize) -> Status {
    hostfirst_boundary!("hostfirst_put_options_init", {
        init_options(out, struct_size, hostfirst_put_options::default())
    })
}

/// Puts a view (a tensor or a row slice) onto a device as a new buffer in `*out`, synchronously.
///
/// `target` NULL means the default device of the calling thread (scopes, process default,
/// `HOSTFIRST_DEFAULT_DEVICE`); in strict mode that is refused with `IMPLICIT_PLACEMENT`. `opts` NULL means
/// all defaults. The fit check runs before anything is allocated: a tensor that does not fit gives
/// `OUT_OF_MEMORY` with a message such as `tensor 'tokens' (19.09 GiB) does not fit on cuda:0: 4.20 GiB free
/// of 24.00 GiB`, details in `hostfirst_last_error_fit`, and allocates nothing. cpu targets are filled by parallel
/// `pread`s straight into the destination; cuda:N targets through the bounded page-locked staging ring (or
/// the resident registration, see `opts->resident`); the driver never copies from pageable memory.
/// Errors: `NULL_ARGUMENT` (`view`, `out`), `INVALID_HANDLE`, `INVALID_ARGUMENT` (unknown device kind,
/// bad options), `IMPLICIT_PLACEMENT`, `OUT_OF_MEMORY` (the fit check), `NO_SUCH_DEVICE`, `UNAVAILABLE`, `DEVICE_ERROR` (message names the driver's error),
/// `TRUNCATED`/`IO` (the file changed), `CANCELLED` (the progress callback asked). On any failure nothing
/// stays allocated and `*out` is unchanged. The buffer is the caller's; free it with `hostfirst_buffer_free`.
/// Thread-safe: many puts may run at once.
///
/// `out_stats` (NULL: not wanted; otherwise set its `struct_size` first) describes what the transfer did. It
/// is written only when the put succeeds, together with `*out`: on any failure (a bad argument, the fit check,
/// a driver error, a cancelled put) `*out_stats` is left exactly as the caller passed it, so stale numbers
/// from an earlier call are never mistaken for this one's.
///
/// **Eager copies and copy-on-write puts to cpu.** By default a put copies: the buffer is new memory the
/// caller owns, and nothing anyone does to the file afterwards can change it or fault it. That is why it is
/// the default: nothing hostfirst hands out changes under the consumer. A copy into new memory runs at the
/// speed of first-touch page zeroing (about 3-4 GB/s on the benchmark machine, BENCHMARKS.md).
/// With `opts->copy_on_write = 1` a put to cpu of a view that reads from a file maps the tensor's pages
/// privately instead (`MAP_PRIVATE`, readable and writable): a 2 GiB tensor in the page cache takes
/// milliseconds, and the process's anonymous memory grows only as pages are written. The pages are populated
/// for reading up front (`MADV_POPULATE_READ`; read-ahead advice on kernels before 5.14), not lazily, because a
/// put promises data in memory: what is not cached is read now, as a copy would read it, instead of one page
/// fault at a time inside the consumer's loop; later reads take no page faults; and a file already truncated
/// is reported now (`TRUNCATED`) instead of by a SIGBUS later. Populating copies nothing. The buffer behaves like any cpu buffer (writable, `hostfirst_buffer_to_dlpack`,
/// `hostfirst_buffer_free`); a write copies the 4 KiB page it touches, and **nothing is ever written to the
/// file**. Its data address is where the tensor sits in its first page (alignment as the file gives it,
/// see `hostfirst_view_info.alignment`). The fit check counts what can become private: every page the tensor
/// touches. The ties to the file, on Linux: pages not yet written still read the file's page cache, so
/// **another process writing the file may change them**. **Truncating the file** discards every page past the
/// new end, including pages the consumer wrote (the kernel drops those private copies too): touching one
/// raises SIGBUS; pages wholly before the new end keep what was written. **Truncating and then extending the
/// file** (a checkpoint rewritten in place with `O_TRUNC`, which cuts it to nothing first) leaves no fault to
/// see: every page past the shortest length the file had, written or not, now reads the file's new content,
/// and **what the consumer wrote there is lost, with no signal and no error**; hostfirst cannot detect it
/// (tests/c/test_cow_truncate.c checks both on the running kernel). On Windows the buffer is a `FILE_MAP_COPY`
/// view, populated with `PrefetchVirtualMemory` and a read per page: the file cannot be shrunk while it lives
/// (the writer gets `ERROR_USER_MAPPED_FILE`), and the written pages keep their writes (the same test checks
/// that under Wine). Prefer the eager
/// copy (the default, `copy_on_write = 0`) when the file may be rewritten or truncated while the buffer
/// lives (shared or network storage, checkpoints replaced in place, files you do not control), when the
/// buffer must be isolated from the file, or when you will overwrite most of it anyway (a fault per written
/// page costs more than a bulk copy). For gathering training batches from a tensor without the SIGBUS hazard,
/// put it to cpu with an eager copy and use `hostfirst_gather_run_from_buffer`.
#[no_mangle]
pub extern "C" fn hostfirst_put(
    view: *const hostfirst_view,
    target: *const hostfirst_device,
    opts: *const hostfirst_put_options,
    out: *mut *mut hostfirst_buffer,
    out_stats: *mut hostfirst_put_stats,
) -> Status {
    hostfirst_boundary!("hostfirst_put", { put_impl(view, target, opts, out, out_stats) })
}

fn put_impl(
    view: *const hostfirst_view,
    target: *const hostfirst_device,
    opts: *const hostfirst_put_options,
    out: *mut *mut hostfirst_buffer,
    out_stats: *mut hostfirst_put_stats,
) -> Result<()> {
    let v = handle::get::<hostfirst_view>(view, "view")?;
    let out = out_ptr(out, "out")?;
    let target = target_of(target)?;
    let o = read_opts(opts)?;
    let stats_size = stats_size(out_stats)?;
    let mut cb = o.progress.map(|p| move |d: u64, t: u64| p.call(d, t));
    let progress = cb.as_mut().map(|c| c as &mut dyn FnMut(u64, u64) -> bool);
    let (buf, stats) = crate::place::put_with_stats(
        &v,
        target,
        PutOptions {
            tuning: o.tuning,
            resident: o.resident,
            copy_on_write: o.copy_on_write,
            progress,
            page_cache: o.page_cache,
        },
    )?;
    write_stats(out_stats, stats_size, stats);
    *out = handle::insert_new::<hostfirst_buffer>(std::sync::Mutex::new(buf));
    Ok(())
}

/// Starts putting a view on a worker thread; `*out_op` receives the operation, whose buffer
/// `hostfirst_put_wait` takes. A different operation from `hostfirst_put` (it returns before the bytes move),
/// with the same options struct. Arguments as for `hostfirst_put`; the target (including the default device and strict mode) is resolved now, on the
/// calling thread, and errors found before the worker starts are returned here (then `*out_op` is
/// unchanged). The view may be freed right after the call (the operation keeps what it needs). The progress
/// callback runs on the worker thread. Free the operation with `hostfirst_put_op_free` in every case. Errors:
/// (here) `NULL_ARGUMENT` (`view`, `out_op`), `INVALID_HANDLE`, `INVALID_ARGUMENT` (unknown device kind, bad
/// options), `IMPLICIT_PLACEMENT` (`target` NULL in strict mode), `NO_SUCH_DEVICE`, `UNAVAILABLE` (a backend
/// not available), `OUT_OF_MEMORY` (the worker thread could not be started); the put's own (the fit check's
/// `OUT_OF_MEMORY`, `DEVICE_ERROR`, `TRUNCATED`, `IO`, `CANCELLED`) come from `hostfirst_put_wait`.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_put_start(
    view: *const hostfirst_view,
    target: *const hostfirst_device,
    opts: *const hostfirst_put_options,
    out_op: *mut *mut hostfirst_put_op,
) -> Status {
    hostfirst_boundary!("hostfirst_put_start", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let out = out_ptr(out_op, "out_op")?;
        let target = target_of(target)?;
        let o = read_opts(opts)?;
        let progress =
            o.progress.map(|p| Box::new(move |d: u64, t: u64| p.call(d, t)) as crate::place::op::SendProgress);
        let op = PutOp::start(
            &v,
            target,
            AsyncPutOptions {
                tuning: o.tuning,
                resident: o.resident,
                copy_on_write: o.copy_on_write,
                progress,
                page_cache: o.page_cache,
            },
        )?;
        *out = handle::insert_new::<hostfirst_put_op>(op);
        Ok(())
    })
}

/// Polls an operation without blocking: `OK` once it has finished (successfully or not; `hostfirst_put_wait`
/// then returns at once with its result), `NOT_READY` while it runs, `ALREADY_USED` after its result was
/// taken. `NOT_READY` is an answer, not a failure: it leaves the thread's last error alone, so a polling loop
/// does not overwrite the message of an earlier failure. Errors: (these do replace it) `ALREADY_USED`,
/// `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_put_poll(op: *const hostfirst_put_op) -> Status {
    hostfirst_boundary!("hostfirst_put_poll", default = Status::Panic, {
        super::status::answer(|| {
            let op = handle::get::<hostfirst_put_op>(op, "op")?;
            Ok(if op.is_done()? { Status::Ok } else { Status::NotReady })
        })
    })
}

/// Blocks until the operation finishes and moves its buffer into `*out` (the caller's, free with
/// `hostfirst_buffer_free`), or returns the put's error (`OUT_OF_MEMORY`, `DEVICE_ERROR`, `CANCELLED`, ...;
/// nothing stays allocated). The result is handed out once. Errors: the put's (`OUT_OF_MEMORY`,
/// `DEVICE_ERROR`, `TRUNCATED`, `IO`, `CANCELLED`, as for `hostfirst_put`), `ALREADY_USED` (a second wait),
/// `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe; the operation must still be freed.
#[no_mangle]
pub extern "C" fn hostfirst_put_wait(op: *mut hostfirst_put_op, out: *mut *mut hostfirst_buffer) -> Status {
    hostfirst_boundary!("hostfirst_put_wait", {
        let op = handle::get::<hostfirst_put_op>(op, "op")?;
        let out = out_ptr(out, "out")?;
        let (buf, _) = op.wait()?;
        *out = handle::insert_new::<hostfirst_buffer>(std::sync::Mutex::new(buf));
        Ok(())
    })
}

/// Frees an operation: a running put is cancelled and waited for; a result never taken is freed. NULL is a
/// no-op. Buffers already taken with `hostfirst_put_wait` are not affected. Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed). Thread-safe (a concurrent `hostfirst_put_wait` on the same operation returns first).
#[no_mangle]
pub extern "C" fn hostfirst_put_op_free(op: *mut hostfirst_put_op) -> Status {
    hostfirst_boundary!("hostfirst_put_op_free", {
        if let Some(op) = handle::remove::<hostfirst_put_op>(op, "op")? {
            op.cancel();
            drop(op);
        }
        Ok(())
    })
}
