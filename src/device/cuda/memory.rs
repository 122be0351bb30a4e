//! Contexts and memory: the per-device primary context, device allocations, page-locked host allocations,
//! host registrations, and synchronous copies.
//!
//! Every type here is safe to use: sizes and offsets are checked before the driver is called (an out-of-range
//! request is `OUT_OF_RANGE` and reaches no driver), driver failures are `DEVICE_ERROR` with the driver's
//! error name and what was attempted (`OUT_OF_MEMORY` with fit numbers for a failed device allocation), and
//! resources are released on drop. Device memory is not Rust memory: its contents are only ever reached
//! through driver copies into or out of host memory the caller lends for the duration of the call.

use super::driver::{self, Api, RawHandle, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use super::{api, check_ordinal};
use crate::error::{human_bytes, Error, FitFailure, Result, Status};
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock};

/// The primary context of one CUDA device, retained lazily on first use and never released (it lives as long
/// as the process, like the CUDA runtime's). Get it with [`Context::get`]; it is shared by every thread.
pub struct Context {
    ordinal: u32,
    raw: RawHandle,
}

// SAFETY: a `CUcontext` is a driver handle, not memory we dereference; the driver API is thread-safe and a
// context may be made current on any thread (several at once). We only pass it to cuCtxSetCurrent and never
// release it, so sharing `&Context` across threads cannot make it dangle.
unsafe impl Send for Context {}
// SAFETY: see `Send`; `Context` has no interior mutability.
unsafe impl Sync for Context {}

/// Retained primary contexts by ordinal (leaked: they live for the process lifetime).
static CONTEXTS: Mutex<Vec<Option<&'static Context>>> = Mutex::new(Vec::new());

impl Context {
    /// The primary context of `cuda:<ordinal>`, retaining it (`cuDevicePrimaryCtxRetain`) on the first call
    /// for that device. Later calls return the same context without calling the driver.
    ///
    /// Errors: `UNAVAILABLE` when the census has no usable CUDA backend; `NO_SUCH_DEVICE` for an ordinal that
    /// is not present; `DEVICE_ERROR` when the driver refuses the retain.
    pub fn get(ordinal: u32) -> Result<&'static Context> {
        let api = api()?;
        check_ordinal(ordinal)?;
        let mut table = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
        let i = ordinal as usize;
        if table.len() <= i {
            table.resize(i + 1, None);
        }
        if let Some(c) = table[i] {
            return Ok(c);
        }
        let mut dev: c_int = 0;
        // SAFETY: valid out-pointer; the ordinal was checked against the census.
        api.check(unsafe { (api.device_get)(&mut dev, ordinal as c_int) }, || format!("cuDeviceGet({ordinal})"))?;
        let mut raw: RawHandle = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device handle.
        let r = unsafe { (api.primary_ctx_retain)(&mut raw, dev) };
        api.check(r, || format!("cuDevicePrimaryCtxRetain(cuda:{ordinal})"))?;
        let ctx: &'static Context = Box::leak(Box::new(Context { ordinal, raw }));
        table[i] = Some(ctx);
        Ok(ctx)
    }

    /// True when this process has already retained `cuda:<ordinal>`'s primary context.
    pub fn is_retained(ordinal: u32) -> bool {
        let table = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
        table.get(ordinal as usize).is_some_and(|c| c.is_some())
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Makes this context current on the calling thread (`cuCtxSetCurrent`) and leaves it current.
    ///
    /// The wrapper types do not need this (each call makes the right context current and restores the
    /// previous one); it is for callers that then use the driver or runtime API themselves.
    pub fn bind(&self) -> Result<()> {
        let api = api()?;
        // SAFETY: a retained context handle.
        api.check(unsafe { (api.ctx_set_current)(self.raw) }, || format!("cuCtxSetCurrent(cuda:{})", self.ordinal))
    }

    /// Makes this context current until the guard drops, then restores the thread's previous context.
    pub(crate) fn enter(&self) -> Result<Current> {
        let api = api()?;
        let mut prev: RawHandle = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        api.check(unsafe { (api.ctx_get_current)(&mut prev) }, || "cuCtxGetCurrent".to_string())?;
        if prev == self.raw {
            return Ok(Current { api, prev, changed: false, _thread_bound: PhantomData });
        }
        self.bind()?;
        Ok(Current { api, prev, changed: true, _thread_bound: PhantomData })
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context(cuda:{}, primary)", self.ordinal)
    }
}

