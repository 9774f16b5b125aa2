//! The BAR0 register file: where an offset lands (engine, then the register `udma::regs` declares there) and
//! the register storage (FACTS §2.3, §4). The layout is the HAL's own declaration ([`Register::decode`]),
//! so the model and the HAL cannot disagree on an offset. Side effects of writes (doorbells, resets, state
//! changes) live in the engine.

use udma::regs::{EngineReg, QueueCfg, QueueReg, RateLimitMask, Register, RingLength, UdmaState};
use udma::{regs, Arch, DMA_MAX_Q, UDMA_INITIAL_RING_ID};

/// Engine state values (`enum udma_state`), as the `state` register reads.
pub mod engine_state {
    use udma::UdmaState;

    /// DISABLE.
    pub const DISABLE: u32 = UdmaState::Disable as u32;
    /// IDLE.
    pub const IDLE: u32 = UdmaState::Idle as u32;
    /// NORMAL: the engine processes descriptors.
    pub const NORMAL: u32 = UdmaState::Normal as u32;
    /// ABORT.
    pub const ABORT: u32 = UdmaState::Abort as u32;
}

/// A decoded BAR0 offset: a register of engine `eng`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) eng: u32,
    pub(crate) reg: Register,
}

/// log2 of the BAR0 granule engines are placed on: every engine's register block starts on a multiple of
/// 256 KiB and is shorter than that, so the granule an offset falls in names at most one engine.
const GRANULE_SHIFT: u32 = 18;

/// Which engine, if any, owns each BAR0 granule of one arch, so decoding an offset is one table load: a
/// binary search over the engine bases was ~120 instructions of every doorbell, a hash lookup ~30. The table
/// spans the granules from the lowest engine base to the highest (V2: 53, V3: about 11,000, a byte each).
#[derive(Debug)]
pub(crate) struct Bar0Map {
    /// The granule `by_granule[0]` stands for.
    first: u64,
    /// Per granule from `first`: the engine whose block starts there, or [`NO_ENGINE`].
    by_granule: Box<[u8]>,
}

/// A granule no engine owns.
const NO_ENGINE: u8 = u8::MAX;

impl Bar0Map {
    pub(crate) fn new(arch: Arch) -> Self {
        let granules: Vec<(u64, u8)> = (0..arch.num_engines())
            .filter_map(|e| arch.engine_base(e).map(|b| (b, e)))
            .map(|(b, e)| {
                assert!(
                    b % (1 << GRANULE_SHIFT) == 0 && regs::ENGINE_REGS_SIZE <= 1 << GRANULE_SHIFT,
                    "engine {e}'s block must fill part of one granule"
                );
                let e = u8::try_from(e).ok().filter(|&e| e != NO_ENGINE).expect("engine ids fit a byte");
                (b >> GRANULE_SHIFT, e)
            })
            .collect();
        let first = granules.iter().map(|&(g, _)| g).min().unwrap_or(0);
        let last = granules.iter().map(|&(g, _)| g).max().unwrap_or(0);
        let mut by_granule = vec![NO_ENGINE; (last - first + 1) as usize].into_boxed_slice();
        for (g, e) in granules {
            by_granule[(g - first) as usize] = e;
        }
        Bar0Map { first, by_granule }
    }

    /// Decodes a BAR0 offset, or `None` for anything that is not a declared register (unmapped space,
    /// unaligned offsets, reserved and `gen` blocks, queue ids beyond 16).
    pub(crate) fn decode(&self, off: u64) -> Option<Target> {
        let granule = off >> GRANULE_SHIFT;
        let eng = *self.by_granule.get(usize::try_from(granule.checked_sub(self.first)?).ok()?)?;
        if eng == NO_ENGINE {
            return None;
        }
        let reg = Register::decode(off - (granule << GRANULE_SHIFT))?;
        Some(Target { eng: u32::from(eng), reg })
    }
}

