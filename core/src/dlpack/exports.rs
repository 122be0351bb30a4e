//! The ownership of exported DLPack tensors: where each managed struct lives, what it keeps alive, and the
//! release its deleter performs.
//!
//! Every managed struct (either form) is written into a *slot*: memory that is never returned to the
//! allocator, so a deleter called with a stale pointer reads nothing freed. A slot holds the export's entry
//! (what it keeps alive, its shape and strides arrays) while the export is live; [`release`] takes the entry
//! out under the slot lock, so of two racing calls one releases and the other finds nothing. A freed slot is
//! reused only after [`QUARANTINE`] later releases, so a repeated call soon after the first finds it free.
//!
//! The deleters themselves are C functions of the C-API crate ([`Deleters`]): they call [`release`].

use super::{dl_device_of, dl_dtype_or_err, dl_shape, DlpackTensor, DlpackVersion, ManagedTensor};
use super::{ManagedTensorVersioned, FLAG_IS_COPIED, FLAG_READ_ONLY, VERSION};
use crate::device::{Device, DeviceKind};
use crate::error::Result;
use crate::file::View;
use crate::forksafe::GlobalMutex;
use crate::place::export::{self, ConsumerStream, CopyPolicy, Export, Form, Keep};
use crate::place::Buffer;
use std::collections::{BTreeSet, VecDeque};
use std::ffi::c_void;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::sync::{Arc, Mutex};

/// A consumer's request, checked: the arguments of Python's `__dlpack__(*, stream, max_version, dl_device,
/// copy)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The form of the managed struct.
    pub form: Form,
    /// Share, copy, or refuse to copy.
    pub copy: CopyPolicy,
    /// The device the consumer wants the data on (`None`: where it is).
    pub device: Option<Device>,
    /// The consumer's stream (CUDA data only).
    pub stream: ConsumerStream,
}

/// The functions a consumer calls to release an export, one per form. They are C functions, defined by the C
/// API (this crate defines none); each must call [`release`] with the pointer it is given.
#[derive(Clone, Copy)]
pub struct Deleters {
    /// Written into `ManagedTensorVersioned::deleter`.
    pub versioned: extern "C" fn(*mut ManagedTensorVersioned),
    /// Written into `ManagedTensor::deleter`.
    pub legacy: extern "C" fn(*mut ManagedTensor),
}

/// A published export: the managed struct of the requested form, live until its deleter runs.
#[derive(Debug, PartialEq, Eq)]
pub enum Published {
    /// `DLManagedTensorVersioned`.
    Versioned(*mut ManagedTensorVersioned),
    /// `DLManagedTensor`.
    Legacy(*mut ManagedTensor),
}

/// What a live export keeps until its release.
struct Entry {
    keep: Keep,
    _shape: Box<[i64]>,
    _strides: Option<Box<[i64]>>,
    /// CUDA: the consumer stream to record a release event on.
    release_on: Option<ConsumerStream>,
}

