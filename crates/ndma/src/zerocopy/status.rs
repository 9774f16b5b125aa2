//! What a ring's zero-copy state holds now: the leak check of every test, and the completion queue user space
//! maps.

use std::sync::Arc;

use crate::classic::RingGuard;
use crate::device::NeuronDevice;
use crate::memory::MemChunk;
use crate::Result;

/// A snapshot of one ring's zero-copy state. A snapshot is not synchronisation: the completion thread may move
/// things right after.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let bed = doctest::testbed(udma::Arch::V3);
/// # let user = doctest::user(&bed, 64); // 64 pages mapped at `user.va`, this thread runs as the process
/// use ndma::BatchOp;
///
/// let dev = &bed.system.devices()[0];
/// assert_eq!(dev.zerocopy_status(0)?, Default::default(), "no zero-copy use yet");
/// let hbm = dev.alloc_device(64 * 4096, 0)?;
/// let op = BatchOp { offset: 0, size: 64 * 4096, buffer: user.va };
/// dev.zerocopy_submit(0, &[op], &hbm, 0, -1, true, 0, 0)?;
/// let s = dev.zerocopy_status(0)?;
/// assert!(s.is_idle());
/// assert_eq!((s.contexts, s.pinned_pages, s.backlog, s.posted), (0, 0, 0, 0));
/// assert_eq!(s.peak_pinned_pages, 64, "one piece of 64 pages at its peak");
/// assert!(!s.thread_running, "a sync request needs no completion thread");
/// # Ok::<(), ndma::NdmaError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZcStatus {
    /// Live contexts in the queue (tombstones excluded).
    pub contexts: u32,
    /// Pages the queue holds pinned (pre-pinned references included).
    pub pinned_pages: u64,
    /// The most pages it ever held pinned at once (never above the pin budget).
    pub peak_pinned_pages: u64,
    /// `(head, first_pinned_unsubmitted, first_unpinned, tail)`.
    pub cursors: (u32, u32, u32, u32),
    /// Completions waiting for room in the completion queue.
    pub backlog: usize,
    /// Completions posted in the completion queue that no consumer has taken yet (user space's to take: not
    /// part of [`ZcStatus::is_idle`]).
    pub posted: u32,
    /// Is the device's completion thread running?
    pub thread_running: bool,
}

impl ZcStatus {
    /// Nothing queued, pinned or waiting to be posted (example on [`ZcStatus`]).
    pub fn is_idle(&self) -> bool {
        self.contexts == 0 && self.pinned_pages == 0 && self.backlog == 0
    }
}

impl NeuronDevice {
    /// The zero-copy state of NC `nc`'s ring (all zero before its first zero-copy use); example on
    /// [`ZcStatus`].
    ///
    /// # Errors
    ///
    /// [`crate::NdmaError::InvalidNc`], [`crate::NdmaError::NoH2tRing`].
    pub fn zerocopy_status(&self, nc: u32) -> Result<ZcStatus> {
        let ring = self.ring(nc)?;
        let g = RingGuard::lock(self, ring);
        let thread_running = self.completion_thread.is_running();
        Ok(match g.inner.zc.as_ref() {
            None => ZcStatus { thread_running, ..ZcStatus::default() },
            Some(zc) => ZcStatus {
                contexts: zc.queue.live_slots().filter(|&i| zc.queue.entry(i).state != super::ZcState::Invalid).count()
                    as u32,
                pinned_pages: zc.queue.nr_pinned_pages(),
                peak_pinned_pages: zc.queue.peak_pinned_pages(),
                cursors: zc.queue.cursors(),
                backlog: zc.cq.backlog_len(),
                posted: zc.cq.posted(),
                thread_running,
            },
        })
    }

