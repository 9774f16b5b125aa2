//! `EmuPlatform`: the [`ndma::Platform`] of an emulated machine — a real (or fake) clock, `udelay`, and
//! coherent DMA allocations from the emulated host DRAM.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ndma::{HostBuf, NdmaError, Platform};
use udma::DmaMemory;

use crate::HostMemory;

/// Jiffies per second of the emulated kernel (`HZ`).
pub const HZ: u64 = 1000;

/// The clocks start one second in, so jiffies are never 0 (a reset stamped at 0 would look "in progress").
const CLOCK_EPOCH_US: u64 = 1_000_000;

/// Delays at least this long sleep for most of their length instead of spinning, so a poller waiting out a
/// long first wait leaves the core to the engine worker.
const SLEEP_THRESHOLD_US: u64 = 200;
/// How much of a long delay is still spun (sleep overshoots).
const SPIN_TAIL_US: u64 = 100;

/// Which clock the platform runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockKind {
    /// The machine's monotonic clock; `udelay` really waits.
    #[default]
    Real,
    /// Virtual time: `udelay(us)` advances the clock by `us` and returns at once. With inline execution this
    /// makes poll counts and budgets exact and fast to check.
    Fake,
}

/// The platform of an emulated instance.
pub struct EmuPlatform {
    host: Arc<HostMemory>,
    clock: ClockKind,
    epoch: Instant,
    coarse_epoch_ns: u64,
    fake_us: AtomicU64,
    emulation: AtomicBool,
    prefetches: Mutex<Vec<(u64, u64)>>,
    fail_prefetch: AtomicBool,
}

impl EmuPlatform {
    /// A platform allocating from `host`, on `clock`. It reports itself as silicon (no ×100000 poll-budget
    /// scaling) until [`EmuPlatform::set_emulation`] says otherwise: the model's engine is faster than the
    /// budgets assume, so a real hang times out in milliseconds.
    pub fn new(host: Arc<HostMemory>, clock: ClockKind) -> Self {
        EmuPlatform {
            host,
            clock,
            epoch: Instant::now(),
            coarse_epoch_ns: coarse_ns(),
            fake_us: AtomicU64::new(CLOCK_EPOCH_US),
            emulation: AtomicBool::new(false),
            prefetches: Mutex::new(Vec::new()),
            fail_prefetch: AtomicBool::new(false),
        }
    }

    /// Turns the emulation-platform budget scaling (`narch_is_emu()`) on or off.
    pub fn set_emulation(&self, on: bool) {
        self.emulation.store(on, Ordering::Relaxed);
    }

    /// Advances a fake clock by `us` (no effect on a real clock).
    pub fn advance_us(&self, us: u64) {
        if self.clock == ClockKind::Fake {
            self.fake_us.fetch_add(us, Ordering::Relaxed);
        }
    }

    /// Every `(addr, len)` the op layer asked to prefetch, in order.
    pub fn prefetches(&self) -> Vec<(u64, u64)> {
        crate::lock::lock(&self.prefetches).clone()
    }

    /// Makes later prefetches fail (the op layer must only log it).
    pub fn set_fail_prefetch(&self, fail: bool) {
        self.fail_prefetch.store(fail, Ordering::Relaxed);
    }

    /// The host memory allocations come from.
    pub fn host(&self) -> &Arc<HostMemory> {
        &self.host
    }
}

impl Platform for EmuPlatform {
    fn jiffies(&self) -> u64 {
        match self.clock {
            // Like the kernel's jiffies, a tick counter that is cheap to read: the coarse clock is a plain
            // memory read in the vDSO, where a precise clock read costs as much as staging a small copy.
            ClockKind::Real => (CLOCK_EPOCH_US + (coarse_ns() - self.coarse_epoch_ns) / 1000) / (1_000_000 / HZ),
            ClockKind::Fake => self.now_us() / (1_000_000 / HZ),
        }
    }

