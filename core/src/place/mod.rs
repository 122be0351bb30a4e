//! Placement: buffers that own memory on a device, puts with a fit check, the staging pipeline to CUDA,
//! whole-file placement rules, and the batch gather.

pub mod arena;
pub mod buffer;
pub mod consumer;
pub mod export;
pub mod host;
pub mod op;
pub mod parallel;
pub mod put;
pub mod resident;
pub mod staging;

pub use buffer::{Buffer, Memory};
pub use put::{buffer_to, put, put_with_stats, PutOptions, PutStats, Target};
pub use staging::release_cached_memory;
pub mod gather;
pub mod gather_stream;
pub mod placed;
pub mod plan;
pub mod rules;

pub use gather::Gather;
pub use placed::{load, load_with, LoadOptions, Loaded, Placed};
pub use plan::{Placement, Plan};
pub use rules::Rules;
