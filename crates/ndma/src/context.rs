//! Classic DMA contexts (`struct ndma_h2t_dma_context`, FACTS §3.2) and the handle FSM that picks them.

use std::sync::Arc;

use crate::memory::MemChunk;
use crate::{NdmaError, Result};

/// Which of a ring's three contexts a transfer uses (`enum neuron_dma_h2t_ctx_handle_type`).
///
/// ```
/// use ndma::{CtxHandle, NdmaError};
///
/// // The double buffer's state machine: a chain starts at NONE and alternates between the async contexts.
/// let chain: Vec<CtxHandle> = std::iter::successors(Some(CtxHandle::None), |h| Some(h.next())).take(5).collect();
/// use CtxHandle::*;
/// assert_eq!(chain, [None, Async1, Async2, Async1, Async2]);
/// assert_eq!(Sync.next(), Sync);
/// // The driver's integers.
/// assert_eq!((None.raw(), Sync.raw(), Async2.raw()), (-1, 0, 2));
/// assert_eq!(CtxHandle::try_from(1), Ok(Async1));
/// assert_eq!(CtxHandle::try_from(3), Err(NdmaError::InvalidHandle(3)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CtxHandle {
    /// No context: the start of an async chain (−1).
    None,
    /// The synchronous context (0).
    Sync,
    /// First async context (1).
    Async1,
    /// Second async context (2).
    Async2,
}

impl CtxHandle {
    /// The driver's integer for this handle (example on [`CtxHandle`]).
    pub const fn raw(self) -> i32 {
        match self {
            CtxHandle::None => -1,
            CtxHandle::Sync => 0,
            CtxHandle::Async1 => 1,
            CtxHandle::Async2 => 2,
        }
    }

    /// `ndma_dma_ctx_get_next_handle`: NONE → ASYNC1, SYNC → SYNC, ASYNC1 → ASYNC2, ASYNC2 → ASYNC1 (example on
    /// [`CtxHandle`]).
    pub const fn next(self) -> CtxHandle {
        match self {
            CtxHandle::None | CtxHandle::Async2 => CtxHandle::Async1,
            CtxHandle::Sync => CtxHandle::Sync,
            CtxHandle::Async1 => CtxHandle::Async2,
        }
    }

    /// The context slot (and completion-buffer slot) of this handle; `None` has none.
    pub(crate) const fn slot(self) -> Option<usize> {
        match self {
            CtxHandle::None => Option::None,
            CtxHandle::Sync => Some(0),
            CtxHandle::Async1 => Some(1),
            CtxHandle::Async2 => Some(2),
        }
    }
}

impl TryFrom<i32> for CtxHandle {
    type Error = NdmaError;

    /// # Errors
    ///
    /// [`NdmaError::InvalidHandle`] for anything outside −1..=2.
    fn try_from(raw: i32) -> Result<Self> {
        match raw {
            -1 => Ok(CtxHandle::None),
            0 => Ok(CtxHandle::Sync),
            1 => Ok(CtxHandle::Async1),
            2 => Ok(CtxHandle::Async2),
            other => Err(NdmaError::InvalidHandle(other)),
        }
    }
}

/// Number of contexts per ring (`NEURON_DMA_H2T_CTX_HANDLE_CNT`).
pub(crate) const CTX_HANDLE_CNT: usize = 3;

