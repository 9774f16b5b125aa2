//! The BAR0 register file: where an offset lands (engine, direction, queue, register) and the per-queue
//! register storage (FACTS §2.3, §4). Side effects of writes (doorbells, resets) live in the engine.

use udma::{regs, Arch, Direction, DMA_MAX_Q, UDMA_INITIAL_RING_ID};

/// Engine state values (`enum udma_state`).
pub mod engine_state {
    /// DISABLE.
    pub const DISABLE: u32 = 0;
    /// IDLE.
    pub const IDLE: u32 = 1;
    /// NORMAL: the engine processes descriptors.
    pub const NORMAL: u32 = 2;
    /// ABORT.
    pub const ABORT: u32 = 3;
}

/// A decoded BAR0 offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A direction's `state` register (read-only).
    State { eng: u32, dir: Direction },
    /// A direction's `change_state` register (write-only).
    ChangeState { eng: u32, dir: Direction },
    /// A per-queue register at offset `reg` of queue `qid`'s block.
    Queue { eng: u32, dir: Direction, qid: u32, reg: u64 },
}

/// Index of a direction in per-direction arrays.
pub(crate) const fn dir_index(dir: Direction) -> usize {
    match dir {
        Direction::Tx => 0,
        Direction::Rx => 1,
    }
}

/// Sorted table of engine bases for one arch, so decoding an offset is a binary search.
#[derive(Debug)]
pub(crate) struct Bar0Map {
    bases: Vec<(u64, u32)>,
}

impl Bar0Map {
    pub(crate) fn new(arch: Arch) -> Self {
        let mut bases: Vec<(u64, u32)> =
            (0..arch.num_engines()).filter_map(|e| arch.engine_base(e).map(|b| (b, e))).collect();
        bases.sort_unstable();
        Bar0Map { bases }
    }

    /// Decodes a BAR0 offset, or `None` for anything that is not a modelled register (unmapped space,
    /// unaligned offsets, `gen` blocks, queue ids beyond 16).
    pub(crate) fn decode(&self, off: u64) -> Option<Target> {
        if off % 4 != 0 {
            return None;
        }
        let i = self.bases.partition_point(|&(b, _)| b <= off).checked_sub(1)?;
        let (base, eng) = self.bases[i];
        let rel = off - base;
        if rel >= regs::ENGINE_REGS_SIZE {
            return None;
        }
        let (dir, rel) = if rel < regs::S2M_REGS {
            (Direction::Tx, rel)
        } else if rel < regs::GEN_REGS {
            (Direction::Rx, rel - regs::S2M_REGS)
        } else {
            return None;
        };
        match rel {
            0x200 => Some(Target::State { eng, dir }),
            0x204 => Some(Target::ChangeState { eng, dir }),
            r if r >= regs::QUEUES_OFFSET => {
                let qid = (r - regs::QUEUES_OFFSET) / regs::QUEUE_STRIDE;
                let reg = (r - regs::QUEUES_OFFSET) % regs::QUEUE_STRIDE;
                (qid < u64::from(DMA_MAX_Q)).then_some(Target::Queue { eng, dir, qid: qid as u32, reg })
            }
            _ => None,
        }
    }
}

/// One direction of one queue: its registers and the engine's live cursors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueRegs {
    pub(crate) cfg: u32,
    pub(crate) status: u32,
    pub(crate) desc_pref_cfg: u32,
    pub(crate) drbp_low: u32,
    pub(crate) drbp_high: u32,
    pub(crate) drl: u32,
    pub(crate) crbp_low: u32,
    pub(crate) crbp_high: u32,
    pub(crate) comp_cfg: u32,
    pub(crate) q_sw_ctrl: u32,
    pub(crate) rlimit_mask: u32,
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
}

