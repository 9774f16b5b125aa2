//! The ring lock, held: [`RingGuard`] is the one handle through which the classic path stages, waits, accounts
//! for and releases its contexts, so no code threads a `(ring, inner, slot)` triple by hand.
//!
//! # Slot accounting
//!
//! Every descriptor slot between the consumer and the producer cursor belongs to exactly one context: the one
//! whose batch staged it and has not been acked yet (`DmaContext::in_flight`). [`RingGuard::slots_in_use`]
//! and [`RingGuard::slots_accounted`] are equal whenever the lock is released; nothing else frees slots than
//! an ack after the marker, or a re-initialisation of the ring, which abandons every batch on it.

use std::sync::MutexGuard;

use super::split::{batch_slots, stage_batch};
use crate::context::{CtxHandle, DmaContext};
use crate::device::NeuronDevice;
use crate::ring::{H2tRing, RingInner};
use crate::{NdmaError, Result};

/// NC `ring.nc`'s H2T ring with its lock held.
pub(crate) struct RingGuard<'a> {
    pub(crate) dev: &'a NeuronDevice,
    pub(crate) ring: &'a H2tRing,
    pub(crate) inner: MutexGuard<'a, RingInner>,
}

impl<'a> RingGuard<'a> {
    /// Takes the ring lock (`h2t_ring_lock`).
    pub(crate) fn lock(dev: &'a NeuronDevice, ring: &'a H2tRing) -> Self {
        RingGuard { dev, ring, inner: ring.lock() }
    }

    /// Takes the ring lock if nobody holds it.
    pub(crate) fn try_lock(dev: &'a NeuronDevice, ring: &'a H2tRing) -> Option<Self> {
        ring.try_lock().map(|inner| RingGuard { dev, ring, inner })
    }

    /// Context `slot`.
    pub(crate) fn ctx(&self, slot: usize) -> &DmaContext {
        &self.inner.contexts[slot]
    }

    /// Installs a new transfer on context `slot` (which must be free).
    pub(crate) fn begin(&mut self, slot: usize, ctx: DmaContext) {
        debug_assert!(!self.inner.contexts[slot].inuse, "context {slot} is still in use");
        self.inner.contexts[slot] = ctx;
        self.ring.stats.add_submitted(1);
    }

    /// Stages the next batch of context `slot` and rings the doorbells (`ndma_memcpy_chunks`).
    ///
    /// # Errors
    ///
    /// HAL errors while staging; the caller must [`RingGuard::recover`] (part of a batch may be staged).
    pub(crate) fn stage(&mut self, slot: usize) -> Result<()> {
        if self.inner.zc.is_some() {
            self.make_room(batch_slots(self.inner.contexts[slot].remaining))?;
        }
        stage_batch(self.dev.dhal, &*self.dev.bar0, self.ring, &mut self.inner, slot)?;
        let seq = self.inner.next_seq;
        self.inner.next_seq += 1;
        let ctx = &mut self.inner.contexts[slot];
        ctx.in_flight = ctx.pending_transfers;
        ctx.staged_seq = seq;
        Ok(())
    }

    /// Until `needed` descriptor slots are free, retires the zero-copy pieces at the head of the ring's queue
    /// (posting their requests' completions as the completion thread would): pieces issue while the ring has
    /// room for one more, so they can leave less than a classic batch needs. Classic contexts alone always fit
    /// (three batches of at most 2032 slots in 8176).
    ///
    /// # Errors
    ///
    /// A failed synchronous zero-copy piece (none is queued while a classic copy holds the ring lock).
    // Out of line: the copy path without zero-copy state never calls it, and inlined, the retire step it
    // reaches bloated every classic staging (measured: ~120 instructions a 4 KiB copy).
    #[inline(never)]
    fn make_room(&mut self, needed: u32) -> Result<()> {
        while self.ring_available() < needed {
            if !self.zc_retire_one()? {
                break;
            }
        }
        Ok(())
    }

    /// Restarts context `slot`'s reset-window clock (each new batch of a synchronous copy).
    pub(crate) fn restart_clock(&mut self, slot: usize) {
        self.inner.contexts[slot].start_time = self.dev.platform.jiffies();
    }

