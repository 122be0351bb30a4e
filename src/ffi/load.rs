//! Whole-file loads, a plan applied to its file: `hostfirst_load_*`. ("Load" means only this: opening and
//! validating files is `hostfirst_file_*`.)

use super::args::{c_page_cache, c_str, init_options, opt_out, options_struct, out_ptr, page_cache_arg, read_options};
use super::buffer::hostfirst_buffer;
use super::file::hostfirst_file;
use super::handle::{self, Handle};
use super::plan::hostfirst_plan;
use super::put::hostfirst_progress_fn;
use super::view::hostfirst_view;
use crate::error::{Error, Result, Status};
use crate::place::Placed;
use std::ffi::{c_char, c_void};

/// The result of a whole-file load: every tensor of the file by name, as a buffer or a host view. Created by
/// `hostfirst_load_run`, released by `hostfirst_load_free`. Immutable: every call on it is thread-safe.
pub struct hostfirst_load {
    _private: [u8; 0],
}

impl Handle for hostfirst_load {
    type Target = crate::place::Loaded;
    const NAME: &'static str = "hostfirst_load";
}

/// How a load holds a tensor (`hostfirst_load_get`'s `out_kind`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum hostfirst_loaded {
    /// A zero-copy host view of the file.
    View = 1,
    /// A buffer on a device.
    Buffer = 2,
}

/// Options of `hostfirst_load_run`. Fill it with `hostfirst_load_options_init` (or zero-initialise and set
/// `struct_size = sizeof(hostfirst_load_options)`), then set what you need; a NULL options pointer means all
/// defaults. The way to make one: `hostfirst_load_options opts; hostfirst_load_options_init(&opts, sizeof
/// opts); opts.progress = my_progress;`. A smaller `struct_size` from an older header (at least the first
/// version's) is accepted: fields past it take their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_load_options {
    /// `sizeof(hostfirst_load_options)`.
    pub struct_size: usize,
    /// 1: tensors the plan puts on `cpu` become copy-on-write mappings of their pages in the file instead of
    /// copies (`hostfirst_put` documents the contract: writable, never written back, pages not yet written
    /// tied to the file; on Linux truncating the file makes pages past the new end raise SIGBUS, written or
    /// not, and extending it again gives them the file's new content, silently losing what was written there;
    /// Windows refuses to shrink the file while they live). 0 (the default): copies. Other devices always copy.
    pub copy_on_write: i32,
    /// Progress callback (see `hostfirst_load_run`), or NULL.
    pub progress: hostfirst_progress_fn,
    /// Passed to `progress` unchanged.
    pub user: *mut c_void,
    /// (1.1) What the load leaves in the page cache: `HOSTFIRST_PAGE_CACHE_KEEP` (0, the default),
    /// `HOSTFIRST_PAGE_CACHE_DROP` (pages of the file the load brought in are dropped when it ends, failed
    /// or not; pages cached before stay) or `HOSTFIRST_PAGE_CACHE_BYPASS` (tensors copied into the `cpu` and
    /// `cuda` arenas are read with `O_DIRECT` into aligned staging where the file system allows it, the rest
    /// as with DROP). Tensors the plan leaves on the host are views of the mapping, read when touched: no
    /// policy applies to them. Another value is `INVALID_ARGUMENT` naming `opts->page_cache`.
    pub page_cache: c_page_cache,
}

impl Default for hostfirst_load_options {
    fn default() -> Self {
        hostfirst_load_options {
            struct_size: std::mem::size_of::<hostfirst_load_options>(),
            copy_on_write: 0,
            progress: None,
            user: std::ptr::null_mut(),
            page_cache: 0,
        }
    }
}

options_struct!(
    hostfirst_load_options,
    first_version_ends_with = user,
    fields = [struct_size, copy_on_write, progress, user],
    appended = [page_cache]
);

/// Fills `*out` with the default options (everything zero/NULL) and sets `out->struct_size = struct_size`.
/// Pass `sizeof *out`: `hostfirst_load_options_init(&opts, sizeof opts)`. Only the fields that lie wholly
/// within the caller's `struct_size` bytes are written. Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a
/// `struct_size` smaller than the struct's 1.0 layout (the message names both sizes). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_options_init(out: *mut hostfirst_load_options, struct_size: usize) -> Status {
    hostfirst_boundary!("hostfirst_load_options_init", {
        init_options(out, struct_size, hostfirst_load_options::default())
    })
}

