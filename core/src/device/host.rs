//! Host memory and CPU facts: `/proc/meminfo` on Linux, `sysconf` elsewhere on Unix.

/// Total and available host memory in bytes (`MemTotal`, `MemAvailable`).
pub fn memory() -> (u64, u64) {
    if let Ok(text) = std::fs::read_to_string("/proc/meminfo") {
        if let Some(pair) = parse_meminfo(&text) {
            return pair;
        }
    }
    sysconf_memory()
}

/// Parses `MemTotal` and `MemAvailable` (kB) out of a `/proc/meminfo` text.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        kb.checked_mul(1024)
    };
    let total = field("MemTotal:")?;
    let avail = field("MemAvailable:").or_else(|| field("MemFree:"))?;
    Some((total, avail.min(total)))
}

#[cfg(unix)]
fn sysconf_memory() -> (u64, u64) {
    // SAFETY: sysconf has no preconditions; negative results mean "unknown".
    let (pages, avail, size) = unsafe {
        (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_AVPHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE))
    };
    if pages <= 0 || size <= 0 {
        return (0, 0);
    }
    let total = (pages as u64).saturating_mul(size as u64);
    let free = if avail > 0 { (avail as u64).saturating_mul(size as u64) } else { total };
    (total, free)
}

#[cfg(not(unix))]
fn sysconf_memory() -> (u64, u64) {
    (0, 0)
}

/// A name for the host CPU (the `model name` of `/proc/cpuinfo` where present).
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("host CPU ({})", std::env::consts::ARCH))
}

/// The host's page size in bytes (`sysconf(_SC_PAGESIZE)`: 4 KiB on most x86-64 machines, 64 KiB on some
/// ARM servers), read once; 4096 where it cannot be read.
pub fn page_size() -> usize {
    static PAGE: crate::forksafe::InitOnce<usize> = crate::forksafe::InitOnce::new();
    *PAGE.get_or_init(|| {
        #[cfg(unix)]
        {
            // SAFETY: sysconf has no preconditions.
            let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            if p > 0 && (p as usize).is_power_of_two() {
                return p as usize;
            }
        }
        4096
    })
}

/// Number of CPUs this process may run on.
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two() && page_size() >= 4096);
    }

    #[test]
    fn meminfo_parsing() {
        let t = "MemTotal:       16000 kB\nMemFree:  100 kB\nMemAvailable:    8000 kB\n";
        assert_eq!(parse_meminfo(t), Some((16000 * 1024, 8000 * 1024)));
        assert_eq!(parse_meminfo("MemTotal: 10 kB\nMemFree: 4 kB\n"), Some((10240, 4096)));
        assert_eq!(parse_meminfo("garbage"), None);
    }

    #[test]
    fn live_memory_is_plausible() {
        let (total, avail) = memory();
        assert!(total > 64 << 20);
        assert!(avail <= total);
    }
}
