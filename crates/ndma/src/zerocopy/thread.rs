//! The completion thread (\[N\] "neuron dma cmpltn", FACTS §5.7): one per device, created on the first async
//! submit, woken through the non-empty-queue bitmap, running the completion steps of every ring whose bit is
//! set until its queue is empty. It stops when the device goes away, after draining what is queued; a request
//! it cannot move then (pieces a pin budget holds back) completes with `-ENODEV`
//! ([`NdmaError::CompletionThreadStopped`]) and releases its pins.
//!
//! Unlike the driver's thread it does not spin over a queue that waits on the engine: the marker wait of step 1
//! sleeps (a marker-aware delay) while the head piece runs, and a pass that moves nothing (pin budget, a full
//! completion queue nobody reads) waits for a kick or a millisecond before the next. A pass retires every piece
//! that is already over, and between passes the thread waits on the head piece without the ring lock (a
//! zero-length marker-aware delay), so submitters are not held up behind it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::classic::RingGuard;
use crate::device::NeuronDevice;
use crate::{NdmaError, Result, DMA_COMPLETION_MARKER};

/// How long a pass that moved nothing waits before the next (a consumer freeing completion-queue room does
/// not kick the thread).
const IDLE_RETRY: Duration = Duration::from_millis(1);

/// What the device and its thread share.
#[derive(Default)]
struct Shared {
    /// `nonempty_ctxq_bitmap`: bit `ctx_queue_bit(eng, qid)` set while that ring's queue may hold work.
    bitmap: AtomicU64,
    /// Set once to stop the thread (it drains first).
    stop: AtomicBool,
    /// Set by the thread as it unwinds from a panic ([`DeathWatch`]): nothing completes async requests any
    /// more.
    died: AtomicBool,
    /// Kicked: a new submit or a stop since the thread last looked.
    kicked: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn kicked(&self) -> MutexGuard<'_, bool> {
        self.kicked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kick(&self) {
        *self.kicked() = true;
        self.wake.notify_one();
    }

    /// Waits for a kick (or `timeout`, if given).
    fn wait(&self, timeout: Option<Duration>) {
        let mut k = self.kicked();
        if !*k {
            k = match timeout {
                Some(t) => self.wake.wait_timeout(k, t).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0),
                None => self.wake.wait(k).unwrap_or_else(|p| p.into_inner()),
            };
        }
        *k = false;
    }
}

/// The device's completion thread handle (`struct ndma_h2d_dma_cmpltn_thread`).
#[derive(Default)]
pub(crate) struct CompletionThread {
    shared: Arc<Shared>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl CompletionThread {
    /// `ndma_h2d_create_cmpltn_thread`: starts the thread if it was never started — unless it was stopped
    /// ([`CompletionThread::stop`]) or died: a stopped or dead thread is not started again, and a request that
    /// would need it is refused ([`CompletionThread::check`]) rather than queued where nothing completes it.
    pub(crate) fn ensure(&self, dev: &NeuronDevice, _bit: u32) -> Result<()> {
        let mut h = self.handle.lock().unwrap_or_else(|p| p.into_inner());
        self.check(dev.index())?;
        if h.is_some() {
            return Ok(());
        }
        let weak = dev.self_ref();
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name(format!("ndma cmpltn d{}", dev.index()))
            .spawn(move || run(&shared, &weak))
            .map_err(|e| NdmaError::Thread(e.to_string()))?;
        *h = Some(handle);
        Ok(())
    }

    /// Marks ring `bit` non-empty and wakes the thread.
    pub(crate) fn kick(&self, bit: u32) {
        // Release: the queued contexts (written under the ring lock, which the thread takes too) are ordered
        // before the bit anyway; Release keeps the bit itself from being seen early by the swap below.
        self.shared.bitmap.fetch_or(1 << bit, Ordering::Release);
        self.shared.kick();
    }

    /// Refuses an async request once the thread was stopped ([`CompletionThread::stop`]) or died: checked
    /// under the ring lock too, so a request queued before a stop is seen by the stopping thread's last look
    /// at every ring (`run`). A request that passed this check just before the thread died stays queued
    /// until a synchronous submit on its ring retires it (FACTS has no such case: the driver's kernel thread
    /// does not panic).
    ///
    /// # Errors
    ///
    /// [`NdmaError::CompletionThreadPanicked`], [`NdmaError::CompletionThreadStopped`].
    pub(crate) fn check(&self, device: u32) -> Result<()> {
        // Acquire (both): pairs with the Release stores in `DeathWatch::drop` and `stop`.
        if self.shared.died.load(Ordering::Acquire) {
            Err(NdmaError::CompletionThreadPanicked { device })
        } else if self.shared.stop.load(Ordering::Acquire) {
            Err(NdmaError::CompletionThreadStopped { device })
        } else {
            Ok(())
        }
    }

    /// Is the thread running (started, and neither stopped nor exited)?
    pub(crate) fn is_running(&self) -> bool {
        self.handle.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|h| !h.is_finished())
    }

