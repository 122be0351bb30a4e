//! Running a shard plan: every device fit-checked first, then one contiguous buffer per shard, filled through
//! the transfer engine from the shards' runs only. The host parts of one tensor are read together
//! (one [`ReadPlan`](crate::engine::ReadPlan) of their views, executed by [`engine::read_scatter`]): the runs of every part in file order, merged across neighbouring shards this
//! process owns while the policy's over-read bound holds (the four column shards of a row are one read),
//! read by several threads, each with a read set at the queue depth. A CUDA part goes through the pinned
//! staging ring; a part of a memory buffer is copied in parallel pieces ([`engine::fill_host`]).

use super::plan::{group_plan, scatter_group, ShardPlan};
use crate::device::DeviceKind;
use crate::engine::staging::{ring_config, transfer};
use crate::engine::{self, Progress, Tuning};
use crate::error::{Error, Result, Status};
use crate::file::View;
use crate::place::buffer::{Buffer, Memory};
use crate::place::{buffer_to, Target};
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
    /// What the run leaves in the page cache ([`crate::cache`]): `Keep` (the default), `Drop` (the pages
    /// of its files that the run brought in are given back when it ends, failed or not) or `Bypass` (the
    /// host parts, and the CUDA parts that are contiguous in the file, are read with direct I/O, `O_DIRECT`
    /// into aligned staging, where the file system allows it: nothing enters the cache; where it does not,
    /// and for a strided CUDA part, read as with `Drop`; the file's read-engine report says which).
    pub page_cache: crate::cache::PageCache,
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
    // The page-cache policy: the cache of every file the run reads, sampled now, restored when it ends.
    let _cache = crate::cache::CacheScope::begin(
        opts.page_cache,
        plan.entries.iter().filter(|e| e.copy_of.is_none()).filter_map(|e| e.view.file_and_offset().map(|f| f.0)),
    );
    let direct = crate::cache::DirectFiles::for_policy(opts.page_cache);
    let mut progress = Progress::new(opts.progress, total);
    let mut shards: Vec<Option<LoadedShard>> = vec![None; plan.entries.len()];
    let mut base = 0u64;
    let mut from = 0usize;
    while from < plan.entries.len() {
        // The entries of one tensor: its host parts read from the file together, then the others in order.
        let tensor = plan.entries[from].tensor;
        let to = from + plan.entries[from..].iter().take_while(|e| e.tensor == tensor).count();
        let entries = &plan.entries[from..to];
        let group = scatter_group(entries);
        // Host copies of a part read in the group (another owned position along a replicated axis) are
        // written by the thread that reads the part; copies to CUDA devices are made after, below.
        let copies: Vec<(usize, usize)> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.device.kind != DeviceKind::CUDA)
            .filter_map(|(k, e)| {
                let j = e.copy_of?;
                Some((k, group.iter().position(|&g| from + g == j)?))
            })
            .collect();
        if !group.is_empty() {
            progress.part(base);
            let got = read_group(entries, &group, &copies, plan, &opts.tuning, &mut progress, direct.as_ref())
                .map_err(named)?;
            for (k, loaded) in group.iter().copied().chain(copies.iter().map(|c| c.0)).zip(got) {
                base += entries[k].nbytes();
                shards[from + k] = Some(loaded);
            }
            progress.part(base);
            progress.at(0).map_err(named)?;
        }
        for (k, e) in entries.iter().enumerate() {
            if shards[from + k].is_some() {
                continue;
            }
            progress.part(base);
            let loaded = match e.copy_of {
                Some(j) => {
                    let src = shards[j].as_ref().expect("a copy's source comes first").buffer.lock();
                    let src = src.unwrap_or_else(|p| p.into_inner());
                    let copy = buffer_to(&src, Target::Device(e.device))?;
                    LoadedShard { buffer: Arc::new(Mutex::new(copy)), bytes_read: 0 }
                }
                None => {
                    let view = &e.view;
                    let mut buf = Buffer::alloc(view.name(), view.dtype(), view.shape(), view.nbytes(), e.device)?;
                    let fresh_cpu = e.device.kind == DeviceKind::CPU;
                    let read =
                        read_shard(view, &mut buf, fresh_cpu, plan, &opts.tuning, &mut progress, direct.as_ref())
                            .map_err(named)?;
                    LoadedShard { buffer: Arc::new(Mutex::new(buf)), bytes_read: read }
                }
            };
            shards[from + k] = Some(loaded);
            base += e.nbytes();
            progress.part(base);
            progress.at(0).map_err(named)?;
        }
        from = to;
    }
    progress.finish().map_err(named)?;
    Ok(ShardLoad { shards: shards.into_iter().map(|s| s.expect("every entry loaded")).collect() })
}

