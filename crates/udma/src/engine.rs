//! M2M queue pairs and the per-engine facade (`udma_m2m.c`, FACTS §1.5, §2.2, §2.4).

use crate::{regs, Barrier, Desc, Direction, DmaMemory, Mmio, Queue, UdmaError};

/// A descriptor ring handed to queue init: its memory and the device address programmed into `drbp`
/// (for a host ring, the host PA with the arch's `pci_host_base` OR-ed in).
pub struct Ring<R> {
    /// The ring's memory.
    pub mem: R,
    /// Device-visible address of `mem`.
    pub dma_addr: u64,
}

/// One M2M queue pair: TX (M2S) and RX (S2M) rings of the same qid, moving in lock-step.
pub struct M2mQueue<R> {
    qid: u32,
    tx: Queue<R>,
    rx: Queue<R>,
}

impl<R: DmaMemory> M2mQueue<R> {
    /// `udma_m2m_init_queue`: validates both rings, then (re)programs both queues' registers and resets the
    /// software cursors. `completion` must be `None`: M2M queues have no completion ring.
    ///
    /// # Errors
    ///
    /// All `-EINVAL`: [`UdmaError::InvalidQueue`] for qid ≥ `num_queues`, [`UdmaError::InvalidQueueSize`],
    /// [`UdmaError::MisalignedRing`], [`UdmaError::RingMemoryTooSmall`],
    /// [`UdmaError::CompletionRingUnsupported`]. Nothing is written to hardware on error.
    #[allow(clippy::too_many_arguments)]
    pub fn init<M: Mmio + ?Sized>(
        mmio: &M,
        engine_base: u64,
        qid: u32,
        num_queues: u32,
        tx: Ring<R>,
        rx: Ring<R>,
        size: u32,
        completion: Option<Ring<R>>,
    ) -> Result<Self, UdmaError> {
        if qid >= num_queues {
            return Err(UdmaError::InvalidQueue { qid, num_queues, errno: crate::errno::EINVAL });
        }
        if completion.is_some() {
            return Err(UdmaError::CompletionRingUnsupported);
        }
        let tx = Queue::new(
            regs::queue_base(engine_base, Direction::Tx, qid),
            Direction::Tx,
            qid,
            tx.mem,
            tx.dma_addr,
            size,
        )?;
        let rx = Queue::new(
            regs::queue_base(engine_base, Direction::Rx, qid),
            Direction::Rx,
            qid,
            rx.mem,
            rx.dma_addr,
            size,
        )?;
        let mut q = M2mQueue { qid, tx, rx };
        q.reinit(mmio);
        Ok(q)
    }

    /// Re-programs both queues and resets their cursors to 0 and their phase to 1 (what `ndmar_h2t_ring_init`
    /// does on the V2 retry path). Anything staged but not completed is abandoned.
    pub fn reinit<M: Mmio + ?Sized>(&mut self, mmio: &M) {
        self.tx.init_hw(mmio);
        self.rx.init_hw(mmio);
    }

    /// `udma_m2m_copy_prepare_one`: stage one descriptor pair copying `size` bytes from `src` to `dst`, RX slot
    /// first, then TX, each written as one 16-byte store. No doorbell.
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidLength`] (`-1`) for a size of 0 or above 65536; [`UdmaError::RingFull`]
    /// (`-ENOMEM`) when either ring has no free slot. Nothing is staged on error.
    #[inline]
    pub fn copy_prepare_one(
        &mut self,
        src: u64,
        dst: u64,
        size: u32,
        barrier: Barrier,
        set_int: bool,
    ) -> Result<(), UdmaError> {
        if size == 0 || size > crate::MAX_DMA_DESC_SIZE {
            return Err(UdmaError::InvalidLength { len: size });
        }
        if self.tx.available() < 1 {
            return Err(UdmaError::RingFull { qid: self.qid, dir: Direction::Tx });
        }
        if self.rx.available() < 1 {
            return Err(UdmaError::RingFull { qid: self.qid, dir: Direction::Rx });
        }
        let (rx_idx, rx_id) = self.rx.take_slot();
        let (tx_idx, tx_id) = self.tx.take_slot();
        // Both builders only fail on the length, which was checked above.
        let (tx_len_ctrl, tx_meta_ctrl, rx_len_ctrl) = Desc::m2m_pair_words(size, tx_id, rx_id, barrier, set_int)?;
        // Exactly `Desc::m2m_rx(dst, ..)` and `Desc::m2m_tx(src, ..)`: buf2_ptr_lo is 0 on the M2M path.
        self.rx.write_desc(rx_idx, Desc::from_words(rx_len_ctrl, 0, dst));
        self.tx.write_desc(tx_idx, Desc::from_words(tx_len_ctrl, tx_meta_ctrl, src));
        Ok(())
    }

    /// `udma_m2m_copy_start`: ring the RX doorbell with `s2m_count`, then the TX doorbell with `m2s_count` if
    /// it is non-zero.
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidDoorbellCount`] (`-1`) when a count exceeds its ring or the RX count is 0; no
    /// doorbell is rung in that case.
    pub fn copy_start<M: Mmio + ?Sized>(&self, mmio: &M, m2s_count: u32, s2m_count: u32) -> Result<(), UdmaError> {
        if m2s_count > self.tx.size() || s2m_count > self.rx.size() || s2m_count == 0 {
            return Err(UdmaError::InvalidDoorbellCount {
                count: if s2m_count == 0 || s2m_count > self.rx.size() { s2m_count } else { m2s_count },
                size: self.rx.size(),
            });
        }
        self.rx.doorbell(mmio, s2m_count)?;
        if m2s_count > 0 {
            self.tx.doorbell(mmio, m2s_count)?;
        }
        Ok(())
    }

    /// Frees `num` slots on both rings, RX then TX (`ndma_ack_completed_desc`).
    pub fn ack(&self, num: u32) {
        self.rx.ack(num);
        self.tx.ack(num);
    }

    /// Slots free on both rings.
    pub fn available(&self) -> u32 {
        self.tx.available().min(self.rx.available())
    }

    /// Queue id.
    pub fn qid(&self) -> u32 {
        self.qid
    }
    /// The TX (M2S) queue.
    pub fn tx(&self) -> &Queue<R> {
        &self.tx
    }
    /// The RX (S2M) queue.
    pub fn rx(&self) -> &Queue<R> {
        &self.rx
    }
}

