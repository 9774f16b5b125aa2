//! M2M queue pairs and the per-engine facade (`udma_m2m.c`, FACTS §1.5, §2.2, §2.4).

use crate::regs::{ChangeState, EngineReg, UdmaState};
use crate::{regs, Arch, Barrier, Desc, Direction, DmaMemory, Mmio, Queue, UdmaError};

/// A descriptor ring handed to queue init: its memory and the device address programmed into `drbp`
/// (for a host ring, the host PA with the arch's `pci_host_base` OR-ed in).
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
/// use udma::{Arch, Ring, Udma, UdmaError};
///
/// let bar0 = Regs::default();
/// let engine = Udma::init(&bar0, Arch::V2, 32)?;
/// let host = Arch::V2.pci_host_base();
/// let ring = |pa: u64| Ring { mem: Mem::new(64 * 16, pa), dma_addr: pa | host };
/// let q = engine.init_queue(&bar0, 0, ring(0x1_0000), ring(0x2_0000), 64)?;
/// assert_eq!(q.tx().dma_addr(), 0x1_0000 | host);
/// // The base and the end of a ring must be 256-byte aligned.
/// let skewed = Ring { mem: Mem::new(64 * 16, 0x3_0000), dma_addr: 0x3_0040 };
/// let err = engine.init_queue(&bar0, 1, skewed, ring(0x4_0000), 64).err();
/// assert_eq!(err, Some(UdmaError::MisalignedRing { addr: 0x3_0040 }));
/// # Ok::<(), UdmaError>(())
/// ```
pub struct Ring<R> {
    /// The ring's memory.
    pub mem: R,
    /// Device-visible address of `mem`.
    pub dma_addr: u64,
}

/// One M2M queue pair: TX (M2S) and RX (S2M) rings of the same qid, moving in lock-step. Made by
/// [`Udma::init_queue`]; the [crate example](crate) stages, starts and acks a copy on one.
pub struct M2mQueue<R> {
    qid: u32,
    tx: Queue<R>,
    rx: Queue<R>,
}

impl<R: DmaMemory> M2mQueue<R> {
    /// `udma_m2m_init_queue` on `engine`: validates both rings, then (re)programs both queues' registers and
    /// resets the software cursors. Reached through [`Udma::init_queue`].
    fn init<M: Mmio + ?Sized>(
        mmio: &M,
        engine: &Udma,
        qid: u32,
        tx: Ring<R>,
        rx: Ring<R>,
        size: u32,
    ) -> Result<Self, UdmaError> {
        if qid >= engine.num_queues() {
            return Err(UdmaError::InvalidQueue { qid, num_queues: engine.num_queues() });
        }
        let base = engine.base();
        let tx = Queue::new(regs::queue_base(base, Direction::Tx, qid), Direction::Tx, qid, tx.mem, tx.dma_addr, size)?;
        let rx = Queue::new(regs::queue_base(base, Direction::Rx, qid), Direction::Rx, qid, rx.mem, rx.dma_addr, size)?;
        let mut q = M2mQueue { qid, tx, rx };
        q.reinit(mmio);
        Ok(q)
    }

