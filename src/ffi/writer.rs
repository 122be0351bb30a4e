//! The safetensors writer: `hostfirst_writer_*` (the skin over `hostfirst_core::write`).

use super::args::{
    c_dtype, c_str, enum_arg, init_options, options_struct, out_ptr, out_struct, out_struct_size, read_options,
    write_out_struct,
};
use super::buffer::hostfirst_buffer;
use super::handle::{self, Handle};
use super::put::hostfirst_progress_fn;
use super::view::hostfirst_view;
use crate::error::{Error, Result, Status};
use crate::write::{Source, Summary, WriteOptions, Writer};
use crate::DType;
use std::ffi::{c_char, c_void, CString};
use std::sync::Mutex;

/// A safetensors writer (`hostfirst_writer_open`, `hostfirst_writer_open_fd`): declarations, metadata, then
/// one `hostfirst_writer_finish`; released with `hostfirst_writer_free`.
///
/// **Thread safety:** calls on one writer are serialised (a second thread waits while `finish` runs);
/// different writers are independent.
pub struct hostfirst_writer {
    _private: [u8; 0],
}

/// The core writer, its callbacks and, after `finish`, the paths it wrote as C strings.
pub(crate) struct WriterHandle {
    writer: Writer,
    callbacks: Callbacks,
    parts: Vec<CString>,
    index: Option<CString>,
}

impl Handle for hostfirst_writer {
    type Target = Mutex<WriterHandle>;
    const NAME: &'static str = "hostfirst_writer";
}

/// The agreement step of a save written by several processes (`hostfirst_writer_options.world` > 1; see
/// `hostfirst_writer_finish`): every rank calls it at the same points with `ok` = 1 when it has succeeded so
/// far, 0 when not; it must return 1 when every rank passed 1, 0 when any passed 0 (an MPI_Allreduce of `ok`
/// with MPI_LAND over the job's communicator, which is also a barrier), or a negative value when it could not
/// agree (the save then fails on this rank with `CANCELLED`). `user` is the options' `user`. Called on the
/// thread that called `hostfirst_writer_finish`.
pub type hostfirst_agree_fn = Option<unsafe extern "C" fn(ok: i32, user: *mut c_void) -> i32>;

/// Options of `hostfirst_writer_open` and `hostfirst_writer_open_fd`. Fill it with
/// `hostfirst_writer_options_init(&opts, sizeof opts)`, then set what you need; zero fields mean the defaults;
/// a NULL options pointer means all defaults (one process, one file, fsync before `finish` returns).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_writer_options {
    /// `sizeof(hostfirst_writer_options)`.
    pub struct_size: usize,
    /// Split the save into part files of at most this many bytes of tensor data, laid out as the Hugging Face
    /// writers do (`model-00001-of-00003.safetensors` ... and `model.safetensors.index.json`); 0: one file.
    pub max_part_bytes: u64,
    /// 1: do not `fsync` (the data may still be in the page cache when `finish` returns; the target is still
    /// replaced by a rename, never written in place). 0 (default): every file and its directory are synced
    /// before `finish` returns.
    pub no_sync: i32,
    /// Threads reading view sources (0: the CPUs available, at most 16).
    pub threads: u32,
    /// Writes in flight at once (0: 64).
    pub queue_depth: u32,
    /// Bytes per write, and per page-locked slab for CUDA sources (0: 8 MiB writes, 16 MiB slabs).
    pub chunk_bytes: u64,
    /// Bytes of bounce buffers for view sources and of the page-locked ring for CUDA sources (0: 64 MiB):
    /// host memory a save uses beyond its sources stays within this bound.
    pub staging_bytes: u64,
    /// This process's rank, 0 .. `world` - 1 (with `world` > 1).
    pub rank: u32,
    /// The processes writing the save together (0 or 1: this one alone). With more, every rank opens a
    /// writer on the same path (a directory all of them see), declares the same tensors with their global
    /// shapes in the same order and the same metadata, adds the pieces it holds, and calls
    /// `hostfirst_writer_finish`, which is then collective and needs `agree`.
    pub world: u32,
    /// The agreement callback of a save by several ranks (see `hostfirst_agree_fn`); NULL otherwise.
    pub agree: hostfirst_agree_fn,
    /// Progress callback of `finish` (bytes of this process's sources written; nonzero return cancels), or NULL.
    pub progress: hostfirst_progress_fn,
    /// Passed to `agree` and `progress` unchanged.
    pub user: *mut c_void,
}

