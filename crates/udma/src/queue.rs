//! One direction of one UDMA queue: the software state of `struct udma_q` (FACTS §2.1–§2.2).
//!
//! # Who owns what
//!
//! The CPU owns the slots from the producer cursor `next_desc_idx` up to (but not including) the consumer
//! cursor `next_cdesc_idx` minus the 16-slot guard gap; the engine owns the slots handed to it by doorbells
//! and not yet acked. Nothing but [`Queue::ack`] moves the consumer: there is no hardware completion ring.

use core::sync::atomic::{fence, Ordering};

use crate::regs::{DoorbellCount, QueueCfg, QueueSwCtrl, RateLimitMask, RingLength};
use crate::sync::{spin_loop, AtomicU32};
use crate::{regs, Desc, DmaMemory, Mmio, UdmaError, UDMA_INITIAL_RING_ID, UDMA_MAX_NUM_CDESC_PER_CACHE_LINE};

/// Which ring of a queue pair: TX is M2S (reads the source), RX is S2M (writes the destination).
///
/// ```
/// use udma::{regs, Direction};
///
/// assert_eq!(Direction::Rx.to_string(), "RX (S2M)");
/// // Each direction has its own register block in an engine.
/// assert_eq!((regs::dir_block(Direction::Tx), regs::dir_block(Direction::Rx)), (0, 0x2_0000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Memory-to-stream: reads the source.
    Tx,
    /// Stream-to-memory: writes the destination.
    Rx,
}

impl Direction {
    /// Index of the direction in per-direction arrays: 0 for TX, 1 for RX.
    ///
    /// ```
    /// assert_eq!((udma::Direction::Tx.index(), udma::Direction::Rx.index()), (0, 1));
    /// ```
    pub const fn index(self) -> usize {
        match self {
            Direction::Tx => 0,
            Direction::Rx => 1,
        }
    }
}

impl core::fmt::Display for Direction {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Direction::Tx => "TX (M2S)",
            Direction::Rx => "RX (S2M)",
        })
    }
}

/// `enum udma_queue_status`: what [`Queue::status`] reports (see [`Queue`]'s example).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueStatus {
    /// Not running.
    Disabled = 1,
    /// Running.
    Enabled = 2,
    /// Aborted.
    Aborted = 3,
}

/// The software completion counter `next_cdesc_idx` and its lock-free ack (`udma_cdesc_ack`).
///
/// ```
/// use udma::CompletionCounter;
///
/// let c = CompletionCounter::new(31); // a ring of 32 descriptors
/// // Concurrent ackers never lose an update; the cursor wraps modulo the ring size.
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| c.ack(10));
///     }
/// });
/// assert_eq!(c.get(), 40 % 32);
/// ```
#[derive(Debug)]
pub struct CompletionCounter {
    next_cdesc_idx: AtomicU32,
    size_mask: u32,
}

impl CompletionCounter {
    /// A counter at 0 for a ring of `size_mask + 1` descriptors.
    pub fn new(size_mask: u32) -> Self {
        CompletionCounter { next_cdesc_idx: AtomicU32::new(0), size_mask }
    }

    /// The consumer cursor.
    #[inline]
    pub fn get(&self) -> u32 {
        self.next_cdesc_idx.load(Ordering::Acquire)
    }

    /// Advances the consumer by `num` modulo the ring size with a CAS loop, so concurrent ackers never lose
    /// an update. `AcqRel` on success: the slots' previous descriptors were consumed (observed through the
    /// marker) before anyone may reuse them.
    pub fn ack(&self, num: u32) {
        let mut cur = self.next_cdesc_idx.load(Ordering::Relaxed);
        loop {
            let next = cur.wrapping_add(num) & self.size_mask;
            match self.next_cdesc_idx.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => {
                    cur = seen;
                    spin_loop();
                }
            }
        }
    }

    pub(crate) fn reset(&mut self) {
        self.next_cdesc_idx = AtomicU32::new(0);
    }
}

