//! Placement: buffers that own memory on a device, puts with a fit check, the staging pipeline to CUDA,
//! whole-file placement rules, and the batch gather.

pub mod fit;
pub mod host;
pub mod parallel;