impl Default for QueueRegs {
    fn default() -> Self {
        QueueRegs {
            cfg: regs::Q_CFG_RESET_VALUE,
            status: 0,
            desc_pref_cfg: 0,
            drbp_low: 0,
            drbp_high: 0,
            drl: 0,
            crbp_low: 0,
            crbp_high: 0,
            comp_cfg: 0,
            q_sw_ctrl: 0,
            rlimit_mask: regs::RLIMIT_MASK_RESET_VALUE,
            head: 0,
            head_phase: UDMA_INITIAL_RING_ID,
            tail: 0,
            tail_phase: UDMA_INITIAL_RING_ID,
            pending: 0,
        }
    }
}

impl QueueRegs {
    /// Ring length in descriptors.
    pub(crate) fn ring_len(&self) -> u32 {
        self.drl & regs::PTR_OFFSET_MASK
    }

    /// Device address of the ring.
    pub(crate) fn ring_base(&self) -> u64 {
        (u64::from(self.drbp_high) << 32) | u64::from(self.drbp_low & regs::DRBP_LOW_MASK)
    }

    /// Both enable bits set.
    pub(crate) fn enabled(&self) -> bool {
        let en = regs::Q_CFG_EN_PREF | regs::Q_CFG_EN_SCHEDULING;
        self.cfg & en == en
    }

    /// `RST_Q`: cursors to 0, both phases to `UDMA_INITIAL_RING_ID`, nothing pending, status clear.
    pub(crate) fn reset_pointers(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.head_phase = UDMA_INITIAL_RING_ID;
        self.tail_phase = UDMA_INITIAL_RING_ID;
        self.pending = 0;
        self.status = 0;
    }

    /// Reads register `reg` of this queue block.
    pub(crate) fn read(&self, dir: Direction, reg: u64) -> u32 {
        match (dir, reg) {
            (Direction::Tx, regs::q::DESC_PREF_CFG) => self.desc_pref_cfg,
            (_, regs::q::CFG) => self.cfg,
            (_, regs::q::STATUS) => self.status,
            (_, regs::q::DRBP_LOW) => self.drbp_low,
            (_, regs::q::DRBP_HIGH) => self.drbp_high,
            (_, regs::q::DRL) => self.drl,
            (_, regs::q::DRHP) | (_, regs::q::DCP) => regs::ptr_value(self.head, self.head_phase),
            (_, regs::q::DRTP) => regs::ptr_value(self.tail, self.tail_phase),
            (_, regs::q::CRBP_LOW) => self.crbp_low,
            (_, regs::q::CRBP_HIGH) => self.crbp_high,
            (Direction::Tx, regs::q::M2S_RLIMIT_MASK) => self.rlimit_mask,
            (Direction::Tx, regs::q::M2S_COMP_CFG) | (Direction::Rx, regs::q::S2M_COMP_CFG) => self.comp_cfg,
            (Direction::Tx, regs::q::M2S_Q_SW_CTRL) | (Direction::Rx, regs::q::S2M_Q_SW_CTRL) => self.q_sw_ctrl,
            _ => 0,
        }
    }

    /// Stores a plain (side-effect-free) register; returns false when `reg` is not one.
    pub(crate) fn write_plain(&mut self, dir: Direction, reg: u64, v: u32) -> bool {
        let slot = match (dir, reg) {
            (Direction::Tx, regs::q::DESC_PREF_CFG) => &mut self.desc_pref_cfg,
            (_, regs::q::CFG) => &mut self.cfg,
            (_, regs::q::DRBP_LOW) => &mut self.drbp_low,
            (_, regs::q::DRBP_HIGH) => &mut self.drbp_high,
            (_, regs::q::DRL) => &mut self.drl,
            (_, regs::q::CRBP_LOW) => &mut self.crbp_low,
            (_, regs::q::CRBP_HIGH) => &mut self.crbp_high,
            (Direction::Tx, regs::q::M2S_RLIMIT_MASK) => &mut self.rlimit_mask,
            (Direction::Tx, regs::q::M2S_COMP_CFG) | (Direction::Rx, regs::q::S2M_COMP_CFG) => &mut self.comp_cfg,
            _ => return false,
        };
        *slot = v;
        true
    }
}