/// One direction of one queue: its registers and the engine's live cursors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueRegs {
    /// Stored values of the plainly stored registers, indexed by [`QueueReg`]; the cursor registers and
    /// `status` are computed or owned by the engine instead.
    values: [u32; QueueReg::COUNT],
    /// The `status` register: set by the engine when it halts the pair, cleared by `RST_Q`.
    pub(crate) status: u32,
    /// Next slot the engine fetches.
    pub(crate) head: u32,
    /// Phase the descriptor at `head` must carry.
    pub(crate) head_phase: u8,
    /// Slot after the last one handed over by doorbells.
    pub(crate) tail: u32,
    /// Phase of the tail cursor (advances when it wraps).
    pub(crate) tail_phase: u8,
    /// Descriptors handed over and not yet executed.
    pub(crate) pending: u32,
    /// Of `pending`, the descriptors the batch in progress has already fetched. `pending` drops only when the
    /// batch retires, but the batch's marker writes come earlier, and a driver that sees one may reuse every
    /// slot up to it: fetched slots no longer hold anything the engine needs, so a doorbell may refill them.
    pub(crate) fetched: u32,
}

impl Default for QueueRegs {
    fn default() -> Self {
        let mut values = [0; QueueReg::COUNT];
        for &reg in QueueReg::ALL {
            values[reg as usize] = reg.reset_value();
        }
        QueueRegs {
            values,
            status: 0,
            head: 0,
            head_phase: UDMA_INITIAL_RING_ID,
            tail: 0,
            tail_phase: UDMA_INITIAL_RING_ID,
            pending: 0,
            fetched: 0,
        }
    }
}

impl QueueRegs {
    /// The stored value of `reg`.
    pub(crate) fn get(&self, reg: QueueReg) -> u32 {
        self.values[reg as usize]
    }

    /// Stores `v` in `reg` (no side effect).
    pub(crate) fn set(&mut self, reg: QueueReg, v: u32) {
        self.values[reg as usize] = v;
    }

    /// Ring length in descriptors.
    pub(crate) fn ring_len(&self) -> u32 {
        RingLength::from_bits(self.get(QueueReg::Drl)).descs()
    }

    /// Device address of the ring.
    pub(crate) fn ring_base(&self) -> u64 {
        (u64::from(self.get(QueueReg::DrbpHigh)) << 32) | u64::from(self.get(QueueReg::DrbpLow) & regs::DRBP_LOW_MASK)
    }

    /// Both enable bits set.
    pub(crate) fn enabled(&self) -> bool {
        QueueCfg::from_bits(self.get(QueueReg::Cfg)).enabled()
    }

    /// A TX descriptor's DMB pauses the queue until earlier writes land: queue init unmasked
    /// `INTERNAL_PAUSE_DMB` in the rate-limit mask. Out of reset it is masked and a DMB does nothing.
    pub(crate) fn dmb_pauses(&self) -> bool {
        !RateLimitMask::from_bits(self.get(QueueReg::RlimitMask)).internal_pause_dmb()
    }

    /// `RST_Q`: cursors to 0, both phases to `UDMA_INITIAL_RING_ID`, nothing pending, status clear.
    pub(crate) fn reset_pointers(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.head_phase = UDMA_INITIAL_RING_ID;
        self.tail_phase = UDMA_INITIAL_RING_ID;
        self.pending = 0;
        self.fetched = 0;
        self.status = 0;
    }

    /// Reads `reg` (which `Register::decode` found in this queue's direction).
    pub(crate) fn read(&self, reg: QueueReg) -> u32 {
        match reg {
            QueueReg::Status => self.status,
            QueueReg::Drhp | QueueReg::Dcp => regs::ptr_value(self.head, self.head_phase),
            QueueReg::Drtp => regs::ptr_value(self.tail, self.tail_phase),
            // The doorbell is write-only; the model has no completion ring, so its head stays 0.
            QueueReg::DrtpInc | QueueReg::Crhp => 0,
            QueueReg::DescPrefCfg
            | QueueReg::Cfg
            | QueueReg::DrbpLow
            | QueueReg::DrbpHigh
            | QueueReg::Drl
            | QueueReg::CrbpLow
            | QueueReg::CrbpHigh
            | QueueReg::RlimitMask
            | QueueReg::CompCfg
            | QueueReg::QSwCtrl => self.get(reg),
        }
    }

