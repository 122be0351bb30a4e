//! The fit check made before any allocation: does `needed` fit in what the device has free now?
//!
//! Host memory (`cpu`, `cuda_host`): `needed ≤ MemAvailable − margin`, margin = max(512 MiB, 5 % of MemTotal),
//! so a put never drives the machine into swap or the OOM killer. CUDA: `needed ≤ free − 32 MiB` where
//! `free` is `cuMemGetInfo`'s in the device's context, the margin covering allocation granularity. Both
//! messages state the margin.
//!
//! Reading `MemAvailable` costs a few microseconds (open, read and parse `/proc/meminfo`), which dominated
//! puts of small tensors one by one. A reading is therefore reused for [`HOST_READING_TTL`], less every
//! byte that host fit checks have passed since it was taken (counted as taken whether or not it has been
//! freed since), so back-to-back puts cannot together overcommit what one reading saw.

use crate::device::{memory, memory_for_allocation, Device, DeviceKind};
use crate::error::{human_bytes, Error, FitFailure, Result};
use crate::forksafe::GlobalMutex;
use std::time::{Duration, Instant};

/// How long one reading of host memory serves fit checks.
pub const HOST_READING_TTL: Duration = Duration::from_millis(10);

pub(crate) struct HostReading {
    at: Instant,
    free: u64,
    total: u64,
    /// Bytes passed by host fit checks since `at`.
    taken: u64,
}

pub(crate) static HOST: GlobalMutex<Option<HostReading>> = GlobalMutex::new(None);

#[cfg(test)]
thread_local! {
    /// A test's host memory, (available, total), seen by fit checks made on its thread.
    static FAKE_HOST: std::cell::Cell<Option<(u64, u64)>> = const { std::cell::Cell::new(None) };
}

/// Makes host fit checks on this thread see `(available, total)` bytes (None: the real figures again). Unit
/// tests only: a fit check on the edge of the memory free now cannot be made against the real figures.
#[cfg(test)]
pub(crate) fn fake_host_memory_here(v: Option<(u64, u64)>) {
    FAKE_HOST.with(|c| c.set(v));
}

/// Host (available, total), from a fresh or recent reading, less what has been passed since.
fn host_memory() -> Result<(u64, u64)> {
    #[cfg(test)]
    if let Some(v) = FAKE_HOST.with(|c| c.get()) {
        return Ok(v);
    }
    let mut g = HOST.lock();
    if let Some(r) = g.as_ref().filter(|r| r.at.elapsed() < HOST_READING_TTL) {
        return Ok((r.free.saturating_sub(r.taken), r.total));
    }
    let (free, total) = memory(Device::CPU)?;
    *g = Some(HostReading { at: Instant::now(), free, total, taken: 0 });
    Ok((free, total))
}

/// Records `n` bytes passed by a host fit check against the current reading.
fn host_take(n: u64) {
    if let Some(r) = HOST.lock().as_mut() {
        r.taken = r.taken.saturating_add(n);
    }
}

/// Host safety margin for a machine with `total` bytes.
pub fn host_margin(total: u64) -> u64 {
    (512u64 << 20).max(total / 20)
}

/// CUDA safety margin.
pub const CUDA_MARGIN: u64 = 32 << 20;

/// Free bytes usable by a new allocation on `device` (after the margin) and the device's total.
pub fn usable(device: Device) -> Result<(u64, u64)> {
    let (free, total) = match device.kind {
        DeviceKind::CPU | DeviceKind::CUDA_HOST => host_memory()?,
        DeviceKind::CUDA => memory_for_allocation(device)?,
    };
    let margin = match device.kind {
        DeviceKind::CPU | DeviceKind::CUDA_HOST => host_margin(total),
        DeviceKind::CUDA => CUDA_MARGIN,
    };
    Ok((free.saturating_sub(margin), total))
}

/// Checks `needed` bytes for `what` (e.g. `tensor 'tokens'`) fit on `device`, else an `OutOfMemory` error
/// carrying the numbers, e.g. `tensor 'tokens' (19.09 GiB) does not fit on cuda:0: 4.20 GiB free of 24.00 GiB
/// (free device memory less a 32.00 MiB safety margin)`.
pub fn check(what: &str, needed: u64, device: Device) -> Result<()> {
    let (free, total) = usable(device)?;
    check_against(what, needed, device, free, total)?;
    if matches!(device.kind, DeviceKind::CPU | DeviceKind::CUDA_HOST) {
        host_take(needed);
    }
    Ok(())
}

/// What the "free" figure of [`usable`] means on `device` (of `total` bytes), for messages: e.g.
/// ` (free device memory less a 32.00 MiB safety margin)`.
pub fn margin_note(device: Device, total: u64) -> String {
    match device.kind {
        DeviceKind::CPU | DeviceKind::CUDA_HOST => {
            format!(" (available host memory less a {} safety margin)", human_bytes(host_margin(total)))
        }
        DeviceKind::CUDA => format!(" (free device memory less a {} safety margin)", human_bytes(CUDA_MARGIN)),
    }
}

/// The comparison and message, separated for testing.
pub fn check_against(what: &str, needed: u64, device: Device, free: u64, total: u64) -> Result<()> {
    if needed <= free {
        return Ok(());
    }
    Err(Error::out_of_memory(
        format!(
            "{what} ({}) does not fit on {device}: {} free of {}{}",
            human_bytes(needed),
            human_bytes(free),
            human_bytes(total),
            margin_note(device, total)
        ),
        FitFailure { needed, free, total, device: device.to_string() },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Status;

    #[test]
    fn message_has_the_numbers() {
        let gib = 1u64 << 30;
        let e = check_against("tensor 'tokens'", 19 * gib + gib / 10, Device::cuda(0), 4 * gib + gib / 5, 24 * gib)
            .unwrap_err();
        assert_eq!(e.status(), Status::OutOfMemory);
        assert_eq!(
            e.message(),
            "tensor 'tokens' (19.10 GiB) does not fit on cuda:0: 4.20 GiB free of 24.00 GiB (free device memory \
             less a 32.00 MiB safety margin)"
        );
        let f = e.fit().unwrap();
        assert_eq!(
            (f.needed, f.free, f.total, f.device.as_str()),
            (19 * gib + gib / 10, 4 * gib + gib / 5, 24 * gib, "cuda:0")
        );
        assert!(check_against("x", 10, Device::CPU, 10, 100).is_ok());
    }

    #[test]
    fn passed_checks_count_against_a_reused_reading() {
        let (free, _) = usable(Device::CPU).unwrap();
        // Two checks of 60 % each within one reading's lifetime: the second sees the first's bytes as
        // taken. (A reading can expire in between on a slow machine; then the live value decides.)
        let part = free / 10 * 6;
        let t = Instant::now();
        check("first", part, Device::CPU).unwrap();
        let second = check("second", part, Device::CPU);
        if t.elapsed() < HOST_READING_TTL {
            assert_eq!(second.unwrap_err().status(), Status::OutOfMemory);
        }
    }

    #[test]
    fn host_check_is_live() {
        assert!(check("small", 4096, Device::CPU).is_ok());
        let e = check("huge", u64::MAX / 2, Device::CPU).unwrap_err();
        assert_eq!(e.status(), Status::OutOfMemory);
        assert!(e.message().contains("safety margin"), "{}", e.message());
    }
}
