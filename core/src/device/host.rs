//! Host memory and CPU facts, from the platform layer ([`crate::os`]): `/proc/meminfo` on Linux, `sysconf`
//! elsewhere on Unix, `GlobalMemoryStatusEx` on Windows.

/// Total and available host memory in bytes (`MemTotal`, `MemAvailable`; `ullTotalPhys`, `ullAvailPhys` on
/// Windows); (0, 0) where the system does not say.
pub fn memory() -> (u64, u64) {
    crate::os::host_memory().unwrap_or((0, 0))
}

/// Parses `MemTotal` and `MemAvailable` (kB) out of a `/proc/meminfo` text.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    crate::os::parse_meminfo(text)
}

/// A name for the host CPU (the `model name` of `/proc/cpuinfo`, `PROCESSOR_IDENTIFIER` on Windows, where
/// present).
pub fn cpu_name() -> String {
    crate::os::cpu_name().unwrap_or_else(|| format!("host CPU ({})", std::env::consts::ARCH))
}

/// The host's page size in bytes (`sysconf(_SC_PAGESIZE)`: 4 KiB on most x86-64 machines, 64 KiB on some
/// ARM servers; `GetSystemInfo` on Windows), read once; 4096 where it cannot be read.
pub fn page_size() -> usize {
    static PAGE: crate::forksafe::InitOnce<usize> = crate::forksafe::InitOnce::new();
    *PAGE.get_or_init(crate::os::page_size)
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