    /// Stores a plainly stored register; returns false (nothing stored) for one the engine owns or computes
    /// (`status`, the cursors) or whose write has a side effect (the doorbell, `q_sw_ctrl`).
    pub(crate) fn write_plain(&mut self, reg: QueueReg, v: u32) -> bool {
        match reg {
            QueueReg::DescPrefCfg
            | QueueReg::Cfg
            | QueueReg::DrbpLow
            | QueueReg::DrbpHigh
            | QueueReg::Drl
            | QueueReg::CrbpLow
            | QueueReg::CrbpHigh
            | QueueReg::RlimitMask
            | QueueReg::CompCfg => {
                self.set(reg, v);
                true
            }
            QueueReg::Status
            | QueueReg::Drhp
            | QueueReg::Drtp
            | QueueReg::Dcp
            | QueueReg::Crhp
            | QueueReg::DrtpInc
            | QueueReg::QSwCtrl => false,
        }
    }
}

/// Registers of one engine: both directions' state and every queue.
#[derive(Debug)]
pub(crate) struct EngineRegs {
    /// Each direction's `state` (a [`UdmaState`] value), moved by `change_state` writes.
    pub(crate) state: [u32; 2],
    /// M2S `cfg_len`: stored and read back; FACTS give no layout, so nothing else depends on it.
    pub(crate) cfg_len: u32,
    pub(crate) queues: [[QueueRegs; 2]; DMA_MAX_Q as usize],
    pub(crate) pairs: [PairState; DMA_MAX_Q as usize],
    /// Round-robin cursor over queue pairs.
    pub(crate) rr: usize,
    /// Bit `q` set iff both rings of pair `q` have pending descriptors ([`EngineRegs::note_pending`] after
    /// every change of a `pending` count): a pick looks only at these pairs instead of all sixteen.
    with_work: u16,
}

// `with_work` has a bit per queue pair.
const _: () = assert!(DMA_MAX_Q == u16::BITS);

/// Per queue-pair execution flags.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PairState {
    /// Halted by a recorded fault; cleared by `RST_Q` of both queues.
    pub(crate) halted: bool,
    /// Hung by the fault plan; cleared by `RST_Q` of both queues.
    pub(crate) hung: bool,
    /// Which queues (by [`udma::Direction::index`]) were reset since the pair stopped.
    pub(crate) reset: [bool; 2],
}

impl PairState {
    /// `RST_Q` of the queue of direction index `d`. A stopped pair runs again once both of its queues were
    /// reset, as the ring re-initialisation does: the other queue still holds what the pair stopped on.
    /// Returns true when the pair is clear (it was not stopped, or now both queues were reset).
    pub(crate) fn reset_queue(&mut self, d: usize) -> bool {
        self.reset[d] = true;
        if !(self.halted || self.hung) || self.reset == [true, true] {
            *self = PairState::default();
            return true;
        }
        false
    }
}

impl Default for EngineRegs {
    fn default() -> Self {
        EngineRegs {
            state: [UdmaState::Disable as u32; 2],
            cfg_len: EngineReg::CfgLen.reset_value(),
            queues: [[QueueRegs::default(); 2]; DMA_MAX_Q as usize],
            pairs: [PairState::default(); DMA_MAX_Q as usize],
            rr: 0,
            with_work: 0,
        }
    }
}

impl EngineRegs {
    /// Reads `reg` of this engine.
    pub(crate) fn read(&self, reg: Register) -> u32 {
        match reg {
            Register::Engine { dir, reg: EngineReg::State } => self.state[dir.index()],
            // Write-only.
            Register::Engine { reg: EngineReg::ChangeState, .. } => 0,
            Register::Engine { reg: EngineReg::CfgLen, .. } => self.cfg_len,
            Register::Queue { dir, qid, reg } => self.queues[qid as usize][dir.index()].read(reg),
        }
    }

    /// Stores a write to a plainly stored register of this engine. Returns true when the write may have made
    /// a queue runnable (a queue's `cfg`), so the caller wakes the engine. Side-effect registers
    /// (`change_state`, the doorbell, `q_sw_ctrl`) are the engine's and are not handled here.
    pub(crate) fn write_plain(&mut self, reg: Register, v: u32) -> bool {
        match reg {
            Register::Engine { reg: EngineReg::CfgLen, .. } => {
                self.cfg_len = v;
                false
            }
            Register::Engine { reg: EngineReg::State | EngineReg::ChangeState, .. } => false,
            Register::Queue { dir, qid, reg } => {
                self.queues[qid as usize][dir.index()].write_plain(reg, v) && reg == QueueReg::Cfg
            }
        }
    }

