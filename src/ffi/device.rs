//! Devices and device specs: the `hostfirst_device` value, `hostfirst_device_*`, `hostfirst_devices`,
//! `hostfirst_target_parse`.

use super::args::{
    c_str, in_ref, out_ptr, out_struct, out_struct_size, static_cstr, write_array, write_out_struct, write_string,
};
use crate::device::{census, memory, Device, DeviceKind};
use crate::error::{Error, Result, Status};
use crate::place::Target;
use crate::scope::resolve_target;
use std::ffi::c_char;

/// A device: a kind (`HOSTFIRST_DEVICE_CPU`, `_CUDA`, `_CUDA_HOST`, equal to DLPack's device types) and an
/// ordinal (0 for cpu and cuda_host). A plain value: copy it freely, compare it field by field. Its layout
/// equals DLPack's `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hostfirst_device {
    /// The kind (checked on every call: an unknown value is `INVALID_ARGUMENT`).
    pub kind: super::args::c_device_kind,
    /// Ordinal within the kind.
    pub ordinal: i32,
}

impl From<Device> for hostfirst_device {
    fn from(d: Device) -> Self {
        hostfirst_device { kind: d.kind as i32, ordinal: d.ordinal as i32 }
    }
}

impl hostfirst_device {
    /// Validates a device value from C (kind known, ordinal non-negative) without checking presence.
    pub(crate) fn to_device(self, param: &str) -> Result<Device> {
        let kind = DeviceKind::from_i32(self.kind).ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!("{param}: unknown device kind {} (expected 1 = cpu, 2 = cuda, 3 = cuda_host)", self.kind),
            )
        })?;
        if self.ordinal < 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("{param}: negative device ordinal {}", self.ordinal),
            ));
        }
        Ok(Device { kind, ordinal: self.ordinal as u32 })
    }

    /// Validates and checks the device is present.
    pub(crate) fn to_present(self, param: &str) -> Result<Device> {
        self.to_device(param)?.validate()
    }
}

/// Properties of one device. Set `struct_size = sizeof(hostfirst_device_info)` before the call; fields may be
/// appended in later minor versions and are then only written when the caller's struct is large enough.
/// Strings are owned by the library and live for the process lifetime.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_device_info {
    /// In: the caller's `sizeof(hostfirst_device_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// The device.
    pub device: hostfirst_device,
    /// Marketing name (CUDA) or CPU model (cpu, cuda_host).
    pub name: *const c_char,
    /// Total bytes of memory (CUDA: device memory; cpu and cuda_host: MemTotal).
    pub total_memory: u64,
    /// CUDA: `"GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"` (`"MIG-…"` for a MIG instance, as `nvidia-smi -L`
    /// prints it); "" otherwise.
    pub uuid: *const c_char,
    /// CUDA: PCI bus id such as `"0000:3b:00.0"`; "" otherwise.
    pub pci_bus_id: *const c_char,
    /// CUDA: compute capability major; 0 otherwise.
    pub compute_capability_major: i32,
    /// CUDA: compute capability minor; 0 otherwise.
    pub compute_capability_minor: i32,
    /// CUDA: multiprocessor count; cpu: logical CPUs available to the process.
    pub multiprocessor_count: u32,
}

out_struct!(hostfirst_device_info, multiprocessor_count);

pub(crate) fn target_of(p: *const hostfirst_device) -> Result<Target> {
    if p.is_null() {
        return Ok(Target::Default);
    }
    Ok(Target::Device(in_ref(p, "target")?.to_device("target")?))
}

/// Lists the devices of every available backend: `cpu:0` first, then `cuda:0..N-1`. (`cuda_host` is a
/// memory kind, not a listed device; it is usable whenever CUDA is available.)
///
/// `*out_count` always receives the number of devices. `out == NULL` with `capacity == 0` is a count query
/// and returns OK. Errors: `BUFFER_TOO_SMALL` if `capacity` is smaller than the count (no element is
/// written), `NULL_ARGUMENT` (`out_count`, or `out` with a non-zero `capacity`). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_devices(out: *mut hostfirst_device, capacity: usize, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_devices", {
        let list: Vec<hostfirst_device> = census().devices.iter().map(|d| d.device.into()).collect();
        write_array(&list, out, capacity, out_count, "devices")
    })
}

/// Describes a present device into `*out` (set `out->struct_size` first).
///
/// `cuda_host` reports the host's properties. Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for an unknown
/// kind, a negative ordinal or `out->struct_size` smaller than the struct's 1.0 layout;
/// `UNAVAILABLE` when the device's backend is not available; `NO_SUCH_DEVICE` for an ordinal out of range.
/// Creates no CUDA context. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_device_describe(device: hostfirst_device, out: *mut hostfirst_device_info) -> Status {
    hostfirst_boundary!("hostfirst_device_describe", {
        let size = out_struct_size(out, "out")?;
        let dev = device.to_present("device")?;
        let c = census();
        let lookup = if dev.kind == DeviceKind::CUDA_HOST { Device::CPU } else { dev };
        let d = c.info(lookup).ok_or_else(|| Error::new(Status::NoSuchDevice, format!("{dev} is not present")))?;
        write_out_struct(
            out,
            size,
            hostfirst_device_info {
                struct_size: 0,
                device: dev.into(),
                name: static_cstr(&d.name),
                total_memory: d.total_memory,
                uuid: static_cstr(&d.uuid),
                pci_bus_id: static_cstr(&d.pci_bus_id),
                compute_capability_major: d.compute_capability.0,
                compute_capability_minor: d.compute_capability.1,
                multiprocessor_count: d.multiprocessor_count,
            },
        );
        Ok(())
    })
}

