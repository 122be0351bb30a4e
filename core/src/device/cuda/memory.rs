//! Contexts and memory: the per-device primary context, device allocations, page-locked host allocations,
//! host registrations. Synchronous copies are in [`super::copy`], asynchronous ones in [`super::stream`].
//!
//! Every type here is safe to use: sizes and offsets are checked before the driver is called (an out-of-range
//! request is `OUT_OF_RANGE` and reaches no driver), driver failures are `DEVICE_ERROR` with the driver's
//! error name and what was attempted (`OUT_OF_MEMORY` with fit numbers for a failed device allocation), and
//! resources are released on drop. Device memory is not Rust memory: its contents are only ever reached
//! through driver copies into or out of host memory the caller lends for the duration of the call.

use super::driver::{
    self, Api, RawHandle, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, CUDA_SUCCESS,
};
use super::probe::{api, check_ordinal, status};
use crate::error::{human_bytes, Error, FitFailure, Result, Status};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Mutex;

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
    /// Errors: `UNAVAILABLE` when the CUDA backend is not usable (see [`super::status`]); `NO_SUCH_DEVICE` for an ordinal that
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
        // SAFETY: valid out-pointer; the ordinal was checked against the probe.
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
        // The table is used only past the CUDA gate, never in a forked child (see forksafe.rs).
        if super::forked_reason().is_some() {
            return false;
        }
        let table = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
        table.get(ordinal as usize).is_some_and(|c| c.is_some())
    }

    /// Every primary context this process has retained, lowest ordinal first (none in a forked child).
    pub(crate) fn retained() -> Vec<&'static Context> {
        if super::forked_reason().is_some() {
            return Vec::new();
        }
        CONTEXTS.lock().unwrap_or_else(|p| p.into_inner()).iter().flatten().copied().collect()
    }

    /// Blocks until every piece of work queued in this context so far, on any stream (hostfirst's and every
    /// other user's of the primary context), has completed (`cuCtxSynchronize`). An error of any of that work
    /// is reported here (`DEVICE_ERROR`). Used before rewriting memory a consumer released without a stream
    /// hostfirst may use (see `Buffer::wait_for_consumers`); it spins a core while it waits, like any
    /// `cuCtxSynchronize` under the primary context's default scheduling.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let api = api()?;
        let _current = self.enter()?;
        // SAFETY: no arguments; this context is current.
        api.check(unsafe { (api.ctx_synchronize)() }, || format!("cuCtxSynchronize(cuda:{})", self.ordinal))
    }

    /// A context for host memory that belongs to no device (page-locked memory for `cuda_host`, which is
    /// allocated portable, so any context serves): one this process already retained (the lowest ordinal),
    /// else the first device whose primary context can be retained (an exclusive-process GPU held by another
    /// process is skipped). Errors as for [`Context::get`] when none can.
    pub fn for_host() -> Result<&'static Context> {
        api()?;
        let retained = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner()).iter().flatten().next().copied();
        if let Some(c) = retained {
            return Ok(c);
        }
        let mut first_error = None;
        for d in &status().devices {
            match Context::get(d.device.ordinal) {
                Ok(c) => return Ok(c),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or_else(|| Error::new(Status::Unavailable, "no CUDA device is present".to_string())))
    }

    /// Enables access from this context to `peer`'s memory where the devices allow it (`cuDeviceCanAccessPeer`,
    /// then `cuCtxEnablePeerAccess` with this context current), once per pair; true when access is enabled.
    /// Copies between the two then take the direct path (NVLink or PCIe peer to peer) instead of being staged
    /// through host memory by the driver. Failure is not an error: the copy still works, slower.
    pub(crate) fn enable_peer_access(&self, peer: &Context) -> bool {
        static PAIRS: Mutex<Option<HashMap<(u32, u32), bool>>> = Mutex::new(None);
        if peer.ordinal == self.ordinal {
            return false;
        }
        let mut pairs = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
        let pairs = pairs.get_or_insert_with(HashMap::new);
        if let Some(&enabled) = pairs.get(&(self.ordinal, peer.ordinal)) {
            return enabled;
        }
        let enabled = (|| {
            let api = api().ok()?;
            let (mut me, mut other, mut can): (c_int, c_int, c_int) = (0, 0, 0);
            // SAFETY: valid out-pointers and ordinals of present devices; these queries need no context.
            let ok = unsafe {
                (api.device_get)(&mut me, self.ordinal as c_int) == CUDA_SUCCESS
                    && (api.device_get)(&mut other, peer.ordinal as c_int) == CUDA_SUCCESS
                    && (api.device_can_access_peer)(&mut can, me, other) == CUDA_SUCCESS
            };
            if !ok || can == 0 {
                return Some(false);
            }
            let _current = self.enter().ok()?;
            // SAFETY: `peer.raw` is a retained primary context; flags must be 0; this context is current.
            let r = unsafe { (api.ctx_enable_peer_access)(peer.raw, 0) };
            Some(r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
        })()
        .unwrap_or(false);
        pairs.insert((self.ordinal, peer.ordinal), enabled);
        enabled
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

    /// The driver handle (`CUcontext`).
    pub(crate) fn raw(&self) -> RawHandle {
        self.raw
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
    /// A sub-allocation ([`DeviceMemory::sub`]): the allocation it lies in, kept alive by this reference and
    /// freed when the last sub-allocation (and the arena itself) is dropped. `None`: this value owns `dptr`.
    arena: Option<std::sync::Arc<DeviceMemory>>,
    /// Set by [`DeviceMemory::keep_after_error`]: a copy that may still write this memory could not be
    /// settled, so dropping it leaks the allocation instead of freeing it.
    keep: std::sync::atomic::AtomicBool,
}

// `DeviceMemory` is Send + Sync automatically (a `&'static Context`, a u64, a usize and an atomic flag): its
// only resource is the allocation, freed once, in `Drop`, which has exclusive access.

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
            return Ok(DeviceMemory { ctx, dptr: 0, len: 0, arena: None, keep: Default::default() });
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
        Ok(DeviceMemory { ctx, dptr, len, arena: None, keep: Default::default() })
    }

    /// Bytes `offset..offset + len` of `arena` as an allocation of their own: same device, device pointer
    /// `arena + offset`, freed with the arena when the last such part and the arena are dropped (the part
    /// holds a reference to it). Loads use it to give every tensor of a device one buffer out of one
    /// `cuMemAlloc`. `OUT_OF_RANGE` when the range does not lie within the arena.
    pub fn sub(arena: &std::sync::Arc<DeviceMemory>, offset: usize, len: usize) -> Result<DeviceMemory> {
        check_range("device sub-allocation", offset, len, arena.len)?;
        Ok(DeviceMemory {
            ctx: arena.ctx,
            dptr: if len == 0 { 0 } else { arena.dptr + offset as u64 },
            len,
            arena: Some(arena.clone()),
            keep: Default::default(),
        })
    }

    /// After a copy into this memory failed and could not be established to have ended (rule 2 of
    /// [`super::inflight`]): dropping this value (for a part: the allocation it lies in) leaks the allocation
    /// instead of freeing memory a transfer may still write.
    pub fn keep_after_error(&self) {
        match &self.arena {
            Some(a) => a.keep_after_error(),
            None => self.keep.store(true, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// True for a part of a larger allocation ([`DeviceMemory::sub`]).
    pub fn is_sub_allocation(&self) -> bool {
        self.arena.is_some()
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

    /// The device's primary context.
    pub(crate) fn context(&self) -> &'static Context {
        self.ctx
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        if self.len == 0 || self.arena.is_some() {
            return; // nothing allocated, or a part: the arena frees the whole when its last reference goes
        }
        if *self.keep.get_mut() {
            return; // a transfer may still write it (see `keep_after_error`): leaked, never freed under it
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
/// a byte slice (`Deref<Target = [u8]>`). Allocated through the context of the device it is for
/// ([`PinnedHostMemory::alloc_on`]), or of any retained device ([`PinnedHostMemory::alloc`]).
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
    /// Allocates `len` zeroed bytes of page-locked host memory through a context this process already uses
    /// (see [`Context::for_host`]): for memory that belongs to no device, such as a `cuda_host` buffer.
    ///
    /// Errors: `UNAVAILABLE` without CUDA; `OUT_OF_MEMORY` when the driver cannot pin that much;
    /// `DEVICE_ERROR` for other driver failures.
    pub fn alloc(len: usize) -> Result<PinnedHostMemory> {
        Self::alloc_in(Context::for_host()?, len)
    }

    /// Allocates `len` zeroed bytes of page-locked host memory through `cuda:<ordinal>`'s primary context, for
    /// transfers to or from that device (staging): a process that only uses cuda:3 never gets a context on
    /// cuda:0 for it. Errors as for [`PinnedHostMemory::alloc`], and `NO_SUCH_DEVICE`.
    pub fn alloc_on(ordinal: u32, len: usize) -> Result<PinnedHostMemory> {
        Self::alloc_in(Context::get(ordinal)?, len)
    }

    fn alloc_in(ctx: &'static Context, len: usize) -> Result<PinnedHostMemory> {
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

    /// `Ok` where the bytes may be touched; `UNAVAILABLE` naming fork() in a child forked after this process
    /// initialised CUDA. NVIDIA leaves the use of memory its interfaces allocated undefined after `fork()`
    /// (the pages may be absent in the child: reading them faults), so a child never reads or writes it:
    /// `cuda_host` buffers and staging slabs made before the fork are unavailable there, as CUDA memory is.
    pub fn check_usable(&self) -> Result<()> {
        match super::forked_reason() {
            None => Ok(()),
            Some(reason) => Err(Error::new(
                Status::Unavailable,
                format!(
                    "page-locked host memory ({} bytes) allocated by the CUDA driver cannot be used in this \
                     process: {reason}",
                    self.len
                ),
            )),
        }
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

/// Whether `cuda:<ordinal>` supports `CU_MEMHOSTREGISTER_READ_ONLY`
/// (`CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED`), cached per device; false without CUDA. Without
/// it a read-only mapping (a file opened read-only) cannot be registered at all: the driver refuses a
/// registration that is not read-only on pages without write permission.
pub fn read_only_register_supported(ordinal: u32) -> bool {
    static SUPPORTED: Mutex<Option<HashMap<u32, bool>>> = Mutex::new(None);
    attribute_is_one(&SUPPORTED, ordinal, driver::ATTR_READ_ONLY_HOST_REGISTER_SUPPORTED)
}

/// Whether `cuda:<ordinal>` supports `cuMemHostRegister` at all (`CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED`),
/// cached per device; false without CUDA. Some platforms (and some virtualised or sandboxed setups) answer 0:
/// then only memory the driver allocated itself (`cuMemHostAlloc`) is page-locked.
pub fn host_register_supported(ordinal: u32) -> bool {
    static SUPPORTED: Mutex<Option<HashMap<u32, bool>>> = Mutex::new(None);
    attribute_is_one(&SUPPORTED, ordinal, driver::ATTR_HOST_REGISTER_SUPPORTED)
}

/// Whether `cuda:<ordinal>` supports GPUDirect RDMA (`CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`), cached per
/// device; false without CUDA. GPUDirect Storage needs it (the gds census entry asks every device).
pub fn gpu_direct_rdma_supported(ordinal: u32) -> bool {
    static SUPPORTED: Mutex<Option<HashMap<u32, bool>>> = Mutex::new(None);
    attribute_is_one(&SUPPORTED, ordinal, driver::ATTR_GPU_DIRECT_RDMA_SUPPORTED)
}

/// A boolean device attribute, cached per device in `cache`; false without CUDA or when the query fails.
fn attribute_is_one(cache: &Mutex<Option<HashMap<u32, bool>>>, ordinal: u32, attribute: c_int) -> bool {
    let Ok(api) = api() else { return false };
    if check_ordinal(ordinal).is_err() {
        return false;
    }
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    *cache.get_or_insert_with(HashMap::new).entry(ordinal).or_insert_with(|| {
        let (mut dev, mut v): (c_int, c_int) = (0, 0);
        // SAFETY: valid out-pointers; device and attribute queries need no context.
        let ok = unsafe {
            (api.device_get)(&mut dev, ordinal as c_int) == CUDA_SUCCESS
                && (api.device_get_attribute)(&mut v, attribute, dev) == CUDA_SUCCESS
        };
        ok && v == 1
    })
}

/// Existing host memory page-locked in place (`cuMemHostRegister_v2`, portable, and read-only where the
/// device it is registered through supports it, which is what lets read-only file mappings be registered),
/// unregistered on drop (`cuMemHostUnregister`). Registered memory makes asynchronous host-to-device copies truly asynchronous
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
    /// Page-locks `bytes` for as long as the registration lives, through a context this process already uses
    /// (see [`Context::for_host`]).
    ///
    /// Errors: `UNAVAILABLE` without CUDA; `DEVICE_ERROR` from the driver (e.g.
    /// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED` when the range overlaps another registration).
    pub fn register(bytes: &'a [u8]) -> Result<HostRegistration<'a>> {
        // SAFETY: `bytes` stays borrowed (alive, not mutated) for 'a, which the result carries.
        unsafe { Self::register_ptr(Context::for_host()?, bytes.as_ptr(), bytes.len()) }
    }

    /// [`HostRegistration::register`] through `cuda:<ordinal>`'s primary context, for transfers to that device.
    pub fn register_on(ordinal: u32, bytes: &'a [u8]) -> Result<HostRegistration<'a>> {
        // SAFETY: as in `register`.
        unsafe { Self::register_ptr(Context::get(ordinal)?, bytes.as_ptr(), bytes.len()) }
    }

    /// Page-locks `len` bytes at `ptr` with no borrow attached, for memory whose owner lives beside the
    /// registration (e.g. a file mapping kept in the same struct), through `cuda:<ordinal>`'s primary context.
    /// A read-only mapping can only be registered where [`read_only_register_supported`] says so.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be valid host memory that stays mapped until the registration is dropped, and
    /// must not be freed or unmapped while registered.
    pub unsafe fn register_raw_on(ordinal: u32, ptr: *const u8, len: usize) -> Result<HostRegistration<'static>> {
        // SAFETY: forwarded contract.
        unsafe { HostRegistration::register_ptr(Context::get(ordinal)?, ptr, len) }
    }

    /// [`HostRegistration::register_raw_on`] through a context this process already uses (see
    /// [`Context::for_host`]).
    ///
    /// # Safety
    /// As [`HostRegistration::register_raw_on`].
    pub unsafe fn register_raw(ptr: *const u8, len: usize) -> Result<HostRegistration<'static>> {
        // SAFETY: forwarded contract.
        unsafe { HostRegistration::register_ptr(Context::for_host()?, ptr, len) }
    }

    /// # Safety
    /// As [`HostRegistration::register_raw_on`], for lifetime `'b`.
    unsafe fn register_ptr<'b>(ctx: &'static Context, ptr: *const u8, len: usize) -> Result<HostRegistration<'b>> {
        if len == 0 {
            return Ok(HostRegistration { ptr, len, read_only: false, ctx, _borrow: PhantomData });
        }
        let api = api()?;
        let read_only = read_only_register_supported(ctx.ordinal);
        let flags = driver::HOST_PORTABLE | if read_only { driver::HOST_REGISTER_READ_ONLY } else { 0 };
        let _current = ctx.enter()?;
        // SAFETY: the caller guarantees the range stays valid while registered; with READ_ONLY the device
        // never writes it, and without it we still only use it as a copy source.
        let r = unsafe { (api.mem_host_register)(ptr as *mut c_void, len, flags) };
        api.check(r, || {
            format!(
                "cuMemHostRegister_v2({ptr:p}, {len} bytes = {}, portable{}, through cuda:{})",
                human_bytes(len as u64),
                if read_only { ", read-only" } else { "" },
                ctx.ordinal
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
        if super::super::status().status == crate::device::types::BackendStatus::Available {
            return;
        }
        assert_eq!(DeviceMemory::alloc(0, 16).unwrap_err().status(), Status::Unavailable);
        assert_eq!(PinnedHostMemory::alloc(16).unwrap_err().status(), Status::Unavailable);
        assert_eq!(PinnedHostMemory::alloc_on(0, 16).unwrap_err().status(), Status::Unavailable);
        assert_eq!(HostRegistration::register(&[1, 2, 3]).unwrap_err().status(), Status::Unavailable);
        assert_eq!(Context::get(0).err().map(|e| e.status()), Some(Status::Unavailable));
        assert_eq!(Context::for_host().err().map(|e| e.status()), Some(Status::Unavailable));
        assert!(!Context::is_retained(0));
        assert!(!read_only_register_supported(0));
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
