//! Per-engine counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of one engine's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Descriptor pairs executed.
    pub descriptors: u64,
    /// Bytes copied (posted writes count when they are enqueued).
    pub bytes: u64,
    /// Doorbell writes, valid or not.
    pub doorbells: u64,
    /// Faults recorded.
    pub faults: u64,
    /// Copies actually performed after merging contiguous descriptors.
    pub copies: u64,
    /// Of `copies`, those performed in groups of independent page-sized writes at once (only while the
    /// engine's recent destinations cover more than the caches hold).
    pub grouped: u64,
    /// Times the posted-write list was drained with something on it.
    pub drains: u64,
    /// Microseconds of per-descriptor delay the fault plan injected (as planned, not as measured).
    pub delayed_us: u64,
    /// Nanoseconds the bandwidth limit charged for copies (bytes / rate, as planned, not as measured).
    pub throttled_ns: u64,
    /// Times the engine's worker thread found work and executed it (`ExecPolicy::Threaded`); the rest ran on
    /// the threads that rang the doorbells or waited for the work.
    pub worker_runs: u64,
    /// Of those, the times the worker then spun for the next doorbell instead of dozing: only when waiting
    /// threads do not execute work (`EmuPlatform::set_assist`). Counted before `worker_runs`, so a snapshot
    /// that sees a run also sees whether it spun.
    pub worker_spins: u64,
    /// Times the worker, rung for work, found the engine's exec lock held by another thread and looked again
    /// after a nap instead of sleeping: the holder may be executing (it runs until idle), or only resetting a
    /// queue or reading the engine's state, and then nobody else would execute the work.
    pub worker_blocked: u64,
    /// Times work reached a queue while a reset of the NeuronCore owning it was in progress, and the queue
    /// hung instead of running it (the V2 bug; see [`crate::EmuDevice::reset_nc`]).
    pub reset_hangs: u64,
}

impl EngineStats {
    /// Field-wise `self − earlier`.
    pub fn since(&self, earlier: &EngineStats) -> EngineStats {
        EngineStats {
            descriptors: self.descriptors.wrapping_sub(earlier.descriptors),
            bytes: self.bytes.wrapping_sub(earlier.bytes),
            doorbells: self.doorbells.wrapping_sub(earlier.doorbells),
            faults: self.faults.wrapping_sub(earlier.faults),
            copies: self.copies.wrapping_sub(earlier.copies),
            grouped: self.grouped.wrapping_sub(earlier.grouped),
            drains: self.drains.wrapping_sub(earlier.drains),
            delayed_us: self.delayed_us.wrapping_sub(earlier.delayed_us),
            throttled_ns: self.throttled_ns.wrapping_sub(earlier.throttled_ns),
            worker_runs: self.worker_runs.wrapping_sub(earlier.worker_runs),
            worker_spins: self.worker_spins.wrapping_sub(earlier.worker_spins),
            worker_blocked: self.worker_blocked.wrapping_sub(earlier.worker_blocked),
            reset_hangs: self.reset_hangs.wrapping_sub(earlier.reset_hangs),
        }
    }
}

/// The live counters. All `Relaxed`: they are statistics, never used to order other memory accesses.
#[derive(Debug, Default)]
pub(crate) struct EngineCounters {
    /// Counted on the doorbell path, by the CPU side: on a line of its own, away from the worker's counters.
    pub(crate) doorbells: crate::engine::CacheAligned<AtomicU64>,
    pub(crate) descriptors: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) faults: AtomicU64,
    pub(crate) copies: AtomicU64,
    pub(crate) grouped: AtomicU64,
    pub(crate) drains: AtomicU64,
    pub(crate) delayed_us: AtomicU64,
    pub(crate) throttled_ns: AtomicU64,
    /// Written by the worker thread only (program order: `worker_spins`, then `worker_runs` with Release).
    pub(crate) worker_runs: AtomicU64,
    pub(crate) worker_spins: AtomicU64,
    pub(crate) worker_blocked: AtomicU64,
    pub(crate) reset_hangs: AtomicU64,
}

impl EngineCounters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        // Relaxed: a statistic (see the type doc).
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// [`EngineCounters::add`] for a counter with one writer at a time — written only under one lock (the
    /// engine's exec lock, or its register lock for `doorbells`) or only by the engine's worker thread: a
    /// plain load and store instead of a locked read-modify-write, since the lock or the single thread
    /// already orders the writes. A small copy counts half a dozen of these.
    pub(crate) fn bump(c: &AtomicU64, n: u64) {
        // Relaxed: a statistic; the one lock its writers hold, or its one writing thread, orders them.
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// The worker executed work and then spun (`spun`) or not.
    pub(crate) fn worker_ran(&self, spun: bool) {
        if spun {
            Self::bump(&self.worker_spins, 1);
        }
        // Release: a snapshot whose Acquire load reads this run also reads the spin count written before it.
        self.worker_runs.store(self.worker_runs.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    pub(crate) fn snapshot(&self) -> EngineStats {
        // Acquire, and first: pairs with the Release in `worker_ran` (the only ordering among the counters).
        let worker_runs = self.worker_runs.load(Ordering::Acquire);
        // Relaxed: a statistic (see the type doc).
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EngineStats {
            worker_runs,
            worker_spins: get(&self.worker_spins),
            worker_blocked: get(&self.worker_blocked),
            descriptors: get(&self.descriptors),
            bytes: get(&self.bytes),
            doorbells: get(&self.doorbells),
            faults: get(&self.faults),
            copies: get(&self.copies),
            grouped: get(&self.grouped),
            drains: get(&self.drains),
            delayed_us: get(&self.delayed_us),
            throttled_ns: get(&self.throttled_ns),
            reset_hangs: get(&self.reset_hangs),
        }
    }
}
