//! Buffers: `hostfirst_buffer_*` and `hostfirst_release_cached_memory` (buffers are made by puts, loads and
//! gathers; the DLPack export, `hostfirst_buffer_to_dlpack`, is in `dlpack.rs`).

use super::args::{out_bytes, out_ptr, out_struct, out_struct_size, write_out_struct};
use super::device::{hostfirst_device, target_of};
use super::handle::{self, Handle};
use crate::error::{Error, Status};
use crate::place::Buffer;
use std::ffi::{c_char, c_void};

/// A buffer: memory owned on one device (cpu, cuda:N or cuda_host) holding one tensor's bytes (cuda:N and
/// cuda_host memory is unusable in a child forked after CUDA was initialised: its calls give `UNAVAILABLE`
/// there, and a raw address from `hostfirst_buffer_describe` must not be read there). Created by a
/// put (or a load, or a gather); released with `hostfirst_buffer_free`. Buffers outlive the file they came
/// from. Read-only calls on one buffer may run from several threads at once.
pub struct hostfirst_buffer {
    _private: [u8; 0],
}

impl Handle for hostfirst_buffer {
    type Target = std::sync::Mutex<Buffer>;
    const NAME: &'static str = "hostfirst_buffer";
}

/// Everything a buffer is (`hostfirst_buffer_describe`). Set `struct_size = sizeof(hostfirst_buffer_info)`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_buffer_info {
    /// `sizeof(hostfirst_buffer_info)`.
    pub struct_size: usize,
    /// The device holding the bytes.
    pub device: hostfirst_device,
    /// The element type.
    pub dtype: super::args::c_dtype,
    /// Number of dimensions.
    pub rank: u32,
    /// `rank` dimensions (NULL when rank is 0); valid while the buffer lives.
    pub shape: *const u64,
    /// Size in bytes.
    pub nbytes: u64,
    /// The data: a host pointer (cpu, cuda_host) or the CUDA device address (`CUdeviceptr`), as an integer;
    /// 0 for an empty CUDA buffer. Valid while the buffer lives.
    pub address: u64,
    /// The tensor name, NUL-terminated; valid while the buffer lives.
    pub name: *const c_char,
}

out_struct!(hostfirst_buffer_info, name);

/// Frees a buffer and its device or host memory. NULL is a no-op; a freed or foreign handle gives
/// `INVALID_HANDLE` and frees nothing. Memory is released once no call in flight still uses the buffer. Safe
/// from a garbage collector's finalizer during another framework's CUDA graph capture: the free is made in
/// relaxed capture mode, or kept for the next hostfirst call while a capture is seen (as a DLPack deleter's
/// release; see `hostfirst_buffer_to_dlpack`). Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed).
#[no_mangle]
pub extern "C" fn hostfirst_buffer_free(buffer: *mut hostfirst_buffer) -> Status {
    hostfirst_boundary!("hostfirst_buffer_free", {
        // Often called by a garbage collector's finalizer: a CUDA free goes through the capture-aware release.
        if let Some(b) = handle::remove::<hostfirst_buffer>(buffer, "buffer")? {
            crate::place::export::drop_buffer(b);
        }
        Ok(())
    })
}

/// Describes a buffer into `*out` (set `out->struct_size = sizeof(hostfirst_buffer_info)` first). The
/// `shape` and `name` pointers stay valid while the buffer lives. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`,
/// `INVALID_ARGUMENT` (`struct_size` too small). On failure `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_describe(
    buffer: *const hostfirst_buffer,
    out: *mut hostfirst_buffer_info,
) -> Status {
    hostfirst_boundary!("hostfirst_buffer_describe", {
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let size = out_struct_size(out, "out")?;
        let b = b.lock().unwrap_or_else(|p| p.into_inner());
        write_out_struct(
            out,
            size,
            hostfirst_buffer_info {
                struct_size: 0,
                device: b.device().into(),
                dtype: b.dtype() as u32,
                rank: b.shape().len() as u32,
                shape: if b.shape().is_empty() { std::ptr::null() } else { b.shape().as_ptr() },
                nbytes: b.nbytes(),
                address: b.address(),
                name: b.c_name().as_ptr(),
            },
        );
        Ok(())
    })
}

/// Writes 1 to `*out` when the buffer's bytes are a private copy-on-write mapping of a file (a put with
/// `opts->copy_on_write`, see `hostfirst_put`): pages not yet written still come from the file, with the
/// ties that brings. 0 for memory of its own (every other buffer). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_is_file_backed(buffer: *const hostfirst_buffer, out: *mut i32) -> Status {
    hostfirst_boundary!("hostfirst_buffer_is_file_backed", {
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let out = out_ptr(out, "out")?;
        *out = b.lock().unwrap_or_else(|p| p.into_inner()).is_file_backed() as i32;
        Ok(())
    })
}

/// The consumer side of the CUDA stream handshake, for consumers that do not go through DLPack (e.g. the
/// `__cuda_array_interface__`): makes `stream` wait, on the device and without blocking the host
/// (`cuStreamWaitEvent`), until hostfirst's last write into the buffer has completed.
///
/// `stream` takes DLPack's values: 1 the legacy default stream, 2 the per-thread default stream, > 2 a
/// `CUstream` of the buffer's device (cast to an integer), -1 nothing to do; 0 and other negative values are
/// `INVALID_ARGUMENT`. Host buffers (cpu, cuda_host) need nothing: every hostfirst write into them has
/// completed when the call that made it returned. Today that is true of CUDA buffers too (puts and gather runs
/// return once their copy has completed), so the wait is enqueued only where hostfirst recorded an event of
/// its last write (gather batches); calling it is always correct and cheap. A `CUstream` must be a live stream
/// of the buffer's device: the driver does not check stream handles, so a destroyed or foreign one is
/// undefined behaviour (a crash, or a wait on an unrelated stream), not an error. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT`, `DEVICE_ERROR` (a driver failure). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_sync_stream(buffer: *const hostfirst_buffer, stream: i64) -> Status {
    hostfirst_boundary!("hostfirst_buffer_sync_stream", {
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let s = crate::place::consumer::ConsumerStream::from_dlpack(Some(stream))?;
        let r = b.lock().unwrap_or_else(|p| p.into_inner()).sync_stream(s).map(|_| ());
        r
    })
}