impl Default for hostfirst_writer_options {
    fn default() -> Self {
        hostfirst_writer_options {
            struct_size: std::mem::size_of::<hostfirst_writer_options>(),
            max_part_bytes: 0,
            no_sync: 0,
            threads: 0,
            queue_depth: 0,
            chunk_bytes: 0,
            staging_bytes: 0,
            rank: 0,
            world: 0,
            agree: None,
            progress: None,
            user: std::ptr::null_mut(),
        }
    }
}

options_struct!(
    hostfirst_writer_options,
    first_version_ends_with = user,
    fields = [
        struct_size,
        max_part_bytes,
        no_sync,
        threads,
        queue_depth,
        chunk_bytes,
        staging_bytes,
        rank,
        world,
        agree,
        progress,
        user
    ]
);

/// What a finished save wrote (`hostfirst_writer_finish`). Set `struct_size = sizeof(hostfirst_writer_info)`
/// (at least its 1.0 layout, at most 4096); fields past what the library knows are zeroed.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_writer_info {
    /// In: the caller's `sizeof(hostfirst_writer_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// Safetensors files of the save (0 for a descriptor: its one file has no path).
    pub parts: u64,
    /// Bytes of every file of the save: headers, data and the index.
    pub file_bytes: u64,
    /// Bytes this process wrote (with ranks: its pieces, and the headers and index on rank 0).
    pub written: u64,
    /// Tensors in the save.
    pub tensors: u64,
    /// The index of a split save (`*.safetensors.index.json`), NUL-terminated; NULL for one file. Valid while
    /// the writer lives.
    pub index: *const c_char,
}

out_struct!(hostfirst_writer_info, index);

/// The writer's copy of the C options, checked.
struct COpts {
    opts: WriteOptions,
    agree: hostfirst_agree_fn,
    progress: hostfirst_progress_fn,
    user: *mut c_void,
}

fn read_opts(p: *const hostfirst_writer_options) -> Result<COpts> {
    let o = read_options(p, hostfirst_writer_options::default(), "opts")?;
    let size = |v: u64, what: &str| {
        usize::try_from(v).map_err(|_| Error::new(Status::InvalidArgument, format!("opts->{what} {v} is too large")))
    };
    if o.no_sync != 0 && o.no_sync != 1 {
        return Err(Error::new(Status::InvalidArgument, format!("opts->no_sync is {}; expected 0 or 1", o.no_sync)));
    }
    if o.threads > 1024 {
        return Err(Error::new(Status::InvalidArgument, format!("opts->threads is {}; at most 1024", o.threads)));
    }
    if o.world > 1 && o.agree.is_none() {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("opts->world is {} but opts->agree is NULL: a save by several ranks needs the callback", o.world),
        ));
    }
    Ok(COpts {
        opts: WriteOptions {
            tuning: crate::engine::Tuning {
                threads: o.threads as usize,
                chunk: size(o.chunk_bytes, "chunk_bytes")?,
                staging: size(o.staging_bytes, "staging_bytes")?,
                queue_depth: o.queue_depth as usize,
            },
            max_part_bytes: o.max_part_bytes,
            durable: o.no_sync == 0,
            rank: o.rank,
            world: o.world.max(1),
        },
        agree: o.agree,
        progress: o.progress,
        user: o.user,
    })
}

/// The callbacks a writer keeps for `finish` (function pointers and the user pointer from the options).
struct Callbacks {
    agree: hostfirst_agree_fn,
    progress: hostfirst_progress_fn,
    user: *mut c_void,
}

// SAFETY: the C contract: the callbacks and `user` are called on the thread that calls finish, which may be
// another thread than the one that opened the writer; the caller makes that valid.
unsafe impl Send for Callbacks {}
// SAFETY: as above; they are only called with the writer's lock held.
unsafe impl Sync for Callbacks {}

