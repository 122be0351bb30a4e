//! Running a shard plan: every device fit-checked first, then one contiguous buffer per shard, filled by the
//! parallel readers (host targets) or the pinned staging ring (CUDA) from the shard's runs only.

use super::plan::ShardPlan;
use crate::device::DeviceKind;
use crate::error::{Error, Result, Status};
use crate::place::buffer::{Buffer, Memory};
use crate::place::parallel::{default_threads, parallel_fill, DEFAULT_CHUNK};
use crate::place::staging::{transfer, RingConfig};
use crate::place::{buffer_to, Target};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Options of a run; zeros mean the defaults.
#[derive(Default)]
pub struct ShardOptions<'a> {
    /// Reader threads (0: the CPUs available, at most 16).
    pub threads: usize,
    /// Bytes per parallel read task for host targets (0: 8 MiB) and per staging slab for CUDA (0: 16 MiB).
    pub chunk: usize,
    /// Page-locked staging for CUDA targets (0: 256 MiB).
    pub staging_bytes: usize,
    /// Progress sink (bytes placed, total) → true to cancel; called at a bounded rate, last with
    /// `done == total`.
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
pub fn run(plan: &ShardPlan, mut opts: ShardOptions<'_>) -> Result<ShardLoad> {
    crate::place::placed::check_devices(&plan.devices, "shard load")?;
    let total = plan.shard_bytes();
    let threads = if opts.threads == 0 { default_threads() } else { opts.threads };
    let cancelled = || Error::new(Status::Cancelled, "shard load cancelled by the progress callback; nothing kept");
    // Read-ahead off on every file the plan reads: it would take pages past the end of each shard's range.
    let mut guards: Vec<(String, crate::file::ReadaheadOff)> = Vec::new();
    for e in plan.entries.iter().filter(|e| e.copy_of.is_none() && e.nbytes() > 0) {
        if !guards.iter().any(|(f, _)| f == e.view.file_display()) {
            guards.push((e.view.file_display().to_string(), e.view.readahead_off()));
        }
    }
    let mut shards: Vec<LoadedShard> = Vec::with_capacity(plan.entries.len());
    let mut base = 0u64;
    let mut last_call = std::time::Instant::now();
    for e in &plan.entries {
        let view = &e.view;
        let loaded = match e.copy_of {
            Some(j) => {
                let src = shards[j].buffer.lock().unwrap_or_else(|p| p.into_inner());
                LoadedShard { buffer: Arc::new(Mutex::new(buffer_to(&src, Target::Device(e.device))?)), bytes_read: 0 }
            }
            None => {
                let mut buf = Buffer::alloc(view.name(), view.dtype(), view.shape(), view.nbytes(), e.device)?;
                let read = AtomicU64::new(0);
                let policy = plan.policy;
                let reader = |off: u64, d: &mut [u8]| {
                    read.fetch_add(view.read_at_with(off, d, &policy)?, Ordering::Relaxed);
                    Ok(())
                };
                let has_progress = opts.progress.is_some();
                let mut sink = |done: u64, _t: u64| match opts.progress.as_mut() {
                    Some(p) => p(base + done, total),
                    None => false,
                };
                let sink: Option<&mut dyn FnMut(u64, u64) -> bool> = if has_progress { Some(&mut sink) } else { None };
                let fresh_cpu = e.device.kind == DeviceKind::CPU;
                let r = match buf.memory_mut() {
                    Memory::Cuda(dev) => {
                        let cfg = RingConfig { threads, staging_bytes: opts.staging_bytes, slab_bytes: opts.chunk };
                        transfer(view.nbytes(), dev, &cfg, reader, sink)
                    }
                    _ => {
                        let dst = buf.host_bytes_mut().expect("host memory");
                        let chunk = if opts.chunk == 0 { DEFAULT_CHUNK } else { opts.chunk };
                        let fill = |off: u64, d: &mut [u8]| {
                            if fresh_cpu {
                                crate::place::host::populate_write(d);
                            }
                            reader(off, d)
                        };
                        parallel_fill(dst, threads, chunk, fill, sink)
                    }
                };
                r.map_err(|err| if err.status() == Status::Cancelled { cancelled() } else { err })?;
                LoadedShard { buffer: Arc::new(Mutex::new(buf)), bytes_read: read.into_inner() }
            }
        };
        shards.push(loaded);
        base += e.nbytes();
        let due = base == total || last_call.elapsed() >= std::time::Duration::from_millis(20);
        if let (true, Some(p)) = (due, opts.progress.as_mut()) {
            last_call = std::time::Instant::now();
            if p(base, total) {
                return Err(cancelled());
            }
        }
    }
    if total == 0 {
        if let Some(p) = opts.progress.as_mut() {
            if p(0, 0) {
                return Err(cancelled());
            }
        }
    }
    Ok(ShardLoad { shards })
}
