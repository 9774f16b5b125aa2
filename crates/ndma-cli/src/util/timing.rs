//! Timing: repetitions of a measured operation, the single-thread memcpy baseline measured in the same run,
//! and throughput arithmetic. GB/s are decimal (10⁹ bytes per second).

use std::hint::black_box;
use std::time::{Duration, Instant};

/// How often to repeat a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Samples taken; the best (shortest) one counts.
    pub samples: u32,
    /// Operations per sample (so small copies are timed over a useful span).
    pub iters: u64,
}

impl Plan {
    /// Samples × iterations for copies of `size` bytes: each sample moves about 32 MiB (at least one copy,
    /// at most 4096); `samples` of them.
    pub fn for_size(size: u64, samples: u32) -> Plan {
        Plan { samples: samples.max(1), iters: ((32u64 << 20) / size.max(1)).clamp(1, 4096) }
    }
}

/// The per-operation times of a measurement's samples.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    /// No samples yet.
    pub fn new() -> Samples {
        Samples::default()
    }

    /// Adds one sample's time per operation.
    pub fn push(&mut self, per_op: Duration) {
        self.0.push(per_op);
    }

    /// The shortest sample (`Duration::MAX` without samples).
    pub fn best(&self) -> Duration {
        self.0.iter().copied().min().unwrap_or(Duration::MAX)
    }

    /// The median sample (the upper one of an even count; `Duration::MAX` without samples).
    pub fn median(&self) -> Duration {
        let mut v = self.0.clone();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(Duration::MAX)
    }
}

/// Runs `op` `plan.iters` times per sample, `plan.samples` samples, and returns the best time per
/// operation. The first error stops the measurement.
///
/// # Errors
///
/// Whatever `op` returns.
pub fn best_per_op<E>(plan: Plan, mut op: impl FnMut() -> Result<(), E>) -> Result<Duration, E> {
    let mut best = Duration::MAX;
    for _ in 0..plan.samples {
        let t0 = Instant::now();
        for _ in 0..plan.iters {
            op()?;
        }
        best = best.min(t0.elapsed() / plan.iters as u32);
    }
    Ok(best)
}

/// GB/s of `bytes` moved in `t`.
pub fn gbps(bytes: u64, t: Duration) -> f64 {
    let s = t.as_secs_f64();
    if s > 0.0 {
        bytes as f64 / s / 1e9
    } else {
        f64::INFINITY
    }
}

/// Two warmed (every page touched) byte vectors for the single-thread `copy_from_slice` baseline.
#[derive(Default)]
pub struct Baseline {
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl Baseline {
    /// An empty baseline; buffers grow on demand.
    pub fn new() -> Self {
        Baseline::default()
    }

    /// Makes the buffers at least `size` bytes, every page touched, and copies `size` bytes once (warm-up).
    pub fn prepare(&mut self, size: u64) {
        let n = size as usize;
        if self.src.len() < n {
            // Non-zero fills: a zeroed allocation could stay unbacked and fault inside the timed copy.
            self.src = vec![0x5a; n];
            self.dst = vec![0xa5; n];
        }
        self.copy_once(size);
    }

    /// One `copy_from_slice` of `size` bytes (at most the prepared size).
    pub fn copy_once(&mut self, size: u64) {
        let n = (size as usize).min(self.src.len());
        black_box(&mut self.dst[..n]).copy_from_slice(black_box(&self.src[..n]));
    }

    /// `count` copies of `size` bytes cycling over `slots` successive slots, each a separate
    /// `copy_from_slice`.
    pub fn stream_once(&mut self, size: u64, count: u64, slots: u64) {
        let n = size as usize;
        let slots = slots.max(1).min((self.src.len() / n.max(1)) as u64).max(1);
        for i in 0..count {
            let off = (i % slots) as usize * n;
            let end = (off + n).min(self.src.len());
            black_box(&mut self.dst[off..end]).copy_from_slice(black_box(&self.src[off..end]));
        }
    }

    /// Best time of one `copy_from_slice` of `size` bytes (after a warm-up copy).
    pub fn per_copy(&mut self, size: u64, plan: Plan) -> Duration {
        self.prepare(size);
        best_per_op::<()>(plan, || {
            self.copy_once(size);
            Ok(())
        })
        .unwrap_or(Duration::MAX)
    }

    /// Releases the buffers.
    pub fn release(&mut self) {
        *self = Baseline::default();
    }
}