/// The release side of the CUDA stream handshake (like torch's `record_stream`): records an event on
/// `stream` now; before hostfirst next rewrites this buffer's memory (a gather reusing the batch), its copy
/// waits on the device for that event. Call it after enqueuing the last work that uses the buffer on that
/// stream and before freeing your reference, when the buffer went to a consumer by its address rather than
/// through DLPack (DLPack exports do this themselves when their deleter runs). `stream` as for
/// `hostfirst_buffer_sync_stream`, which also says what a stream handle must be; for 1 and 2 the event goes on
/// the device's legacy default stream, which is ordered after every blocking stream's work (every thread's
/// per-thread default stream included), so it covers the consumer's work from whichever thread this is
/// called. -1 and host buffers: nothing to do. If the event cannot be recorded (`DEVICE_ERROR`), the buffer
/// is never rewritten: a gather drops that batch from its ring. The record is made in relaxed stream-capture
/// mode; while another framework's CUDA graph capture is seen it makes no driver call at all, and the next
/// rewrite waits for the whole device instead. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`,
/// `INVALID_ARGUMENT`, `DEVICE_ERROR`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_record_stream(buffer: *const hostfirst_buffer, stream: i64) -> Status {
    hostfirst_boundary!("hostfirst_buffer_record_stream", {
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let s = crate::place::consumer::ConsumerStream::from_dlpack(Some(stream))?;
        crate::place::export::record_consumer_stream(&b, s)
    })
}

/// Copies the whole buffer (from any device) into the caller's host memory `(dst, capacity)`. A capacity
/// below the buffer's size gives `BUFFER_TOO_SMALL` and writes nothing; `(NULL, 0)` copies an empty buffer.
/// For `cuda:N` the copy is a synchronous `cuMemcpyDtoH` on the legacy default stream: it sees every hostfirst
/// write (they have completed when the call that made them returned) and is ordered after work queued on
/// blocking streams, but it does **not** wait for work a consumer queued on a non-blocking stream (a
/// framework's side stream, or the `CUstream` a DLPack export was made for): when such work writes into the
/// buffer, synchronise that stream before calling this; that is the caller's job. In a child forked after CUDA
/// was initialised, `cuda:N` and `cuda_host` buffers give `UNAVAILABLE` naming fork(): their memory was
/// allocated by the CUDA driver, which the child cannot use (page-locked pages may be absent there).
/// Errors: `BUFFER_TOO_SMALL` (as above), `NULL_ARGUMENT`, `INVALID_HANDLE`, `UNAVAILABLE`, `DEVICE_ERROR`.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_copy_to_host(
    buffer: *const hostfirst_buffer,
    dst: *mut c_void,
    capacity: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_buffer_copy_to_host", {
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let b = b.lock().unwrap_or_else(|p| p.into_inner());
        if (capacity as u64) < b.nbytes() {
            return Err(Error::new(
                Status::BufferTooSmall,
                format!("buffer '{}' has {} bytes; the destination holds {capacity}", b.name(), b.nbytes()),
            ));
        }
        let dst = out_bytes(dst as *mut u8, capacity, "dst")?;
        b.copy_to_host(dst)
    })
}

/// Copies a buffer onto another device (cpu, cuda_host, cuda:N; `device` NULL: the default device, refused in
/// strict mode) as a new buffer in `*out`, fit-checked before anything is allocated (`OUT_OF_MEMORY`,
/// `hostfirst_last_error_fit`). The source is unchanged. Host to CUDA goes through the pinned staging ring (never
/// DMA from pageable memory); CUDA to CUDA on another device is one peer copy (`cuMemcpyPeer`: direct where
/// the devices can reach each other, staged by the driver where not). Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`,
/// `INVALID_ARGUMENT` (unknown device kind), `IMPLICIT_PLACEMENT` (`device` NULL in strict mode),
/// `OUT_OF_MEMORY` (the fit check), `NO_SUCH_DEVICE`, `UNAVAILABLE`, `DEVICE_ERROR`. On failure nothing stays
/// allocated and `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_to(
    buffer: *const hostfirst_buffer,
    device: *const hostfirst_device,
    out: *mut *mut hostfirst_buffer,
) -> Status {
    hostfirst_boundary!("hostfirst_buffer_to", {
        let b = handle::get::<hostfirst_buffer>(buffer, "buffer")?;
        let out = out_ptr(out, "out")?;
        let target = target_of(device)?;
        let nb = {
            let b = b.lock().unwrap_or_else(|p| p.into_inner());
            crate::place::buffer_to(&b, target)?
        };
        *out = handle::insert_new::<hostfirst_buffer>(std::sync::Mutex::new(nb));
        Ok(())
    })
}

/// Frees the process-wide caches of page-locked memory: idle staging slabs kept for reuse by CUDA puts, and
/// resident-mode registrations (unregistered once no transfer uses them). Puts in progress are not affected;
/// later puts allocate again. Returns `OK`. Errors: none of its own (`PANIC` only for a bug inside the
/// library: see CONVENTIONS, Status). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_release_cached_memory() -> Status {
    hostfirst_boundary!("hostfirst_release_cached_memory", {
        crate::place::release_cached_memory();
        Ok(())
    })
}