    /// Records the `pending` counts of pair `qid` after a change: call after every change of either.
    pub(crate) fn note_pending(&mut self, qid: usize) {
        let [tx, rx] = &self.queues[qid];
        let bit = 1u16 << qid;
        if tx.pending > 0 && rx.pending > 0 {
            self.with_work |= bit;
        } else {
            self.with_work &= !bit;
        }
    }

    /// `with_work` as the `pending` counts define it (what [`EngineRegs::note_pending`] keeps it equal to).
    fn pairs_with_work(&self) -> u16 {
        (0..self.queues.len())
            .filter(|&q| self.queues[q].iter().all(|d| d.pending > 0))
            .fold(0, |mask, q| mask | 1 << q)
    }

    /// Queue pair `qid` can execute its next descriptor pair.
    pub(crate) fn runnable(&self, qid: usize) -> bool {
        // A `pending` change without `note_pending` would hide or invent work: every test checks the mask.
        debug_assert_eq!(self.with_work, self.pairs_with_work(), "with_work out of step with pending");
        // Pending work first: it rules out almost every queue.
        if self.with_work & (1 << qid) == 0 {
            return false;
        }
        let [tx, rx] = &self.queues[qid];
        let p = &self.pairs[qid];
        self.state == [engine_state::NORMAL; 2]
            && !p.halted
            && !p.hung
            && tx.enabled()
            && rx.enabled()
            && tx.ring_len() > 0
            && rx.ring_len() > 0
    }

    /// The next runnable queue pair in round-robin order.
    pub(crate) fn pick(&mut self) -> Option<usize> {
        let n = self.queues.len();
        // Bit i of `order` is pair (rr + i) % n: the pairs with work, in round-robin order from `rr`.
        let mut order = self.with_work.rotate_right(self.rr as u32);
        while order != 0 {
            let q = (self.rr + order.trailing_zeros() as usize) % n;
            if self.runnable(q) {
                self.rr = (q + 1) % n;
                return Some(q);
            }
            order &= order - 1;
        }
        None
    }