impl Entry {
    /// Whether releasing it may call the CUDA driver: it keeps a `cuda:N` or `cuda_host` buffer (an event to
    /// record, memory to free when it holds the last reference).
    fn uses_cuda(&self) -> bool {
        match &self.keep {
            Keep::Buffer(b) => b.lock().unwrap_or_else(|p| p.into_inner()).device().kind != DeviceKind::CPU,
            Keep::View(_) => false,
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // The deleter has no way to report an error; a failed event record leaves the next rewrite unordered
        // with that consumer only on a driver that is already failing.
        let _ = export::release(&self.keep, self.release_on);
    }
}

/// The memory of one managed struct; both forms start at the slot's address.
#[repr(C)]
union ManagedStruct {
    versioned: ManuallyDrop<ManagedTensorVersioned>,
    legacy: ManuallyDrop<ManagedTensor>,
}

#[repr(C)]
struct Slot {
    /// Written when the export is published; read only by the consumer.
    managed: MaybeUninit<ManagedStruct>,
    /// The live export using the slot; `None` while it is free (or not yet published).
    entry: Option<Box<Entry>>,
}

/// How many released exports' slots are kept aside before the oldest is reused.
const QUARANTINE: usize = 1024;

/// Every slot ever made (by address), the free ones (oldest release first) and the number of live exports.
pub(crate) struct Slots {
    all: BTreeSet<usize>,
    free: VecDeque<usize>,
    live: usize,
}

/// The slots. Process-global; held by the fork handlers (`fork_handlers.rs`).
pub(crate) static DLPACK_SLOTS: GlobalMutex<Slots> =
    GlobalMutex::new(Slots { all: BTreeSet::new(), free: VecDeque::new(), live: 0 });

/// A slot for a new export: the oldest free one past the quarantine, else a new one.
fn take_slot() -> *mut Slot {
    let mut slots = DLPACK_SLOTS.lock();
    if slots.free.len() > QUARANTINE {
        return slots.free.pop_front().expect("non-empty") as *mut Slot;
    }
    let slot = Box::into_raw(Box::new(Slot { managed: MaybeUninit::uninit(), entry: None }));
    slots.all.insert(slot as usize);
    slot
}

/// Exports a view for `req` (see [`export::export_view`] for what is shared, mapped or copied).
pub fn export_view(view: &View, req: &Request, deleters: Deleters) -> Result<Published> {
    let what = format!("{}: tensor '{}'", view.file_display(), view.name());
    let e = export::export_view(view, req.form, req.copy, req.device)?;
    publish(e, req.form, &what, deleters)
}

/// Exports a buffer for `req` (see [`export::export_buffer`]: shared, or copied to the requested device; the
/// CUDA stream handshake).
pub fn export_buffer(buffer: &Arc<Mutex<Buffer>>, req: &Request, deleters: Deleters) -> Result<Published> {
    let what = format!("buffer '{}'", buffer.lock().unwrap_or_else(|p| p.into_inner()).name());
    let e = export::export_buffer(buffer, req.copy, req.device, req.stream)?;
    publish(e, req.form, &what, deleters)
}

/// Writes the managed struct of `form` for `e` into a slot and makes it live. On an error nothing is
/// published and `e` is released.
fn publish(e: Export, form: Form, what: &str, deleters: Deleters) -> Result<Published> {
    let mut dims = dl_shape(&e.shape, what)?.into_boxed_slice();
    let mut strides = match &e.strides {
        Some(s) => Some(dl_shape(s, what)?.into_boxed_slice()),
        None => None,
    };
    let dt = dl_dtype_or_err(e.dtype, what)?;
    let tensor = DlpackTensor {
        data: e.data as usize as *mut c_void,
        device: dl_device_of(e.device),
        ndim: dims.len() as i32,
        dtype: dt,
        shape: if dims.is_empty() { std::ptr::null_mut() } else { dims.as_mut_ptr() },
        strides: strides.as_deref_mut().map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
        byte_offset: 0,
    };
    let flags = if e.read_only { FLAG_READ_ONLY } else { 0 } | if e.copied { FLAG_IS_COPIED } else { 0 };
    let entry = Box::new(Entry { keep: e.keep, _shape: dims, _strides: strides, release_on: e.release_on });
    let slot = take_slot();
    // SAFETY: the slot is ours (never freed) and free, so no consumer holds it and no release reads it; the
    // struct is written in place at the slot's start, where both forms live.
    let published = unsafe {
        let managed = std::ptr::addr_of_mut!((*slot).managed) as *mut c_void;
        match form {
            Form::Versioned => {
                let m = managed as *mut ManagedTensorVersioned;
                m.write(ManagedTensorVersioned {
                    version: DlpackVersion { major: VERSION.0, minor: VERSION.1 },
                    manager_ctx: slot as *mut c_void,
                    deleter: Some(deleters.versioned),
                    flags,
                    dl_tensor: tensor,
                });
                Published::Versioned(m)
            }
            Form::Legacy => {
                debug_assert!(!e.read_only, "a read-only mapping never goes out in the legacy form");
                let m = managed as *mut ManagedTensor;
                m.write(ManagedTensor {
                    dl_tensor: tensor,
                    manager_ctx: slot as *mut c_void,
                    deleter: Some(deleters.legacy),
                });
                Published::Legacy(m)
            }
        }
    };
    // The release accepts the slot from here on.
    let mut slots = DLPACK_SLOTS.lock();
    // SAFETY: a slot of ours, written under the lock.
    unsafe { (*slot).entry = Some(entry) };
    slots.live += 1;
    Ok(published)
}

/// Releases the export whose managed struct (either form) is at `managed`: what the deleters do. Never reads
/// the struct: the address must be one of the slots, holding a live export; anything else (a second call,
/// NULL, a struct hostfirst did not make) is ignored and gives `false`.
pub fn release(managed: *mut c_void) -> bool {
    let addr = managed as usize;
    let entry = {
        let mut slots = DLPACK_SLOTS.lock();
        if !slots.all.contains(&addr) {
            return false; // not ours
        }
        // SAFETY: one of our slots (never freed), accessed under the lock.
        let Some(entry) = (unsafe { (*(addr as *mut Slot)).entry.take() }) else {
            return false; // already released
        };
        slots.free.push_back(addr);
        slots.live -= 1;
        entry
    };
    // Outside the lock. A CUDA buffer's release may call the driver (an event recorded, memory freed): in
    // relaxed capture mode, or kept for a safe point while a capture is seen (device::cuda::capture).
    if entry.uses_cuda() {
        crate::device::cuda::capture::release_or_defer(entry);
    } else {
        drop(entry);
        crate::device::cuda::capture::safe_point();
    }
    true
}

/// The number of live exports (made and not yet released).
pub fn live_exports() -> usize {
    DLPACK_SLOTS.lock().live
}

#[cfg(test)]
mod tests {
    use super::super::{DlDType, DlpackDevice, DlpackDeviceType, DlpackFlag};
    use super::*;
    use crate::dtype::DType;
    use crate::file::TensorFile;
    use std::mem::{offset_of, size_of};