/// Writes a device's live free and total memory in bytes.
///
/// cpu and cuda_host: `MemAvailable` and `MemTotal` from `/proc/meminfo`. CUDA: **no context is created**
/// where NVML answers: while this process has not retained the device's primary context, the numbers come from
/// NVML (`libnvidia-ml.so.1`, installed with the NVIDIA driver; device-wide, found by the device's UUID, a MIG
/// instance by its `MIG-` UUID). Once the context is retained (any allocation, put or gather on the device
/// retains it), or where NVML is missing or does not know the device, they come from `cuMemGetInfo`, which
/// needs a context: the call then **retains the device's primary context** (creating it costs time and a few
/// hundred MiB of device memory; it is kept for the process lifetime, shared with the runtime API and
/// frameworks that use primary contexts), current only during the call (the calling thread's previous context
/// is restored). The fit check before an allocation always reads `cuMemGetInfo` in the context. Either output
/// may be NULL if not wanted. Errors: `INVALID_ARGUMENT` (an unknown device kind), `NO_SUCH_DEVICE`,
/// `UNAVAILABLE` (its backend is not available), `DEVICE_ERROR` (the driver's answer). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_device_memory(device: hostfirst_device, out_free: *mut u64, out_total: *mut u64) -> Status {
    hostfirst_boundary!("hostfirst_device_memory", {
        let dev = device.to_present("device")?;
        let (free, total) = memory(dev)?;
        if let Some(f) = super::args::opt_out(out_free) {
            *f = free;
        }
        if let Some(t) = super::args::opt_out(out_total) {
            *t = total;
        }
        Ok(())
    })
}

/// Parses a device spec and resolves it against the census into `*out`.
///
/// Accepted forms (case-insensitive, surrounding whitespace ignored): `cpu`, `cpu:0`, `cuda`, `cuda:N`, `gpu`,
/// `gpu:N` (alias of cuda), `cuda:GPU-<uuid>` and `cuda:MIG-<uuid>` (stable under `CUDA_VISIBLE_DEVICES`
/// renumbering), `cuda_host`.
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a malformed spec (the message lists the accepted forms);
/// `UNAVAILABLE` when the backend is not available (the message says why); `NO_SUCH_DEVICE` when the
/// ordinal or UUID names no present device (the message lists the devices present). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_device_parse(spec: *const c_char, out: *mut hostfirst_device) -> Status {
    hostfirst_boundary!("hostfirst_device_parse", {
        let spec = c_str(spec, "spec")?;
        let out = out_ptr(out, "out")?;
        *out = Device::parse(spec)?.into();
        Ok(())
    })
}

/// Like `hostfirst_device_parse`, but also accepts `"default"`, resolved through the default-device stack
/// (and refused with `IMPLICIT_PLACEMENT` in strict mode). This is how placement targets are read. Errors:
/// `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a malformed spec (the message lists the accepted forms, `default`
/// among them) or one that is not UTF-8; `NO_SUCH_DEVICE`, `UNAVAILABLE` as for `hostfirst_device_parse`;
/// `IMPLICIT_PLACEMENT` (`default` in strict mode); for `default`, the errors of an invalid
/// `HOSTFIRST_DEFAULT_DEVICE` as in `hostfirst_default_device`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_target_parse(spec: *const c_char, out: *mut hostfirst_device) -> Status {
    hostfirst_boundary!("hostfirst_target_parse", {
        let spec = c_str(spec, "spec")?;
        let out = out_ptr(out, "out")?;
        *out = resolve_target(spec, &format!("target '{}'", spec.trim()))?.into();
        Ok(())
    })
}

/// Writes the canonical spec of a device (`"cpu:0"`, `"cuda:1"`, `"cuda_host"`) into `buf`.
///
/// `*out_len` (if not NULL) always receives the length without the NUL; `(NULL, 0)` is a length query. The
/// device need not be present. Errors: `BUFFER_TOO_SMALL` (a too-small buffer; nothing is written),
/// `INVALID_ARGUMENT` (an unknown device kind), `NULL_ARGUMENT` (`buf` NULL with a non-zero `capacity`).
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_device_format(
    device: hostfirst_device,
    buf: *mut c_char,
    capacity: usize,
    out_len: *mut usize,
) -> Status {
    hostfirst_boundary!("hostfirst_device_format", {
        let dev = device.to_device("device")?;
        write_string(&dev.to_string(), buf, capacity, out_len, "device spec")
    })
}

/// Returns 1 when two devices are the same (same kind and ordinal), else 0. NULL pointers compare unequal.
#[no_mangle]
pub extern "C" fn hostfirst_device_equal(a: *const hostfirst_device, b: *const hostfirst_device) -> i32 {
    hostfirst_boundary!("hostfirst_device_equal", default = 0, {
        match (in_ref(a, "a"), in_ref(b, "b")) {
            (Ok(a), Ok(b)) => (a == b) as i32,
            _ => 0,
        }
    })
}