/// One UDMA engine seen as the driver's `struct udma`: a BAR0 base and up to 16 queue pairs indexed by qid.
pub struct Udma<R> {
    base: u64,
    num_queues: u32,
    queues: [Option<M2mQueue<R>>; crate::DMA_MAX_Q as usize],
}

impl<R: DmaMemory> Udma<R> {
    /// An engine at BAR0 offset `base` with `num_queues` (≤ 16) queues, none initialised.
    pub fn new(base: u64, num_queues: u32) -> Self {
        Udma { base, num_queues: num_queues.min(crate::DMA_MAX_Q), queues: Default::default() }
    }

    /// Puts both directions of the engine in NORMAL state (`udma_state_set`).
    pub fn start<M: Mmio + ?Sized>(&self, mmio: &M) {
        mmio.write32(self.base + regs::M2S_CHANGE_STATE, regs::CHANGE_STATE_NORMAL);
        mmio.write32(self.base + regs::S2M_CHANGE_STATE, regs::CHANGE_STATE_NORMAL);
    }

    /// Initialises queue pair `qid` (see [`M2mQueue::init`]), replacing any previous one.
    ///
    /// # Errors
    ///
    /// As [`M2mQueue::init`].
    pub fn init_queue<M: Mmio + ?Sized>(
        &mut self,
        mmio: &M,
        qid: u32,
        tx: Ring<R>,
        rx: Ring<R>,
        size: u32,
    ) -> Result<&mut M2mQueue<R>, UdmaError> {
        let q = M2mQueue::init(mmio, self.base, qid, self.num_queues, tx, rx, size, None)?;
        Ok(self.queues[qid as usize].insert(q))
    }

    fn pair(&self, qid: u32) -> Result<&M2mQueue<R>, UdmaError> {
        if qid >= self.num_queues {
            return Err(UdmaError::InvalidQueue { qid, num_queues: self.num_queues, errno: crate::errno::EPERM });
        }
        self.queues[qid as usize].as_ref().ok_or(UdmaError::QueueNotInitialised { qid })
    }

    /// [`M2mQueue::copy_prepare_one`] on queue `qid`.
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidQueue`] (`-1`) for qid ≥ the engine's queues, [`UdmaError::QueueNotInitialised`],
    /// or the pair's own errors.
    pub fn copy_prepare_one(
        &mut self,
        qid: u32,
        src: u64,
        dst: u64,
        size: u32,
        barrier: Barrier,
        set_int: bool,
    ) -> Result<(), UdmaError> {
        self.pair(qid)?;
        match self.queues[qid as usize].as_mut() {
            Some(q) => q.copy_prepare_one(src, dst, size, barrier, set_int),
            None => Err(UdmaError::QueueNotInitialised { qid }),
        }
    }

    /// [`M2mQueue::copy_start`] on queue `qid`.
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidQueue`] (`-1`), [`UdmaError::QueueNotInitialised`], or the pair's own errors.
    pub fn copy_start<M: Mmio + ?Sized>(&self, mmio: &M, qid: u32, m2s: u32, s2m: u32) -> Result<(), UdmaError> {
        self.pair(qid)?.copy_start(mmio, m2s, s2m)
    }

    /// [`M2mQueue::ack`] on queue `qid`.
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidQueue`] (`-1`) or [`UdmaError::QueueNotInitialised`].
    pub fn ack(&self, qid: u32, num: u32) -> Result<(), UdmaError> {
        self.pair(qid)?.ack(num);
        Ok(())
    }

    /// Queue pair `qid`, if initialised.
    pub fn queue(&self, qid: u32) -> Option<&M2mQueue<R>> {
        self.queues.get(qid as usize)?.as_ref()
    }

    /// Queue pair `qid`, mutably, if initialised.
    pub fn queue_mut(&mut self, qid: u32) -> Option<&mut M2mQueue<R>> {
        self.queues.get_mut(qid as usize)?.as_mut()
    }

    /// BAR0 offset of the engine.
    pub fn base(&self) -> u64 {
        self.base
    }
}