/// One direction (TX or RX) of a UDMA queue, owning its descriptor ring memory. An [`M2mQueue`] holds the two
/// of a pair and moves them in lock-step; [`M2mQueue::tx`] and [`M2mQueue::rx`] show them.
///
/// [`M2mQueue`]: crate::M2mQueue
/// [`M2mQueue::tx`]: crate::M2mQueue::tx
/// [`M2mQueue::rx`]: crate::M2mQueue::rx
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
/// use udma::{regs, Arch, Barrier, Direction, QueueStatus, Ring, Udma};
///
/// let bar0 = Regs::default();
/// let engine = Udma::init(&bar0, Arch::V3, 128)?;
/// let ring = |pa| Ring { mem: Mem::new(32 * 16, pa), dma_addr: pa };
/// let mut pair = engine.init_queue(&bar0, 1, ring(0x1000), ring(0x2000), 32)?;
/// for _ in 0..3 {
///     pair.copy_prepare_one(0x10_0000, 0x20_0000, 64, Barrier::None, false)?;
/// }
/// let tx = pair.tx();
/// assert_eq!((tx.direction(), tx.qid(), tx.size(), tx.status()), (Direction::Tx, 1, 32, QueueStatus::Enabled));
/// assert_eq!((tx.dma_addr(), tx.regs()), (0x1000, regs::queue_base(engine.base(), Direction::Tx, 1)));
/// assert_eq!((tx.next_desc_idx(), tx.next_cdesc_idx(), tx.ring_id()), (3, 0, 1));
/// assert_eq!(tx.available(), 32 - 16 - 3);
///
/// // Acked slots come back; when the producer wraps to slot 0 the phase moves on (1 → 2).
/// pair.ack(3);
/// for _ in 0..29 {
///     pair.copy_prepare_one(0x10_0000, 0x20_0000, 64, Barrier::None, false)?;
///     pair.ack(1);
/// }
/// assert_eq!((pair.tx().next_desc_idx(), pair.tx().ring_id()), (0, 2));
/// assert_eq!(pair.rx().read_desc(31).len_ctrl().ring_id(), 1, "the last slot keeps the old phase");
/// # Ok::<(), udma::UdmaError>(())
/// ```
pub struct Queue<R> {
    ring: R,
    dma_addr: u64,
    regs: u64,
    dir: Direction,
    qid: u32,
    size: u32,
    next_desc_idx: u32,
    desc_ring_id: u8,
    completed: CompletionCounter,
    status: QueueStatus,
}

impl<R: DmaMemory> Queue<R> {
    /// Validates a ring as `udma_q_init_validate` and `udma_m2m_init_queue` do (FACTS §2.4) and builds the
    /// software state, without touching hardware.
    pub(crate) fn new(
        regs: u64,
        dir: Direction,
        qid: u32,
        ring: R,
        dma_addr: u64,
        size: u32,
    ) -> Result<Self, UdmaError> {
        let size_ok = (crate::UDMA_MIN_Q_SIZE..=crate::UDMA_MAX_Q_SIZE).contains(&size)
            && size % 16 == 0
            && size.is_power_of_two();
        if !size_ok {
            return Err(UdmaError::InvalidQueueSize { size });
        }
        let bytes = size as usize * core::mem::size_of::<Desc>();
        let end = dma_addr.checked_add(bytes as u64).ok_or(UdmaError::MisalignedRing { addr: dma_addr })?;
        if dma_addr % crate::UDMA_QUEUE_ADDR_BYTE_ALIGNMENT != 0 || end % crate::UDMA_QUEUE_ADDR_BYTE_ALIGNMENT != 0 {
            return Err(UdmaError::MisalignedRing { addr: dma_addr });
        }
        if ring.len() < bytes || ring.as_ptr() as usize % 16 != 0 {
            return Err(UdmaError::RingMemoryTooSmall { len: ring.len(), size });
        }
        Ok(Queue {
            ring,
            dma_addr,
            regs,
            dir,
            qid,
            size,
            next_desc_idx: 0,
            desc_ring_id: UDMA_INITIAL_RING_ID,
            completed: CompletionCounter::new(size - 1),
            status: QueueStatus::Disabled,
        })
    }