    /// Re-programs both queues and resets their cursors to 0 and their phase to 1 (what `ndmar_h2t_ring_init`
    /// does on the V2 retry path). Anything staged but not completed is abandoned.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
    /// use udma::{regs, Arch, Barrier, Ring, Udma};
    ///
    /// let bar0 = Regs::default();
    /// let ring = |pa| Ring { mem: Mem::new(32 * 16, pa), dma_addr: pa };
    /// let mut q = Udma::init(&bar0, Arch::V2, 33)?.init_queue(&bar0, 0, ring(0x1000), ring(0x2000), 32)?;
    /// q.copy_prepare_one(0x10_0000, 0x20_0000, 64, Barrier::None, false)?;
    /// q.reinit(&bar0);
    /// assert_eq!((q.tx().next_desc_idx(), q.rx().next_cdesc_idx(), q.available()), (0, 0, 16));
    /// // `RST_Q` was written to both queues' software control registers.
    /// assert_eq!(bar0.read32(q.tx().regs() + regs::q::M2S_Q_SW_CTRL), regs::Q_SW_CTRL_RST_Q);
    /// assert_eq!(bar0.read32(q.rx().regs() + regs::q::S2M_Q_SW_CTRL), regs::Q_SW_CTRL_RST_Q);
    /// # Ok::<(), udma::UdmaError>(())
    /// ```
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
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
    /// use udma::{Arch, Barrier, Direction, Ring, Udma, UdmaError};
    ///
    /// let bar0 = Regs::default();
    /// let ring = |pa| Ring { mem: Mem::new(32 * 16, pa), dma_addr: pa };
    /// let mut q = Udma::init(&bar0, Arch::V3, 0)?.init_queue(&bar0, 3, ring(0x1000), ring(0x2000), 32)?;
    /// q.copy_prepare_one(0x10_0000, 0x20_0000, 65536, Barrier::WriteBarrier, false)?;
    /// let (tx, rx) = (q.tx().read_desc(0).tx(), q.rx().read_desc(0).rx());
    /// assert_eq!((tx.src, rx.dst, tx.len_ctrl.len_bytes()), (0x10_0000, 0x20_0000, 65536));
    /// assert_eq!(tx.barrier(), Barrier::WriteBarrier);
    /// assert_eq!(q.copy_prepare_one(0, 0, 65537, Barrier::None, false), Err(UdmaError::InvalidLength { len: 65537 }));
    /// // 32 slots less the 16-slot guard gap: the 16th more pair finds the ring full.
    /// for _ in 1..16 {
    ///     q.copy_prepare_one(0x10_0000, 0x20_0000, 4, Barrier::None, false)?;
    /// }
    /// let full = q.copy_prepare_one(0x10_0000, 0x20_0000, 4, Barrier::None, false);
    /// assert_eq!(full, Err(UdmaError::RingFull { qid: 3, dir: Direction::Tx }));
    /// # Ok::<(), UdmaError>(())
    /// ```
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
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
    /// use udma::{regs, Arch, Ring, Udma, UdmaError};
    ///
    /// let bar0 = Regs::default();
    /// let ring = |pa| Ring { mem: Mem::new(32 * 16, pa), dma_addr: pa };
    /// let q = Udma::init(&bar0, Arch::V2, 1)?.init_queue(&bar0, 2, ring(0x1000), ring(0x2000), 32)?;
    /// q.copy_start(&bar0, 0, 4)?; // RX only: a TX count of 0 rings no TX doorbell
    /// let (tx_bell, rx_bell) = (q.tx().regs() + regs::q::DRTP_INC, q.rx().regs() + regs::q::DRTP_INC);
    /// assert_eq!((bar0.read32(tx_bell), bar0.read32(rx_bell)), (0, 4));
    /// assert_eq!(q.copy_start(&bar0, 1, 0), Err(UdmaError::InvalidDoorbellCount { count: 0, size: 32 }));
    /// # Ok::<(), UdmaError>(())
    /// ```
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

    /// Frees `num` slots on both rings, RX then TX (`ndma_ack_completed_desc`); see the [crate example](crate).
    pub fn ack(&self, num: u32) {
        self.rx.ack(num);
        self.tx.ack(num);
    }

    /// Slots free on both rings (see the [crate example](crate)).
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

/// One UDMA engine, brought up: the driver's `struct udma` after `udma_init` + `udma_m2m_init_engine`
/// (FACTS §2.4). [`Udma::init`] is the one way to bring an engine up and [`Udma::init_queue`] the one way to
/// bring one of its queue pairs up; the op layer and every test go through them.
///
/// What engine init programs, and what it cannot:
/// - the state machine of both directions to NORMAL (`udma_state_set`: `change_state` NORMAL, M2S then S2M);
/// - `rev_id` = 4, `num_of_queues_max` = 16 and the queue handles are software state: [`Udma::num_queues`];
/// - FACTS give values but **no register** for the rest, so it is left out rather than written to an
///   invented offset: `cfg_1c` = (1 << 12) | (16 >> 2); at most 65 descriptors per packet
///   (`ALLOWED_DESC_PER_PACKET` + 1); prefetch minimum and maximum burst 8 (the V3 DGE workaround);
///   `disable_phase_bit` = 0; on V3, ring-id errors masked on SENG engines (ids < 128). `cfg_len` (M2S
///   +0x254) has an offset but no value in FACTS, so it keeps its reset value.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
/// use udma::{regs, Arch, Direction, Udma, UdmaError, UdmaState};
///
/// let bar0 = Regs::default();
/// let engine = Udma::init(&bar0, Arch::V2, 32)?; // the D2H engine
/// assert_eq!((engine.arch(), engine.id(), engine.base(), engine.num_queues()), (Arch::V2, 32, 0x3060_0000, 16));
/// assert_eq!(bar0.read32(engine.base() + regs::M2S_CHANGE_STATE), regs::CHANGE_STATE_NORMAL);
/// assert_eq!(bar0.read32(engine.base() + regs::S2M_CHANGE_STATE), regs::CHANGE_STATE_NORMAL);
/// assert_eq!(Udma::init(&bar0, Arch::V2, 34).unwrap_err(), UdmaError::NoSuchEngine { engine: 34, num_engines: 34 });
///
/// // The state machine's register belongs to the hardware; a model (here: a test double) moves it.
/// bar0.write32(engine.base() + regs::M2S_STATE, UdmaState::Normal as u32);
/// assert_eq!(engine.state(&bar0, Direction::Tx), Some(UdmaState::Normal));
/// bar0.write32(engine.base() + regs::S2M_STATE, 9);
/// assert_eq!(engine.state(&bar0, Direction::Rx), None, "9 names no state");
/// # Ok::<(), UdmaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Udma {
    arch: Arch,
    id: u32,
    base: u64,
}

