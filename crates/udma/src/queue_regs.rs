//! The engine's view of one queue, read back through BAR0 ([`Queue::read_regs`]): what a DMA engineer dumps
//! when a transfer hangs — the head / tail / current pointers with their ring ids, the queue status, whether
//! the queue is enabled or paused, and the direction's engine state. Reads only: nothing here writes a
//! register.

use crate::regs::{self, EngineReg, QueueCfg, QueueReg, RateLimitMask, RingLength, RingPtr, UdmaState};
use crate::{DmaMemory, Mmio, Queue};

/// A ring pointer register (`drhp`, `drtp`, `dcp`) decoded: slot offset and ring id (phase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingPos {
    /// Descriptor slot, bits 23:0.
    pub slot: u32,
    /// Ring id, bits 31:30.
    pub ring_id: u8,
}

impl RingPos {
    fn from_bits(v: u32) -> RingPos {
        let p = RingPtr::from_bits(v);
        RingPos { slot: p.offset(), ring_id: p.ring_id() }
    }
}

impl core::fmt::Display for RingPos {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} (ring id {})", self.slot, self.ring_id)
    }
}

/// One queue's registers as read through BAR0 at one moment (see [`Queue::read_regs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRegsView {
    /// `cfg`, raw.
    pub cfg: u32,
    /// Both enable bits of `cfg` are set (`EN_PREF`, `EN_SCHEDULING`): the queue fetches and executes.
    /// Cleared, the queue is paused.
    pub enabled: bool,
    /// `status`, raw (its layout is the hardware's; 0 on a healthy queue of the device model).
    pub status: u32,
    /// `drhp`: the next slot the engine fetches.
    pub head: RingPos,
    /// `drtp`: the slot after the last one handed over by doorbells.
    pub tail: RingPos,
    /// `dcp`: the current pointer.
    pub current: RingPos,
    /// `drbp_high:drbp_low`: the ring's device address.
    pub ring_base: u64,
    /// `drl`: ring length in descriptors.
    pub ring_len: u32,
    /// TX only: the rate-limiter mask leaves `INTERNAL_PAUSE_DMB` unmasked (a DMB pauses the queue until
    /// earlier writes land). `None` on RX.
    pub dmb_pauses: Option<bool>,
    /// The direction's engine state register, raw.
    pub engine_state_raw: u32,
    /// The direction's engine state, `None` for a value naming no state.
    pub engine_state: Option<UdmaState>,
}

impl<R: DmaMemory> Queue<R> {
    /// Reads this queue's registers (and its direction's engine state) through `mmio`: the engine's side of
    /// the ring, next to the software cursors [`Queue::next_desc_idx`] and [`Queue::next_cdesc_idx`]. Only
    /// reads.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
    /// use udma::{regs, Arch, Direction, Mmio, Ring, Udma, UdmaState};
    ///
    /// let bar0 = Regs::default();
    /// let engine = Udma::init(&bar0, Arch::V3, 2)?;
    /// let ring = |pa| Ring { mem: Mem::new(64 * 16, pa), dma_addr: pa };
    /// let q = engine.init_queue(&bar0, 1, ring(0x1_0000), ring(0x2_0000), 64)?;
    /// // A device would move these; the test double stores what is written.
    /// bar0.write32(q.tx().regs() + regs::q::DRHP, regs::ptr_value(5, 2));
    /// bar0.write32(engine.base() + regs::M2S_STATE, UdmaState::Normal as u32);
    /// let v = q.tx().read_regs(&bar0);
    /// assert_eq!((v.head.slot, v.head.ring_id, v.ring_base, v.ring_len), (5, 2, 0x1_0000, 64));
    /// assert!(v.enabled && v.dmb_pauses == Some(true));
    /// assert_eq!(v.engine_state, Some(UdmaState::Normal));
    /// assert_eq!(q.rx().read_regs(&bar0).dmb_pauses, None, "RX has no rate limiter");
    /// // As `ndmar_queue_get_state` reads them: the base without drbp_low's low 6 bits, the length, head and
    /// // tail offsets in bits 23:0.
    /// bar0.write32(q.tx().regs() + regs::q::DRBP_LOW, 0x1_003F);
    /// bar0.write32(q.tx().regs() + regs::q::DRL, 0xAB00_0040);
    /// bar0.write32(q.tx().regs() + regs::q::DRTP, 0x7F00_0007);
    /// let v = q.tx().read_regs(&bar0);
    /// assert_eq!((v.ring_base, v.ring_len, v.tail.slot, v.tail.ring_id), (0x1_0000, 64, 7, 1));
    /// # Ok::<(), udma::UdmaError>(())
    /// ```
    pub fn read_regs<M: Mmio + ?Sized>(&self, mmio: &M) -> QueueRegsView {
        let dir = self.direction();
        let r = self.regs();
        let rd = |reg: QueueReg| reg.offset(dir).map_or(0, |off| mmio.read32(r + off));
        let cfg = rd(QueueReg::Cfg);
        let engine_base = r - regs::dir_block(dir) - regs::QUEUES_OFFSET - u64::from(self.qid()) * regs::QUEUE_STRIDE;
        let engine_state_raw = EngineReg::State.offset(dir).map_or(0, |off| mmio.read32(engine_base + off));
        QueueRegsView {
            cfg,
            enabled: QueueCfg::from_bits(cfg).enabled(),
            status: rd(QueueReg::Status),
            head: RingPos::from_bits(rd(QueueReg::Drhp)),
            tail: RingPos::from_bits(rd(QueueReg::Drtp)),
            current: RingPos::from_bits(rd(QueueReg::Dcp)),
            ring_base: (u64::from(rd(QueueReg::DrbpHigh)) << 32)
                | u64::from(rd(QueueReg::DrbpLow) & regs::DRBP_LOW_MASK),
            ring_len: RingLength::from_bits(rd(QueueReg::Drl)).descs(),
            dmb_pauses: QueueReg::RlimitMask
                .offset(dir)
                .map(|off| !RateLimitMask::from_bits(mmio.read32(r + off)).internal_pause_dmb()),
            engine_state_raw,
            engine_state: UdmaState::from_bits(engine_state_raw),
        }
    }
}