    /// `udma_q_init_internal`: reset the software cursors (both to 0, phase to 1), then program the hardware:
    /// (TX) rate-limit mask, pause + `RST_Q`, ring base and length, `comp_cfg` = 0, enable.
    pub(crate) fn init_hw<M: Mmio + ?Sized>(&mut self, mmio: &M) {
        self.next_desc_idx = 0;
        self.desc_ring_id = UDMA_INITIAL_RING_ID;
        self.completed.reset();
        self.status = QueueStatus::Disabled;
        let r = self.regs;
        if self.dir == Direction::Tx {
            // Unmask the DMB pause source ("enable DMB"); the others stay as out of reset.
            let mask = RateLimitMask::from_bits(regs::RLIMIT_MASK_RESET_VALUE).with_internal_pause_dmb(false);
            mmio.write32(r + regs::q::M2S_RLIMIT_MASK, mask.into_bits());
        }
        // udma_q_reset: pause (clear the enable bits, keep the rest as read), then reset the queue pointers.
        let cfg = QueueCfg::from_bits(mmio.read32(r + regs::q::CFG));
        mmio.write32(r + regs::q::CFG, cfg.with_en_pref(false).with_en_scheduling(false).into_bits());
        mmio.write32(r + regs::q_sw_ctrl(self.dir), QueueSwCtrl::new().with_rst_q(true).into_bits());
        // udma_q_set_pointers: base, length; no completion ring so comp_cfg is 0.
        mmio.write32(r + regs::q::DRBP_LOW, (self.dma_addr as u32) & regs::DRBP_LOW_MASK);
        mmio.write32(r + regs::q::DRBP_HIGH, (self.dma_addr >> 32) as u32);
        mmio.write32(r + regs::q::DRL, RingLength::new().with_descs(self.size).into_bits());
        mmio.write32(r + regs::comp_cfg(self.dir), 0);
        // udma_q_enable.
        mmio.write32(r + regs::q::CFG, regs::Q_CFG_ENABLED);
        self.status = QueueStatus::Enabled;
    }

    /// Free slots: `(next_cdesc_idx − (next_desc_idx + 16)) & size_mask` (`udma_available_get`).
    /// An empty ring has `size − 16` (see the [type's example](Queue)).
    pub fn available(&self) -> u32 {
        self.completed.get().wrapping_sub(self.next_desc_idx.wrapping_add(UDMA_MAX_NUM_CDESC_PER_CACHE_LINE))
            & self.size_mask()
    }

    /// Takes the slot at the producer cursor and returns it with the phase to stamp on it
    /// (`udma_desc_get` followed by `udma_ring_id_get`): when the producer wraps to slot 0 the phase advances
    /// mod 4, so the last slot keeps the old id and slot 0 carries the new one. Availability is the caller's
    /// business, as in the driver. [`M2mQueue::copy_prepare_one`](crate::M2mQueue::copy_prepare_one) takes
    /// its slots this way; the [type's example](Queue) shows the wrap.
    pub fn take_slot(&mut self) -> (u32, u8) {
        let idx = self.next_desc_idx;
        self.next_desc_idx = (idx + 1) & self.size_mask();
        let ring_id = self.desc_ring_id;
        if self.next_desc_idx == 0 {
            self.desc_ring_id = (ring_id + 1) & crate::DMA_RING_ID_MASK;
        }
        (idx, ring_id)
    }

    /// Stores `desc` into slot `idx` as one 16-byte write.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
    /// use udma::{Arch, Barrier, Desc, Ring, Udma};
    ///
    /// let bar0 = Regs::default();
    /// let ring = |pa| Ring { mem: Mem::new(32 * 16, pa), dma_addr: pa };
    /// let pair = Udma::init(&bar0, Arch::V2, 0)?.init_queue(&bar0, 0, ring(0x1000), ring(0x2000), 32)?;
    /// let d = Desc::m2m_tx(0x4000, 256, 1, Barrier::None)?;
    /// pair.tx().write_desc(5, d);
    /// assert_eq!(pair.tx().read_desc(5), d);
    /// assert_eq!(pair.tx().read_desc(6), Desc::default(), "untouched slots read as zero");
    /// # Ok::<(), udma::UdmaError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// Never for `idx < size`; `idx` comes from [`Queue::take_slot`].
    pub fn write_desc(&self, idx: u32, desc: Desc) {
        assert!(idx < self.size, "slot {idx} outside a ring of {}", self.size);
        // SAFETY: the ring memory holds `size` descriptors (checked in `new`), so slot `idx < size` is in bounds.
        let slot = unsafe { (self.ring.as_ptr() as *mut Desc).add(idx as usize) };
        store_desc(slot, desc);
    }

    /// Reads slot `idx` back (for inspection and tests); example on [`Queue::write_desc`].
    ///
    /// # Panics
    ///
    /// If `idx >= size`.
    pub fn read_desc(&self, idx: u32) -> Desc {
        assert!(idx < self.size, "slot {idx} outside a ring of {}", self.size);
        // SAFETY: as in `write_desc`; a volatile read of a plain-old-data descriptor.
        unsafe { core::ptr::read_volatile((self.ring.as_ptr() as *const Desc).add(idx as usize)) }
    }

