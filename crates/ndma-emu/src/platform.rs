//! `EmuPlatform`: the [`ndma::Platform`] of an emulated machine — the system's (real or fake) clock, delays
//! that watch the marker and execute pending engine work while they wait (`delay`), and coherent DMA
//! allocations from the emulated host DRAM.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use ndma::{HostBuf, NdmaError, Platform};
use udma::DmaMemory;

use crate::clock::{Clock, ClockKind};
use crate::delay::{self, Engines, WaitTiming, Watch};
use crate::engine::Assist;
use crate::HostMemory;

/// The platform of an emulated instance.
pub struct EmuPlatform {
    host: Arc<HostMemory>,
    clock: Arc<Clock>,
    /// The system's engines, which delays execute when nobody else does; `None` for a bare platform.
    engines: Option<Engines>,
    timing: AtomicU8,
    emulation: AtomicBool,
    prefetches: Mutex<Vec<(u64, u64)>>,
    fail_prefetch: AtomicBool,
}

impl std::fmt::Debug for EmuPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuPlatform")
            .field("clock", &self.clock.kind())
            .field("timing", &self.timing())
            .field("assist", &self.assist())
            .field("engines", &self.engines.is_some())
            .finish_non_exhaustive()
    }
}

impl EmuPlatform {
    /// A bare platform allocating from `host`, on a clock of its own, that knows no engines: its delays only
    /// wait. [`crate::EmuSystem::platform`] is the platform of a system, whose delays also run the system's
    /// pending engine work and whose clock the NeuronCore reset model reads.
    ///
    /// Either reports itself as silicon (no ×100000 poll-budget scaling) until [`EmuPlatform::set_emulation`]
    /// says otherwise, and uses [`WaitTiming::Marker`] until [`EmuPlatform::set_timing`].
    pub fn new(host: Arc<HostMemory>, clock: ClockKind) -> Self {
        Self::with(host, Arc::new(Clock::new(clock)), None)
    }

    /// The platform of a system: its clock and its engines.
    pub(crate) fn with(host: Arc<HostMemory>, clock: Arc<Clock>, engines: Option<Engines>) -> Self {
        EmuPlatform {
            host,
            clock,
            engines,
            timing: AtomicU8::new(WaitTiming::Marker as u8),
            emulation: AtomicBool::new(false),
            prefetches: Mutex::new(Vec::new()),
            fail_prefetch: AtomicBool::new(false),
        }
    }

    /// Turns the emulation-platform budget scaling (`narch_is_emu()`) on or off.
    pub fn set_emulation(&self, on: bool) {
        // Relaxed: a setting read on its own.
        self.emulation.store(on, Ordering::Relaxed);
    }

    /// Chooses how `delay_until` times a wait (default [`WaitTiming::Marker`]).
    pub fn set_timing(&self, timing: WaitTiming) {
        // Relaxed: a setting read on its own.
        self.timing.store(timing as u8, Ordering::Relaxed);
    }

    /// How `delay_until` times a wait.
    pub fn timing(&self) -> WaitTiming {
        // Relaxed: a setting read on its own.
        match self.timing.load(Ordering::Relaxed) {
            t if t == WaitTiming::Driver as u8 => WaitTiming::Driver,
            _ => WaitTiming::Marker,
        }
    }

    /// Whether a real-clock delay executes pending engine work itself when nobody else is executing it (on by
    /// default). Off, a waiting thread only watches its word while the engines' worker threads do all the
    /// work, so a completion always crosses from the worker's thread to the waiter's: a measurement switch
    /// (`ndma bench` reports the round trip both ways). Leave it on with [`crate::ExecPolicy::Deferred`],
    /// whose work only waiting threads execute. A fake-clock delay always executes pending work (virtual time
    /// passes only there).
    ///
    /// The engines' worker threads follow the setting too: with it on they leave work to the waiters (after
    /// a batch they go back to dozing rather than spin for the next doorbell); with it off they spin after
    /// each batch, since nobody else will execute the next one.
    pub fn set_assist(&self, on: bool) {
        if let Some(e) = &self.engines {
            e.activity.set_assist(on);
        }
    }