/// While alive, a context is current on this thread; on drop the previous one is restored. Not `Send`: the
/// current context is per thread.
pub(crate) struct Current {
    api: &'static Api,
    prev: RawHandle,
    changed: bool,
    _thread_bound: PhantomData<*const ()>,
}

impl Drop for Current {
    fn drop(&mut self) {
        if self.changed {
            // SAFETY: `prev` is what the driver reported as current (possibly NULL, which is allowed).
            let _ = unsafe { (self.api.ctx_set_current)(self.prev) };
        }
    }
}

/// `Ok` when `offset..offset + len` lies within a buffer of `size` bytes, else `OUT_OF_RANGE` saying so.
pub(crate) fn check_range(what: &str, offset: usize, len: usize, size: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::new(
            Status::OutOfRange,
            format!("{what}: {len} bytes at offset {offset} do not fit in a buffer of {size} bytes"),
        )),
    }
}

/// `(free, total)` of the current context's device, or `(0, 0)` when the driver will not say.
fn current_mem_info(api: &Api) -> (u64, u64) {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers; called with a context current.
    if unsafe { (api.mem_get_info)(&mut free, &mut total) } == CUDA_SUCCESS {
        (free as u64, total as u64)
    } else {
        (0, 0)
    }
}

/// Device memory on one CUDA device (`cuMemAlloc_v2`), freed on drop (`cuMemFree_v2`).
///
/// A zero-length allocation reaches no driver and has device pointer 0. Copies take `&self`: device memory
/// is not Rust memory, and ordering device work is the caller's job (streams, events).
pub struct DeviceMemory {
    ctx: &'static Context,
    dptr: u64,
    len: usize,
}

// `DeviceMemory` is Send + Sync automatically (a `&'static Context`, a u64 and a usize): its only resource is
// the allocation, freed once, in `Drop`, which has exclusive access.

impl DeviceMemory {
    /// Allocates `len` bytes on `cuda:<ordinal>` (retaining its primary context if needed). The contents are
    /// uninitialised device memory.
    ///
    /// Errors: `UNAVAILABLE`, `NO_SUCH_DEVICE` as for [`Context::get`]; `OUT_OF_MEMORY` (message naming
    /// `CUDA_ERROR_OUT_OF_MEMORY`, fit numbers attached) when the device cannot hold it; `DEVICE_ERROR` for
    /// any other driver failure.
    pub fn alloc(ordinal: u32, len: usize) -> Result<DeviceMemory> {
        let ctx = Context::get(ordinal)?;
        if len == 0 {
            return Ok(DeviceMemory { ctx, dptr: 0, len: 0 });
        }
        let api = api()?;
        let _current = ctx.enter()?;
        let mut dptr: u64 = 0;
        // SAFETY: valid out-pointer, non-zero size, the device's context is current.
        let r = unsafe { (api.mem_alloc)(&mut dptr, len) };
        let what = || format!("cuMemAlloc_v2(cuda:{ordinal}, {len} bytes = {})", human_bytes(len as u64));
        if r == CUDA_ERROR_OUT_OF_MEMORY {
            let (free, total) = current_mem_info(api);
            let device = format!("cuda:{ordinal}");
            return Err(Error::out_of_memory(
                format!(
                    "{}; {device} has {} free of {}",
                    api.describe(r, &what()),
                    human_bytes(free),
                    human_bytes(total)
                ),
                FitFailure { needed: len as u64, free, total, device },
            ));
        }
        api.check(r, what)?;
        Ok(DeviceMemory { ctx, dptr, len })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ctx.ordinal
    }

