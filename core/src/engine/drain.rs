//! The engine's device → host side for streaming consumers: the bytes of CUDA memory handed out slab by slab
//! through the page-locked staging pool, several copies in flight on a stream of their own.
//!
//! ```text
//!   stream (1, non-blocking)                         calling thread
//!   cuMemcpyDtoHAsync into slab k ──► event ──► wait ──► consume(offset, slab k) ──► slab k reused
//!   (slabs k+1 .. k+count-1 copying meanwhile)
//! ```
//!
//! The writer uses it for device sources: host memory stays bounded by the ring (at most `staging` bytes of
//! slabs, whatever the tensor's size), the driver copies only into page-locked memory, and the consumer (a
//! positioned write) of slab k overlaps the copies of the slabs after it. Every copy goes through
//! [`Stream::copy_to_host_async`], whose [`InFlight`] keeps an error a query or a wait saw: an error is
//! never lost and never counted as success. On an error (a copy's, or the consumer's) the copies still
//! queued are waited for before this returns, so nothing writes into a slab afterwards; the slabs go back to
//! the pool (a slab whose copy failed is released by `InFlight` once the copy is known to have ended).

use super::staging::{geometry, give_slab, ring_config, take_slab};
use super::Tuning;
use crate::device::cuda::{DeviceMemory, InFlight, PinnedHostMemory, Stream};
use crate::error::Result;
use std::collections::VecDeque;

/// Copies bytes `[src_off, src_off + len)` of `src` to host memory through the staging ring and calls
/// `consume(offset within the range, bytes)` for each slab's worth, in order, once its copy has completed.
/// The ring's geometry comes from `tuning` as for host-to-device transfers (`chunk`: slab size, default 16
/// MiB; `staging`: ring size, default 256 MiB; fewer and smaller slabs for small ranges), less one slab (the
/// headroom that keeps the whole transfer within `staging`) when there are more than two. The first error (a
/// driver error as `DEVICE_ERROR`, or the consumer's) ends the transfer and is returned.
pub fn device_to_host_slabs(
    src: &DeviceMemory,
    src_off: usize,
    len: usize,
    tuning: &Tuning,
    consume: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let cfg = ring_config(&Tuning { threads: 1, ..*tuning });
    let (slab_len, count) = geometry(len as u64, &cfg);
    // One slab's worth of the budget is left for everything else the transfer holds (the stream, events, the
    // consumer's own bookkeeping), so the host memory it takes stays within `staging`.
    let count = if count > 2 { count - 1 } else { count };
    let stream = Stream::new(src.ordinal())?;
    let mut free: Vec<PinnedHostMemory> = Vec::with_capacity(count);
    let mut queued: VecDeque<(usize, usize, InFlight<PinnedHostMemory>)> = VecDeque::with_capacity(count);
    let mut next = 0usize;
    let mut result: Result<()> = Ok(());
    while result.is_ok() && (next < len || !queued.is_empty()) {
        // Keep up to `count` copies in flight.
        while result.is_ok() && next < len && queued.len() < count {
            let n = (len - next).min(slab_len);
            let slab = match free.pop() {
                Some(s) => s,
                None => match take_slab(src.ordinal(), slab_len) {
                    Ok(s) => s,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                },
            };
            match stream.copy_to_host_async(src, src_off + next, slab, 0, n) {
                Ok(f) => queued.push_back((next, n, f)),
                Err(e) => result = Err(e),
            }
            next += n;
        }
        let Some((off, n, f)) = queued.pop_front() else { break };
        match f.wait() {
            Ok(slab) => {
                if result.is_ok() {
                    result = consume(off as u64, &slab[..n]);
                }
                free.push(slab);
            }
            Err(e) => {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
    }
    // On an error: wait for every copy still queued (an InFlight waits when dropped, and keeps its slab
    // when the copy failed) and keep the first error.
    for (_, _, f) in queued.drain(..) {
        match f.wait() {
            Ok(slab) => free.push(slab),
            Err(e) => {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
    }
    for slab in free {
        give_slab(slab);
    }
    result
}