fn register(w: Writer, c: COpts) -> *mut hostfirst_writer {
    let callbacks = Callbacks { agree: c.agree, progress: c.progress, user: c.user };
    handle::insert_new::<hostfirst_writer>(Mutex::new(WriterHandle {
        writer: w,
        callbacks,
        parts: Vec::new(),
        index: None,
    }))
}

/// Fills `*out` with the default options (everything zero/NULL) and sets `out->struct_size = struct_size`.
/// Pass `sizeof *out`. Only the fields that lie wholly within the caller's `struct_size` bytes are written.
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a `struct_size` smaller than the struct's 1.0 layout or
/// larger than 4096 (the message names the sizes). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_options_init(out: *mut hostfirst_writer_options, struct_size: usize) -> Status {
    hostfirst_boundary!("hostfirst_writer_options_init", {
        init_options(out, struct_size, hostfirst_writer_options::default())
    })
}

/// Opens a writer of the safetensors file `path` (UTF-8) and writes its handle to `*out`. Nothing is created
/// or written until `hostfirst_writer_finish`: declare the tensors (`hostfirst_writer_add_*`,
/// `hostfirst_writer_declare` + `hostfirst_writer_add_piece_*`), set the metadata, then finish.
///
/// **Never a half-written file.** `finish` writes into a temporary file in `path`'s directory
/// (`.<name>.<tag>.hostfirst-tmp`, or `.hf<digest of the name>.<tag>.hostfirst-tmp` where that would not fit
/// 255 bytes: any legal file name can be saved), then `fsync`s it, renames it over `path` and `fsync`s the
/// directory: at every instant `path` is the old file or the complete new one, and a reader holding the old file
/// keeps its bytes (nothing is truncated in place). A process killed at any point leaves the old file and at most
/// its temporary file, which the next writer of that path removes. Concurrent saves of one path all succeed, the
/// last rename winning. (Windows: the temporary file is closed before the rename; a target that another process
/// holds open or mapped is retried for 1.27 s, then refused — as is one this process maps, a view of the target
/// as a source: `finish` returns `PERMISSION_DENIED` and the target is unchanged; the directory is not synced;
/// see the README.) With `opts->max_part_bytes`, `path` names the set: `model.safetensors` (or
/// `model.safetensors.index.json`) becomes `model-0000k-of-0000N.safetensors` and
/// `model.safetensors.index.json`, each file replaced the same way, the index last. **A set commits as a
/// whole:** saves of one set, from any processes or threads, take turns under a lock over the set (the file
/// `.<index name>.hostfirst-lock`, removed when the save ends; one a killed process left is taken over by
/// the next save): `finish` waits while another save of the set runs, and every opened set is entirely one
/// save's.
///
/// **The file written.** A symbolic link at `path` is replaced by a regular file (the link is not followed: the
/// file it pointed to keeps its bytes, as a Hugging Face cache's blob must); a file replaced keeps its mode
/// (through a link, the mode of the file it pointed to); a new file gets `0666` less the umask.
///
/// **A URL saves to object storage.** `path` may be `s3://bucket/key.safetensors` (or `gs://`, `az://`;
/// configured from the environment as `hostfirst_file_open` is): `finish` streams each file (the same bytes a
/// local save writes) into a multipart upload of `HOSTFIRST_REMOTE_PART_SIZE` bytes per part (default 16 MiB,
/// at least 5 MiB; grown so no file needs more than 10,000 parts) with `HOSTFIRST_REMOTE_CONCURRENCY` parts in
/// flight (default 8): the memory it uses is bounded by part size x (concurrency + 1), never the whole file.
/// The object appears only when the save completes; a split set completes its part files, then writes the
/// index. Any failure (a source, a cancel, the server) aborts every upload of the save: no object, no pending
/// upload, no index; the message names the URL, never credentials. Each tensor is given whole (or as one
/// piece covering it: `UNSUPPORTED` at `finish` otherwise); `no_sync` has no effect there.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` (an empty path, a path that is a directory or whose parent is
/// a file, bad options, `world` > 1 without `agree`, `rank` >= `world`; a URL that names no object, or an
/// upload setting out of range, the message naming the variable); `UNSUPPORTED` (an `http://` or `https://`
/// URL, which takes no upload; `world` > 1 with a URL); `IO` (the directory does not exist,
/// as a missing file is `IO` to `hostfirst_file_open`; hostfirst makes no directories), `PERMISSION_DENIED`
/// (the directory cannot be read). On failure `*out` is unchanged. Free the handle with `hostfirst_writer_free`.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_open(
    path: *const c_char,
    opts: *const hostfirst_writer_options,
    out: *mut *mut hostfirst_writer,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_open", {
        let path = c_str(path, "path")?;
        let out = out_ptr(out, "out")?;
        let c = read_opts(opts)?;
        let w = Writer::create(path, c.opts)?;
        *out = register(w, c);
        Ok(())
    })
}