    /// Sets the zero-copy pin budget of every ring (`NDMA_CTX_QUEUE_MAX_PINNED_PAGES`, 524288 pages by default):
    /// async pieces beyond it are queued unpinned and pinned later by the completion thread; a sync submit
    /// waits. A tuning and test knob: the driver's value is a constant. A piece takes up to 64 pages
    /// (`NDMA_ZC_PAGES_PER_XFER`); below that a larger piece never fits: async pieces stay queued unpinned
    /// until the budget is raised (0 holds every async piece back), and a sync request fails with
    /// [`NdmaError::QueueFull`](crate::NdmaError::QueueFull) once it has nothing left to retire.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let bed = doctest::testbed(udma::Arch::V3);
    /// # let user = doctest::user(&bed, 256); // 256 pages mapped at `user.va`, this thread runs as the process
    /// use ndma::BatchOp;
    ///
    /// let dev = &bed.system.devices()[0];
    /// dev.set_zerocopy_pin_budget(128); // two pieces of 64 pages at a time
    /// assert_eq!(dev.zerocopy_pin_budget(), 128);
    /// let hbm = dev.alloc_device(256 * 4096, 0)?;
    /// let op = BatchOp { offset: 0, size: 256 * 4096, buffer: user.va };
    /// dev.zerocopy_submit(0, &[op], &hbm, 0, -1, true, 0, 0)?; // a sync request waits for pins to come back
    /// assert_eq!(dev.zerocopy_status(0)?.peak_pinned_pages, 128);
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    pub fn set_zerocopy_pin_budget(&self, pages: u64) {
        self.zc_pin_budget.store(pages, std::sync::atomic::Ordering::Relaxed);
        for ring in self.rings.iter().flatten() {
            let queued = match RingGuard::lock(self, ring).inner.zc.as_mut() {
                Some(zc) => {
                    // The newest budget, read under the ring lock rather than `pages`: of two setters racing, the
                    // one whose store came last might update this ring first, and the other's update would
                    // then leave the ring on a budget the device no longer reports. Read under the lock, a
                    // later update sees every store made before an earlier one released it.
                    zc.queue.set_pin_budget(self.zerocopy_pin_budget());
                    !zc.queue.is_empty()
                }
                None => false,
            };
            // Deferred pieces may now fit: let the completion thread look.
            if let Some(bit) = self.dhal.ctx_queue_bit(ring.eng_id, ring.qid).filter(|_| queued) {
                self.completion_thread.kick(bit);
            }
        }
    }

    /// The zero-copy pin budget, in pages (example on [`NeuronDevice::set_zerocopy_pin_budget`]).
    pub fn zerocopy_pin_budget(&self) -> u64 {
        self.zc_pin_budget.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The host chunk holding NC `nc`'s completion queue (24,592 bytes, FACTS §5.7), for a consumer to map
    /// ([`super::CqConsumer::new`]); created with the ring's zero-copy state. Example on the [`cq`](super::cq)
    /// module.
    ///
    /// # Errors
    ///
    /// [`crate::NdmaError::InvalidNc`], [`crate::NdmaError::NoH2tRing`], allocation failures.
    pub fn completion_queue(&self, nc: u32) -> Result<Arc<MemChunk>> {
        let ring = self.ring(nc)?;
        let mut g = RingGuard::lock(self, ring);
        Ok(Arc::clone(g.zc()?.cq.chunk()))
    }
}

impl RingGuard<'_> {
    /// `ndma_ctx_queue_free` after a quiesce: nothing is in flight any more, so every context is released
    /// (unpinned) without waiting.
    pub(crate) fn zc_teardown(&mut self) {
        if let Some(zc) = self.inner.zc.as_mut() {
            let _ = zc.queue.drain(|_, _| Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ZcStatus;

    /// Idle means no live context, no pinned page and no completion waiting for room, each on its own; what
    /// a consumer has yet to take, the peak, the cursors and the thread do not count.
    #[test]
    fn idle_needs_each_of_contexts_pins_and_backlog_at_zero() {
        let quiet = ZcStatus {
            peak_pinned_pages: 64,
            cursors: (7, 7, 7, 7),
            posted: 3,
            thread_running: true,
            ..Default::default()
        };
        assert!(quiet.is_idle());
        assert!(!ZcStatus { contexts: 1, ..quiet }.is_idle(), "a live context");
        assert!(!ZcStatus { pinned_pages: 1, ..quiet }.is_idle(), "a pinned page");
        assert!(!ZcStatus { backlog: 1, ..quiet }.is_idle(), "a completion waiting for room");
    }
}
