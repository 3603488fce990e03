//! Latency samples and percentiles, and what `/proc` says about the machine
//! and the server process during a row (peak RSS, CPU time).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Latencies (microseconds) and errors of one operation kind.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// Latency of each measured success, in microseconds.
    pub latencies_us: Vec<u32>,
    /// Unexpected outcomes (wrong status, transport or database error),
    /// measured window or not.
    pub errors: u64,
    /// The first few unexpected outcomes, for the report.
    pub error_samples: Vec<String>,
}

impl Samples {
    /// Records one success that took `elapsed`.
    pub fn record(&mut self, elapsed: Duration) {
        self.latencies_us
            .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
    }

    /// Records one unexpected outcome.
    pub fn error(&mut self, what: String) {
        self.errors += 1;
        if self.error_samples.len() < 5 && !self.error_samples.contains(&what) {
            self.error_samples.push(what);
        }
    }

    /// Adds another client's samples.
    pub fn merge(&mut self, other: Samples) {
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        for s in other.error_samples {
            if self.error_samples.len() < 5 && !self.error_samples.contains(&s) {
                self.error_samples.push(s);
            }
        }
    }

    /// Percentiles in milliseconds: p50, p95, p99, max (nearest rank).
    pub fn percentiles_ms(&mut self) -> [f64; 4] {
        self.latencies_us.sort_unstable();
        let v = &self.latencies_us;
        let at = |q: f64| -> f64 {
            if v.is_empty() {
                return f64::NAN;
            }
            let rank = (q * v.len() as f64).ceil() as usize;
            f64::from(v[rank.clamp(1, v.len()) - 1]) / 1000.0
        };
        [at(0.50), at(0.95), at(0.99), at(1.0)]
    }
}

/// USER_HZ: /proc reports CPU time in these ticks (100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU time of a process (user + system), in seconds; None if unreadable.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// Machine-wide (busy, total) CPU ticks over all cores, from /proc/stat.
pub fn host_cpu_ticks() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?; // idle + iowait
    Some((total - idle, total))
}

/// The 1-minute load average.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Resident set size of a process in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time over a measured window: of the server process and of the machine.
pub struct CpuWindow {
    pid: Option<u32>,
    server0: Option<f64>,
    host0: Option<(u64, u64)>,
}

impl CpuWindow {
    /// Starts the window (`pid`: the server, if any).
    pub fn start(pid: Option<u32>) -> CpuWindow {
        CpuWindow {
            pid,
            server0: pid.and_then(process_cpu_seconds),
            host0: host_cpu_ticks(),
        }
    }

    /// (server CPU seconds, machine (busy, total) ticks) since the start.
    pub fn finish(&self) -> (Option<f64>, Option<(u64, u64)>) {
        let server = match (self.pid.and_then(process_cpu_seconds), self.server0) {
            (Some(b), Some(a)) => Some(b - a),
            _ => None,
        };
        let host = match (host_cpu_ticks(), self.host0) {
            (Some((b1, t1)), Some((b0, t0))) => Some((b1 - b0, t1 - t0)),
            _ => None,
        };
        (server, host)
    }
}

/// What one measured slice of a row saw; slices of a row add up.
#[derive(Debug, Clone, Default)]
pub struct Slice {
    /// Samples per operation label, in a stable order.
    pub ops: Vec<(&'static str, Samples)>,
    /// Measured seconds.
    pub seconds: f64,
    /// Server CPU seconds (server rows).
    pub server_cpu_s: Option<f64>,
    /// Machine (busy, total) CPU ticks.
    pub host_ticks: Option<(u64, u64)>,
    /// Peak server RSS (server rows).
    pub rss_peak_mib: Option<f64>,
}

impl Slice {
    /// Adds a later slice of the same row.
    pub fn merge(&mut self, other: Slice) {
        for (label, samples) in other.ops {
            match self.ops.iter_mut().find(|(l, _)| *l == label) {
                Some((_, mine)) => mine.merge(samples),
                None => self.ops.push((label, samples)),
            }
        }
        self.seconds += other.seconds;
        self.server_cpu_s = match (self.server_cpu_s, other.server_cpu_s) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.host_ticks = match (self.host_ticks, other.host_ticks) {
            (Some(a), Some(b)) => Some((a.0 + b.0, a.1 + b.1)),
            (a, b) => a.or(b),
        };
        self.rss_peak_mib = match (self.rss_peak_mib, other.rss_peak_mib) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// Unexpected outcomes over all operations.
    pub fn errors(&self) -> u64 {
        self.ops.iter().map(|(_, s)| s.errors).sum()
    }
}

/// Samples a process's RSS every 20 ms and keeps the peak.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak_kib: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak_kib = Arc::new(AtomicU64::new(rss_kib(pid).unwrap_or(0)));
        let (s, p) = (stop.clone(), peak_kib.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if let Some(kib) = rss_kib(pid) {
                    p.fetch_max(kib, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        RssSampler {
            stop,
            peak_kib,
            task,
        }
    }

    /// Stops sampling; the peak RSS in MiB.
    pub async fn finish(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }
}
