//! Running a shard plan: every device fit-checked first, then one contiguous buffer per shard, filled through
//! the transfer engine from the shard's runs only: a strided shard's coalesced runs as read sets
//! ([`engine::read_pieces`]), a contiguous one in parallel pieces ([`engine::fill_host`]), a CUDA shard
//! through the pinned staging ring.

use super::plan::ShardPlan;
use crate::device::DeviceKind;
use crate::engine::staging::{ring_config, transfer};
use crate::engine::{self, Progress, ReadFailure, Tuning};
use crate::error::{Error, Result, Status};
use crate::file::TensorView;
use crate::place::buffer::{Buffer, Memory};
use crate::place::{buffer_to, Target};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Options of a run; zeros mean the defaults.
#[derive(Default)]
pub struct ShardOptions<'a> {
    /// Threads, piece size, staging and queue depth (zeros: the defaults, see [`Tuning`]). `chunk` is the
    /// piece of a contiguous host shard (default 8 MiB) and the staging slab for CUDA (default 16 MiB);
    /// `staging` is the page-locked staging for CUDA (default 256 MiB) and the bytes of one read set of a
    /// strided host shard.
    pub tuning: Tuning,
    /// Progress sink (bytes placed, total) → true to cancel; the engine's [`Progress`] contract (rate-limited,
    /// monotonic across shards, last with `done == total`).
    pub progress: Option<&'a mut dyn FnMut(u64, u64) -> bool>,
}

/// One loaded shard (same order as the plan's entries).
#[derive(Clone)]
pub struct LoadedShard {
    /// Its buffer, shared (the C API hands out references to it).
    pub buffer: Arc<Mutex<Buffer>>,
    /// File bytes read for it (0 for a copy of a replicated part).
    pub bytes_read: u64,
}

/// The shards of a run.
pub struct ShardLoad {
    /// One per plan entry.
    pub shards: Vec<LoadedShard>,
}

impl ShardLoad {
    /// File bytes read over all shards.
    pub fn bytes_read(&self) -> u64 {
        self.shards.iter().map(|s| s.bytes_read).sum()
    }
}

/// Runs `plan`: fit-checks every device against its memory free now (the first that does not fit gives
/// `OUT_OF_MEMORY` with the numbers; nothing is allocated), then reads each shard into a new buffer on its
/// device. A part held by several owned positions is read once and copied. Any failure, and cancelling
/// from `progress` (`CANCELLED`), frees everything the run had allocated.
pub fn run(plan: &ShardPlan, opts: ShardOptions<'_>) -> Result<ShardLoad> {
    crate::place::placed::check_devices(&plan.devices, "shard load")?;
    let total = plan.shard_bytes();
    let cancelled = || Error::new(Status::Cancelled, "shard load cancelled by the progress callback; nothing kept");
    let named = |err: Error| if err.status() == Status::Cancelled { cancelled() } else { err };
    // Read-ahead off on every file the plan reads: it would take pages past the end of each shard's range.
    let mut guards: Vec<(String, crate::file::ReadaheadOff)> = Vec::new();
    for e in plan.entries.iter().filter(|e| e.copy_of.is_none() && e.nbytes() > 0) {
        if !guards.iter().any(|(f, _)| f == e.view.file_display()) {
            guards.push((e.view.file_display().to_string(), e.view.readahead_off()));
        }
    }
    let mut progress = Progress::new(opts.progress, total);
    let mut shards: Vec<LoadedShard> = Vec::with_capacity(plan.entries.len());
    let mut base = 0u64;
    for e in &plan.entries {
        progress.part(base);
        let loaded = match e.copy_of {
            Some(j) => {
                let src = shards[j].buffer.lock().unwrap_or_else(|p| p.into_inner());
                LoadedShard { buffer: Arc::new(Mutex::new(buffer_to(&src, Target::Device(e.device))?)), bytes_read: 0 }
            }
            None => {
                let view = &e.view;
                let mut buf = Buffer::alloc(view.name(), view.dtype(), view.shape(), view.nbytes(), e.device)?;
                let fresh_cpu = e.device.kind == DeviceKind::CPU;
                let read = read_shard(view, &mut buf, fresh_cpu, plan, &opts.tuning, &mut progress).map_err(named)?;
                LoadedShard { buffer: Arc::new(Mutex::new(buf)), bytes_read: read }
            }
        };
        shards.push(loaded);
        base += e.nbytes();
        progress.part(base);
        progress.at(0).map_err(named)?;
    }
    progress.finish().map_err(named)?;
    Ok(ShardLoad { shards })
}

/// Reads one shard into its new buffer; returns the file bytes read.
fn read_shard(
    view: &TensorView,
    buf: &mut Buffer,
    fresh_cpu: bool,
    plan: &ShardPlan,
    tuning: &Tuning,
    progress: &mut Progress<'_>,
) -> Result<u64> {
    let policy = plan.policy;
    let read = AtomicU64::new(0);
    let reader = |off: u64, d: &mut [u8]| {
        read.fetch_add(view.read_at_with(off, d, &policy)?, Ordering::Relaxed);
        Ok(())
    };
    match buf.memory_mut() {
        Memory::Cuda(dev) => {
            let mut sink = |done: u64, _t: u64| progress.at(done).is_err();
            transfer(view.nbytes(), dev, &ring_config(tuning), reader, Some(&mut sink))?;
            Ok(read.into_inner())
        }
        _ => {
            let dst = buf.host_bytes_mut().expect("host memory");
            let prepare: Option<engine::bulk::Prepare<'_>> =
                if fresh_cpu { Some(&crate::place::host::populate_write) } else { None };
            let runs = view.runs();
            match (view.file_and_offset(), runs) {
                // A strided shard of a file: its runs merged under the policy, submitted as read sets.
                (Some((file, first)), Some(runs)) if !view.is_contiguous() => {
                    if let Some(p) = prepare {
                        p(dst);
                    }
                    let data_start = first - runs.start;
                    let pieces = runs.pieces(0, runs.nbytes()).map(|(src, d, n)| (data_start + src, d, n));
                    let failed = |f: ReadFailure| read_failure(view, file, f);
                    engine::read_pieces(file.as_raw_fd(), pieces, dst, &policy, tuning, progress, &failed)
                }
                // Contiguous (or a memory buffer): parallel pieces.
                _ => {
                    engine::fill_host(dst, tuning, prepare, reader, progress)?;
                    Ok(read.into_inner())
                }
            }
        }
    }
}

/// A failed read of a shard's read set as the error a `pread` of it gives: `TRUNCATED` at the end of the
/// file, `IO` otherwise.
fn read_failure(view: &TensorView, file: &std::fs::File, f: ReadFailure) -> Error {
    match f.kind {
        engine::FailureKind::Eof { at } => Error::new(
            Status::Truncated,
            format!(
                "{}: tensor '{}': the file ends before byte {at} (it is now {} bytes; was it truncated after opening?)",
                view.file_display(),
                view.name(),
                file.metadata().map(|m| m.len().to_string()).unwrap_or_else(|_| "?".into())
            ),
        ),
        engine::FailureKind::Os(e) => {
            Error::new(Status::Io, format!("{}: tensor '{}': {e}", view.file_display(), view.name()))
        }
    }
}