    // The deleters a C API would define; plain Rust functions with C's calling convention are what the
    // managed structs hold, so the tests need two (they are never exported).
    extern "C" fn versioned_deleter(t: *mut ManagedTensorVersioned) {
        release(t as *mut c_void);
    }
    extern "C" fn legacy_deleter(t: *mut ManagedTensor) {
        release(t as *mut c_void);
    }
    const DELETERS: Deleters = Deleters { versioned: versioned_deleter, legacy: legacy_deleter };

    fn req(form: Form) -> Request {
        Request { form, copy: CopyPolicy::IfNeeded, device: None, stream: ConsumerStream::Legacy }
    }

    #[test]
    fn layout_matches_dlpack_h() {
        assert_eq!(size_of::<DlpackVersion>(), 8);
        assert_eq!(size_of::<DlpackDevice>(), 8);
        assert_eq!(size_of::<DlDType>(), 4);
        assert_eq!(offset_of!(DlDType, bits), 1);
        assert_eq!(offset_of!(DlDType, lanes), 2);
        if size_of::<usize>() == 8 {
            assert_eq!(offset_of!(DlpackTensor, device), 8);
            assert_eq!(offset_of!(DlpackTensor, ndim), 16);
            assert_eq!(offset_of!(DlpackTensor, dtype), 20);
            assert_eq!(offset_of!(DlpackTensor, shape), 24);
            assert_eq!(offset_of!(DlpackTensor, strides), 32);
            assert_eq!(offset_of!(DlpackTensor, byte_offset), 40);
            assert_eq!(size_of::<DlpackTensor>(), 48);
            assert_eq!(offset_of!(ManagedTensorVersioned, manager_ctx), 8);
            assert_eq!(offset_of!(ManagedTensorVersioned, deleter), 16);
            assert_eq!(offset_of!(ManagedTensorVersioned, flags), 24);
            assert_eq!(offset_of!(ManagedTensorVersioned, dl_tensor), 32);
            assert_eq!(size_of::<ManagedTensorVersioned>(), 80);
            assert_eq!(offset_of!(ManagedTensor, dl_tensor), 0);
            assert_eq!(offset_of!(ManagedTensor, manager_ctx), 48);
            assert_eq!(offset_of!(ManagedTensor, deleter), 56);
            assert_eq!(size_of::<ManagedTensor>(), 64);
        }
    }