/// The cursor of one classic transfer.
///
/// # Ownership
///
/// While a context is in use it holds a reference on every memory chunk its descriptors point at (`held`), so
/// a caller dropping its own references cannot free memory the engine may still read or write: the chunks
/// are released only when the transfer has been waited for, or when the ring was re-initialised under it.
#[derive(Debug, Default)]
pub(crate) struct DmaContext {
    /// Set at start, cleared on release.
    pub inuse: bool,
    /// Original source PA.
    pub src: u64,
    /// Original destination PA.
    pub dst: u64,
    /// Original byte count.
    pub size: u64,
    /// Does the source advance per chunk? (memset's replicate holds it.)
    pub smove: bool,
    /// Does the destination advance per chunk?
    pub dmove: bool,
    /// Neither end is host memory: a synchronous wait takes the device-to-device shortcut (see
    /// [`poll_plan`](crate::poll_plan) for why every such batch, not only memset's replicate).
    pub is_d2d: bool,
    /// Jiffies at staging; restarted each batch and each retry.
    pub start_time: u64,
    /// Bytes completed.
    pub offset: u64,
    /// Bytes not yet completed.
    pub remaining: u64,
    /// Bytes staged in the current batch.
    pub outstanding: u64,
    /// Descriptors in the current batch, marker included: the doorbell count and the ack count.
    pub pending_transfers: u32,
    /// Descriptor slots of this context's batch that are staged and not yet acked (0 or
    /// `pending_transfers`): what the context accounts for on the ring.
    pub in_flight: u32,
    /// Order in which batches were staged on the ring (a replay re-stages in this order).
    pub staged_seq: u64,
    /// The user range faulted in after the first batch is staged (`prefetch_addr`; `None` = no prefetch).
    pub prefetch: Option<u64>,
    /// Abandoned: the ring was re-initialised while this transfer was in flight and it could not be re-staged.
    pub aborted: bool,
    /// The memory the descriptors point at (source and destination chunk), kept alive until the context is
    /// released. An array, not a vector: an async copy allocates nothing.
    pub held: Held,
}

/// The chunks a context keeps alive: at most its source and its destination.
pub type Held = [Option<Arc<MemChunk>>; 2];

impl DmaContext {
    /// Can the transfer be staged again from its start after the engine may have run part of it? Yes unless
    /// what it writes overlaps what it reads: a second run would then read bytes the first already overwrote.
    /// A source (destination) that does not advance covers one descriptor's worth.
    pub fn replayable(&self) -> bool {
        let extent = |moves: bool| if moves { self.size } else { self.size.min(u64::from(udma::MAX_DMA_DESC_SIZE)) };
        let src_end = self.src.saturating_add(extent(self.smove));
        let dst_end = self.dst.saturating_add(extent(self.dmove));
        src_end <= self.dst || dst_end <= self.src
    }

    /// The transfer is abandoned: it will not complete, and its memory is no longer held (nothing of it is on
    /// the ring any more).
    pub fn abort(&mut self) {
        self.aborted = true;
        self.held = Held::default();
    }

    /// Marks the context free and drops its hold on memory. Only called once nothing of it is in flight.
    pub fn release(&mut self) {
        debug_assert_eq!(self.in_flight, 0, "a context is released while the engine may still use it");
        self.inuse = false;
        self.aborted = false;
        self.held = Held::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_replayable_unless_it_reads_what_it_writes() {
        let ctx = |src: u64, dst: u64, size: u64, smove: bool| DmaContext {
            src,
            dst,
            size,
            smove,
            dmove: true,
            ..DmaContext::default()
        };
        assert!(ctx(0x1000, 0x9000, 0x4000, true).replayable(), "disjoint");
        assert!(
            ctx(0x1000, 0x9000, 0x8000, true).replayable(),
            "adjacent: the source ends where the destination begins"
        );
        assert!(!ctx(0x1000, 0x9000, 0x8001, true).replayable(), "the source runs into the destination");
        assert!(!ctx(0x9000, 0x1000, 0x8001, true).replayable(), "the destination runs into the source");
        // memset's replicate: the source stays put and covers one descriptor (64 KiB) at most.
        assert!(ctx(0x1000, 0x1000 + 0x1_0000, 1 << 20, false).replayable());
        assert!(!ctx(0x1000, 0x1000 + 0xffff, 1 << 20, false).replayable());
    }

    #[test]
    fn handle_fsm() {
        assert_eq!(CtxHandle::None.next(), CtxHandle::Async1);
        assert_eq!(CtxHandle::Sync.next(), CtxHandle::Sync);
        assert_eq!(CtxHandle::Async1.next(), CtxHandle::Async2);
        assert_eq!(CtxHandle::Async2.next(), CtxHandle::Async1);
        for raw in -1..=2 {
            assert_eq!(CtxHandle::try_from(raw).map(CtxHandle::raw), Ok(raw));
        }
        for raw in [-2, 3, i32::MIN, i32::MAX] {
            assert_eq!(CtxHandle::try_from(raw), Err(NdmaError::InvalidHandle(raw)));
            assert_eq!(NdmaError::InvalidHandle(raw).errno(), -22);
        }
    }
}
