//! Helpers the benchmarks share (each uses some).

#![allow(dead_code)]

/// A field of `/proc/self/status` in KiB (`VmRSS:`, `VmHWM:`); 0 where
/// there is none.
pub fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The process's resident memory in KiB.
pub fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// The machine's load average (1, 5 and 15 minutes): what else ran.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
