//! Latency figures: a recorder of per-operation times (an HDR histogram, 3 significant figures) and the
//! round trip of one small synchronous copy — back to back, or each after the process has been idle for a
//! while (engine workers dozing or parked).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::error::{CliResult, OpContext};
use ndma_emu::test_utils::Window;

/// Median and 99th percentile of a set of timed operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// Median, ns.
    pub median_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Operations timed.
    pub samples: u64,
}

/// Records operation times.
pub struct Recorder(Histogram<u64>);

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty recorder: up to 60 s per operation, 3 significant figures.
    pub fn new() -> Recorder {
        // Constants the constructor accepts (1 ns … 60 s, 3 significant figures).
        Recorder(Histogram::new_with_max(60_000_000_000, 3).expect("valid histogram bounds"))
    }

    /// Records one operation's time.
    pub fn record(&mut self, d: Duration) {
        self.0.saturating_record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Median and p99 of what was recorded (zeros when nothing was).
    pub fn latency(&self) -> Latency {
        Latency {
            median_ns: self.0.value_at_quantile(0.5),
            p99_ns: self.0.value_at_quantile(0.99),
            samples: self.0.len(),
        }
    }
}

/// `n` synchronous copies of `size` bytes over window `w`, each timed from the call to its return (marker
/// seen, batch acked); with a non-zero `idle`, the process sleeps that long before each one. `warm` untimed
/// copies first. Every byte of the window is verified afterwards.
///
/// # Errors
///
/// Copy and verification failures.
pub fn roundtrip(w: &Window<'_>, size: u64, n: usize, warm: usize, idle: Duration, what: &str) -> CliResult<Latency> {
    for _ in 0..warm {
        w.copy(0, size).op_ctx(|| format!("{what} (warm-up)"))?;
    }
    w.reset_dst()?;
    let mut rec = Recorder::new();
    for _ in 0..n {
        if !idle.is_zero() {
            std::thread::sleep(idle);
        }
        let t0 = Instant::now();
        w.copy(0, size).op_ctx(|| what.to_string())?;
        rec.record(t0.elapsed());
    }
    w.verify(what, true)?;
    Ok(rec.latency())
}