/// Opens a writer into the open file descriptor `fd` (Unix), which the caller owns and keeps open: the
/// writer uses a duplicate (closed by `hostfirst_writer_free`) and never closes `fd`. A seekable file is
/// written from its current position with positioned writes (nothing before it is touched, nothing is
/// truncated) and is positioned after the save when `finish` returns; anything else (a pipe, a socket) is
/// written in order and takes each tensor in one piece: given whole (`hostfirst_writer_add_*`) or as one piece
/// that covers it (`hostfirst_writer_declare` and one `hostfirst_writer_add_piece_*` starting at 0 with the
/// tensor's shape); a tensor in several pieces is `UNSUPPORTED` at `finish`. There is no temporary
/// file here: what a failed save leaves in `fd` is the caller's. One file, one process: `max_part_bytes` must
/// be 0 and `world` at most 1 (`INVALID_ARGUMENT`). `fsync` unless `no_sync` (skipped for pipes).
///
/// Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (bad options, as above), `IO` (`fd` is not an open
/// descriptor). Windows: `UNSUPPORTED` (use `hostfirst_writer_open`).
/// On failure `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_open_fd(
    fd: i32,
    opts: *const hostfirst_writer_options,
    out: *mut *mut hostfirst_writer,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_open_fd", {
        let out = out_ptr(out, "out")?;
        let c = read_opts(opts)?;
        let file = dup_fd(fd)?;
        let w = Writer::to_file(file, c.opts)?;
        *out = register(w, c);
        Ok(())
    })
}

/// A duplicate of the caller's descriptor `fd` (the platform layer's; Windows: `UNSUPPORTED`, saying why).
fn dup_fd(fd: i32) -> Result<std::fs::File> {
    hostfirst_core::os::dup_descriptor(fd).map_err(|e| {
        if e.kind() == std::io::ErrorKind::Unsupported {
            Error::new(Status::Unsupported, format!("{e} (writers on descriptors are Unix only)"))
        } else {
            hostfirst_core::os::io_error(format!("fd {fd} is not an open file descriptor"), &e)
        }
    })
}

/// The writer behind a handle, locked.
fn with<T>(w: *mut hostfirst_writer, f: impl FnOnce(&mut WriterHandle) -> Result<T>) -> Result<T> {
    let h = handle::get::<hostfirst_writer>(w, "writer")?;
    let mut g = h.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut g)
}

/// A `(ptr, rank)` array of u64 from C.
fn dims<'a>(p: *const u64, rank: usize, name: &str) -> Result<&'a [u64]> {
    if rank > crate::file::MAX_RANK {
        return Err(Error::new(
            Status::LimitExceeded,
            format!("{name}: rank {rank}; the hostfirst cap is {}", crate::file::MAX_RANK),
        ));
    }
    if rank == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("array '{name}' is NULL with {rank} elements")));
    }
    // SAFETY: non-NULL with the caller's promise of `rank` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, rank) })
}

