//! The host-to-tensor (H2T) ring of one NeuronCore: a UDMA queue pair whose rings live in host memory, the
//! 24-byte completion buffer, the three classic contexts, and the ring lock (FACTS §3.3–§3.4).

use std::sync::{Mutex, MutexGuard};

use udma::{DmaMemory, M2mQueue, Mmio, Ring};

use crate::classic::marker::MARKER_SLOT_SIZE;
use crate::context::{DmaContext, CTX_HANDLE_CNT};
use crate::ring_lock::{self, Acquired};
use crate::stats::RingStats;
use crate::{Dhal, HostBuf, Platform, Result};

/// Nominal H2T ring size the batch bound is derived from (`DMA_H2T_DESC_COUNT`).
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let bed = doctest::testbed(udma::Arch::V2);
/// use ndma::{DMA_H2T_DESC_COUNT, H2T_RING_SIZE, SYNC_THRESHOLD};
/// use udma::{regs, Direction, Mmio};
///
/// assert_eq!(SYNC_THRESHOLD, DMA_H2T_DESC_COUNT / 2 - 16 - 1);
/// // What bring-up programmed into NC 0's H2T queue: a ring of 4096 + 16 descriptors, rounded up.
/// let (dev, emu) = bed.device(0);
/// let (eng, qid) = dev.h2t_queue(0)?;
/// let queue = regs::queue_base(dev.dhal().engine_base(eng).unwrap(), Direction::Tx, qid);
/// assert_eq!((emu.read32(queue + regs::q::DRL), H2T_RING_SIZE), (8192, 8192));
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub const DMA_H2T_DESC_COUNT: u32 = 4096;
/// Descriptors actually allocated per H2T ring: 4096 + 16 rounded up to a power of two
/// (`ndmar_ring_get_desc_count`); see [`DMA_H2T_DESC_COUNT`].
pub const H2T_RING_SIZE: u32 = (DMA_H2T_DESC_COUNT + udma::UDMA_MAX_NUM_CDESC_PER_CACHE_LINE).next_power_of_two();
/// Bytes of the completion buffer: two u32 words per context handle.
pub const H2T_COMPLETION_BUF_SIZE: usize = MARKER_SLOT_SIZE * CTX_HANDLE_CNT;

const _: () = assert!(H2T_RING_SIZE == 8192);
const _: () = assert!(H2T_COMPLETION_BUF_SIZE == 24);

/// Ring memory as the HAL sees it: a host DMA buffer.
pub(crate) struct HostRing(pub HostBuf);

// SAFETY: delegates to a `DmaMemory` whose own contract covers every method.
unsafe impl DmaMemory for HostRing {
    fn as_ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn phys_addr(&self) -> u64 {
        self.0.phys_addr()
    }
}

/// What the ring lock protects: the queue cursors and the contexts.
pub(crate) struct RingInner {
    pub queue: M2mQueue<HostRing>,
    pub contexts: [DmaContext; CTX_HANDLE_CNT],
    /// Sequence number of the next staged batch (orders replays).
    pub next_seq: u64,
    /// The zero-copy context and completion queues, created on first use.
    pub zc: Option<Box<crate::zerocopy::ZcRing>>,
}

/// One NC's H2T ring.
pub(crate) struct H2tRing {
    pub nc: u32,
    pub eng_id: u32,
    pub qid: u32,
    /// `h2t_ring_lock`: serialises staging, doorbells, polling and acks on this ring.
    inner: Mutex<RingInner>,
    /// The marker words: handle h uses bytes [8h, 8h + 8): +0 the marker source, +4 the poll slot.
    pub completion: HostBuf,
    /// Device address of `completion` (host PA | `pci_host_base`).
    pub completion_dma: u64,
    pub stats: RingStats,
}

impl H2tRing {
    /// `ndmar_h2t_ring_alloc` + `ndmar_h2t_ring_init`: allocate the TX and RX rings and the completion
    /// buffer in host memory and bring NC `nc`'s default queue of `engine` (its H2T engine, already brought
    /// up) up.
    pub(crate) fn new(
        engine: &udma::Udma,
        dhal: &dyn Dhal,
        platform: &dyn Platform,
        mmio: &dyn Mmio,
        nc: u32,
    ) -> Result<Self> {
        let eng_id = engine.id();
        let qid = dhal.h2t_def_qid(nc);
        let ring_bytes = H2T_RING_SIZE as usize * core::mem::size_of::<udma::Desc>();
        let host = dhal.pci_host_base();
        let rx = crate::platform::alloc_coherent(platform, ring_bytes)?;
        let tx = crate::platform::alloc_coherent(platform, ring_bytes)?;
        let completion = crate::platform::alloc_coherent(platform, H2T_COMPLETION_BUF_SIZE)?;
        let completion_dma = completion.phys_addr() | host;
        let (tx_dma, rx_dma) = (tx.phys_addr() | host, rx.phys_addr() | host);
        let queue = engine.init_queue(
            mmio,
            qid,
            Ring { mem: HostRing(tx), dma_addr: tx_dma },
            Ring { mem: HostRing(rx), dma_addr: rx_dma },
            H2T_RING_SIZE,
        )?;
        tracing::debug!(nc, eng_id, qid, "H2T ring initialised");
        Ok(H2tRing {
            nc,
            eng_id,
            qid,
            inner: Mutex::new(RingInner { queue, contexts: Default::default(), next_seq: 0, zc: None }),
            completion,
            completion_dma,
            stats: RingStats::default(),
        })
    }

    /// Takes the ring lock, spinning briefly before it sleeps ([`crate::ring_lock`]); counts the
    /// acquisitions that found it held.
    pub(crate) fn lock(&self) -> MutexGuard<'_, RingInner> {
        // Every path that fails while holding the lock re-initialises the queue before returning, so a
        // lock poisoned by a panic elsewhere still guards a consistent ring.
        let (g, how) = ring_lock::lock(&self.inner, ring_lock::RING_LOCK_SPIN);
        match how {
            Acquired::Free => {}
            Acquired::Spun => self.stats.add_lock_spins(1),
            Acquired::Slept => self.stats.add_lock_sleeps(1),
        }
        g
    }

    /// Takes the ring lock if it is free (a poisoned lock counts as free, as in [`H2tRing::lock`]).
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, RingInner>> {
        ring_lock::try_lock(&self.inner)
    }

    /// Byte offset of handle slot `slot`'s marker words inside the completion buffer.
    pub(crate) const fn completion_slot(slot: usize) -> usize {
        slot * MARKER_SLOT_SIZE
    }
}
