//! The marker poll (`ndma_memcpy_wait_for_completion`, spec §2): no interrupt, no completion ring — wait the
//! DHAL's first wait, then poll the host word every 1 µs within the budget; on the marker, re-arm both words
//! and ack the batch (the only thing that frees ring slots).

use std::sync::atomic::Ordering;

use super::marker::DMA_COMPLETION_MARKER;
use udma::{DmaMemory, M2mQueue};

use crate::classic::marker::poll_word;
use crate::ring::{H2tRing, HostRing, RingInner};
use crate::{Dhal, NdmaError, Platform, Result};

/// The virtual-platform scaling of the following wait (`narch_is_qemu() || narch_is_emu()`).
pub const EMULATION_WAIT_SCALE: u64 = 100_000;
/// First wait of a synchronous device-to-device batch, µs.
pub const D2D_FIRST_WAIT_US: u64 = 10;
/// Divisor of a synchronous device-to-device batch's following wait.
pub const D2D_WAIT_DIVISOR: u64 = 200;
/// Poll interval, µs.
pub const POLL_INTERVAL_US: u64 = 1;

/// The exact delays a wait uses: `(first_wait_us, loop)`; the poll loop makes `loop + 1` polls.
///
/// `emulation` scales the following wait ×100000 ([`Platform::is_emulation`]);
/// a synchronous device-to-device batch (`is_d2d`) waits 10 µs first and 1/200 of the budget after.
///
/// Which batches are device-to-device is a reading of the spec, which is of two minds: its sketch of
/// `_ndma_memcpy_wait_for_completion` passes `is_intra_device_dma = false` on the classic path, while its memset
/// section says the device→device replicate takes this shortcut. We follow the latter for every classic batch
/// whose source and destination are both device addresses; zero-copy waits never take it.
///
/// ```
/// use ndma::{dhal, poll_plan};
/// use udma::Arch;
///
/// // A full V2 batch (2031 data descriptors + the marker), synchronous, host ↔ device, on silicon:
/// assert_eq!(poll_plan(dhal(Arch::V2), false, 2032, false, false), (8121, 80_427_901));
/// // The same batch device → device.
/// assert_eq!(poll_plan(dhal(Arch::V2), false, 2032, false, true), (10, 402_140));
/// // An async batch: the first wait is 1 µs.
/// assert_eq!(poll_plan(dhal(Arch::V3), false, 3, true, false).0, 1);
/// ```
pub fn poll_plan(dhal: &dyn Dhal, emulation: bool, count: u32, is_async: bool, is_d2d: bool) -> (u64, u64) {
    let budget = dhal.wait_budget(count, is_async);
    let mut first = budget.first_wait_us;
    let mut wait = budget.following_us;
    if emulation {
        wait = wait.saturating_mul(EMULATION_WAIT_SCALE);
    }
    if is_d2d && !is_async {
        first = D2D_FIRST_WAIT_US;
        wait /= D2D_WAIT_DIVISOR;
    }
    (first, wait / POLL_INTERVAL_US + 1)
}

/// Where a batch's completion marker lives and how to wait for it.
#[derive(Clone, Copy)]
pub(crate) struct MarkerWait<'a> {
    /// The host memory holding the marker words.
    pub completion: &'a dyn DmaMemory,
    /// Byte offset of the 8-byte marker slot: +0 the marker source, +4 the poll word.
    pub offset: usize,
    /// Descriptors of the batch, marker included: the ack count.
    pub count: u32,
    /// Descriptors the budget is sized for: `count`, except for a fence, whose marker waits for the writes of
    /// every piece it fences to land (a lone marker's own budget is next to nothing: V3 sizes it at 0 µs
    /// past the first wait).
    pub budget_for: u32,
    /// Async budget (first wait 1 µs, no device-to-device shortcut).
    pub is_async: bool,
    /// Neither end of the batch's data is host memory.
    pub is_d2d: bool,
}