    /// `ndma_h2d_stop_cmpltn_thread`: stops the thread after it has drained what is queued, and joins it —
    /// unless called on the thread itself (the device dropped by its own thread), which then just exits.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick();
        let handle = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() && h.join().is_err() {
                tracing::error!("the zero-copy completion thread panicked");
            }
        }
    }
}

/// Marks the thread dead if it unwinds from a panic, so that async requests are refused from then on
/// ([`CompletionThread::check`]) instead of queued where nothing completes them.
struct DeathWatch<'a>(&'a Shared);

impl Drop for DeathWatch<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!("the zero-copy completion thread panicked; async requests are refused from now on");
            // Release: pairs with the Acquire load in `CompletionThread::check`.
            self.0.died.store(true, Ordering::Release);
        }
    }
}

fn run(shared: &Shared, weak: &Weak<NeuronDevice>) {
    let _watch = DeathWatch(shared);
    loop {
        // Acquire: pairs with the kickers' Release.
        let bits = shared.bitmap.swap(0, Ordering::Acquire);
        if bits == 0 {
            if shared.stop.load(Ordering::Acquire) {
                // A submit that passed its check before the stop may have queued a request and not kicked
                // yet: one last look at every ring (each under its lock, which that submit held) before
                // leaving.
                let left = weak.upgrade().map_or(0, |dev| dev.zc_rings_with_work());
                if left == 0 {
                    return;
                }
                shared.bitmap.fetch_or(left, Ordering::Release);
                continue;
            }
            shared.wait(None);
            continue;
        }
        let Some(dev) = weak.upgrade() else { return };
        let stopping = shared.stop.load(Ordering::Acquire);
        let (mut again, mut moved) = (0u64, false);
        for bit in (0..64).filter(|b| bits & (1 << b) != 0) {
            let Some(ring) = dev.ring_of_bit(bit) else { continue };
            let mut g = RingGuard::lock(&dev, ring);
            ring.stats.add_zc_passes(1);
            moved |= g.zc_complete().any();
            // Stopping: completions nobody will read no longer hold the thread.
            let left = if stopping { g.zc_queued() } else { g.zc_pending() };
            if left {
                again |= 1 << bit;
            }
            let head = g.zc_head_marker();
            drop(g);
            if let Some((completion, offset)) = head {
                // Before the next pass takes the ring lock, a zero-length wait on the head piece's marker: on
                // hardware it returns at once; on a platform whose delays run the engine (the model) it runs
                // the piece now, without the ring lock, so submitters are not held up for a copy's length.
                // The next pass retires the piece (with the driver's budgeted wait if it is still running).
                if let Ok(word) = completion.word(offset) {
                    dev.platform.delay_until(word, DMA_COMPLETION_MARKER, 0);
                }
            }
        }
        drop(dev);
        if again != 0 {
            if stopping && !moved {
                // What is left cannot move (a pin budget of 0, say). First the last look of a stop with nothing
                // pending (above): a submit that passed its check may have queued a request on another ring
                // and not kicked yet.
                let Some(dev) = weak.upgrade() else { return };
                let others = dev.zc_rings_with_work() & !again;
                if others == 0 {
                    // Nobody will move it after this thread: each request ends with an error completion and
                    // lets its pins go, rather than staying queued, pinned and unanswered.
                    tracing::warn!("zero-copy completion thread stopping with work it cannot complete");
                    let stopped = NdmaError::CompletionThreadStopped { device: dev.index() };
                    for ring in (0..64).filter(|b| again & (1 << b) != 0).filter_map(|b| dev.ring_of_bit(b)) {
                        RingGuard::lock(&dev, ring).zc_abandon(&stopped);
                    }
                    return;
                }
                again |= others;
            }
            shared.bitmap.fetch_or(again, Ordering::Release);
            if !moved {
                shared.wait(Some(IDLE_RETRY));
            }
        }
    }
}