    /// The doorbell (`udma_desc_action_add`): hand `num` more descriptors to the engine.
    /// [`M2mQueue::copy_start`](crate::M2mQueue::copy_start) rings both of a pair.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
    /// use udma::{regs, Arch, Ring, Udma, UdmaError};
    ///
    /// let bar0 = Regs::default();
    /// let ring = |pa| Ring { mem: Mem::new(32 * 16, pa), dma_addr: pa };
    /// let pair = Udma::init(&bar0, Arch::V2, 0)?.init_queue(&bar0, 0, ring(0x1000), ring(0x2000), 32)?;
    /// pair.rx().doorbell(&bar0, 7)?;
    /// assert_eq!(bar0.read32(pair.rx().regs() + regs::q::DRTP_INC), 7);
    /// assert_eq!(pair.rx().doorbell(&bar0, 33), Err(UdmaError::InvalidDoorbellCount { count: 33, size: 32 }));
    /// # Ok::<(), UdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidDoorbellCount`] (`-1`) when `num` is 0 or above the ring size.
    pub fn doorbell<M: Mmio + ?Sized>(&self, mmio: &M, num: u32) -> Result<(), UdmaError> {
        if num == 0 || num > self.size {
            return Err(UdmaError::InvalidDoorbellCount { count: num, size: self.size });
        }
        // Orders every descriptor store into the ring before the doorbell write that publishes them (the
        // driver's mb()); the engine pairs it with an acquire when it takes the doorbell.
        fence(Ordering::Release);
        mmio.write32(self.regs + regs::q::DRTP_INC, DoorbellCount::new().with_count(num).into_bits());
        Ok(())
    }

    /// Advances the software completion counter by `num` (`udma_cdesc_ack`), freeing `num` slots (see the
    /// [type's example](Queue) and [`CompletionCounter`]).
    pub fn ack(&self, num: u32) {
        self.completed.ack(num);
    }

    /// The producer cursor.
    pub fn next_desc_idx(&self) -> u32 {
        self.next_desc_idx
    }
    /// The consumer cursor.
    pub fn next_cdesc_idx(&self) -> u32 {
        self.completed.get()
    }
    /// The phase the next descriptor will carry.
    pub fn ring_id(&self) -> u8 {
        self.desc_ring_id
    }
    /// Ring size in descriptors.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// `size − 1`.
    pub fn size_mask(&self) -> u32 {
        self.size - 1
    }
    /// Device address of the ring as programmed into `drbp`.
    pub fn dma_addr(&self) -> u64 {
        self.dma_addr
    }
    /// BAR0 offset of this queue's register block.
    pub fn regs(&self) -> u64 {
        self.regs
    }
    /// TX or RX.
    pub fn direction(&self) -> Direction {
        self.dir
    }
    /// Queue id.
    pub fn qid(&self) -> u32 {
        self.qid
    }
    /// Hardware status as last programmed.
    pub fn status(&self) -> QueueStatus {
        self.status
    }
    /// The ring's memory.
    pub fn ring(&self) -> &R {
        &self.ring
    }
}

impl<R> core::fmt::Debug for Queue<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Queue")
            .field("dir", &self.dir)
            .field("qid", &self.qid)
            .field("size", &self.size)
            .field("next_desc_idx", &self.next_desc_idx)
            .field("desc_ring_id", &self.desc_ring_id)
            .field("next_cdesc_idx", &self.completed)
            .finish()
    }
}

/// Stores a descriptor into its ring slot as one 16-byte write, as the driver does (FACTS §1.5).
///
/// `slot` must be a slot of a ring: valid for 16 bytes and 16-byte aligned (the ring is, and `Desc` is 16
/// bytes). The slot is CPU-owned: the engine reads only slots handed over by a later doorbell, whose release
/// fence orders this store before it.
#[inline]
fn store_desc(slot: *mut Desc, desc: Desc) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__m128i, _mm_set_epi64x, _mm_store_si128};
        let lo = u64::from(desc.len_ctrl().into_bits()) | (u64::from(desc.word1()) << 32);
        // SAFETY: SSE2 is part of the x86_64 baseline; `slot` is valid for 16 bytes and 16-byte aligned, as
        // `_mm_store_si128` requires. Little-endian lanes: the low quadword holds len_ctrl then word 1.
        unsafe { _mm_store_si128(slot as *mut __m128i, _mm_set_epi64x(desc.buf_ptr() as i64, lo as i64)) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above; one volatile store of the whole descriptor.
    unsafe {
        core::ptr::write_volatile(slot, desc)
    };
}
