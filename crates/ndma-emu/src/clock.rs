//! The emulated machine's clock: real (monotonic) or fake (virtual time that only delays advance), read by
//! the platform and by the NeuronCore reset model.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Jiffies per second of the emulated kernel (`HZ`).
pub const HZ: u64 = 1000;

/// The clocks start one second in, so jiffies are never 0 (a reset stamped at 0 would look "in progress").
const CLOCK_EPOCH_US: u64 = 1_000_000;

/// Which clock the platform runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockKind {
    /// The machine's monotonic clock; delays really wait.
    #[default]
    Real,
    /// Virtual time: a delay of `us` advances the clock by `us` and returns at once (a marker-aware delay
    /// whose word already holds its value returns without advancing it). With inline or deferred execution
    /// this makes poll counts and budgets exact and fast to check.
    Fake,
}

/// One system's clock.
#[derive(Debug)]
pub(crate) struct Clock {
    kind: ClockKind,
    epoch: Instant,
    coarse_epoch_ns: u64,
    fake_us: AtomicU64,
}

impl Clock {
    pub(crate) fn new(kind: ClockKind) -> Self {
        Clock { kind, epoch: Instant::now(), coarse_epoch_ns: coarse_ns(), fake_us: AtomicU64::new(CLOCK_EPOCH_US) }
    }

    pub(crate) fn kind(&self) -> ClockKind {
        self.kind
    }

    /// Microseconds since the (virtual) boot.
    pub(crate) fn now_us(&self) -> u64 {
        match self.kind {
            ClockKind::Real => CLOCK_EPOCH_US + self.epoch.elapsed().as_micros() as u64,
            // Relaxed: virtual time orders nothing else; each thread sees its own advances.
            ClockKind::Fake => self.fake_us.load(Ordering::Relaxed),
        }
    }

    /// `get_jiffies_64()`.
    pub(crate) fn jiffies(&self) -> u64 {
        match self.kind {
            // Like the kernel's jiffies, a tick counter that is cheap to read: the coarse clock is a plain
            // memory read in the vDSO, where a precise clock read costs as much as staging a small copy.
            ClockKind::Real => (CLOCK_EPOCH_US + (coarse_ns() - self.coarse_epoch_ns) / 1000) / (1_000_000 / HZ),
            ClockKind::Fake => self.now_us() / (1_000_000 / HZ),
        }
    }

    /// Advances a fake clock by `us` (no effect on a real clock).
    pub(crate) fn advance_us(&self, us: u64) {
        if self.kind == ClockKind::Fake {
            // Relaxed: see `now_us`.
            self.fake_us.fetch_add(us, Ordering::Relaxed);
        }
    }
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds (tick resolution, a few ns to read).
fn coarse_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC_COARSE exists on every Linux since 2.6.32.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
