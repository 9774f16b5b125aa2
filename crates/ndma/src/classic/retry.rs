//! The marker wait with V2's reset-window workaround (`_ndma_memcpy_wait_for_completion`, spec §5): V2 silicon
//! can hang a DMA whose doorbell rang while its NeuronCore was being reset. A timeout is retried only when the
//! arch has the retry flag **and** the op started inside a reset window; the retry re-initialises the ring and
//! replays the staged chunks. Unlike the C loop, the number of replays is bounded.

use super::guard::RingGuard;
use super::wait::wait_for_completion;
use crate::device::NeuronDevice;
use crate::{NdmaError, Result, RingSnapshot};

/// Replays after which a reset-window hang is reported as [`NdmaError::RetryExhausted`].
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let bed = doctest::testbed_fake_clock(udma::Arch::V2); // waits advance a fake clock: timeouts are instant
/// use ndma::{NdmaError, RingSnapshot, MAX_RESET_WINDOW_REPLAYS};
///
/// let (dev, emu) = bed.device(0);
/// let (src, dst) = (dev.alloc_device(4096, 0)?, dev.alloc_device(4096, 0)?);
/// // The model resets NC 0 for a long time: on V2 a doorbell rung meanwhile hangs.
/// assert!(emu.reset_nc(0, 1_000_000));
/// let err = dev.memcpy_mc(&src, &dst, 0, 0, 4096).unwrap_err();
/// assert_eq!(err, NdmaError::RetryExhausted { replays: MAX_RESET_WINDOW_REPLAYS, state: RingSnapshot::NONE });
/// // The snapshot taken after the last replay hung, before recovery: the model's record says why.
/// let state = err.ring_state().expect("a timeout carries the ring's state");
/// assert!(state.device_diagnostics.as_deref().unwrap().contains("doorbell during a NeuronCore reset"));
/// assert_eq!(err.errno(), -110);
/// let s = dev.ring_stats(0)?;
/// assert_eq!((s.retries, s.replays), (8, 8));
/// # Ok::<(), NdmaError>(())
/// ```
pub const MAX_RESET_WINDOW_REPLAYS: u32 = 8;

impl NeuronDevice {
    /// `nr_op_in_reset_wnd`: true while a reset of NC `nc` is in progress (end ≤ start, which includes "never
    /// reset"), or when the op started at or before the latest reset's end. False without a reset model.
    pub(crate) fn op_in_reset_window(&self, nc: u32, op_start: u64) -> bool {
        match &self.resets {
            None => false,
            Some(clock) => {
                let (start, end) = clock.reset_times(nc);
                end <= start || op_start <= end
            }
        }
    }
}

impl RingGuard<'_> {
    /// Waits for context `wait_slot`'s batch and accounts for it (`_ndma_memcpy_wait_for_completion`);
    /// `staged_slot` is the context staged in the same call (the same slot for a synchronous copy). A context
    /// with nothing in flight (a zero-byte transfer) completes at once.
    ///
    /// On a timeout, V2's reset-window workaround re-initialises the ring and replays what was in flight —
    /// only when the arch has the retry flag **and** the op started inside a reset window, and at most
    /// [`MAX_RESET_WINDOW_REPLAYS`] times (the C loop is unbounded). A copy over its own source
    /// ([`DmaContext::replayable`](crate::context::DmaContext::replayable)) is never run twice: waited for, its
    /// timeout is reported; in flight beside the waited one, it is aborted.
    ///
    /// # Errors
    ///
    /// [`NdmaError::Timeout`], [`NdmaError::RetryExhausted`], or a HAL error from a replay; the caller must
    /// then [`RingGuard::recover`]. [`NdmaError::Aborted`] for a context abandoned since the caller took the
    /// lock (staging the other context of the call made room by retiring zero-copy pieces, and a failed one
    /// re-initialised the ring under a copy over its own source).
    pub(crate) fn wait(&mut self, wait_slot: usize, staged_slot: usize) -> Result<()> {
        if self.inner.contexts[wait_slot].aborted {
            // Abandoned by a re-initialisation under this very lock hold (a zero-copy piece retired to make room
            // for the staged batch failed): it did not run, and it will not.
            self.ring.stats.add_aborts(1);
            return Err(NdmaError::Aborted(wait_slot as i32));
        }
        let ctx = &self.inner.contexts[wait_slot];
        if ctx.in_flight == 0 {
            // Nothing in flight: it completed (a re-initialisation may have found it landed). A context with
            // bytes left would be one a recovery neither re-staged nor aborted: reporting it done would lose
            // its bytes without a word.
            debug_assert_eq!(ctx.remaining, 0, "context {wait_slot}: bytes left and nothing in flight");
            return Ok(());
        }
        let mut is_async = wait_slot != staged_slot;
        let mut replays = 0;
        loop {
            let (dhal, platform) = (self.dev.dhal, &*self.dev.platform);
            let err = match wait_for_completion(dhal, platform, self.ring, &self.inner, wait_slot, is_async) {
                Ok(_) => break,
                Err(e) => e,
            };
            let ctx = &self.inner.contexts[wait_slot];
            if !self.dev.dhal.retry_memcpy() || !self.dev.op_in_reset_window(self.ring.nc, ctx.start_time) {
                return Err(self.with_state(err));
            }
            if !ctx.replayable() {
                // The engine may have run part of it (or all of it, and lost only the marker): a copy that
                // reads what it writes cannot run again. Its timeout is reported, as outside a window.
                tracing::warn!(
                    nc = self.ring.nc,
                    "a copy over its own source timed out in a reset window: not replayed"
                );
                return Err(self.with_state(err));
            }
            if replays == MAX_RESET_WINDOW_REPLAYS {
                tracing::error!(nc = self.ring.nc, replays, "DMA still hung inside the reset window; giving up");
                return Err(self.with_state(NdmaError::RetryExhausted { replays, state: RingSnapshot::NONE }));
            }
            tracing::warn!(
                nc = self.ring.nc,
                eng = self.ring.eng_id,
                qid = self.ring.qid,
                "Failed to copy memory during a NeuronCore reset; re-initialising the ring and retrying"
            );
            self.replay_in_flight(wait_slot)?;
            if self.inner.contexts[wait_slot].in_flight == 0 {
                // Its marker had landed after all (just after the last poll): the re-initialisation completed it
                // in place, with every batch staged before it.
                return Ok(());
            }
            replays += 1;
            is_async = false;
        }
        self.complete_batch(wait_slot);
        Ok(())
    }

    /// The V2 retry's "re-init the ring and replay": re-initialises the queue, then re-stages every batch that
    /// was in flight, in the order it was first staged — the waited context and the one staged after it, as
    /// the driver does, and any other context still in flight, which a re-init would otherwise silently lose.
    /// Batches whose markers had landed, in ring order up to the first that had not, are done as they are and
    /// not run again — the waited one too, when its marker landed just after the last poll (the driver replays
    /// them: a copy over its own source would then read bytes it already overwrote, and a replayed earlier
    /// batch could undo a later one) — and another copy over its own source still in flight is aborted
    /// ([`RingGuard::reinit_in_flight`]).
    fn replay_in_flight(&mut self, wait_slot: usize) -> Result<()> {
        let again = self.reinit_in_flight(&[], Some(wait_slot));
        self.ring.stats.add_retries(1);
        self.restage(&again)
    }
}
