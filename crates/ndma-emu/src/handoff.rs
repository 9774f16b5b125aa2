//! The doorbell → worker hand-off of [`crate::ExecPolicy::Threaded`]: how a doorbell tells an engine's worker
//! thread that there is new work, without a lost wake-up and without a system call while the worker is
//! awake.
//!
//! The doorbell first publishes the work (the queue's `pending` count, under the engine's register lock), then
//! [`WorkerSignal::ring`]s. The worker reads [`WorkerSignal::rung`] *before* it looks for work; once it finds
//! none it may spin on [`WorkerSignal::rung_since`] and then calls [`WorkerSignal::park_unless_rung`]. Any
//! doorbell the worker's look missed changed the count it read, so either the worker sees the change and does
//! not park, or the doorbell sees the worker asleep and unparks it (see `park_unless_rung` for the argument).
//! `tests/loom_handoff.rs` model-checks this.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use crate::sync::thread::{self, Thread};
use crate::sync::{fence, AtomicBool, AtomicU64};

/// The two words doorbells and the worker share, on cache lines of their own (two lines: adjacent-line
/// prefetch pairs them) so the worker's other state does not bounce with every doorbell.
#[derive(Debug)]
#[repr(align(128))]
struct Shared {
    /// Doorbells rung so far.
    rung: AtomicU64,
    /// False while the worker is parked or about to park: only then does a doorbell pay for an unpark.
    awake: AtomicBool,
}

/// The signal between an engine's doorbells and its worker thread.
#[derive(Debug)]
pub struct WorkerSignal {
    shared: Shared,
    worker: OnceLock<Thread>,
}

impl Default for WorkerSignal {
    fn default() -> Self {
        WorkerSignal::new()
    }
}

impl WorkerSignal {
    /// A signal with no worker attached yet.
    pub fn new() -> Self {
        WorkerSignal {
            shared: Shared { rung: AtomicU64::new(0), awake: AtomicBool::new(false) },
            worker: OnceLock::new(),
        }
    }

    /// Attaches the worker thread; only the first call counts. Must happen before the first doorbell that
    /// relies on the worker (the spawner attaches under the lock that doorbells take to find the worker).
    pub fn attach(&self, worker: Thread) {
        let _ = self.worker.set(worker);
    }

    /// Is a worker attached?
    pub fn has_worker(&self) -> bool {
        self.worker.get().is_some()
    }

    /// Doorbell side, after the work is published: counts the doorbell and unparks the worker if it is
    /// asleep.
    pub fn ring(&self) {
        // Release: the work published before this doorbell is visible to a worker whose Acquire load in
        // `rung` reads this count.
        self.shared.rung.fetch_add(1, Ordering::Release);
        // SeqCst fence between the increment and the load of `awake`, mirrored in `park_unless_rung`: of the
        // two fences one comes first in the single total order, so either the worker's look after its fence
        // sees this increment, or this load sees its `awake = false` and unparks it.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        if !self.shared.awake.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    /// Unparks the worker whatever it is doing (shutdown). The unpark token is sticky: a worker about to
    /// park returns at once.
    pub fn wake(&self) {
        if let Some(t) = self.worker.get() {
            t.unpark();
        }
    }

    /// Worker side: doorbells rung so far; read *before* looking for work.
    pub fn rung(&self) -> u64 {
        // Acquire pairs with the doorbell's RMW: the work published before a doorbell counted here is
        // visible to the look that follows.
        self.shared.rung.load(Ordering::Acquire)
    }

    /// Worker side: has a doorbell rung since [`WorkerSignal::rung`] returned `seen`?
    pub fn rung_since(&self, seen: u64) -> bool {
        self.rung() != seen
    }

    /// Worker side: marks the worker awake (it starts awake; `park_unless_rung` keeps it so on return).
    pub fn set_awake(&self) {
        // Relaxed: a doorbell that reads `true` skips the unpark, which is right because this worker looks for
        // work again afterwards and, before it can park, passes the fence in `park_unless_rung`.
        self.shared.awake.store(true, Ordering::Relaxed);
    }

    /// Is the worker awake (running, or spinning for work)? A snapshot, for the waiter's decision whether to
    /// leave pending work to the worker; it orders nothing.
    pub fn is_awake(&self) -> bool {
        // Relaxed: a hint (see above).
        self.shared.awake.load(Ordering::Relaxed)
    }

    /// Worker side, after a look for work that started at `seen` found none: parks the calling thread unless
    /// a doorbell rang since or `stop()` holds. Returns awake (spurious wake-ups included: the caller looks for
    /// work again either way).
    pub fn park_unless_rung(&self, seen: u64, stop: &dyn Fn() -> bool) {
        // Store, SeqCst fence, load (the doorbell does the mirror image): if this load misses a doorbell's
        // increment, that doorbell's fence comes after ours in the total order and its load of `awake` sees
        // `false`, so it unparks us — before `park` (the sticky token makes `park` return) or after.
        // Relaxed store and load: ordered by the fence.
        self.shared.awake.store(false, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.shared.rung.load(Ordering::Relaxed) == seen && !stop() {
            thread::park();
        }
        self.set_awake();
    }
}