/// Applies `plan` (made from `file`) and writes a new load handle to `*out` (free with `hostfirst_load_free`).
///
/// Before the first byte moves, every device of the plan is fit-checked against its memory free *now* (one
/// memory query per device, the only fit check of the load; with `opts->page_cache` BYPASS the host's share
/// includes the direct-read staging, 8 MiB and a page per reader thread); the first that does not fit gives
/// `OUT_OF_MEMORY` naming the device with the numbers (structured: `hostfirst_last_error_fit`), and nothing is
/// allocated. Host tensors become views. Then each device's tensors are placed as one job:
/// - `cpu`: one host allocation for all of them; each tensor's buffer is a 64-byte aligned part of it.
/// - `cuda:N`: one device allocation (`cuMemAlloc`) for all of them; each buffer is a 256-byte aligned part
///   (the alignment DLPack asks for). The bytes go through the page-locked staging ring on one stream with
///   one event per staging slab, reused: no stream, event or allocation per tensor.
/// - `cuda_host`, and `cpu` with copy-on-write (`opts->copy_on_write`): one allocation (or mapping) per
///   tensor.
///
/// Neighbouring tensors in the file are read together (one `pread`/`preadv`, never through the mapping, so
/// a file truncated since it was opened gives `TRUNCATED`, not a crash) as long as the bytes read between
/// them stay within 1.25 pages read per page needed. A buffer obtained from the load keeps its device's
/// allocation alive: the memory is released when the load and every buffer handle from it are freed.
/// **One kept tensor keeps the whole arena**: the allocation is one per device for all of that device's
/// tensors, so a single buffer handle (or DLPack export) of one small tensor, kept after
/// `hostfirst_load_free`, keeps every tensor's memory on that device allocated. To keep a few tensors and
/// give the rest back, copy them out (`hostfirst_buffer_to`), then free the load and its handles.
///
/// `opts` NULL means the defaults (copies, no progress callback); with `opts->copy_on_write = 1`, tensors
/// placed on `cpu` are mapped copy-on-write instead of copied (the fit check still runs before anything is
/// mapped). `opts->progress` (may be NULL) is called on the calling thread at a bounded rate (at most every
/// 50 ms, plus once after each device's job) with the bytes moved to devices so far and in all, never
/// decreasing, at least once, last with `done == total`; returning nonzero cancels: `CANCELLED`, no further
/// call, and everything the load had allocated is freed. Any other failure also frees everything.
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (the plan was made for another file; a bad
/// `opts`: struct_size, copy_on_write not 0 or 1, page_cache not a `hostfirst_page_cache`), `OUT_OF_MEMORY`,
/// `CANCELLED`, `DEVICE_ERROR`, `IO`, `TRUNCATED`. On error `*out` is unchanged. `opts->page_cache` (1.1)
/// says what the load leaves in the page cache (see `hostfirst_load_options`).
/// Thread-safe; `opts->user` is passed to the callback untouched.
#[no_mangle]
pub extern "C" fn hostfirst_load_run(
    file: *const hostfirst_file,
    plan: *const hostfirst_plan,
    opts: *const hostfirst_load_options,
    out: *mut *mut hostfirst_load,
) -> Status {
    hostfirst_boundary!("hostfirst_load_run", {
        let o = read_options(opts, hostfirst_load_options::default(), "opts")?;
        if o.copy_on_write != 0 && o.copy_on_write != 1 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("opts->copy_on_write is {}; expected 0 or 1", o.copy_on_write),
            ));
        }
        let page_cache = page_cache_arg(o.page_cache, "opts->page_cache")?;
        load_run(file, plan, o.progress, o.user, o.copy_on_write == 1, page_cache, out)
    })
}

fn load_run(
    file: *const hostfirst_file,
    plan: *const hostfirst_plan,
    progress: hostfirst_progress_fn,
    user: *mut c_void,
    copy_on_write: bool,
    page_cache: crate::cache::PageCache,
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
    let opts = crate::place::LoadOptions { copy_on_write, progress, page_cache };
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
/// handle to it are freed, in any order; it is a part of its device's one allocation for the whole load, which
/// it keeps allocated entirely (see `hostfirst_load_run`). Pass NULL for both to ask only for the kind. Errors:
/// `NULL_ARGUMENT` (load, name, out_kind), `INVALID_HANDLE`, `NOT_FOUND`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_get(
    load: *const hostfirst_load,
    name: *const c_char,
    out_kind: *mut hostfirst_loaded,
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
                (hostfirst_loaded::View, std::ptr::null_mut(), v)
            }
            Placed::Buffer(buf) => {
                let b = if out_buffer.is_null() {
                    std::ptr::null_mut()
                } else {
                    handle::insert::<hostfirst_buffer>(buf.clone())
                };
                (hostfirst_loaded::Buffer, b, std::ptr::null_mut())
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

/// Frees a load. NULL is a no-op. Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed). Buffers and views
/// obtained with `hostfirst_load_get` stay valid, and while any buffer of a device (or a DLPack export of one)
/// lives, that device's whole allocation for the load does too (see `hostfirst_load_run`). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_load_free(load: *mut hostfirst_load) -> Status {
    hostfirst_boundary!("hostfirst_load_free", { handle::remove(load, "load").map(|_| ()) })
}