/// Registers of one engine: both directions' state and every queue.
#[derive(Debug)]
pub(crate) struct EngineRegs {
    pub(crate) state: [u32; 2],
    pub(crate) queues: [[QueueRegs; 2]; DMA_MAX_Q as usize],
    pub(crate) pairs: [PairState; DMA_MAX_Q as usize],
    /// Round-robin cursor over queue pairs.
    pub(crate) rr: usize,
}

/// Per queue-pair execution flags.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PairState {
    /// Halted by a recorded fault; cleared by `RST_Q`.
    pub(crate) halted: bool,
    /// Hung by the fault plan; cleared by `RST_Q`.
    pub(crate) hung: bool,
}

impl Default for EngineRegs {
    fn default() -> Self {
        EngineRegs {
            state: [engine_state::DISABLE; 2],
            queues: [[QueueRegs::default(); 2]; DMA_MAX_Q as usize],
            pairs: [PairState::default(); DMA_MAX_Q as usize],
            rr: 0,
        }
    }
}

impl EngineRegs {
    /// Queue pair `qid` can execute its next descriptor pair.
    pub(crate) fn runnable(&self, qid: usize) -> bool {
        let [tx, rx] = &self.queues[qid];
        let p = self.pairs[qid];
        self.state == [engine_state::NORMAL; 2]
            && !p.halted
            && !p.hung
            && tx.enabled()
            && rx.enabled()
            && tx.pending > 0
            && rx.pending > 0
            && tx.ring_len() > 0
            && rx.ring_len() > 0
    }

    /// The next runnable queue pair in round-robin order.
    pub(crate) fn pick(&mut self) -> Option<usize> {
        let n = self.queues.len();
        let q = (0..n).map(|i| (self.rr + i) % n).find(|&q| self.runnable(q))?;
        self.rr = (q + 1) % n;
        Some(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_decode_for_every_engine() {
        for arch in Arch::ALL {
            let m = Bar0Map::new(arch);
            for eng in 0..arch.num_engines() {
                let b = arch.engine_base(eng).unwrap();
                assert_eq!(m.decode(b + 0x204), Some(Target::ChangeState { eng, dir: Direction::Tx }));
                assert_eq!(m.decode(b + 0x20200), Some(Target::State { eng, dir: Direction::Rx }));
                assert_eq!(
                    m.decode(regs::queue_base(b, Direction::Rx, 15) + regs::q::DRTP_INC),
                    Some(Target::Queue { eng, dir: Direction::Rx, qid: 15, reg: regs::q::DRTP_INC })
                );
                assert_eq!(m.decode(b + regs::GEN_REGS), None);
                assert_eq!(m.decode(b + 0x1002), None);
                assert_eq!(m.decode(b + regs::ENGINE_REGS_SIZE + 4), None);
            }
            assert_eq!(m.decode(0), None);
            assert_eq!(m.decode(!3), None);
        }
    }

    proptest::proptest! {
        /// The sorted-table decode agrees with the arch's linear `engine_at` for any offset.
        #[test]
        fn decode_agrees_with_engine_at(off in 0u64..0xC000_0000, v3: bool) {
            let arch = if v3 { Arch::V3 } else { Arch::V2 };
            let off = off & !3;
            let m = Bar0Map::new(arch);
            let eng = match m.decode(off) {
                Some(Target::State { eng, .. } | Target::ChangeState { eng, .. } | Target::Queue { eng, .. }) => Some(eng),
                None => None,
            };
            if let Some(e) = eng {
                proptest::prop_assert_eq!(arch.engine_at(off).map(|x| x.0), Some(e));
            }
            if arch.engine_at(off).is_none() {
                proptest::prop_assert_eq!(eng, None);
            }
        }
    }
}