/// Waits for the marker of classic context `slot`; returns the polls made.
///
/// # Errors
///
/// [`NdmaError::Timeout`] when the budget runs out; nothing is acked then.
pub(crate) fn wait_for_completion(
    dhal: &dyn Dhal,
    platform: &dyn Platform,
    ring: &H2tRing,
    inner: &RingInner,
    slot: usize,
    is_async: bool,
) -> Result<u64> {
    let ctx = &inner.contexts[slot];
    let m = MarkerWait {
        completion: &*ring.completion,
        offset: H2tRing::completion_slot(slot),
        count: ctx.pending_transfers,
        budget_for: ctx.pending_transfers,
        is_async,
        is_d2d: ctx.is_d2d,
    };
    wait_marker(dhal, platform, ring, &inner.queue, m)
}

/// `ndma_memcpy_wait_for_completion`: wait the first wait, then poll the marker word every 1 µs within the
/// budget; on the marker, re-arm both words and ack `count` slots on RX then TX. Returns the polls made.
///
/// # Errors
///
/// [`NdmaError::Timeout`] (without a snapshot: the caller, which holds the whole ring, attaches one) when
/// the budget runs out; nothing is acked then.
pub(crate) fn wait_marker(
    dhal: &dyn Dhal,
    platform: &dyn Platform,
    ring: &H2tRing,
    queue: &M2mQueue<HostRing>,
    m: MarkerWait<'_>,
) -> Result<u64> {
    let MarkerWait { completion, offset, count, budget_for, is_async, is_d2d } = m;
    let _span = tracing::debug_span!("wait_for_completion", nc = ring.nc, offset, count, is_async).entered();
    let (first_wait, loops) = poll_plan(dhal, platform.is_emulation(), budget_for.max(count), is_async, is_d2d);
    // Resolve (and bounds-check) both marker words once, outside the poll loop.
    let src = completion.word(offset)?;
    let dst = completion.word(poll_word(offset))?;
    // The first wait and each poll interval are marker-aware delays: on a platform that watches the word they
    // end the moment the engine writes it; the polls (and so the budget) are counted exactly as the driver's.
    platform.delay_until(dst, DMA_COMPLETION_MARKER, first_wait);
    let mut polls = 0u64;
    let result = loop {
        polls += 1;
        // Acquire: pairs with the engine's release of the marker write, so every data write the batch made
        // (drained by the barrier on its last data descriptor) is visible once we see the marker.
        if dst.load(Ordering::Acquire) == DMA_COMPLETION_MARKER {
            // Re-arm: clear the poll word and re-seed the source so a stale marker is detectable.
            dst.store(0, Ordering::Relaxed);
            src.store(DMA_COMPLETION_MARKER, Ordering::Relaxed);
            queue.ack(count);
            tracing::debug!(nc = ring.nc, count, polls, "marker seen; re-armed and acked");
            break Ok(polls);
        }
        platform.delay_until(dst, DMA_COMPLETION_MARKER, POLL_INTERVAL_US);
        if polls > loops {
            let state = crate::RingSnapshot::NONE;
            break Err(NdmaError::Timeout { eng: ring.eng_id, qid: ring.qid, count, polls, state });
        }
    };
    ring.stats.add_polls(polls);
    // The budget consumed, not a clock reading: a clock read costs as much as the rest of a small copy.
    ring.stats.add_wait_us(first_wait + polls * POLL_INTERVAL_US);
    if let Err(e) = &result {
        ring.stats.add_timeouts(1);
        // The caller logs the error event, with the ring's snapshot (`RingGuard::with_state`).
        tracing::debug!(nc = ring.nc, eng = ring.eng_id, qid = ring.qid, count, polls, "DMA completion timeout: {e}");
    }
    result
}

/// Is the completion marker of context `slot` visible now (`Acquire`)? A snapshot for non-blocking queries;
/// it neither re-arms nor acks.
pub(crate) fn marker_visible(ring: &H2tRing, slot: usize) -> bool {
    marker_holds(&*ring.completion, poll_word(H2tRing::completion_slot(slot)))
}

/// Does the marker word at `offset` of `mem` hold the marker now? `Acquire`: pairs with the engine's release of
/// the marker write, so what the batch wrote is visible once this returns true.
pub(crate) fn marker_holds(mem: &dyn DmaMemory, offset: usize) -> bool {
    mem.load_u32(offset, Ordering::Acquire).is_ok_and(|w| w == DMA_COMPLETION_MARKER)
}