impl Udma {
    /// Brings engine `eng` of an `arch` device up (see the [type's documentation](Udma) for what is programmed,
    /// and its example).
    ///
    /// # Errors
    ///
    /// [`UdmaError::NoSuchEngine`] (`-ENOENT`) for an engine id the arch does not have; nothing is written.
    pub fn init<M: Mmio + ?Sized>(mmio: &M, arch: Arch, eng: u32) -> Result<Udma, UdmaError> {
        let base =
            arch.engine_base(eng).ok_or(UdmaError::NoSuchEngine { engine: eng, num_engines: arch.num_engines() })?;
        let normal = ChangeState::new().with_normal(true).into_bits();
        for change_state in [regs::M2S_CHANGE_STATE, regs::S2M_CHANGE_STATE] {
            mmio.write32(base + change_state, normal);
        }
        Ok(Udma { arch, id: eng, base })
    }

    /// Brings queue pair `qid` of this engine up (`udma_m2m_init_queue`, FACTS §2.4): validates both rings,
    /// then for TX and then RX programs the rate-limit mask (TX only), pause + `RST_Q`, ring base and length,
    /// `comp_cfg` = 0 and enable, and starts the software cursors at 0 with phase 1. An M2M queue has no
    /// completion ring (the driver refuses one), so there is no parameter for it.
    ///
    /// # Errors
    ///
    /// All `-EINVAL`: [`UdmaError::InvalidQueue`] for qid ≥ [`Udma::num_queues`],
    /// [`UdmaError::InvalidQueueSize`], [`UdmaError::MisalignedRing`], [`UdmaError::RingMemoryTooSmall`].
    /// Nothing is written to hardware on error.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
    /// use udma::{regs, Arch, Ring, Udma, UdmaError};
    ///
    /// let bar0 = Regs::default();
    /// let engine = Udma::init(&bar0, Arch::V3, 129)?;
    /// let ring = |pa| Ring { mem: Mem::new(64 * 16, pa), dma_addr: pa };
    /// let q = engine.init_queue(&bar0, 1, ring(0x1_0000), ring(0x2_0000), 64)?;
    /// let tx = q.tx().regs();
    /// assert_eq!(bar0.read32(tx + regs::q::DRBP_LOW), 0x1_0000);
    /// assert_eq!(bar0.read32(tx + regs::q::DRL), 64);
    /// assert_eq!(bar0.read32(tx + regs::q::CFG), regs::Q_CFG_ENABLED);
    /// let err = engine.init_queue(&bar0, 16, ring(0x3_0000), ring(0x4_0000), 64).err();
    /// assert_eq!(err, Some(UdmaError::InvalidQueue { qid: 16, num_queues: 16 }));
    /// let err = engine.init_queue(&bar0, 2, ring(0x3_0000), ring(0x4_0000), 48).err();
    /// assert_eq!(err, Some(UdmaError::InvalidQueueSize { size: 48 }));
    /// # Ok::<(), UdmaError>(())
    /// ```
    pub fn init_queue<R: DmaMemory, M: Mmio + ?Sized>(
        &self,
        mmio: &M,
        qid: u32,
        tx: Ring<R>,
        rx: Ring<R>,
        size: u32,
    ) -> Result<M2mQueue<R>, UdmaError> {
        M2mQueue::init(mmio, self, qid, tx, rx, size)
    }

    /// `udma_state_get`: the state of direction `dir`, or `None` for a value that names no state (example on
    /// [`Udma`]).
    pub fn state<M: Mmio + ?Sized>(&self, mmio: &M, dir: Direction) -> Option<UdmaState> {
        let off = EngineReg::State.offset(dir)?;
        UdmaState::from_bits(mmio.read32(self.base + off))
    }

    /// The device generation.
    pub fn arch(&self) -> Arch {
        self.arch
    }
    /// Engine id.
    pub fn id(&self) -> u32 {
        self.id
    }
    /// BAR0 offset of the engine's register block.
    pub fn base(&self) -> u64 {
        self.base
    }
    /// Queue pairs the engine has (`num_of_queues_max`, `DMA_MAX_Q`).
    pub fn num_queues(&self) -> u32 {
        crate::DMA_MAX_Q
    }
}
