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
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::{DMA_COMPLETION_MARKER, DMA_COMPLETION_MARKER_SIZE};
///
/// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
/// dev.memcpy_mc(&src, &dst, 0, 0, 4096)?;
/// // The batch ends with the marker: a 4-byte self-copy from a word seeded with the marker to the polled word.
/// let pairs = dev.ring_descriptors(0)?;
/// let (tx, rx) = (pairs[1].0.tx(), pairs[1].1.rx());
/// assert_eq!(tx.len_ctrl.len_bytes(), DMA_COMPLETION_MARKER_SIZE);
/// assert_eq!(rx.dst, tx.src + 4);
/// assert!(dev.dhal().arch().is_host_addr(tx.src), "in host memory, where the CPU polls it");
/// assert_eq!(DMA_COMPLETION_MARKER, 0xabcd_ef01);
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub const DMA_COMPLETION_MARKER: u32 = 0xabcd_ef01;
/// Bytes of the marker copy (`DMA_COMPLETION_MARKER_SIZE`); see [`DMA_COMPLETION_MARKER`].
pub const DMA_COMPLETION_MARKER_SIZE: u32 = 4;

/// Bytes of one marker slot: the word seeded with the marker, then the word the marker copy writes.
pub(crate) const MARKER_SLOT_SIZE: usize = 2 * DMA_COMPLETION_MARKER_SIZE as usize;

/// Offset of the word the marker copy of the slot at `slot` writes, which the CPU polls.
pub(crate) const fn poll_word(slot: usize) -> usize {
    slot + DMA_COMPLETION_MARKER_SIZE as usize
}

/// `ndma_memcpy_add_completion_desc`: seed the marker words at `slot` of `completion` and stage the 4-byte
/// copy from `completion_dma + slot` to its poll word ([`poll_word`]).
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
    completion.store_u32(poll_word(slot), 0, Ordering::Relaxed)?;
    let addr = completion_dma + slot as u64;
    // The driver returns a bare -1 when the marker cannot be staged, whatever the HAL said (FACTS §6).
    queue
        .copy_prepare_one(addr, completion_dma + poll_word(slot) as u64, DMA_COMPLETION_MARKER_SIZE, barrier, false)
        .map_err(NdmaError::MarkerStaging)
}

#[cfg(test)]
mod tests {
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::sync::Arc;

    use udma::{Barrier, DmaMemory, Mmio, Ring, UdmaError};

    use super::*;
    use crate::ring::HostRing;

    /// Plain aligned memory posing as host DMA memory (its "physical" address is its CPU address).
    struct Plain {
        ptr: *mut u8,
        len: usize,
    }

    impl Plain {
        fn new(len: usize) -> Arc<Plain> {
            // SAFETY: a non-zero size and a power-of-two alignment make a valid layout.
            let ptr = unsafe { alloc_zeroed(Layout::from_size_align(len, 256).unwrap()) };
            assert!(!ptr.is_null());
            Arc::new(Plain { ptr, len })
        }
    }

    impl Drop for Plain {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ptr, Layout::from_size_align(self.len, 256).unwrap()) };
        }
    }

    // SAFETY: the pointer is valid for `len` bytes, 256-byte aligned, owned by the value.
    unsafe impl Send for Plain {}
    // SAFETY: as above; shared access goes through the `DmaMemory` accessors.
    unsafe impl Sync for Plain {}

    // SAFETY: `ptr` is non-null, 256-byte aligned and valid for `len` bytes while the value lives.
    unsafe impl DmaMemory for Plain {
        fn as_ptr(&self) -> *mut u8 {
            self.ptr
        }
        fn len(&self) -> usize {
            self.len
        }
        fn phys_addr(&self) -> u64 {
            self.ptr as u64
        }
    }

    struct NoMmio;
    impl Mmio for NoMmio {
        fn read32(&self, _: u64) -> u32 {
            0
        }
        fn write32(&self, _: u64, _: u32) {}
    }

    #[test]
    fn a_marker_that_cannot_be_staged_is_the_drivers_bare_minus_one() {
        let ring = |mem: Arc<Plain>| Ring { dma_addr: mem.phys_addr(), mem: HostRing(mem) };
        let engine = udma::Udma::init(&NoMmio, udma::Arch::V3, 128).unwrap();
        let mut q = engine.init_queue(&NoMmio, 0, ring(Plain::new(32 * 16)), ring(Plain::new(32 * 16)), 32).unwrap();
        // 32 slots less the 16-slot guard: 16 data pairs fill the ring.
        for _ in 0..16 {
            q.copy_prepare_one(0x1000, 0x2000, 64, Barrier::None, false).unwrap();
        }
        let completion = Plain::new(256);
        let err = add_completion_desc(&mut q, &*completion, completion.phys_addr(), 8, Barrier::None).unwrap_err();
        assert_eq!(err, NdmaError::MarkerStaging(UdmaError::RingFull { qid: 0, dir: udma::Direction::Tx }));
        assert_eq!(err.errno(), -1, "FACTS §6: -1, not the HAL's -ENOMEM");
        assert_eq!(completion.load_u32(8, Ordering::Relaxed), Ok(DMA_COMPLETION_MARKER), "the words were seeded");
    }
}