    /// Is any queue pair runnable?
    pub(crate) fn any_runnable(&self) -> bool {
        let mut work = self.with_work;
        while work != 0 {
            if self.runnable(work.trailing_zeros() as usize) {
                return true;
            }
            work &= work - 1;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use udma::Direction;

    #[test]
    fn offsets_decode_for_every_engine() {
        for arch in Arch::ALL {
            let m = Bar0Map::new(arch);
            for eng in 0..arch.num_engines() {
                let b = arch.engine_base(eng).unwrap();
                let engine = |dir, reg| Some(Target { eng, reg: Register::Engine { dir, reg } });
                assert_eq!(m.decode(b + regs::M2S_CHANGE_STATE), engine(Direction::Tx, EngineReg::ChangeState));
                assert_eq!(m.decode(b + regs::S2M_STATE), engine(Direction::Rx, EngineReg::State));
                assert_eq!(m.decode(b + regs::M2S_CFG_LEN), engine(Direction::Tx, EngineReg::CfgLen));
                assert_eq!(
                    m.decode(regs::queue_base(b, Direction::Rx, 15) + regs::q::DRTP_INC),
                    Some(Target { eng, reg: Register::Queue { dir: Direction::Rx, qid: 15, reg: QueueReg::DrtpInc } })
                );
                assert_eq!(m.decode(b + regs::GEN_REGS), None);
                assert_eq!(m.decode(b + 0x1002), None);
                assert_eq!(m.decode(b + regs::S2M_REGS + 0x254), None, "FACTS give no S2M cfg_len");
                assert_eq!(m.decode(b + regs::ENGINE_REGS_SIZE + 4), None);
            }
            assert_eq!(m.decode(0), None);
            assert_eq!(m.decode(!3), None);
        }
    }

    /// Every declared queue register reads back its reset value from a fresh queue, and every plainly
    /// stored one reads back what was written.
    #[test]
    fn queue_registers_reset_and_store_as_declared() {
        for dir in [Direction::Tx, Direction::Rx] {
            let mut q = QueueRegs::default();
            for &reg in QueueReg::ALL {
                if reg.offset(dir).is_none() {
                    continue;
                }
                let want = match reg {
                    QueueReg::Drhp | QueueReg::Drtp | QueueReg::Dcp => regs::ptr_value(0, UDMA_INITIAL_RING_ID),
                    _ => reg.reset_value(),
                };
                assert_eq!(q.read(reg), want, "{dir} {}", reg.name());
                let stored = q.write_plain(reg, 0x5a5a_0040);
                assert_eq!(q.read(reg) == 0x5a5a_0040, stored, "{dir} {}", reg.name());
            }
        }
    }

    /// An engine whose queue pairs `qids` are enabled with rings of 64 descriptors, both directions normal.
    fn engine_with_queues(qids: &[usize]) -> EngineRegs {
        let mut r = EngineRegs { state: [engine_state::NORMAL; 2], ..EngineRegs::default() };
        let cfg = QueueCfg::new().with_en_pref(true).with_en_scheduling(true).into_bits();
        for &q in qids {
            for d in &mut r.queues[q] {
                d.write_plain(QueueReg::Cfg, cfg);
                d.write_plain(QueueReg::Drl, RingLength::new().with_descs(64).into_bits());
            }
        }
        r
    }

    fn set_pending(r: &mut EngineRegs, q: usize, tx: u32, rx: u32) {
        r.queues[q][0].pending = tx;
        r.queues[q][1].pending = rx;
        r.note_pending(q);
    }

    /// Picks go round robin over the pairs with work on both rings, and skip pairs whose work went away,
    /// halted pairs and every pair of a disabled engine: exactly what scanning all sixteen would pick.
    #[test]
    fn picks_follow_round_robin_over_pairs_with_work_on_both_rings() {
        let mut r = engine_with_queues(&[0, 3, 7, 15]);
        assert_eq!((r.pick(), r.any_runnable()), (None, false), "nothing pending");
        set_pending(&mut r, 3, 2, 2);
        set_pending(&mut r, 7, 1, 0);
        set_pending(&mut r, 15, 5, 5);
        set_pending(&mut r, 0, 4, 4);
        let picks: Vec<_> = (0..6).map(|_| r.pick()).collect();
        assert_eq!(picks, [Some(0), Some(3), Some(15), Some(0), Some(3), Some(15)], "7 has no RX work");
        set_pending(&mut r, 7, 1, 1);
        set_pending(&mut r, 3, 0, 2);
        assert_eq!([r.pick(), r.pick(), r.pick()], [Some(0), Some(7), Some(15)]);
        r.pairs[0].halted = true;
        r.queues[7][0].reset_pointers();
        r.note_pending(7);
        assert_eq!([r.pick(), r.pick()], [Some(15), Some(15)], "0 halted, 7 reset");
        assert!(r.any_runnable());
        r.state[1] = engine_state::DISABLE;
        assert_eq!((r.pick(), r.any_runnable()), (None, false), "S2M disabled");
        // Work on a pair whose queues are not enabled is never picked.
        let mut r = engine_with_queues(&[1]);
        set_pending(&mut r, 2, 3, 3);
        assert_eq!((r.pick(), r.any_runnable()), (None, false));
    }

    proptest::proptest! {
        /// The granule decode agrees with the arch's linear `engine_at` for any offset.
        #[test]
        fn decode_agrees_with_engine_at(off in 0u64..0xC000_0000, v3: bool) {
            let arch = if v3 { Arch::V3 } else { Arch::V2 };
            let off = off & !3;
            let m = Bar0Map::new(arch);
            if let Some(t) = m.decode(off) {
                proptest::prop_assert_eq!(arch.engine_at(off).map(|x| x.0), Some(t.eng));
            }
            if arch.engine_at(off).is_none() {
                proptest::prop_assert_eq!(m.decode(off), None);
            }
        }
    }
}