    /// After the first batch of a transfer is staged: fault in its prefetch range, if it has one (best
    /// effort, as the driver: a failure is only logged). Replays do not prefetch again.
    pub(crate) fn prefetch(&self, slot: usize) {
        let ctx = &self.inner.contexts[slot];
        if let Some(addr) = ctx.prefetch {
            if let Err(why) = self.dev.platform.prefetch_user_pages(addr, ctx.size) {
                tracing::info!(addr, size = ctx.size, "prefetch of user pages failed: {why}");
            }
        }
    }

    /// Re-programs the queue (cursors to 0, phase 1): every staged batch is abandoned — classic contexts have
    /// nothing in flight any more, and zero-copy pieces in flight (still pinned) go back to be issued again.
    pub(super) fn reinit_queue(&mut self) {
        if let Some(zc) = self.inner.zc.as_mut() {
            zc.queue.requeue_submitted();
        }
        self.inner.queue.reinit(&*self.dev.bar0);
        for ctx in &mut self.inner.contexts {
            ctx.in_flight = 0;
        }
        self.ring.stats.add_ring_resets(1);
    }

    /// Re-initialises the queue under the classic contexts in flight on it and returns those that must run
    /// again, in the order their batches were first staged: every one but those in `skip`, except
    /// - the batches that had landed before the first that had not (their markers visible, read after the
    ///   re-initialisation, when nothing of the ring lands any more), which are completed in place — nothing
    ///   to run again, nothing left to ack. From the first batch that had not landed on, every batch runs again,
    ///   landed or not, so the ring's order holds: a later batch completed in place while an earlier one ran
    ///   again would see its writes undone, or its source changed under it;
    /// - a copy that reads what it writes ([`DmaContext::replayable`]), which is aborted: the engine may have
    ///   run part of it, and a second run would read bytes the first overwrote — except `keep`, whose caller
    ///   has checked that it may run again.
    pub(super) fn reinit_in_flight(&mut self, skip: &[usize], keep: Option<usize>) -> Vec<usize> {
        let contexts = &self.inner.contexts;
        let mut order: Vec<usize> =
            (0..contexts.len()).filter(|&s| contexts[s].in_flight > 0 && !skip.contains(&s)).collect();
        order.sort_by_key(|&s| contexts[s].staged_seq);
        self.reinit_queue();
        let mut landed_so_far = true;
        order.retain(|&slot| {
            landed_so_far &= super::wait::marker_visible(self.ring, slot);
            if landed_so_far {
                self.complete_batch(slot);
                return false;
            }
            let ctx = &mut self.inner.contexts[slot];
            if Some(slot) != keep && !ctx.replayable() {
                ctx.abort();
                return false;
            }
            true
        });
        order
    }

    /// Marks context `slot`'s batch done: the marker was seen and the slots acked.
    pub(super) fn complete_batch(&mut self, slot: usize) {
        let ctx = &mut self.inner.contexts[slot];
        ctx.in_flight = 0;
        ctx.offset += ctx.outstanding;
        ctx.remaining -= ctx.outstanding;
        self.ring.stats.add_bytes(ctx.outstanding);
        if ctx.remaining == 0 {
            self.ring.stats.add_transfers(1);
        }
    }

    /// Releases context `slot` (it must have nothing in flight): it is free again and its memory is no longer
    /// held.
    pub(crate) fn release(&mut self, slot: usize) {
        self.inner.contexts[slot].release();
    }

    /// After the transfer of the contexts in `failed` failed (their callers release them next): re-initialise
    /// the queue so nothing half-staged or hung is left on it (the C driver leaves the ring as it is,
    /// un-acked), and re-issue every *other* transfer that was in flight on it, so a failure loses only its
    /// own: other classic copies are re-staged in the order they were first staged, zero-copy pieces go back
    /// to be issued again. A copy whose marker had landed is done as it is; a copy lands the same bytes however
    /// often it runs, so one the engine had begun is re-staged from its start — unless it reads what it writes
    /// ([`DmaContext::replayable`]), or a re-stage fails: such copies are aborted, their memory is released at
    /// once and waiting for them reports [`NdmaError::Aborted`].
    pub(crate) fn recover(&mut self, failed: &[usize]) {
        let again = self.reinit_in_flight(failed, None);
        tracing::warn!(
            nc = self.ring.nc,
            eng = self.ring.eng_id,
            qid = self.ring.qid,
            in_flight = again.len(),
            "H2T ring re-initialised after a failed copy; re-staging the other copies in flight"
        );
        if let Err(e) = self.restage(&again) {
            tracing::error!(nc = self.ring.nc, "a copy in flight could not be re-staged: {e}");
        }
    }

