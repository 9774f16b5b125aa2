//! The completion marker: a 4-byte host self-copy staged after a batch's data descriptors (spec §2).
//!
//! Source word +0 is seeded with [`DMA_COMPLETION_MARKER`], the poll word +4 is cleared; when the engine
//! executes the copy, +4 becomes the marker. UDMA retires a ring in order and the last data descriptor
//! carries the DHAL's write barrier, so seeing the marker means every data write of the batch has landed.

use std::sync::atomic::Ordering;

use udma::{Barrier, DmaMemory, M2mQueue};

use crate::ring::HostRing;
use crate::{NdmaError, Result};

/// The word the marker copy writes (`DMA_COMPLETION_MARKER`).
pub const DMA_COMPLETION_MARKER: u32 = 0xabcd_ef01;
/// Bytes of the marker copy (`DMA_COMPLETION_MARKER_SIZE`).
pub const DMA_COMPLETION_MARKER_SIZE: u32 = 4;

/// `ndma_memcpy_add_completion_desc`: seed the marker words at `slot` of `completion` and stage the 4-byte
/// copy from `completion_dma + slot` to `completion_dma + slot + 4`.
///
/// # Errors
///
/// [`NdmaError::MarkerStaging`] (`-1`) when the HAL refuses the descriptor (e.g. no free slot).
pub(crate) fn add_completion_desc(
    queue: &mut M2mQueue<HostRing>,
    completion: &dyn DmaMemory,
    completion_dma: u64,
    slot: usize,
    barrier: Barrier,
) -> Result<()> {
    // Plain stores: the doorbell's release fence orders them before the engine can see the descriptor.
    completion.store_u32(slot, DMA_COMPLETION_MARKER, Ordering::Relaxed)?;
    completion.store_u32(slot + 4, 0, Ordering::Relaxed)?;
    let addr = completion_dma + slot as u64;
    // The driver returns a bare -1 when the marker cannot be staged, whatever the HAL said (FACTS §6).
    queue
        .copy_prepare_one(
            addr,
            addr + u64::from(DMA_COMPLETION_MARKER_SIZE),
            DMA_COMPLETION_MARKER_SIZE,
            barrier,
            false,
        )
        .map_err(NdmaError::MarkerStaging)
}