    /// The device address (`CUdeviceptr`), 0 for an empty allocation. Valid while `self` lives.
    pub fn device_ptr(&self) -> u64 {
        self.dptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length allocation.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` into this allocation at `offset`, synchronously (`cuMemcpyHtoD_v2`): when it returns,
    /// `src` may be reused. `src` may be pageable, pinned or registered memory.
    pub fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()> {
        let what = || {
            format!(
                "cuMemcpyHtoD_v2(host -> cuda:{}, {} bytes at offset {offset} of {})",
                self.ordinal(),
                src.len(),
                self.len
            )
        };
        check_range(&what(), offset, src.len(), self.len)?;
        if src.is_empty() {
            return Ok(());
        }
        let api = api()?;
        let _current = self.ctx.enter()?;
        // SAFETY: the range was checked against the allocation; `src` is a live borrow of src.len() bytes and
        // the synchronous copy has finished reading it when the call returns.
        let r = unsafe { (api.memcpy_htod)(self.dptr + offset as u64, src.as_ptr() as *const c_void, src.len()) };
        api.check(r, what)
    }

    /// Copies `dst.len()` bytes from this allocation at `offset` into `dst`, synchronously (`cuMemcpyDtoH_v2`).
    /// On failure the contents of `dst` are unspecified.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let len = dst.len();
        let what = || {
            format!("cuMemcpyDtoH_v2(cuda:{} -> host, {len} bytes at offset {offset} of {})", self.ordinal(), self.len)
        };
        check_range(&what(), offset, len, self.len)?;
        if len == 0 {
            return Ok(());
        }
        let api = api()?;
        let _current = self.ctx.enter()?;
        // SAFETY: range checked; `dst` is an exclusive borrow of `len` bytes, written only until the
        // synchronous copy returns.
        let r = unsafe { (api.memcpy_dtoh)(dst.as_mut_ptr() as *mut c_void, self.dptr + offset as u64, len) };
        api.check(r, what)
    }

    /// Copies `len` bytes from `src` at `src_offset` into this allocation at `dst_offset`: `cuMemcpyDtoD_v2` on
    /// one device, `cuMemcpyPeer` between two (the driver uses a direct peer path where the devices have one
    /// and stages through host memory itself where not). Synchronous with respect to the host; overlapping
    /// ranges are not allowed (`INVALID_ARGUMENT`).
    pub fn copy_from_device(&self, dst_offset: usize, src: &DeviceMemory, src_offset: usize, len: usize) -> Result<()> {
        let what = || {
            format!(
                "cuMemcpyDtoD_v2(cuda:{} -> cuda:{}, {len} bytes from offset {src_offset} of {} to offset {dst_offset} of {})",
                src.ordinal(),
                self.ordinal(),
                src.len,
                self.len
            )
        };
        check_range(&what(), src_offset, len, src.len)?;
        check_range(&what(), dst_offset, len, self.len)?;
        if len == 0 {
            return Ok(());
        }
        let (s, d) = (src.dptr + src_offset as u64, self.dptr + dst_offset as u64);
        if s < d + len as u64 && d < s + len as u64 {
            return Err(Error::new(Status::InvalidArgument, format!("{}: source and destination overlap", what())));
        }
        let api = api()?;
        let _current = self.ctx.enter()?;
        if src.ordinal() != self.ordinal() {
            let peer_what = || what().replacen("cuMemcpyDtoD_v2", "cuMemcpyPeer", 1);
            // SAFETY: both ranges checked against live allocations, each in its own device's retained primary
            // context; no host memory involved.
            return api.check(unsafe { (api.memcpy_peer)(d, self.ctx.raw, s, src.ctx.raw, len) }, peer_what);
        }
        // SAFETY: both ranges checked against live allocations on this device; no host memory involved.
        api.check(unsafe { (api.memcpy_dtod)(d, s, len) }, what)
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if let Ok(api) = api() {
            if let Ok(_current) = self.ctx.enter() {
                // SAFETY: `dptr` came from cuMemAlloc_v2 and is freed exactly once, here. Failure (e.g. the
                // driver already shut down at process exit) leaves nothing for us to do.
                let _ = unsafe { (api.mem_free)(self.dptr) };
            }
        }
    }
}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceMemory(cuda:{}, {:#x}, {} bytes)", self.ordinal(), self.dptr, self.len)
    }
}

/// Page-locked ("pinned") host memory (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_PORTABLE`, so every context
/// may use it), freed on drop (`cuMemFreeHost`). Zero-filled on allocation; readable and writable from Rust as
/// a byte slice (`Deref<Target = [u8]>`). Allocated under `cuda:0`'s primary context.
pub struct PinnedHostMemory {
    ptr: NonNull<u8>,
    len: usize,
    ctx: &'static Context,
}

// SAFETY: `PinnedHostMemory` uniquely owns its allocation, like `Box<[u8]>`: moving it to another thread moves
// that ownership, `&` gives shared read access and `&mut` exclusive write access, as the borrow checker
// enforces through `as_slice`/`as_mut_slice`. cuMemFreeHost may be called from any thread.
unsafe impl Send for PinnedHostMemory {}
// SAFETY: see `Send`; shared references only read.
unsafe impl Sync for PinnedHostMemory {}

impl PinnedHostMemory {
    /// Allocates `len` zeroed bytes of page-locked host memory.
    ///
    /// Errors: `UNAVAILABLE` without CUDA; `OUT_OF_MEMORY` when the driver cannot pin that much;
    /// `DEVICE_ERROR` for other driver failures.
    pub fn alloc(len: usize) -> Result<PinnedHostMemory> {
        let ctx = Context::get(0)?;
        if len == 0 {
            return Ok(PinnedHostMemory { ptr: NonNull::dangling(), len: 0, ctx });
        }
        let api = api()?;
        let _current = ctx.enter()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer, non-zero size, a context is current.
        let r = unsafe { (api.mem_host_alloc)(&mut p, len, driver::HOST_PORTABLE) };
        let what = || format!("cuMemHostAlloc({len} bytes = {}, portable)", human_bytes(len as u64));
        if r == CUDA_ERROR_OUT_OF_MEMORY {
            return Err(Error::new(Status::OutOfMemory, api.describe(r, &what())));
        }
        api.check(r, what)?;
        let ptr = NonNull::new(p as *mut u8)
            .ok_or_else(|| Error::new(Status::DeviceError, format!("cuMemHostAlloc({len} bytes) returned NULL")))?;
        // SAFETY: the driver returned `len` writable bytes at `ptr`; zeroing makes them initialised.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        Ok(PinnedHostMemory { ptr, len, ctx })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by `self` (dangling but valid for len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The host address (stable for the life of `self`, also when `self` is moved).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for PinnedHostMemory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for PinnedHostMemory {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl Drop for PinnedHostMemory {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if let Ok(api) = api() {
            if let Ok(_current) = self.ctx.enter() {
                // SAFETY: the pointer came from cuMemHostAlloc and is freed exactly once, here.
                let _ = unsafe { (api.mem_free_host)(self.ptr.as_ptr() as *mut c_void) };
            }
        }
    }
}

impl std::fmt::Debug for PinnedHostMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedHostMemory({:p}, {} bytes)", self.ptr, self.len)
    }
}