    /// Stages `again` anew, in order, after a re-initialisation (each counted in `replays`). If one fails,
    /// the ring is quiesced and every copy not staged again is aborted: nothing of it is in flight any more,
    /// and it must not read as done.
    ///
    /// # Errors
    ///
    /// The failed staging's.
    pub(super) fn restage(&mut self, again: &[usize]) -> Result<()> {
        for (k, &slot) in again.iter().enumerate() {
            if let Err(e) = self.stage(slot) {
                self.quiesce();
                for &s in &again[k..] {
                    self.inner.contexts[s].abort();
                }
                return Err(e);
            }
            // Its doorbell rang now: what the V2 reset-window check asks about.
            self.restart_clock(slot);
            self.ring.stats.add_replays(1);
        }
        Ok(())
    }

    /// Abandons whatever is in flight and re-initialises the queue: afterwards the engine holds no
    /// descriptor of this ring.
    pub(crate) fn quiesce(&mut self) {
        let in_flight: Vec<usize> = (0..self.inner.contexts.len())
            .filter(|&s| self.inner.contexts[s].inuse && self.inner.contexts[s].in_flight > 0)
            .collect();
        // Re-initialise first: until the engine has dropped the descriptors, the memory they point at must stay
        // held (an abort releases it, and another thread could allocate it again at once).
        self.reinit_queue();
        for s in in_flight {
            self.inner.contexts[s].abort();
        }
    }

    /// Takes an in-use context out of a chain: releases it, reporting an abort as an error.
    pub(crate) fn finish(&mut self, slot: usize, handle: CtxHandle) -> Result<()> {
        let aborted = self.inner.contexts[slot].aborted;
        self.release(slot);
        if aborted {
            self.ring.stats.add_aborts(1);
            return Err(NdmaError::Aborted(handle.raw()));
        }
        Ok(())
    }

    /// The slot accounting now: `(slots in use, slots the contexts account for)`.
    pub(crate) fn slot_accounting(&self) -> (u32, u32) {
        (self.slots_in_use(), self.slots_accounted())
    }

    /// Descriptor slots the ring holds between its consumer and producer cursors (TX; RX moves in lock-step).
    fn slots_in_use(&self) -> u32 {
        let tx = self.inner.queue.tx();
        tx.next_desc_idx().wrapping_sub(tx.next_cdesc_idx()) & tx.size_mask()
    }

    /// Descriptor slots the in-use classic contexts and the submitted zero-copy contexts account for.
    fn slots_accounted(&self) -> u32 {
        let classic: u32 = self.inner.contexts.iter().filter(|c| c.inuse).map(|c| c.in_flight).sum();
        classic + self.inner.zc.as_ref().map_or(0, |zc| zc.queue.slots_in_flight())
    }

    /// Is context `slot`'s marker visible (without acking)? Aborted and idle contexts count as done.
    pub(crate) fn marker_seen(&self, slot: usize) -> bool {
        let ctx = &self.inner.contexts[slot];
        ctx.in_flight == 0 || super::wait::marker_visible(self.ring, slot)
    }
}

impl Drop for RingGuard<'_> {
    fn drop(&mut self) {
        // The invariant of the module doc, checked at every unlock in debug builds (tests): a leaked slot is
        // caught where it happens, not when the ring runs dry thousands of copies later.
        if !std::thread::panicking() {
            debug_assert_eq!(
                self.slots_in_use(),
                self.slots_accounted(),
                "NC {} ring: slots in use differ from what the contexts account for",
                self.ring.nc
            );
            if let Some(zc) = self.inner.zc.as_ref() {
                debug_assert_eq!(zc.queue.check_invariants(), Ok(()), "NC {} zero-copy queue", self.ring.nc);
            }
        }
    }
}
