//! Shard-on-read for multi-device and multi-process jobs: each process reads only the bytes of the tensor
//! parts its devices hold.
//!
//! - [`Mesh`]: named axes and sizes (JAX's `Mesh`); positions are numbered row-major.
//! - [`Spec`]: which mesh axes split which tensor dimension (JAX's `PartitionSpec`); dimensions and axes it
//!   does not name replicate. Splits must be even: a dimension that does not divide is an error naming the
//!   tensor, the dimension, its size and the axes (as JAX's `device_put` refuses it).
//! - [`ShardRules`]: glob patterns on tensor names → specs, first match wins, unmatched tensors replicated.
//! - [`ShardPlan`]: for the positions a process owns (and the device of each), each tensor's part as a
//!   narrowed view of the file (sharded `*.index.json` sets included), its byte runs, and what the coalesced
//!   reads cost under a [`ReadPolicy`](crate::file::ReadPolicy) (neighbouring runs merged while a read spans at most 1.25×
//!   the pages it needs, by default). The host parts of one tensor are planned together: runs of
//!   neighbouring shards the process owns merge into one read under the same bound (owning every column
//!   shard of a row reads the row once).
//! - [`run`]: fit check per device before anything moves, then one contiguous buffer per shard, filled by
//!   the transfer engine's parallel readers ([`crate::engine::read_scatter`]: several threads, each with a
//!   read set at the queue depth; host copies of replicated parts filled by the same threads) or the CUDA
//!   staging ring, with progress and cancel as for loads.
//!
//! No communication between processes: each computes its own plan from the same rules and reads its bytes.
//! Collectives and resharding after load stay with the engines built for them (MPI, JAX, torch.distributed).

pub mod mesh;
pub mod plan;
pub mod read;
pub mod rules;
pub mod table;

pub use mesh::{Mesh, Spec};
pub use plan::{Owned, ShardEntry, ShardPlan};
pub use read::{run, LoadedShard, ShardLoad, ShardOptions};
pub use rules::ShardRules;
pub use table::{PlanTable, ShardRow};