/// Whether every present device supports `CU_MEMHOSTREGISTER_READ_ONLY` (cached).
fn read_only_register_supported(api: &Api) -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let n = crate::device::census().devices.iter().filter(|d| d.device.kind == crate::DeviceKind::CUDA).count();
        n > 0
            && (0..n).all(|i| {
                let (mut dev, mut v): (c_int, c_int) = (0, 0);
                // SAFETY: valid out-pointers; device and attribute queries need no context.
                let ok = unsafe {
                    (api.device_get)(&mut dev, i as c_int) == CUDA_SUCCESS
                        && (api.device_get_attribute)(&mut v, driver::ATTR_READ_ONLY_HOST_REGISTER_SUPPORTED, dev)
                            == CUDA_SUCCESS
                };
                ok && v == 1
            })
    })
}

/// Existing host memory page-locked in place (`cuMemHostRegister_v2`, portable, and read-only where every
/// device supports it, which is what lets read-only file mappings be registered), unregistered on drop
/// (`cuMemHostUnregister`). Registered memory makes asynchronous host-to-device copies truly asynchronous
/// and faster. The borrow keeps the memory alive and unmodified (the device only reads it) for `'a`.
pub struct HostRegistration<'a> {
    ptr: *const u8,
    len: usize,
    read_only: bool,
    ctx: &'static Context,
    _borrow: PhantomData<&'a [u8]>,
}

// SAFETY: the raw pointer is only the key passed back to cuMemHostUnregister (never dereferenced by us); the
// memory it names is borrowed immutably for 'a, which is itself Send + Sync for `[u8]`. Registration and
// unregistration may happen on any thread.
unsafe impl Send for HostRegistration<'_> {}
// SAFETY: see `Send`; `&HostRegistration` offers only getters.
unsafe impl Sync for HostRegistration<'_> {}