/// Caller host memory `(data, nbytes)` as a source (NULL with 0 bytes is empty).
fn host_source(data: *const c_void, nbytes: usize) -> Result<Source> {
    if data.is_null() && nbytes > 0 {
        return Err(Error::new(Status::NullArgument, format!("'data' is NULL with {nbytes} bytes")));
    }
    // SAFETY: the C contract of the add functions: `data` is readable for `nbytes` bytes and stays valid and
    // unchanged until finish returns or the writer is freed.
    Ok(unsafe { Source::raw(data as *const u8, nbytes) })
}

fn dtype_arg(dtype: c_dtype) -> Result<DType> {
    enum_arg(dtype, DType::from_u32, "dtype", "hostfirst_dtype")
}

/// Declares tensor `name` with the bytes of `view` (its dtype and shape; a row slice or a narrowed view gives
/// its packed C-order bytes), read from its file through the transfer engine at `finish` (any file hostfirst
/// opens: the source may even be the file being replaced, except on Windows, where a mapped file cannot be
/// replaced: see `hostfirst_writer_open`). `name` NULL: the view's own name. The writer keeps
/// the view's file alive; the caller may free the view handle at once.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (a name that is `__metadata__`, holds a NUL
/// or is not UTF-8), `LIMIT_EXCEEDED` (a name longer than `HOSTFIRST_MAX_NAME_LEN` bytes, too many tensors),
/// `DUPLICATE_TENSOR` (the name is declared already), `ALREADY_USED` (after finish). On error nothing is
/// declared. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_add_view(
    writer: *mut hostfirst_writer,
    name: *const c_char,
    view: *const hostfirst_view,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_add_view", {
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let name = if name.is_null() { v.name().to_string() } else { c_str(name, "name")?.to_string() };
        with(writer, |h| h.writer.add(&name, v.dtype(), v.shape(), Source::View((*v).clone())))
    })
}

/// Declares tensor `name` with the bytes of `buffer` (its dtype and shape), on any device: cpu and cuda_host
/// buffers are written from where they lie; a CUDA buffer is copied to host through the page-locked staging
/// ring (at most `staging_bytes` of host memory, however large it is) while earlier slabs are written. The
/// writer keeps the buffer alive until finish (free the handle when you like) and holds its lock while
/// finish writes it. `name` NULL: the buffer's name. Errors: as `hostfirst_writer_add_view` (`NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT`, `LIMIT_EXCEEDED`, `DUPLICATE_TENSOR`, `ALREADY_USED`). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_add_buffer(
    writer: *mut hostfirst_writer,
    name: *const c_char,
    buffer: *const hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_add_buffer", {
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let (dtype, shape, own) = {
            let g = b.lock().unwrap_or_else(|p| p.into_inner());
            (g.dtype(), g.shape().to_vec(), g.name().to_string())
        };
        let name = if name.is_null() { own } else { c_str(name, "name")?.to_string() };
        with(writer, |h| h.writer.add(&name, dtype, &shape, Source::Buffer(b)))
    })
}

/// Declares tensor `name` of `dtype` and shape `(shape, rank)` with the `nbytes` bytes at `data` (host memory,
/// C order, little-endian), written from where they lie at finish: no copy.
///
/// **Ownership:** the caller keeps `data` valid and unchanged until `hostfirst_writer_finish` returns (or the
/// writer is freed).
///
/// Errors: as `hostfirst_writer_add_view`, and `INVALID_ARGUMENT` (unknown dtype, or `nbytes` is not the
/// shape's bytes: the message gives both), `MISALIGNED_SLICE` (a sub-byte dtype whose elements are not whole
/// bytes), `VALIDATION_OVERFLOW`, `LIMIT_EXCEEDED` (rank above `HOSTFIRST_MAX_RANK`). On error nothing is
/// declared. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_add_host(
    writer: *mut hostfirst_writer,
    name: *const c_char,
    dtype: c_dtype,
    shape: *const u64,
    rank: usize,
    data: *const c_void,
    nbytes: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_add_host", {
        let name = c_str(name, "name")?;
        let dtype = dtype_arg(dtype)?;
        let shape = dims(shape, rank, "shape")?;
        let src = host_source(data, nbytes)?;
        with(writer, |h| h.writer.add(name, dtype, shape, src))
    })
}

