//! The transfer split (`ndma_memcpy_chunks`, spec §2): stage one batch of ≤64 KiB descriptor pairs, append
//! the marker, ring the doorbells.

use udma::{Barrier, Mmio, MAX_DMA_DESC_SIZE};

use super::marker::add_completion_desc;
use crate::ring::{H2tRing, RingInner};
use crate::{Dhal, Result};

/// Data descriptors per batch at most: half the nominal 4096-descriptor ring less the 16-slot guard and
/// one for the marker (`sync_threshold` = 4096/2 − 16 − 1).
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::{MAX_BATCH_BYTES, SYNC_THRESHOLD};
///
/// assert_eq!((SYNC_THRESHOLD, MAX_BATCH_BYTES), (2031, 2031 * 65536));
/// // One byte more than a batch holds: two batches, each closed by its marker.
/// let size = MAX_BATCH_BYTES + 1;
/// let (src, dst) = (dev.alloc_device(size, 0)?, dev.alloc_device(size, 0)?);
/// dev.memcpy_mc(&src, &dst, 0, 0, size)?;
/// let s = dev.ring_stats(0)?;
/// assert_eq!((s.batches, s.descriptors, s.bytes), (2, (2031 + 1) + (1 + 1), size));
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub const SYNC_THRESHOLD: u32 = crate::ring::DMA_H2T_DESC_COUNT / 2 - udma::UDMA_MAX_NUM_CDESC_PER_CACHE_LINE - 1;

const _: () = assert!(SYNC_THRESHOLD == 2031);

/// The most bytes one batch moves: an async request must fit in it (examples on [`SYNC_THRESHOLD`] and
/// [`NeuronDevice::start`](crate::NeuronDevice::start)).
pub const MAX_BATCH_BYTES: u64 = SYNC_THRESHOLD as u64 * MAX_DMA_DESC_SIZE as u64;

/// Ring slots the next batch of a transfer with `remaining` bytes takes: its data descriptors (at most
/// `SYNC_THRESHOLD` of 64 KiB) and the marker.
pub(crate) fn batch_slots(remaining: u64) -> u32 {
    let data = remaining.div_ceil(u64::from(MAX_DMA_DESC_SIZE)).clamp(1, u64::from(SYNC_THRESHOLD));
    data as u32 + 1
}

/// Stage the next batch of context `slot` (from its `offset`, at most `SYNC_THRESHOLD` data descriptors),
/// add the marker and trigger. On return the context's `pending_transfers` and `outstanding` describe the
/// batch. On error the caller must re-initialise the ring: part of a batch may be staged.
pub(crate) fn stage_batch(
    dhal: &dyn Dhal,
    mmio: &dyn Mmio,
    ring: &H2tRing,
    inner: &mut RingInner,
    slot: usize,
) -> Result<()> {
    let _span = tracing::debug_span!("stage_batch", nc = ring.nc, slot).entered();
    let ctx = &inner.contexts[slot];
    let (src, dst, smove, dmove, offset, remaining) =
        (ctx.src, ctx.dst, ctx.smove, ctx.dmove, ctx.offset, ctx.remaining);
    let queue = &mut inner.queue;
    // Asked once per batch, not once per descriptor.
    let (barrier_mid, barrier_last) = (dhal.m2m_barrier(false), dhal.m2m_barrier(true));
    let mut staged = 0u64;
    let mut data_descs = 0u32;
    loop {
        let left = remaining - staged;
        let chunk = left.min(u64::from(MAX_DMA_DESC_SIZE));
        let last = chunk == left || data_descs + 1 == SYNC_THRESHOLD;
        let at = offset + staged;
        let s = if smove { src + at } else { src };
        let d = if dmove { dst + at } else { dst };
        queue.copy_prepare_one(s, d, chunk as u32, if last { barrier_last } else { barrier_mid }, false)?;
        staged += chunk;
        data_descs += 1;
        if last {
            break;
        }
    }
    add_completion_desc(queue, &*ring.completion, ring.completion_dma, H2tRing::completion_slot(slot), Barrier::None)?;
    let count = data_descs + 1;
    let ctx = &mut inner.contexts[slot];
    ctx.pending_transfers = count;
    ctx.outstanding = staged;
    inner.queue.copy_start(mmio, count, count)?;
    ring.stats.add_descriptors(u64::from(count));
    ring.stats.add_batches(1);
    ring.stats.add_doorbells(2);
    tracing::debug!(nc = ring.nc, count, bytes = staged, "doorbells rung (RX then TX)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_takes_its_data_descriptors_and_the_marker() {
        let desc = u64::from(MAX_DMA_DESC_SIZE);
        let cases = [(1, 2), (desc, 2), (desc + 1, 3), (MAX_BATCH_BYTES - 1, 2032), (MAX_BATCH_BYTES, 2032)];
        for (remaining, slots) in cases {
            assert_eq!(batch_slots(remaining), slots, "{remaining} bytes");
        }
        assert_eq!(batch_slots(MAX_BATCH_BYTES * 3), SYNC_THRESHOLD + 1, "a batch of a larger copy is a full one");
    }
}
