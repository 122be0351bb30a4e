//! A buffer: memory owned on one device (cpu, cuda:N, cuda_host) with a dtype and a shape.

use super::host::HostAlloc;
use crate::device::cuda::{DeviceMemory, PinnedHostMemory};
use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};

/// Where a buffer's bytes live.
pub enum Memory {
    /// Aligned host memory (`cpu`).
    Host(HostAlloc),
    /// Page-locked host memory (`cuda_host`).
    Pinned(PinnedHostMemory),
    /// CUDA device memory (`cuda:N`).
    Cuda(DeviceMemory),
}

/// Memory on one device with a dtype and shape. Buffers own their memory and outlive the file they came from.
pub struct Buffer {
    name: String,
    cname: std::ffi::CString,
    dtype: DType,
    shape: Vec<u64>,
    nbytes: u64,
    mem: Memory,
}

impl Buffer {
    /// Allocates (zeroed for host kinds) memory for `nbytes` on `device`. No fit check: see [`crate::device::fit`].
    pub fn alloc(name: &str, dtype: DType, shape: &[u64], nbytes: u64, device: Device) -> Result<Buffer> {
        let len = usize::try_from(nbytes)
            .map_err(|_| Error::new(Status::OutOfMemory, format!("{name}: {nbytes} bytes does not fit in memory")))?;
        let what = format!("tensor '{name}'");
        let mem = match device.kind {
            DeviceKind::CPU => Memory::Host(HostAlloc::zeroed(len, &what)?),
            DeviceKind::CUDA_HOST => Memory::Pinned(PinnedHostMemory::alloc(len).map_err(|e| e.context(&what))?),
            DeviceKind::CUDA => Memory::Cuda(DeviceMemory::alloc(device.ordinal, len).map_err(|e| e.context(&what))?),
        };
        Ok(Buffer { name: name.to_string(), cname: c_name(name), dtype, shape: shape.to_vec(), nbytes, mem })
    }

    /// The tensor name it was made from (or given).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Its shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    /// Size in bytes.
    pub fn nbytes(&self) -> u64 {
        self.nbytes
    }
    /// The device holding the bytes.
    pub fn device(&self) -> Device {
        match &self.mem {
            Memory::Host(_) => Device::CPU,
            Memory::Pinned(_) => Device::CUDA_HOST,
            Memory::Cuda(d) => Device::cuda(d.ordinal()),
        }
    }
    /// The memory.
    pub fn memory(&self) -> &Memory {
        &self.mem
    }
    /// The memory, mutably.
    pub fn memory_mut(&mut self) -> &mut Memory {
        &mut self.mem
    }
    /// Host-addressable bytes (cpu and cuda_host), else None.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &self.mem {
            Memory::Host(h) => Some(h.as_slice()),
            Memory::Pinned(p) => Some(p.as_slice()),
            Memory::Cuda(_) => None,
        }
    }
    /// Host-addressable bytes, mutably.
    pub fn host_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.mem {
            Memory::Host(h) => Some(h.as_mut_slice()),
            Memory::Pinned(p) => Some(p.as_mut_slice()),
            Memory::Cuda(_) => None,
        }
    }
    /// The data address: a host pointer, or the CUDA device address, as an integer.
    pub fn address(&self) -> u64 {
        match &self.mem {
            Memory::Host(h) => h.as_ptr() as u64,
            Memory::Pinned(p) => p.as_ptr() as u64,
            Memory::Cuda(d) => d.device_ptr(),
        }
    }

    /// Copies bytes `[offset, offset + dst.len())` of the buffer into caller host memory.
    pub fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(dst.len() as u64).filter(|e| *e <= self.nbytes).ok_or_else(|| {
            Error::new(
                Status::OutOfRange,
                format!("buffer '{}': bytes {offset}..+{} are outside its {} bytes", self.name, dst.len(), self.nbytes),
            )
        })?;
        let (s, e) = (offset as usize, end as usize);
        match &self.mem {
            Memory::Host(h) => dst.copy_from_slice(&h.as_slice()[s..e]),
            Memory::Pinned(p) => dst.copy_from_slice(&p.as_slice()[s..e]),
            Memory::Cuda(d) => d.copy_to_host(s, dst)?,
        }
        Ok(())
    }

    /// Copies the whole buffer into caller host memory, which must hold `nbytes` (`BUFFER_TOO_SMALL` otherwise).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        if (dst.len() as u64) < self.nbytes {
            return Err(Error::new(
                Status::BufferTooSmall,
                format!("buffer '{}' has {} bytes; the destination holds {}", self.name, self.nbytes, dst.len()),
            ));
        }
        self.read_at(0, &mut dst[..self.nbytes as usize])
    }

    /// Renames (used when a buffer is made for a named tensor).
    pub fn set_name(&mut self, name: &str) {
        self.name = name.to_string();
        self.cname = c_name(name);
    }

    /// The name as a C string (interior NULs escaped), stable while the buffer lives and is not renamed.
    pub fn c_name(&self) -> &std::ffi::CStr {
        &self.cname
    }
}

fn c_name(name: &str) -> std::ffi::CString {
    std::ffi::CString::new(name.replace('\0', "\\0")).unwrap_or_default()
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer('{}', {:?}, {:?}, {} bytes on {})",
            self.name,
            self.dtype,
            self.shape,
            self.nbytes,
            self.device()
        )
    }
}