/// Reads the host parts `group` of one tensor (indices into `entries`, see [`scatter_group`]) into new
/// buffers with one [`ReadPlan`](crate::engine::ReadPlan) of their views: the runs of all of them in file order, merged across
/// neighbouring shards under the plan's policy, read by several threads at the queue depth. `copies`: (entry,
/// position in `group` of the part it copies), host copies filled from the same reads. Returns the loaded
/// shards in `group` order, each with its share of the bytes read, then the copies (0 bytes read). With
/// `direct` (page-cache policy `bypass`) the requests are read with direct I/O where the file allows it.
fn read_group(
    entries: &[super::plan::ShardEntry],
    group: &[usize],
    copies: &[(usize, usize)],
    plan: &ShardPlan,
    tuning: &Tuning,
    progress: &mut Progress<'_>,
    direct: Option<&crate::cache::DirectFiles>,
) -> Result<Vec<LoadedShard>> {
    let rp = group_plan(entries, group, &plan.policy, tuning)?;
    let alloc = |k: usize| {
        let (v, device) = (&entries[k].view, entries[k].device);
        Buffer::alloc(v.name(), v.dtype(), v.shape(), v.nbytes(), device)
    };
    let mut bufs: Vec<Buffer> = group.iter().map(|&k| alloc(k)).collect::<Result<_>>()?;
    let mut copy_bufs: Vec<Buffer> = copies.iter().map(|&(k, _)| alloc(k)).collect::<Result<_>>()?;
    // Fresh cpu pages are populated by the thread that fills them (pinned `cuda_host` memory already is).
    let populate: engine::bulk::Prepare<'_> = &crate::place::host::populate_write;
    let prepare = |k: usize| (entries[k].device.kind == DeviceKind::CPU).then_some(populate);
    const HOST: &str = "a host device's buffer is host memory";
    let mut dsts: Vec<engine::ScatterDst<'_>> = group
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&k, b)| engine::ScatterDst {
            bytes: b.host_bytes_mut().expect(HOST),
            prepare: prepare(k),
            copies: Vec::new(),
        })
        .collect();
    for (&(k, g), b) in copies.iter().zip(copy_bufs.iter_mut()) {
        dsts[g].copies.push((b.host_bytes_mut().expect(HOST), prepare(k)));
    }
    rp.execute_group_with(0, &mut dsts, progress, direct)?;
    drop(dsts);
    let read = rp.group_per_slice(0).iter().copied().chain(copies.iter().map(|_| 0));
    Ok(bufs
        .drain(..)
        .chain(copy_bufs.drain(..))
        .zip(read)
        .map(|(b, bytes_read)| LoadedShard { buffer: Arc::new(Mutex::new(b)), bytes_read })
        .collect())
}

/// Reads one shard that is not part of a scatter group (a CUDA part through the staging ring, a part of a
/// memory buffer in parallel pieces) into its new buffer; returns the file bytes read. With `direct`
/// (page-cache policy `bypass`) a contiguous CUDA part of a file that allows `O_DIRECT` is read with direct
/// I/O into each reader's aligned staging, then into the ring's slabs.
fn read_shard(
    view: &View,
    buf: &mut Buffer,
    fresh_cpu: bool,
    plan: &ShardPlan,
    tuning: &Tuning,
    progress: &mut Progress<'_>,
    direct: Option<&crate::cache::DirectFiles>,
) -> Result<u64> {
    let policy = plan.policy;
    let read = AtomicU64::new(0);
    // The direct twin and the tensor's first byte, for a contiguous view of a file under bypass.
    let twin = match (direct, view.file_and_offset()) {
        (Some(d), Some((file, at))) if view.is_contiguous() => d.get(file).map(|t| (t, at)),
        _ => None,
    };
    let what = || format!("{}: tensor '{}'", view.file_display(), view.name());
    let reader = |off: u64, d: &mut [u8]| {
        match &twin {
            Some((t, at)) => {
                crate::cache::read_direct_here(t, at + off, d, &what)?;
                read.fetch_add(d.len() as u64, Ordering::Relaxed);
            }
            None => {
                read.fetch_add(view.read_at_with(off, d, &policy)?, Ordering::Relaxed);
            }
        }
        Ok(())
    };
    match buf.memory_mut() {
        Memory::Cuda(dev) => {
            let mut sink = |done: u64, _t: u64| progress.at(done).is_err();
            let r = transfer(view.nbytes(), dev, &ring_config(tuning), reader, Some(&mut sink));
            // The reader threads' staging went with them; a one-slab part was read on this thread.
            crate::cache::release_staging_here();
            r?;
            Ok(read.into_inner())
        }
        _ => {
            let dst = buf.host_bytes_mut().expect("host memory");
            let prepare: Option<engine::bulk::Prepare<'_>> =
                if fresh_cpu { Some(&crate::place::host::populate_write) } else { None };
            // A memory buffer (file-backed host parts are read by `read_group`): parallel pieces.
            let r = engine::fill_host(dst, tuning, prepare, reader, progress);
            crate::cache::release_staging_here();
            r?;
            Ok(read.into_inner())
        }
    }
}
