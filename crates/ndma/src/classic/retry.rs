//! The V2 reset-window workaround (`_ndma_memcpy_wait_for_completion`, spec §5): V2 silicon can hang a DMA
//! whose doorbell rang while its NeuronCore was being reset. A timeout is retried only when the arch has the
//! retry flag **and** the op started inside a reset window; the retry re-initialises the ring and replays the
//! staged chunks. Unlike the C loop, the number of replays is bounded.

use super::split::stage_batch;
use super::wait::wait_for_completion;
use crate::device::NeuronDevice;
use crate::ring::{H2tRing, RingInner};
use crate::{NdmaError, Result};

/// Replays after which a reset-window hang is reported as [`NdmaError::RetryExhausted`].
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

    /// Wait for context `wait_slot`; `staged_slot` is the context staged in the same call (equal for sync).
    pub(crate) fn wait_retrying(
        &self,
        ring: &H2tRing,
        inner: &mut RingInner,
        wait_slot: usize,
        staged_slot: usize,
    ) -> Result<()> {
        let mut is_async = wait_slot != staged_slot;
        let mut replays = 0;
        loop {
            let err = match wait_for_completion(self.dhal, &*self.platform, ring, inner, wait_slot, is_async) {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            if !self.dhal.retry_memcpy() || !self.op_in_reset_window(ring.nc, inner.contexts[wait_slot].start_time) {
                return Err(err);
            }
            if replays == MAX_RESET_WINDOW_REPLAYS {
                tracing::error!(nc = ring.nc, replays, "DMA still hung inside the reset window; giving up");
                return Err(NdmaError::RetryExhausted { replays });
            }
            tracing::warn!(
                nc = ring.nc,
                eng = ring.eng_id,
                qid = ring.qid,
                "Failed to copy memory during a NeuronCore reset; re-initialising the ring and retrying"
            );
            inner.contexts[wait_slot].start_time = self.platform.jiffies();
            inner.queue.reinit(&*self.bar0);
            ring.stats.add_ring_resets(1);
            ring.stats.add_retries(1);
            stage_batch(self.dhal, &*self.bar0, ring, inner, wait_slot)?;
            ring.stats.add_replays(1);
            if staged_slot != wait_slot {
                stage_batch(self.dhal, &*self.bar0, ring, inner, staged_slot)?;
                ring.stats.add_replays(1);
            }
            replays += 1;
            is_async = false;
        }
    }
}
