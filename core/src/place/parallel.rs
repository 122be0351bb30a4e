//! How many threads a transfer uses by default. The parallel fill that lived here is the transfer engine's
//! [`crate::engine::fill_host`] now, with the engine's one progress contract ([`crate::engine::Progress`]).

/// The shortest interval between two progress reports: the engine's (the staging ring and the resident copies
/// still pace their own reports with it).
pub use crate::engine::PROGRESS_INTERVAL;

/// Default number of reader threads: the engine's (the CPUs available to the process, between 1 and 16).
pub use crate::engine::default_threads;