/// Declares tensor `name` of `dtype` and (global) shape `(shape, rank)` without bytes: its bytes come from
/// pieces (`hostfirst_writer_add_piece_host`, `_buffer`, `_view`). In one process the pieces must cover it
/// exactly by `finish`; in a save by several ranks each rank adds the pieces it holds and the ranks together
/// must cover it exactly once. Declaring a name again with the same dtype and shape changes nothing.
/// Errors: as `hostfirst_writer_add_host` (`NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`,
/// `LIMIT_EXCEEDED`, `VALIDATION_OVERFLOW`, `ALREADY_USED`), `DUPLICATE_TENSOR` for a name declared with
/// another dtype or shape.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_declare(
    writer: *mut hostfirst_writer,
    name: *const c_char,
    dtype: c_dtype,
    shape: *const u64,
    rank: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_declare", {
        let name = c_str(name, "name")?;
        let dtype = dtype_arg(dtype)?;
        let shape = dims(shape, rank, "shape")?;
        with(writer, |h| h.writer.declare(name, dtype, shape))
    })
}

/// Adds the piece of declared tensor `name` that spans `len[d]` elements from `start[d]` of each of its `rank`
/// dimensions, with the `nbytes` bytes at `data` (the box's elements in C order; same ownership as
/// `hostfirst_writer_add_host`). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `ALREADY_USED` (after finish),
/// `NOT_FOUND` (not declared), `OUT_OF_RANGE` (the box passes the
/// tensor's end), `INVALID_ARGUMENT` (`rank` is not the tensor's, `nbytes` is not the box's, or the box
/// overlaps a piece added before), `MISALIGNED_SLICE` (a sub-byte dtype whose rows would not be whole bytes).
/// On error nothing is added. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_add_piece_host(
    writer: *mut hostfirst_writer,
    name: *const c_char,
    start: *const u64,
    len: *const u64,
    rank: usize,
    data: *const c_void,
    nbytes: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_add_piece_host", {
        let name = c_str(name, "name")?;
        let start = dims(start, rank, "start")?;
        let len = dims(len, rank, "len")?;
        let src = host_source(data, nbytes)?;
        with(writer, |h| h.writer.add_piece(name, start, len, src))
    })
}

/// Adds the piece of declared tensor `name` at `(start, rank)` whose extent and bytes are those of `buffer` (its
/// shape; its dtype must be the tensor's), on any device (as `hostfirst_writer_add_buffer`): e.g. a shard that
/// `hostfirst_shard_run` gave this rank, at the start `hostfirst_shard_plan_describe` reports. Errors: as
/// `hostfirst_writer_add_piece_host` (`NULL_ARGUMENT`, `INVALID_HANDLE`, `ALREADY_USED`, `NOT_FOUND`,
/// `OUT_OF_RANGE`, `INVALID_ARGUMENT`, `MISALIGNED_SLICE`). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_add_piece_buffer(
    writer: *mut hostfirst_writer,
    name: *const c_char,
    start: *const u64,
    rank: usize,
    buffer: *const hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_add_piece_buffer", {
        let name = c_str(name, "name")?;
        let start = dims(start, rank, "start")?;
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let len = b.lock().unwrap_or_else(|p| p.into_inner()).shape().to_vec();
        with(writer, |h| h.writer.add_piece(name, start, &len, Source::Buffer(b)))
    })
}

/// Adds the piece of declared tensor `name` at `(start, rank)` whose extent and bytes are those of `view` (its
/// shape and packed bytes; its dtype must be the tensor's). Errors: as `hostfirst_writer_add_piece_host`
/// (`NULL_ARGUMENT`, `INVALID_HANDLE`, `ALREADY_USED`, `NOT_FOUND`, `OUT_OF_RANGE`, `INVALID_ARGUMENT`,
/// `MISALIGNED_SLICE`).
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_add_piece_view(
    writer: *mut hostfirst_writer,
    name: *const c_char,
    start: *const u64,
    rank: usize,
    view: *const hostfirst_view,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_add_piece_view", {
        let name = c_str(name, "name")?;
        let start = dims(start, rank, "start")?;
        let v = handle::get::<hostfirst_view>(view, "view")?;
        let len = v.shape().to_vec();
        with(writer, |h| h.writer.add_piece(name, start, &len, Source::View((*v).clone())))
    })
}

