//! Helpers the benchmarks share (each uses some).

#![allow(dead_code)]

pub mod results;

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

/// The peak resident memory of one stretch of a run, above what was
/// resident when it began, so that what ran before it (a setup's peak)
/// does not count. On Linux the kernel's high-water mark (`VmHWM`) is reset
/// to the current resident size by writing "5" to `/proc/self/clear_refs`;
/// where that is refused or does not take, `VmRSS` is sampled every
/// millisecond on a thread instead (which can miss a peak shorter than
/// that).
pub struct PeakRss {
    before_kib: u64,
    sampler: Option<Sampler>,
}

struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl PeakRss {
    /// Resets the high-water mark to the resident size now; false where
    /// that is refused or does not take.
    pub fn reset_hwm() -> bool {
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        // After a reset the mark is the resident size at that moment; a
        // mark well above the resident size now means it did not take.
        reset && status_kib("VmHWM:") <= rss_kib() + 1024
    }

    /// Starts the stretch now.
    pub fn start() -> PeakRss {
        let reset = PeakRss::reset_hwm();
        let before_kib = rss_kib();
        if reset {
            return PeakRss {
                before_kib,
                sampler: None,
            };
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = rss_kib();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_kib());
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            peak
        });
        PeakRss {
            before_kib,
            sampler: Some(Sampler { stop, thread }),
        }
    }

    /// Ends the stretch: (resident before, peak during) in KiB.
    pub fn finish(self) -> (u64, u64) {
        let peak = match self.sampler {
            None => status_kib("VmHWM:"),
            Some(s) => {
                s.stop.store(true, std::sync::atomic::Ordering::Relaxed);
                s.thread.join().unwrap_or(0).max(rss_kib())
            }
        };
        (self.before_kib, peak.max(self.before_kib))
    }
}

/// p50 and p99 of some samples (any unit), by nearest rank.
pub fn p50_p99(samples: &[u64]) -> (u64, u64) {
    let mut v = samples.to_vec();
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (at(0.50), at(0.99))
}

/// CPU time this process has used so far (user and system, every thread),
/// in seconds: what a stretch cost whatever else the machine ran.
pub fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The fields after the command name (which may hold spaces), from the
    // third: utime and stime are the 14th and 15th, in clock ticks.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // 100 ticks a second on Linux (USER_HZ).
    (ticks(11) + ticks(12)) / 100.0
}