impl<'a> HostRegistration<'a> {
    /// Page-locks `bytes` for as long as the registration lives.
    ///
    /// Errors: `UNAVAILABLE` without CUDA; `DEVICE_ERROR` from the driver (e.g.
    /// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED` when the range overlaps another registration).
    pub fn register(bytes: &'a [u8]) -> Result<HostRegistration<'a>> {
        // SAFETY: `bytes` stays borrowed (alive, not mutated) for 'a, which the result carries.
        unsafe { Self::register_ptr(bytes.as_ptr(), bytes.len()) }
    }

    /// Page-locks `len` bytes at `ptr` with no borrow attached, for memory whose owner lives beside the
    /// registration (e.g. a file mapping kept in the same struct).
    ///
    /// # Safety
    /// `ptr..ptr + len` must be valid host memory that stays mapped until the registration is dropped, and
    /// must not be freed or unmapped while registered.
    pub unsafe fn register_raw(ptr: *const u8, len: usize) -> Result<HostRegistration<'static>> {
        // SAFETY: forwarded contract.
        unsafe { HostRegistration::register_ptr(ptr, len) }
    }

    /// # Safety
    /// As [`HostRegistration::register_raw`], for lifetime `'b`.
    unsafe fn register_ptr<'b>(ptr: *const u8, len: usize) -> Result<HostRegistration<'b>> {
        let ctx = Context::get(0)?;
        if len == 0 {
            return Ok(HostRegistration { ptr, len, read_only: false, ctx, _borrow: PhantomData });
        }
        let api = api()?;
        let read_only = read_only_register_supported(api);
        let flags = driver::HOST_PORTABLE | if read_only { driver::HOST_REGISTER_READ_ONLY } else { 0 };
        let _current = ctx.enter()?;
        // SAFETY: the caller guarantees the range stays valid while registered; with READ_ONLY the device
        // never writes it, and without it we still only use it as a copy source.
        let r = unsafe { (api.mem_host_register)(ptr as *mut c_void, len, flags) };
        api.check(r, || {
            format!(
                "cuMemHostRegister_v2({ptr:p}, {len} bytes = {}, portable{})",
                human_bytes(len as u64),
                if read_only { ", read-only" } else { "" }
            )
        })?;
        Ok(HostRegistration { ptr, len, read_only, ctx, _borrow: PhantomData })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty (nothing was registered).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The registered host address.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// True when registered with `CU_MEMHOSTREGISTER_READ_ONLY`.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
}

impl std::fmt::Debug for HostRegistration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostRegistration({:p}, {} bytes, read_only: {})", self.ptr, self.len, self.read_only)
    }
}

impl Drop for HostRegistration<'_> {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if let Ok(api) = api() {
            if let Ok(_current) = self.ctx.enter() {
                // SAFETY: the pointer was registered by us and is unregistered exactly once, here.
                let _ = unsafe { (api.mem_host_unregister)(self.ptr as *mut c_void) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(check_range("x", 0, 10, 10).is_ok());
        assert!(check_range("x", 10, 0, 10).is_ok());
        assert!(check_range("x", 0, 0, 0).is_ok());
        let e = check_range("copy", 4, 7, 10).unwrap_err();
        assert_eq!(e.status(), Status::OutOfRange);
        assert!(e.message().contains("7 bytes at offset 4") && e.message().contains("10 bytes"), "{}", e.message());
        assert_eq!(check_range("x", usize::MAX, 2, 10).unwrap_err().status(), Status::OutOfRange);
        assert_eq!(check_range("x", 11, 0, 10).unwrap_err().status(), Status::OutOfRange);
    }

    #[test]
    fn without_a_driver_everything_is_unavailable() {
        // In the unit-test process no stand-in is on the library path (the stand-in tests run in children).
        if crate::device::census().cuda_available() {
            return;
        }
        assert_eq!(DeviceMemory::alloc(0, 16).unwrap_err().status(), Status::Unavailable);
        assert_eq!(PinnedHostMemory::alloc(16).unwrap_err().status(), Status::Unavailable);
        assert_eq!(HostRegistration::register(&[1, 2, 3]).unwrap_err().status(), Status::Unavailable);
        assert_eq!(Context::get(0).err().map(|e| e.status()), Some(Status::Unavailable));
        assert!(!Context::is_retained(0));
        assert_eq!(super::super::mem_info(0).unwrap_err().status(), Status::Unavailable);
    }

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn thread_safety_markers() {
        assert_send_sync::<Context>();
        assert_send_sync::<DeviceMemory>();
        assert_send_sync::<PinnedHostMemory>();
        assert_send_sync::<HostRegistration<'static>>();
    }
}