/// Sets the metadata map (`__metadata__`, string to string) to the `count` pairs `keys[i]` → `values[i]`
/// (UTF-8), replacing any set before. They are written in the order given; `count` 0 writes an empty map
/// (`{}`); a save that never calls this has no `__metadata__` (as the `safetensors` serializer with `None`).
/// A split save also puts them in the index's `metadata`, beside `total_size`. The strings are copied.
/// A key or value may be as long as a header the reader takes (100,000,000 bytes), so a map read from any file
/// can be written again; a header over that cap is refused by `hostfirst_writer_finish` (`HEADER_TOO_LARGE`).
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (a key given twice, text that is not UTF-8, a
/// string longer than 100,000,000 bytes), `METADATA_LIMIT_EXCEEDED` (more than `HOSTFIRST_MAX_METADATA_ENTRIES`),
/// `ALREADY_USED`. On error the map is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_set_metadata(
    writer: *mut hostfirst_writer,
    keys: *const *const c_char,
    values: *const *const c_char,
    count: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_set_metadata", {
        if count > 0 && (keys.is_null() || values.is_null()) {
            return Err(Error::new(Status::NullArgument, format!("'keys' or 'values' is NULL with {count} entries")));
        }
        if count > crate::file::MAX_METADATA_ENTRIES {
            return Err(Error::new(
                Status::MetadataLimitExceeded,
                format!("{count} metadata entries; the hostfirst cap is {}", crate::file::MAX_METADATA_ENTRIES),
            ));
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: non-NULL arrays of `count` pointers (the caller's promise).
            let (k, v) = unsafe { (*keys.add(i), *values.add(i)) };
            // Up to the largest header the reader takes (what is read can be written); the header's own cap is
            // checked when the save is laid out.
            let max = crate::file::MAX_HEADER_SIZE as usize;
            entries.push((
                super::args::c_str_up_to(k, &format!("keys[{i}]"), max)?.to_string(),
                super::args::c_str_up_to(v, &format!("values[{i}]"), max)?.to_string(),
            ));
        }
        with(writer, |h| h.writer.set_metadata(entries))
    })
}