    fn safetensors_bytes() -> Vec<u8> {
        let header = br#"{"x":{"dtype":"BF16","shape":[4,2],"data_offsets":[0,16]}}"#;
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header);
        v.extend((0u8..16).collect::<Vec<_>>());
        v
    }

    /// The live count is process-wide and other tests export concurrently, so only this test's own exports
    /// are checked (through `release`'s result), not the count.
    #[test]
    fn view_export_outlives_the_view_and_releases_once() {
        let f = TensorFile::from_bytes(safetensors_bytes()).unwrap();
        let s = f.view("x").unwrap().slice_rows(1, 3).unwrap();
        drop(f);
        let Published::Versioned(t) = export_view(&s, &req(Form::Versioned), DELETERS).unwrap() else {
            panic!("the versioned form was asked")
        };
        drop(s);
        // SAFETY: a live export.
        let m = unsafe { &*t };
        assert_eq!(m.version, DlpackVersion { major: 1, minor: 1 });
        assert_eq!(m.flags, DlpackFlag::ReadOnly as u64);
        assert_eq!(m.dl_tensor.device, DlpackDevice { device_type: DlpackDeviceType::CPU as i32, device_id: 0 });
        assert_eq!(m.dl_tensor.dtype, DlDType { code: 4, bits: 16, lanes: 1 });
        assert_eq!(m.dl_tensor.ndim, 2);
        assert!(m.dl_tensor.strides.is_null());
        // SAFETY: ndim dims, and 8 bytes of data (rows 1..3 of 4x2 bf16), kept alive by the export.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(m.dl_tensor.shape, 2), &[2, 2]);
            assert_eq!(std::slice::from_raw_parts(m.dl_tensor.data as *const u8, 8), &[4, 5, 6, 7, 8, 9, 10, 11]);
        }
        assert!(release(t as *mut c_void), "the first release releases");
        assert!(!release(t as *mut c_void), "a second release is ignored");
        assert!(!release(std::ptr::null_mut()), "NULL is ignored");
        let mut not_ours = 0u64;
        assert!(!release(&mut not_ours as *mut u64 as *mut c_void), "a struct hostfirst did not make is ignored");
    }

    #[test]
    fn buffer_export_is_writable_in_both_forms() {
        let b = Arc::new(Mutex::new(Buffer::alloc("b", DType::F32, &[3], 12, Device::CPU).unwrap()));
        let addr = b.lock().unwrap().address();
        let Published::Legacy(l) = export_buffer(&b, &req(Form::Legacy), DELETERS).unwrap() else {
            panic!("the legacy form was asked")
        };
        let Published::Versioned(v) = export_buffer(&b, &req(Form::Versioned), DELETERS).unwrap() else {
            panic!("the versioned form was asked")
        };
        drop(b);
        // SAFETY: live exports of a 12-byte cpu buffer.
        let (lm, vm) = unsafe { (&mut *l, &mut *v) };
        assert_eq!(vm.flags, 0);
        assert_eq!(vm.dl_tensor.data as u64, addr);
        assert_eq!(lm.dl_tensor.data as u64, addr);
        assert_eq!(vm.dl_tensor.dtype, DlDType { code: 2, bits: 32, lanes: 1 });
        // SAFETY: writable, 3 f32 (the buffer is kept alive by the exports).
        unsafe { *(lm.dl_tensor.data as *mut f32).add(2) = 1.5 };
        (lm.deleter.unwrap())(l);
        // SAFETY: still alive through the versioned export.
        assert_eq!(unsafe { *(vm.dl_tensor.data as *const f32).add(2) }, 1.5);
        (vm.deleter.unwrap())(v);
        assert!(!release(v as *mut c_void));
    }

    #[test]
    fn copy_never_refuses_a_copy_to_another_device() {
        let b = Arc::new(Mutex::new(Buffer::alloc("b", DType::F32, &[3], 12, Device::CPU).unwrap()));
        let never = Request { copy: CopyPolicy::Never, device: Some(Device::CUDA_HOST), ..req(Form::Versioned) };
        let e = export_buffer(&b, &never, DELETERS).unwrap_err();
        assert_eq!(e.status(), crate::error::Status::Unsupported, "{e}");
        assert!(e.to_string().contains("buffer 'b'"), "{e}");
    }
}