    /// Whether real-clock delays execute pending engine work (see [`EmuPlatform::set_assist`]); false for a
    /// bare platform, which knows no engines.
    pub fn assist(&self) -> bool {
        self.engines.as_ref().is_some_and(|e| e.activity.assist())
    }

    /// The clock the platform runs on.
    pub fn clock_kind(&self) -> ClockKind {
        self.clock.kind()
    }

    /// Advances a fake clock by `us` (no effect on a real clock).
    pub fn advance_us(&self, us: u64) {
        self.clock.advance_us(us);
    }

    /// Every `(addr, len)` the op layer asked to prefetch, in order.
    pub fn prefetches(&self) -> Vec<(u64, u64)> {
        crate::lock::lock(&self.prefetches).clone()
    }

    /// Makes later prefetches fail (the op layer must only log it).
    pub fn set_fail_prefetch(&self, fail: bool) {
        // Relaxed: a setting read on its own.
        self.fail_prefetch.store(fail, Ordering::Relaxed);
    }

    /// The host memory allocations come from.
    pub fn host(&self) -> &Arc<HostMemory> {
        &self.host
    }

    /// A delay of `us` µs watching `watch` (see `Platform::delay_until`).
    fn delay(&self, us: u64, watch: Option<Watch<'_>>) -> bool {
        match self.clock.kind() {
            ClockKind::Real => {
                let engines = self.engines.as_ref().filter(|_| self.assist());
                delay::wait(engines, us, watch, self.timing())
            }
            ClockKind::Fake => {
                // Virtual time passes only here, so no real thread's progress can be awaited: execute every
                // pending batch now (deterministic), then look.
                if let Some(e) = &self.engines {
                    while e.assist(true, &|| false) == Assist::Ran {}
                }
                if self.timing() == WaitTiming::Marker
                    && watch.is_some_and(|w| w.word.load(Ordering::Acquire) == w.value)
                {
                    return true;
                }
                self.clock.advance_us(us);
                // Acquire: pairs with the engine's Release store of the word.
                watch.is_some_and(|w| w.word.load(Ordering::Acquire) == w.value)
            }
        }
    }
}

impl Platform for EmuPlatform {
    fn jiffies(&self) -> u64 {
        self.clock.jiffies()
    }

    fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// Waits at least `us` µs (exactly `us` of virtual time on a fake clock), executing pending engine work
    /// meanwhile when nobody else does.
    fn udelay(&self, us: u64) {
        self.delay(us, None);
    }

    /// On a real clock see the crate's `delay` module: with [`WaitTiming::Marker`] it returns the moment the
    /// word holds `value`; with [`WaitTiming::Driver`] it waits the whole delay. Either executes pending engine
    /// work while it waits when nobody else does, and may outlast `us` while an engine is mid-batch (it then
    /// sleeps until the batch ends). On a fake clock it executes all pending work, then returns without
    /// advancing virtual time if the word holds `value` ([`WaitTiming::Marker`]), else advances it by `us`.
    fn delay_until(&self, word: &AtomicU32, value: u32, us: u64) -> bool {
        self.delay(us, Some(Watch { word, value }))
    }

    fn is_emulation(&self) -> bool {
        // Relaxed: a setting read on its own.
        self.emulation.load(Ordering::Relaxed)
    }

    fn prefetch_user_pages(&self, addr: u64, len: u64) -> Result<(), String> {
        crate::lock::lock(&self.prefetches).push((addr, len));
        // Relaxed: a setting read on its own.
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

    fn virt_to_phys(&self, cpu: *const u8, len: usize) -> Option<u64> {
        self.host.pa_of(cpu, len)
    }

    fn current_mm(&self) -> Option<Arc<dyn ndma::UserMm>> {
        crate::user::current_mm_on(&self.host)
    }

    /// What the model recorded the last time the engine stopped on this queue pair (halted on a fault, hung,
    /// or dropped a write) since its last `RST_Q`: [`crate::QueueStop`]'s text. `None` for a bare platform,
    /// an unknown device, engine or queue, or a queue the engine never stopped on.
    fn device_diagnostics(&self, device: u32, engine: u32, qid: u32) -> Option<String> {
        let core = self.engines.as_ref()?.cores.iter().find(|c| c.index == device as usize)?;
        core.engines.get(engine as usize)?.queue_stop(qid as usize).map(|s| s.to_string())
    }
}