    fn now_us(&self) -> u64 {
        match self.clock {
            ClockKind::Real => CLOCK_EPOCH_US + self.epoch.elapsed().as_micros() as u64,
            ClockKind::Fake => self.fake_us.load(Ordering::Relaxed),
        }
    }

    fn udelay(&self, us: u64) {
        match self.clock {
            ClockKind::Fake => {
                self.fake_us.fetch_add(us, Ordering::Relaxed);
            }
            ClockKind::Real => {
                if us < SLEEP_THRESHOLD_US {
                    if let Some(tsc) = tsc::Tsc::get() {
                        tsc.spin_us(us);
                        return;
                    }
                }
                let deadline = Instant::now() + Duration::from_micros(us);
                if us >= SLEEP_THRESHOLD_US {
                    std::thread::sleep(Duration::from_micros(us - SPIN_TAIL_US));
                }
                while Instant::now() < deadline {
                    std::hint::spin_loop();
                }
            }
        }
    }

    fn is_emulation(&self) -> bool {
        self.emulation.load(Ordering::Relaxed)
    }

    fn prefetch_user_pages(&self, addr: u64, len: u64) -> Result<(), String> {
        crate::lock::lock(&self.prefetches).push((addr, len));
        if self.fail_prefetch.load(Ordering::Relaxed) {
            return Err(format!("no user mapping at {addr:#x}"));
        }
        Ok(())
    }

    fn alloc_coherent(&self, len: usize) -> Result<HostBuf, NdmaError> {
        let buf = self.host.alloc(len, 256).map_err(|_| NdmaError::NoMemory { what: "host", size: len as u64 })?;
        // dma_alloc_coherent hands out zeroed memory.
        buf.fill(0, len, 0).map_err(NdmaError::from)?;
        Ok(Arc::new(buf))
    }

    fn current_mm(&self) -> Option<Arc<dyn ndma::UserMm>> {
        crate::user::current_mm_on(&self.host)
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

/// A spin-delay clock on the CPU's invariant time-stamp counter: the marker poll's `udelay(1)` is the op
/// layer's tightest loop, and a TSC read costs ~13 ns here against ~37 ns for `Instant::now`, so delays
/// overshoot less.
mod tsc {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    #[derive(Debug, Clone, Copy)]
    pub(super) struct Tsc {
        ticks_per_us: f64,
    }

    static TSC: OnceLock<Option<Tsc>> = OnceLock::new();

    #[cfg(target_arch = "x86_64")]
    fn read() -> u64 {
        // SAFETY: RDTSC is available on every x86_64 CPU and has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[cfg(target_arch = "x86_64")]
    fn invariant() -> bool {
        // Leaf 0x8000_0007 EDX bit 8 is "invariant TSC" (CPUID is safe to execute on x86_64).
        let max_ext = core::arch::x86_64::__cpuid(0x8000_0000).eax;
        max_ext >= 0x8000_0007 && core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
    }

    impl Tsc {
        /// The calibrated counter, or `None` where there is no invariant TSC (then `Instant` is used).
        pub(super) fn get() -> Option<Tsc> {
            *TSC.get_or_init(|| {
                #[cfg(target_arch = "x86_64")]
                if invariant() {
                    let (t0, c0) = (Instant::now(), read());
                    while t0.elapsed() < Duration::from_millis(2) {
                        std::hint::spin_loop();
                    }
                    let (dt, dc) = (t0.elapsed(), read().wrapping_sub(c0));
                    let ticks_per_us = dc as f64 / (dt.as_nanos() as f64 / 1000.0);
                    return (ticks_per_us > 1.0).then_some(Tsc { ticks_per_us });
                }
                None
            })
        }

        /// Spins for at least `us` microseconds.
        pub(super) fn spin_us(&self, us: u64) {
            #[cfg(target_arch = "x86_64")]
            {
                let start = read();
                let ticks = (us as f64 * self.ticks_per_us).ceil() as u64;
                while read().wrapping_sub(start) < ticks {
                    std::hint::spin_loop();
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (us, self.ticks_per_us);
        }
    }
}