/// Writes the save: the files are staged in the target's directory, each header written first, then the
/// tensors' bytes streamed by the transfer engine (positioned writes, `queue_depth` in flight, io_uring where
/// available; host memory written from where it lies, views read through the engine, CUDA buffers drained
/// through the page-locked ring), the kernel's writeback started as it goes; then (unless `no_sync`) each file
/// is synced, renamed over its target, and the directory synced. The bytes of each file are exactly what the
/// `safetensors` crate's serializer writes for the same tensors and metadata: tensors sorted by dtype
/// (descending) then name, packed, the header JSON padded to 8 bytes (metadata in the order given).
///
/// **Several ranks** (`opts->world` > 1): collective — every rank calls it; it returns on every rank with the
/// same outcome. Rank 0 takes the lock of a set (see `hostfirst_writer_open`), stages the files and writes the
/// headers; every rank writes only its own pieces;
/// rank 0 checks that all ranks' pieces cover every tensor exactly once (a byte two ranks give, or none,
/// fails the save with `INVALID_ARGUMENT` naming the tensor), then commits; `agree` is called four times on
/// every rank in between. A rank that fails returns its error; the others return `CANCELLED`.
///
/// `out_info` (NULL: not wanted) receives what was written. The writer is used up either way: a second call
/// is `ALREADY_USED`, and the sources (views, buffers, caller memory) are released when it returns.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `ALREADY_USED`; `INVALID_ARGUMENT` (a declared tensor whose pieces
/// do not cover it, a split save whose path does not end in `.safetensors` or `.safetensors.index.json`);
/// `HEADER_TOO_LARGE`; `NO_SPACE` (the file system is full or a quota is reached: the message gives the bytes
/// needed and free; or the file passes the largest file the process may write (its file-size limit, RLIMIT_FSIZE), or the file
/// system takes: the message says so), `UNSUPPORTED` (a writer on a pipe given a tensor in several pieces),
/// `PERMISSION_DENIED` (the directory or the target cannot be written, a read-only file
/// system; on Windows also a target that is mapped, see `hostfirst_writer_open`), `IO`; a source's failure: `TRUNCATED` or `IO` (a view's file changed), `DEVICE_ERROR` (a CUDA
/// copy failed, with the driver's error); `CANCELLED` (the progress callback, or another rank failed). On any
/// error every target is as it was and no temporary file is left. A save to a URL: the server's failures as
/// `hostfirst_file_open` maps them (`NOT_FOUND` for a missing bucket, `PERMISSION_DENIED`, `IO`), and
/// `UNSUPPORTED` for a tensor in several pieces; on any error no object and no pending upload is left.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_finish(
    writer: *mut hostfirst_writer,
    out_info: *mut hostfirst_writer_info,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_finish", {
        let info_size = if out_info.is_null() { None } else { Some(out_struct_size(out_info, "out_info")?) };
        let h = handle::get::<hostfirst_writer>(writer, "writer")?;
        let mut g = h.lock().unwrap_or_else(|p| p.into_inner());
        let (agree, progress, user) = (g.callbacks.agree, g.callbacks.progress, g.callbacks.user);
        let mut progress_fn = progress.map(|f| {
            move |done: u64, total: u64| -> bool {
                // SAFETY: a function pointer given by the caller with this signature.
                unsafe { f(done, total, user) != 0 }
            }
        });
        let mut agree_fn = agree.map(|f| {
            move |ok: bool| -> Result<bool> {
                // SAFETY: a function pointer given by the caller with this signature.
                match unsafe { f(ok as i32, user) } {
                    1 => Ok(true),
                    0 => Ok(false),
                    r => Err(Error::new(Status::Cancelled, format!("the agreement callback returned {r}"))),
                }
            }
        });
        let summary: Summary = g.writer.finish(
            progress_fn.as_mut().map(|f| f as &mut dyn FnMut(u64, u64) -> bool),
            agree_fn.as_mut().map(|f| f as &mut dyn FnMut(bool) -> Result<bool>),
        )?;
        g.parts = summary.parts.iter().map(|p| super::args::cstring(&p.to_string_lossy())).collect();
        g.index = summary.index.as_ref().map(|p| super::args::cstring(&p.to_string_lossy()));
        if let Some(size) = info_size {
            write_out_struct(
                out_info,
                size,
                hostfirst_writer_info {
                    struct_size: 0,
                    parts: summary.parts.len() as u64,
                    file_bytes: summary.file_bytes,
                    written: summary.written,
                    tensors: summary.tensors as u64,
                    index: g.index.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                },
            );
        }
        Ok(())
    })
}

/// Writes the path of part file `index` of a finished save (`0 .. info.parts`) to `*out`: NUL-terminated,
/// valid while the writer lives. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `NOT_READY` (not finished, or
/// finish failed), `OUT_OF_RANGE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_writer_part_path(
    writer: *mut hostfirst_writer,
    index: usize,
    out: *mut *const c_char,
) -> Status {
    hostfirst_boundary!("hostfirst_writer_part_path", {
        let out = out_ptr(out, "out")?;
        with(writer, |h| {
            if h.parts.is_empty() {
                return Err(Error::new(Status::NotReady, "the writer has no finished save with part files"));
            }
            let p = h.parts.get(index).ok_or_else(|| {
                Error::new(Status::OutOfRange, format!("part {index}, but the save has {} parts", h.parts.len()))
            })?;
            *out = p.as_ptr();
            Ok(())
        })
    })
}

/// Frees a writer. A writer freed before `finish` writes nothing (no file is created). NULL is a no-op. The
/// sources it kept (views, buffers) are released. Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed). Thread-safe (a `finish` in progress on another thread completes first).
#[no_mangle]
pub extern "C" fn hostfirst_writer_free(writer: *mut hostfirst_writer) -> Status {
    hostfirst_boundary!("hostfirst_writer_free", { handle::remove(writer, "writer").map(|_| ()) })
}
