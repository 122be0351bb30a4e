//! Buffers and puts.

use super::handle::{self, Handle};
use crate::error::Status;
use crate::place::Buffer;

/// A buffer: memory owned on one device (cpu, cuda:N or cuda_host) holding one tensor's bytes. Created by a
/// put (or a load, or a gather); released with `hostfirst_buffer_free`. Buffers outlive the file they came
/// from. Read-only calls on one buffer may run from several threads at once.
pub struct hostfirst_buffer {
    _private: [u8; 0],
}

impl Handle for hostfirst_buffer {
    type Target = std::sync::Mutex<Buffer>;
    const NAME: &'static str = "hostfirst_buffer";
}

/// Frees a buffer and its device or host memory. NULL is a no-op; a freed or foreign handle gives
/// `INVALID_HANDLE` and frees nothing. Memory is released once no call in flight still uses the buffer.
#[no_mangle]
pub extern "C" fn hostfirst_buffer_free(buffer: *mut hostfirst_buffer) -> Status {
    hostfirst_boundary!("hostfirst_buffer_free", { handle::remove(buffer, "buffer").map(|_| ()) })
}
