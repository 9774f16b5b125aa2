//! The doorbell → worker hand-off of [`crate::ExecPolicy::Threaded`]: how a doorbell tells an engine's worker
//! thread that there is new work, without a lost wake-up and, most of the time, without a system call.
//!
//! An idle worker goes through three states:
//! - **running** — executing, or spinning for the next doorbell: it sees a doorbell within nanoseconds if it
//!   is on a CPU;
//! - **dozing** — napping in short timed sleeps for a while: it notices a doorbell at its next nap's end, so a
//!   doorbell does not wake it. Waking a sleeping thread costs the waker a system call and, on a small virtual
//!   machine, an inter-processor interrupt to a halted vCPU: 10–20 µs measured here, more than a whole small
//!   copy. A thread that waits for the work meanwhile executes it itself (`Engine::assist`);
//! - **parked** — asleep until a doorbell unparks it.
//!
//! The doorbell first publishes the work (the queue's `pending` count, under the engine's register lock), then
//! [`WorkerSignal::ring`]s. The worker reads [`WorkerSignal::rung`] *before* it looks for work, and once it
//! finds none calls [`WorkerSignal::idle`]. Any doorbell the worker's look missed changed the count it read, so
//! either the worker sees the change before it parks, or the doorbell sees it parked and unparks it (see
//! `idle`). `tests/loom_handoff.rs` model-checks this.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Duration;

use crate::sync::thread::{self, Thread};
use crate::sync::{fence, nap, AtomicU64, AtomicU8};

/// Worker states (see the module doc).
const RUNNING: u8 = 0;
const DOZING: u8 = 1;
const PARKED: u8 = 2;

/// The two words doorbells and the worker share, on cache lines of their own (two lines: adjacent-line
/// prefetch pairs them) so the worker's other state does not bounce with every doorbell.
#[derive(Debug)]
#[repr(align(128))]
struct Shared {
    /// Doorbells rung so far.
    rung: AtomicU64,
    /// `RUNNING`, `DOZING` or `PARKED`.
    state: AtomicU8,
}

/// How long an idle worker dozes before it parks: `naps` timed sleeps of `nap` each (a sleep overshoots by the
/// timer slack, ~50 µs here).
#[derive(Debug, Clone, Copy)]
pub struct Doze {
    /// Timed sleeps before parking.
    pub naps: u32,
    /// Length of one.
    pub nap: Duration,
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
    /// A signal with no worker attached yet (its state reads "parked": there is nobody to leave work to).
    pub fn new() -> Self {
        WorkerSignal {
            shared: Shared { rung: AtomicU64::new(0), state: AtomicU8::new(PARKED) },
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
    /// parked.
    pub fn ring(&self) {
        // Release: the work published before this doorbell is visible to a worker whose Acquire load in
        // `rung` reads this count.
        self.shared.rung.fetch_add(1, Ordering::Release);
        // SeqCst fence between the increment and the load of `state`, mirrored in `idle`: of the two fences
        // one comes first in the single total order, so either the worker's last look before it parks sees
        // this increment, or this load sees `PARKED` and unparks it.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        if self.shared.state.load(Ordering::Relaxed) == PARKED {
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
        // Acquire pairs with the doorbell's Release increment: the work published before a doorbell counted
        // here is visible to the look that follows.
        self.shared.rung.load(Ordering::Acquire)
    }

    /// Worker side: has a doorbell rung since [`WorkerSignal::rung`] returned `seen`?
    pub fn rung_since(&self, seen: u64) -> bool {
        self.rung() != seen
    }

    /// Worker side: the worker runs (it starts so, and `idle` returns so).
    pub fn set_running(&self) {
        // Relaxed: a doorbell that reads RUNNING skips the unpark, which is right because this worker looks for
        // work again afterwards and, before it can park, passes the fence in `idle`.
        self.shared.state.store(RUNNING, Ordering::Relaxed);
    }

    /// Worker side: one nap of `d` marked dozing, then running again — for a worker that found the engine's
    /// exec lock held and looks again after the nap. Dozing, it leaves no waiter waiting for it: a waiter
    /// executes pending work itself rather than leave it to a running worker (`Engine::assist`).
    pub fn nap_dozing(&self, d: Duration) {
        // Relaxed: as in `idle`, a doorbell that reads DOZING does not unpark; the look after the nap sees it.
        self.shared.state.store(DOZING, Ordering::Relaxed);
        nap(d);
        self.set_running();
    }

    /// Is the worker running (executing, or spinning for work)? If it is, a doorbell's work is picked up
    /// within nanoseconds — unless the worker is off its CPU. A snapshot for a waiter's decision whether to
    /// leave pending work to the worker; it orders nothing.
    pub fn is_running(&self) -> bool {
        // Relaxed: a hint (see above).
        self.shared.state.load(Ordering::Relaxed) == RUNNING
    }

    /// Worker side, after a look for work that started at `seen` found none (and any spinning): dozes, then
    /// parks, until a doorbell rings after `seen` or `stop()` holds. Returns running (spurious wake-ups
    /// included: the caller looks for work again either way).
    pub fn idle(&self, seen: u64, stop: &dyn Fn() -> bool, doze: Doze) {
        // Relaxed: doorbells that read DOZING do not unpark; the naps below notice them.
        self.shared.state.store(DOZING, Ordering::Relaxed);
        for _ in 0..doze.naps {
            if self.rung_since(seen) || stop() {
                self.set_running();
                return;
            }
            nap(doze.nap);
        }
        // Store, SeqCst fence, load (the doorbell does the mirror image): if this load misses a doorbell's
        // increment, that doorbell's fence comes after ours in the total order and its load of `state` sees
        // PARKED, so it unparks us — before `park` (the sticky token makes `park` return) or after.
        // Relaxed store and load: ordered by the fence.
        self.shared.state.store(PARKED, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.shared.rung.load(Ordering::Relaxed) == seen && !stop() {
            thread::park();
        }
        self.set_running();
    }
}
