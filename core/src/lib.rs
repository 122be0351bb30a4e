//! hostfirst-core: the safe Rust core of hostfirst (explicit, host-first placement of tensors).
//!
//! [`device`] (backends, devices, specs), [`scope`] (the default-device stack), [`file`](mod@file) (opening and
//! validating safetensors files and sharded sets, zero-copy host views), [`place`] (buffers, puts, the staging
//! pipeline, placement rules, whole-file loads, gather), [`engine`] (the transfer engine: concurrent reads
//! through io_uring or a pread pool), [`shard`] (meshes, partition specs, shard-on-read), [`write`] (the
//! streaming safetensors writer: staged files, part files, saves by several ranks) and [`dlpack`] (the DLPack
//! exchange format and the ownership of exported tensors).
//!
//! This crate defines no `extern "C"` function and exports no symbol (tests/it/boundary.rs checks it); the
//! C API is the `hostfirst` crate at the repository root (`src/ffi`), which owns the header. The C-visible enums
//! ([`Status`], [`DType`], [`DeviceKind`], ...) and `#[repr(C)]` structs are defined here once; cbindgen reads
//! them from this crate (`[parse] include` in cbindgen.toml).

#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
pub mod error;
pub mod cache;
pub mod device;
pub mod dlpack;
pub mod dtype;
pub mod engine;
pub mod file;
pub mod fork_handlers;
pub mod forksafe;
pub mod os;
pub mod place;
pub mod remote;
pub mod scope;
pub mod shard;
pub mod write;

pub use device::{Device, DeviceKind};
pub use dtype::DType;
pub use error::{Error, Result, Status};
pub use file::{TensorFile, View};
