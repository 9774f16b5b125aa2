//! The UDMA register map (`udma/udma_regs.h`, FACTS §2.3), declared once for the HAL that programs it and a
//! device model that decodes it.
//!
//! An engine block is [`ENGINE_REGS_SIZE`] bytes: M2S (TX) registers at +0, S2M (RX) at +0x20000. Each
//! direction has engine-level registers ([`EngineReg`]: the state machine, `cfg_len`) and `DMA_MAX_Q`
//! per-queue blocks of [`QUEUE_STRIDE`] bytes ([`QueueReg`]): M2S queue q at engine + 0x1000 + q·0x1000, S2M
//! queue q at engine + 0x21000 + q·0x1000.
//!
//! - Where a register sits: [`QueueReg::offset`], [`EngineReg::offset`], and the inverse,
//!   [`Register::decode`], all generated from one table per kind (the `registers!` declarations below).
//! - What a register's bits mean: the field views [`QueueCfg`], [`RingPtr`], [`RingLength`],
//!   [`DoorbellCount`], [`QueueSwCtrl`], [`RateLimitMask`], [`ChangeState`] and the [`UdmaState`] values.
//! - Reset values, where FACTS give one: [`QueueReg::reset_value`].
//!
//! The flat constants (`q::CFG`, `M2S_CHANGE_STATE`, `Q_CFG_ENABLED`, …) are derived from those declarations
//! for call sites that want a plain number.
//!
//! ```
//! use udma::regs::{self, QueueCfg, QueueReg, Register};
//! use udma::{Arch, Direction};
//!
//! // A device model decoding a BAR0 write: which engine, which register, what it means.
//! let (offset, value) = (0x3060_0000 + 0x2_1000 + 3 * 0x1000 + 0x20, 0x0303_0000);
//! let (eng, in_engine) = Arch::V2.engine_at(offset).unwrap();
//! let reg = Register::decode(in_engine).unwrap();
//! assert_eq!((eng, reg), (32, Register::Queue { dir: Direction::Rx, qid: 3, reg: QueueReg::Cfg }));
//! assert!(QueueCfg::from_bits(value).enabled());
//! // And the HAL's side: the same register as a plain offset.
//! assert_eq!(regs::queue_base(0x3060_0000, Direction::Rx, 3) + regs::q::CFG, offset);
//! ```

use bitfield_struct::bitfield;

use crate::Direction;

/// M2S (TX) register block, from the engine base. With the constants below it is the layout of an engine
/// block:
///
/// ```
/// use udma::regs::*;
///
/// assert!(M2S_REGS < S2M_REGS && S2M_REGS < GEN_REGS && GEN_REGS < GEN_EX_REGS && GEN_EX_REGS < ENGINE_REGS_SIZE);
/// // 16 queue blocks per direction fit before the next block.
/// assert!(S2M_REGS + QUEUES_OFFSET + 16 * QUEUE_STRIDE <= GEN_REGS);
/// ```
pub const M2S_REGS: u64 = 0x0_0000;
/// S2M (RX) register block, from the engine base.
pub const S2M_REGS: u64 = 0x2_0000;
/// `gen` block, from the engine base.
pub const GEN_REGS: u64 = 0x3_8000;
/// `gen_ex` block, from the engine base.
pub const GEN_EX_REGS: u64 = 0x3_c000;
/// Size of one engine's register block (`struct unit_regs_v4`).
pub const ENGINE_REGS_SIZE: u64 = 0x3_c800;

/// Offset of the per-queue blocks inside a direction's register block.
pub const QUEUES_OFFSET: u64 = 0x1000;
/// Size of one per-queue register block.
pub const QUEUE_STRIDE: u64 = 0x1000;
/// The engine-level `m2s` / `s2m` block inside a direction's register block.
const DIR_ENGINE_BLOCK: u64 = 0x200;

/// Offset of a direction's register block from the engine base (example on [`Direction`]).
pub const fn dir_block(dir: Direction) -> u64 {
    match dir {
        Direction::Tx => M2S_REGS,
        Direction::Rx => S2M_REGS,
    }
}

/// Declares a kind of register once: its names, where each sits in the M2S and the S2M block (`None`: the
/// direction has no such register) and its reset value (FACTS; 0 where FACTS give none). Generates the
/// enum, `ALL`, `COUNT`, `offset`, `at` (the inverse of `offset`), `reset_value` and `name`.
macro_rules! registers {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $reg:ident { m2s: $m2s:expr, s2m: $s2m:expr, reset: $reset:expr $(,)? }
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $reg, )+
        }

        impl $name {
            /// Every register of this kind, in declaration order (`ALL[r as usize] == r`).
            pub const ALL: &'static [$name] = &[$($name::$reg),+];
            /// Number of registers of this kind.
            pub const COUNT: usize = Self::ALL.len();

            /// Offset of the register inside its block in direction `dir`, or `None` when that direction has
            /// no such register.
            pub const fn offset(self, dir: Direction) -> Option<u64> {
                match (self, dir) {
                    $(
                        ($name::$reg, Direction::Tx) => $m2s,
                        ($name::$reg, Direction::Rx) => $s2m,
                    )+
                }
            }

            /// The register at offset `off` of a block in direction `dir`: the inverse of
            /// [`Self::offset`].
            pub fn at(dir: Direction, off: u64) -> Option<$name> {
                Self::ALL.iter().copied().find(|r| r.offset(dir) == Some(off))
            }

            /// The register's value out of reset.
            pub const fn reset_value(self) -> u32 {
                match self {
                    $( $name::$reg => $reset, )+
                }
            }

            /// The register's name in the driver's `udma_regs.h`.
            pub const fn name(self) -> &'static str {
                match self {
                    $( $name::$reg => stringify!($reg), )+
                }
            }
        }
    };
}

registers! {
    /// A register of a per-queue block (`struct udma_rings_regs`, FACTS §2.3). Offsets are from the queue
    /// block ([`queue_base`]).
    ///
    /// ```
    /// use udma::regs::QueueReg;
    /// use udma::Direction::{Rx, Tx};
    ///
    /// assert_eq!((QueueReg::CompCfg.offset(Tx), QueueReg::CompCfg.offset(Rx)), (Some(0xa0), Some(0x54)));
    /// assert_eq!(QueueReg::RlimitMask.offset(Rx), None, "M2S only");
    /// assert_eq!(QueueReg::at(Tx, 0x38), Some(QueueReg::DrtpInc));
    /// assert_eq!((QueueReg::DrtpInc.name(), QueueReg::Cfg.reset_value()), ("DrtpInc", 0x0300_0000));
    /// assert_eq!(QueueReg::ALL.len(), QueueReg::COUNT);
    /// ```
    pub enum QueueReg {
        /// M2S descriptor prefetch configuration (layout not in FACTS).
        DescPrefCfg { m2s: Some(0x00), s2m: None, reset: 0 },
        /// Ring configuration, [`QueueCfg`].
        Cfg { m2s: Some(0x20), s2m: Some(0x20), reset: Q_CFG_RESET_VALUE },
        /// Queue status.
        Status { m2s: Some(0x24), s2m: Some(0x24), reset: 0 },
        /// Descriptor ring base, bits 31:0; the low 6 bits must be 0 ([`DRBP_LOW_MASK`]).
        DrbpLow { m2s: Some(0x28), s2m: Some(0x28), reset: 0 },
        /// Descriptor ring base, bits 63:32.
        DrbpHigh { m2s: Some(0x2c), s2m: Some(0x2c), reset: 0 },
        /// Descriptor ring length, [`RingLength`].
        Drl { m2s: Some(0x30), s2m: Some(0x30), reset: 0 },
        /// Head pointer, [`RingPtr`].
        Drhp { m2s: Some(0x34), s2m: Some(0x34), reset: 0 },
        /// The doorbell, [`DoorbellCount`]: writing N hands N more descriptors to the engine.
        DrtpInc { m2s: Some(0x38), s2m: Some(0x38), reset: 0 },
        /// Tail pointer, [`RingPtr`].
        Drtp { m2s: Some(0x3c), s2m: Some(0x3c), reset: 0 },
        /// Current pointer, [`RingPtr`].
        Dcp { m2s: Some(0x40), s2m: Some(0x40), reset: 0 },
        /// Completion ring base low (unused on M2M).
        CrbpLow { m2s: Some(0x44), s2m: Some(0x44), reset: 0 },
        /// Completion ring base high (unused on M2M).
        CrbpHigh { m2s: Some(0x48), s2m: Some(0x48), reset: 0 },
        /// Completion head.
        Crhp { m2s: Some(0x4c), s2m: Some(0x4c), reset: 0 },
        /// M2S rate-limiter mask (`rlimit` at 0x60, + 0x14), [`RateLimitMask`].
        RlimitMask { m2s: Some(0x74), s2m: None, reset: RLIMIT_MASK_RESET_VALUE },
        /// Completion configuration: written 0, as M2M queues have no completion ring.
        CompCfg { m2s: Some(0xa0), s2m: Some(0x54), reset: 0 },
        /// Software control, [`QueueSwCtrl`].
        QSwCtrl { m2s: Some(0xb0), s2m: Some(0x64), reset: 0 },
    }
}

registers! {
    /// An engine-level register of one direction (the `m2s` / `s2m` block at +0x200 of each direction,
    /// FACTS §2.3). Offsets are from the engine base. FACTS give `state`, `change_state` and `cfg_len` for the
    /// M2S side; `udma_state_set` writes both directions, so the S2M state machine sits at the same place in
    /// the S2M block. FACTS give no S2M `cfg_len`.
    ///
    /// ```
    /// use udma::regs::EngineReg;
    /// use udma::Direction::{Rx, Tx};
    ///
    /// assert_eq!(EngineReg::ChangeState.offset(Rx), Some(0x2_0204));
    /// assert_eq!(EngineReg::at(Tx, 0x200), Some(EngineReg::State));
    /// assert_eq!(EngineReg::CfgLen.offset(Rx), None);
    /// ```
    pub enum EngineReg {
        /// The state machine's current state, a [`UdmaState`] (read-only).
        State { m2s: Some(M2S_REGS + DIR_ENGINE_BLOCK), s2m: Some(S2M_REGS + DIR_ENGINE_BLOCK), reset: 0 },
        /// Requests a state change, [`ChangeState`] (write-only).
        ChangeState {
            m2s: Some(M2S_REGS + DIR_ENGINE_BLOCK + 0x4),
            s2m: Some(S2M_REGS + DIR_ENGINE_BLOCK + 0x4),
            reset: 0,
        },
        /// M2S length configuration (layout and init value not in FACTS).
        CfgLen { m2s: Some(M2S_REGS + DIR_ENGINE_BLOCK + 0x54), s2m: None, reset: 0 },
    }
}

/// A register of one engine, located: what [`Register::decode`] makes of an offset inside an engine block.
///
/// ```
/// use udma::regs::{EngineReg, QueueReg, Register};
/// use udma::Direction;
///
/// let doorbell = Register::Queue { dir: Direction::Tx, qid: 15, reg: QueueReg::DrtpInc };
/// assert_eq!(doorbell.offset(), Some(0x1_0038));
/// assert_eq!(Register::decode(0x1_0038), Some(doorbell));
/// assert_eq!(Register::decode(0x204), Some(Register::Engine { dir: Direction::Tx, reg: EngineReg::ChangeState }));
/// assert_eq!(Register::decode(0x1_0039), None, "unaligned");
/// assert_eq!(Register::decode(0x3_8000), None, "the gen block is not decoded");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Register {
    /// An engine-level register of direction `dir`.
    Engine {
        /// M2S or S2M.
        dir: Direction,
        /// Which register.
        reg: EngineReg,
    },
    /// A register of queue `qid`'s block in direction `dir`.
    Queue {
        /// M2S or S2M.
        dir: Direction,
        /// Queue id, below `DMA_MAX_Q`.
        qid: u32,
        /// Which register.
        reg: QueueReg,
    },
}

impl Register {
    /// The register at byte offset `off` from an engine's base, or `None` for an offset that is no declared
    /// register (reserved space, the `gen` blocks, unaligned offsets, queue ids ≥ `DMA_MAX_Q`).
    pub fn decode(off: u64) -> Option<Register> {
        if off % 4 != 0 || off >= GEN_REGS {
            return None;
        }
        let dir = if off < S2M_REGS { Direction::Tx } else { Direction::Rx };
        let rel = off - dir_block(dir);
        if rel < QUEUES_OFFSET {
            return EngineReg::at(dir, off).map(|reg| Register::Engine { dir, reg });
        }
        let qid = (rel - QUEUES_OFFSET) / QUEUE_STRIDE;
        if qid >= u64::from(crate::DMA_MAX_Q) {
            return None;
        }
        let word = ((rel - QUEUES_OFFSET) % QUEUE_STRIDE / 4) as usize;
        let reg = QUEUE_REG_AT[dir.index()][word]?;
        Some(Register::Queue { dir, qid: qid as u32, reg })
    }

    /// Byte offset of the register from its engine's base: the inverse of [`Register::decode`]. `None` for
    /// a combination that does not exist (an M2S-only register on S2M, a qid ≥ `DMA_MAX_Q`).
    pub fn offset(self) -> Option<u64> {
        match self {
            Register::Engine { dir, reg } => reg.offset(dir),
            Register::Queue { qid, .. } if qid >= crate::DMA_MAX_Q => None,
            Register::Queue { dir, qid, reg } => Some(queue_base(0, dir, qid) + reg.offset(dir)?),
        }
    }
}

/// [`QueueReg::at`] as a table, by direction and word offset in a queue block: every doorbell decodes its
/// register, and searching `QueueReg::ALL` for it was a large share of a small copy's MMIO cost.
const QUEUE_REG_AT: [[Option<QueueReg>; (QUEUE_STRIDE / 4) as usize]; 2] = {
    let mut table = [[None; (QUEUE_STRIDE / 4) as usize]; 2];
    let mut i = 0;
    while i < QueueReg::COUNT {
        let reg = QueueReg::ALL[i];
        if let Some(off) = reg.offset(Direction::Tx) {
            table[0][(off / 4) as usize] = Some(reg);
        }
        if let Some(off) = reg.offset(Direction::Rx) {
            table[1][(off / 4) as usize] = Some(reg);
        }
        i += 1;
    }
    table
};

/// `cfg` (FACTS §2.3): bits other than 16, 17 and 25:24 are not documented (FACTS §8) and are kept as read.
///
/// ```
/// use udma::regs::{QueueCfg, Q_CFG_ENABLED, Q_CFG_RESET_VALUE};
///
/// assert!(QueueCfg::from_bits(Q_CFG_ENABLED).enabled() && !QueueCfg::from_bits(Q_CFG_RESET_VALUE).enabled());
/// // Pausing a queue clears the two enable bits and keeps every other bit as read.
/// let paused = QueueCfg::from_bits(0xFFFF_FFFF).with_en_pref(false).with_en_scheduling(false);
/// assert_eq!(paused.into_bits(), 0xFFFC_FFFF);
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct QueueCfg {
    #[bits(16)]
    __: u16,
    /// Bit 16, `EN_PREF`: enable descriptor prefetch.
    pub en_pref: bool,
    /// Bit 17, `EN_SCHEDULING` (S2M: `EN_STREAM`).
    pub en_scheduling: bool,
    #[bits(6)]
    __: u8,
    /// Bits 25:24: set out of reset (the reset value is 3 << 24); their meaning is not documented.
    #[bits(2)]
    pub reset_bits: u8,
    #[bits(6)]
    __: u8,
}

impl QueueCfg {
    /// Both enable bits set: the queue fetches and executes (example on [`QueueCfg`]).
    pub const fn enabled(&self) -> bool {
        self.en_pref() && self.en_scheduling()
    }
}

/// `drhp` / `drtp` / `dcp`: a ring offset and the ring id (phase) that goes with it.
///
/// ```
/// use udma::regs::{ptr_value, RingPtr};
///
/// let p = RingPtr::from_bits(0xC012_3456);
/// assert_eq!((p.offset(), p.ring_id()), (0x12_3456, 3));
/// assert_eq!(ptr_value(0x12_3456, 3), 0xC012_3456);
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct RingPtr {
    /// Bits 23:0, descriptor offset in the ring.
    #[bits(24)]
    pub offset: u32,
    #[bits(6)]
    __: u8,
    /// Bits 31:30, ring id.
    #[bits(2)]
    pub ring_id: u8,
}

/// `drl`: the ring length, the descriptor count written as-is.
///
/// ```
/// use udma::regs::RingLength;
///
/// assert_eq!(RingLength::new().with_descs(8192).into_bits(), 8192);
/// assert_eq!(RingLength::from_bits(0xAB00_2000).descs(), 0x2000, "bits 31:24 are not the length");
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct RingLength {
    /// Bits 23:0, descriptors.
    #[bits(24)]
    pub descs: u32,
    #[bits(8)]
    __: u8,
}

/// `drtp_inc`: the doorbell.
///
/// ```
/// use udma::regs::DoorbellCount;
///
/// assert_eq!(DoorbellCount::new().with_count(2032).into_bits(), 2032);
/// assert_eq!(DoorbellCount::from_bits(0xFF00_0007).count(), 7);
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct DoorbellCount {
    /// Bits 23:0, descriptors handed to the engine.
    #[bits(24)]
    pub count: u32,
    #[bits(8)]
    __: u8,
}

/// `q_sw_ctrl`.
///
/// ```
/// use udma::regs::{QueueSwCtrl, Q_SW_CTRL_RST_Q};
///
/// assert_eq!(QueueSwCtrl::new().with_rst_q(true).into_bits(), Q_SW_CTRL_RST_Q);
/// assert!(QueueSwCtrl::from_bits(0x100).rst_q() && !QueueSwCtrl::from_bits(0xFF).rst_q());
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct QueueSwCtrl {
    #[bits(8)]
    __: u8,
    /// Bit 8, `RST_Q`: reset the queue's pointers (`udma_q_reset`).
    pub rst_q: bool,
    #[bits(23)]
    __: u32,
}

/// M2S `rlimit.mask`: a set bit masks (disables) an internal pause source. Out of reset all three are
/// masked (0b111); queue init clears `INTERNAL_PAUSE_DMB` so a descriptor's DMB pauses the queue until
/// earlier writes complete ("enable DMB"). Bits 1:0 are not documented.
///
/// ```
/// use udma::regs::{RateLimitMask, RLIMIT_MASK_RESET_VALUE};
///
/// let at_init = RateLimitMask::from_bits(RLIMIT_MASK_RESET_VALUE).with_internal_pause_dmb(false);
/// assert_eq!(at_init.into_bits(), 0b011);
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct RateLimitMask {
    #[bits(2)]
    __: u8,
    /// Bit 2, `INTERNAL_PAUSE_DMB`: set, a DMB does not pause the queue.
    pub internal_pause_dmb: bool,
    #[bits(29)]
    __: u32,
}

/// `change_state` (`udma_state_set`): one request bit per target state.
///
/// ```
/// use udma::regs::{ChangeState, CHANGE_STATE_ABORT, CHANGE_STATE_DIS, CHANGE_STATE_NORMAL};
///
/// assert_eq!(ChangeState::new().with_normal(true).into_bits(), CHANGE_STATE_NORMAL);
/// assert_eq!((CHANGE_STATE_NORMAL, CHANGE_STATE_DIS, CHANGE_STATE_ABORT), (1, 2, 4));
/// assert!(ChangeState::from_bits(4).abort());
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct ChangeState {
    /// Bit 0: go to NORMAL.
    pub normal: bool,
    /// Bit 1: disable.
    pub dis: bool,
    /// Bit 2: abort.
    pub abort: bool,
    #[bits(29)]
    __: u32,
}

/// The values of the `state` register (`enum udma_state`).
///
/// ```
/// use udma::UdmaState;
///
/// assert_eq!(UdmaState::from_bits(2), Some(UdmaState::Normal));
/// assert_eq!(UdmaState::Normal as u32, 2);
/// assert_eq!(UdmaState::from_bits(5), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum UdmaState {
    /// DISABLE: out of reset, or after a `change_state` DIS.
    Disable = 0,
    /// IDLE.
    Idle = 1,
    /// NORMAL: the engine processes descriptors.
    Normal = 2,
    /// ABORT.
    Abort = 3,
    /// RESET.
    Reset = 4,
}

impl UdmaState {
    /// The state a `state` register value names, if any (example on [`UdmaState`]).
    pub const fn from_bits(v: u32) -> Option<UdmaState> {
        Some(match v {
            0 => UdmaState::Disable,
            1 => UdmaState::Idle,
            2 => UdmaState::Normal,
            3 => UdmaState::Abort,
            4 => UdmaState::Reset,
            _ => return None,
        })
    }
}

/// Per-queue register offsets, relative to the queue block, as plain numbers (from [`QueueReg`]).
///
/// ```
/// use udma::regs::{q, queue_base, QueueReg};
/// use udma::Direction;
///
/// assert_eq!(q::DRTP_INC, QueueReg::DrtpInc.offset(Direction::Tx).unwrap());
/// // The doorbell of RX queue 2 of the engine at 0x3000_0000:
/// assert_eq!(queue_base(0x3000_0000, Direction::Rx, 2) + q::DRTP_INC, 0x3002_3038);
/// assert!(q::BLOCKED.contains(&q::DRTP_INC), "userspace may not ring doorbells through BAR0");
/// ```
pub mod q {
    use super::QueueReg;
    use crate::Direction::{Rx, Tx};

    /// M2S descriptor prefetch configuration.
    pub const DESC_PREF_CFG: u64 = QueueReg::DescPrefCfg.offset(Tx).unwrap();
    /// Ring configuration: bit 16 EN_PREF, bit 17 EN_SCHEDULING (S2M: EN_STREAM).
    pub const CFG: u64 = QueueReg::Cfg.offset(Tx).unwrap();
    /// Queue status.
    pub const STATUS: u64 = QueueReg::Status.offset(Tx).unwrap();
    /// Descriptor ring base, bits 31:0 (low 6 bits must be 0).
    pub const DRBP_LOW: u64 = QueueReg::DrbpLow.offset(Tx).unwrap();
    /// Descriptor ring base, bits 63:32.
    pub const DRBP_HIGH: u64 = QueueReg::DrbpHigh.offset(Tx).unwrap();
    /// Descriptor ring length, in descriptors.
    pub const DRL: u64 = QueueReg::Drl.offset(Tx).unwrap();
    /// Head pointer: \[23:0\] offset, \[31:30\] ring id.
    pub const DRHP: u64 = QueueReg::Drhp.offset(Tx).unwrap();
    /// The doorbell: writing N hands N more descriptors to the engine.
    pub const DRTP_INC: u64 = QueueReg::DrtpInc.offset(Tx).unwrap();
    /// Tail pointer: \[23:0\] offset, \[31:30\] ring id.
    pub const DRTP: u64 = QueueReg::Drtp.offset(Tx).unwrap();
    /// Current pointer.
    pub const DCP: u64 = QueueReg::Dcp.offset(Tx).unwrap();
    /// Completion ring base low (unused on M2M).
    pub const CRBP_LOW: u64 = QueueReg::CrbpLow.offset(Tx).unwrap();
    /// Completion ring base high (unused on M2M).
    pub const CRBP_HIGH: u64 = QueueReg::CrbpHigh.offset(Tx).unwrap();
    /// Completion head.
    pub const CRHP: u64 = QueueReg::Crhp.offset(Tx).unwrap();
    /// M2S rate-limiter mask (`rlimit` + 0x14).
    pub const M2S_RLIMIT_MASK: u64 = QueueReg::RlimitMask.offset(Tx).unwrap();
    /// M2S completion configuration.
    pub const M2S_COMP_CFG: u64 = QueueReg::CompCfg.offset(Tx).unwrap();
    /// M2S software control (bit 8 RST_Q).
    pub const M2S_Q_SW_CTRL: u64 = QueueReg::QSwCtrl.offset(Tx).unwrap();
    /// S2M completion configuration.
    pub const S2M_COMP_CFG: u64 = QueueReg::CompCfg.offset(Rx).unwrap();
    /// S2M software control (bit 8 RST_Q).
    pub const S2M_Q_SW_CTRL: u64 = QueueReg::QSwCtrl.offset(Rx).unwrap();

    /// The registers userspace may never write through a BAR0 mapping (ring bases and the doorbell,
    /// spec §6 `udma_blocked[]`).
    pub const BLOCKED: [u64; 5] = [DRBP_LOW, DRBP_HIGH, CRBP_LOW, CRBP_HIGH, DRTP_INC];
}

/// M2S `state`, from the engine base. This and the constants below are plain numbers derived from the
/// declarations ([`EngineReg`] and the field views):
///
/// ```
/// use udma::regs::*;
/// use udma::Direction;
///
/// assert_eq!((M2S_STATE, M2S_CHANGE_STATE, S2M_CHANGE_STATE, M2S_CFG_LEN), (0x200, 0x204, 0x2_0204, 0x254));
/// assert_eq!(S2M_STATE, EngineReg::State.offset(Direction::Rx).unwrap());
/// assert_eq!((Q_CFG_EN_PREF | Q_CFG_EN_SCHEDULING | Q_CFG_RESET_VALUE, Q_CFG_ENABLED), (0x0303_0000, 0x0303_0000));
/// assert_eq!((PTR_OFFSET_MASK, PTR_RING_ID_SHIFT, DRBP_LOW_MASK), (0x00FF_FFFF, 30, 0xFFFF_FFC0));
/// assert_eq!((RLIMIT_MASK_RESET_VALUE, RLIMIT_INTERNAL_PAUSE_DMB), (0b111, 0b100));
/// ```
pub const M2S_STATE: u64 = EngineReg::State.offset(Direction::Tx).unwrap();
/// M2S `change_state`, from the engine base.
pub const M2S_CHANGE_STATE: u64 = EngineReg::ChangeState.offset(Direction::Tx).unwrap();
/// S2M `state`, from the engine base.
pub const S2M_STATE: u64 = EngineReg::State.offset(Direction::Rx).unwrap();
/// S2M `change_state`, from the engine base.
pub const S2M_CHANGE_STATE: u64 = EngineReg::ChangeState.offset(Direction::Rx).unwrap();
/// M2S `cfg_len`, from the engine base.
pub const M2S_CFG_LEN: u64 = EngineReg::CfgLen.offset(Direction::Tx).unwrap();

/// `change_state` bit: go to NORMAL.
pub const CHANGE_STATE_NORMAL: u32 = ChangeState::new().with_normal(true).into_bits();
/// `change_state` bit: disable.
pub const CHANGE_STATE_DIS: u32 = ChangeState::new().with_dis(true).into_bits();
/// `change_state` bit: abort.
pub const CHANGE_STATE_ABORT: u32 = ChangeState::new().with_abort(true).into_bits();

/// `cfg` bit 16: enable descriptor prefetch.
pub const Q_CFG_EN_PREF: u32 = QueueCfg::new().with_en_pref(true).into_bits();
/// `cfg` bit 17: enable scheduling (S2M: enable stream).
pub const Q_CFG_EN_SCHEDULING: u32 = QueueCfg::new().with_en_scheduling(true).into_bits();
/// `cfg` value out of reset (3 << 24).
pub const Q_CFG_RESET_VALUE: u32 = QueueCfg::new().with_reset_bits(3).into_bits();
/// `cfg` value of an enabled queue (`udma_q_enable`).
pub const Q_CFG_ENABLED: u32 =
    QueueCfg::from_bits(Q_CFG_RESET_VALUE).with_en_pref(true).with_en_scheduling(true).into_bits();
/// `q_sw_ctrl` bit 8: reset the queue's pointers.
pub const Q_SW_CTRL_RST_Q: u32 = QueueSwCtrl::new().with_rst_q(true).into_bits();
/// `drbp_low` keeps bits 31:6.
pub const DRBP_LOW_MASK: u32 = 0xFFFF_FFC0;
/// Offset field of `drl`, `drhp`, `drtp`, `drtp_inc`.
pub const PTR_OFFSET_MASK: u32 = RingPtr::new().with_offset(u32::MAX >> 8).into_bits();
/// Shift of the ring id in `drhp` / `drtp`.
pub const PTR_RING_ID_SHIFT: u32 = RingPtr::RING_ID_OFFSET as u32;
/// M2S rate-limit mask out of reset: every pause source masked.
pub const RLIMIT_MASK_RESET_VALUE: u32 = 0b111;
/// rate-limit mask bit 2, `INTERNAL_PAUSE_DMB`; queue init clears it.
pub const RLIMIT_INTERNAL_PAUSE_DMB: u32 = RateLimitMask::new().with_internal_pause_dmb(true).into_bits();

/// BAR0 offset of queue `qid`'s register block in direction `dir` of the engine at `engine_base`.
///
/// ```
/// use udma::regs::{comp_cfg, q_sw_ctrl, queue_base};
/// use udma::Direction::{Rx, Tx};
///
/// assert_eq!((queue_base(0, Tx, 0), queue_base(0, Rx, 0), queue_base(0, Tx, 15)), (0x1000, 0x2_1000, 0x1_0000));
/// // The two registers whose offset differs between the directions:
/// assert_eq!((q_sw_ctrl(Tx), q_sw_ctrl(Rx), comp_cfg(Tx), comp_cfg(Rx)), (0xb0, 0x64, 0xa0, 0x54));
/// ```
pub const fn queue_base(engine_base: u64, dir: Direction, qid: u32) -> u64 {
    engine_base + dir_block(dir) + QUEUES_OFFSET + qid as u64 * QUEUE_STRIDE
}

/// Offset of `q_sw_ctrl` inside a queue block of direction `dir` (example on [`queue_base`]).
pub const fn q_sw_ctrl(dir: Direction) -> u64 {
    QueueReg::QSwCtrl.offset(dir).unwrap()
}

/// Offset of `comp_cfg` inside a queue block of direction `dir` (example on [`queue_base`]).
pub const fn comp_cfg(dir: Direction) -> u64 {
    QueueReg::CompCfg.offset(dir).unwrap()
}

/// A `drhp`/`drtp` value: `offset` and `ring_id`, each masked to its field (example on [`RingPtr`]).
pub const fn ptr_value(offset: u32, ring_id: u8) -> u32 {
    RingPtr::new().with_offset(offset & PTR_OFFSET_MASK).with_ring_id(ring_id & crate::DMA_RING_ID_MASK).into_bits()
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::Direction::{Rx, Tx};

    #[test]
    fn queue_blocks_sit_where_facts_say() {
        assert_eq!(queue_base(0, Tx, 0), 0x1000);
        assert_eq!(queue_base(0, Tx, 15), 0x1_0000);
        assert_eq!(queue_base(0, Rx, 0), 0x2_1000);
        assert_eq!(queue_base(0x3060_0000, Rx, 3), 0x3060_0000 + 0x2_4000);
        assert_eq!(Q_CFG_ENABLED, 0x0303_0000);
        assert_eq!(ptr_value(5, 1), 0x4000_0005);
        assert!(queue_base(0, Rx, 15) + QUEUE_STRIDE <= GEN_REGS);
    }

    /// The decode table answers as the search of `QueueReg::ALL` for every word of a queue block, both
    /// directions, and decode finds every queue register of every queue.
    #[test]
    fn the_queue_register_table_matches_the_search() {
        for dir in [Tx, Rx] {
            for word in 0..(QUEUE_STRIDE / 4) {
                assert_eq!(QUEUE_REG_AT[dir.index()][word as usize], QueueReg::at(dir, word * 4), "{dir:?} {word}");
            }
            for qid in 0..crate::DMA_MAX_Q {
                for &reg in QueueReg::ALL.iter().filter(|r| r.offset(dir).is_some()) {
                    let r = Register::Queue { dir, qid, reg };
                    assert_eq!(Register::decode(r.offset().unwrap()), Some(r));
                }
            }
        }
    }

    /// The declarations against the literal table of FACTS §2.3, so a typo in either is caught.
    #[test]
    fn declarations_match_the_facts_table() {
        use QueueReg::*;
        let queue = [
            (DescPrefCfg, Some(0x00), None),
            (Cfg, Some(0x20), Some(0x20)),
            (Status, Some(0x24), Some(0x24)),
            (DrbpLow, Some(0x28), Some(0x28)),
            (DrbpHigh, Some(0x2c), Some(0x2c)),
            (Drl, Some(0x30), Some(0x30)),
            (Drhp, Some(0x34), Some(0x34)),
            (DrtpInc, Some(0x38), Some(0x38)),
            (Drtp, Some(0x3c), Some(0x3c)),
            (Dcp, Some(0x40), Some(0x40)),
            (CrbpLow, Some(0x44), Some(0x44)),
            (CrbpHigh, Some(0x48), Some(0x48)),
            (Crhp, Some(0x4c), Some(0x4c)),
            (RlimitMask, Some(0x74), None),
            (CompCfg, Some(0xa0), Some(0x54)),
            (QSwCtrl, Some(0xb0), Some(0x64)),
        ];
        assert_eq!(queue.len(), QueueReg::COUNT);
        for (reg, m2s, s2m) in queue {
            assert_eq!((reg.offset(Tx), reg.offset(Rx)), (m2s, s2m), "{}", reg.name());
        }
        let engine = [
            (EngineReg::State, Some(0x200), Some(0x2_0200)),
            (EngineReg::ChangeState, Some(0x204), Some(0x2_0204)),
            (EngineReg::CfgLen, Some(0x254), None),
        ];
        assert_eq!(engine.len(), EngineReg::COUNT);
        for (reg, m2s, s2m) in engine {
            assert_eq!((reg.offset(Tx), reg.offset(Rx)), (m2s, s2m), "{}", reg.name());
        }
        assert_eq!(Cfg.reset_value(), 0x0300_0000);
        assert_eq!(RlimitMask.reset_value(), 0b111);
        assert_eq!((q::M2S_Q_SW_CTRL, q::S2M_Q_SW_CTRL, q::M2S_COMP_CFG, q::S2M_COMP_CFG), (0xb0, 0x64, 0xa0, 0x54));
        assert_eq!(q::BLOCKED, [0x28, 0x2c, 0x44, 0x48, 0x38]);
        // `struct unit_regs_v4`: m2s, s2m, gen, gen_ex, total; queues at +0x1000 of each direction, 0x1000 apart.
        let layout = (M2S_REGS, S2M_REGS, GEN_REGS, GEN_EX_REGS, ENGINE_REGS_SIZE, QUEUES_OFFSET, QUEUE_STRIDE);
        assert_eq!(layout, (0, 0x2_0000, 0x3_8000, 0x3_c000, 0x3_c800, 0x1000, 0x1000));
    }

    /// Every declared register decodes back to itself from its offset, in every queue, and no two share an
    /// offset; everything else in the engine block decodes to nothing.
    #[test]
    fn declarations_round_trip_through_decode() {
        let mut all = std::vec::Vec::new();
        for dir in [Tx, Rx] {
            for &reg in EngineReg::ALL {
                if reg.offset(dir).is_some() {
                    all.push(Register::Engine { dir, reg });
                }
            }
            for qid in 0..crate::DMA_MAX_Q {
                for &reg in QueueReg::ALL {
                    if reg.offset(dir).is_some() {
                        all.push(Register::Queue { dir, qid, reg });
                    }
                }
            }
        }
        let mut offsets = std::collections::BTreeMap::new();
        for &r in &all {
            let off = r.offset().unwrap();
            assert_eq!(Register::decode(off), Some(r), "{off:#x}");
            assert!(offsets.insert(off, r).is_none(), "{r:?} shares {off:#x} with {:?}", offsets[&off]);
        }
        for off in (0..ENGINE_REGS_SIZE + 0x100).step_by(2) {
            if !offsets.contains_key(&off) {
                assert_eq!(Register::decode(off), None, "{off:#x}");
            }
        }
        // Combinations that do not exist have no offset.
        assert_eq!(Register::Queue { dir: Rx, qid: 0, reg: QueueReg::RlimitMask }.offset(), None);
        assert_eq!(Register::Queue { dir: Tx, qid: 16, reg: QueueReg::Cfg }.offset(), None);
        assert_eq!(Register::Engine { dir: Rx, reg: EngineReg::CfgLen }.offset(), None);
        for (i, r) in QueueReg::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }

    /// The field views agree with the values FACTS give, and keep bits they do not name.
    #[test]
    fn field_views_round_trip() {
        let cfg = QueueCfg::from_bits(0x0303_0000);
        assert!(cfg.en_pref() && cfg.en_scheduling() && cfg.enabled());
        assert_eq!(cfg.reset_bits(), 3);
        let paused = QueueCfg::from_bits(u32::MAX).with_en_pref(false).with_en_scheduling(false);
        assert_eq!(paused.into_bits(), 0xFFFC_FFFF, "undocumented bits survive a pause");
        assert!(!QueueCfg::from_bits(Q_CFG_RESET_VALUE).enabled());
        assert!(!QueueCfg::from_bits(Q_CFG_ENABLED & !Q_CFG_EN_PREF).enabled());

        let p = RingPtr::from_bits(0xC012_3456);
        assert_eq!((p.offset(), p.ring_id()), (0x12_3456, 3));
        assert_eq!(ptr_value(0x12_3456, 3), 0xC012_3456);
        assert_eq!(ptr_value(0x1FF_FFFF, 7), 0xC0FF_FFFF, "fields are masked");
        assert_eq!((PTR_OFFSET_MASK, PTR_RING_ID_SHIFT), (0x00FF_FFFF, 30));
        assert_eq!(RingLength::from_bits(0xAB00_2000).descs(), 0x2000);
        assert_eq!(DoorbellCount::from_bits(0xFF00_0007).count(), 7);

        assert_eq!(Q_SW_CTRL_RST_Q, 0x100);
        assert!(QueueSwCtrl::from_bits(0x100).rst_q() && !QueueSwCtrl::from_bits(0xFF).rst_q());
        assert_eq!(RLIMIT_INTERNAL_PAUSE_DMB, 0b100);
        assert!(RateLimitMask::from_bits(RLIMIT_MASK_RESET_VALUE).internal_pause_dmb());
        assert!(!RateLimitMask::from_bits(0b011).internal_pause_dmb());
        assert_eq!((CHANGE_STATE_NORMAL, CHANGE_STATE_DIS, CHANGE_STATE_ABORT), (1, 2, 4));
        for s in [UdmaState::Disable, UdmaState::Idle, UdmaState::Normal, UdmaState::Abort, UdmaState::Reset] {
            assert_eq!(UdmaState::from_bits(s as u32), Some(s));
        }
        assert_eq!(UdmaState::from_bits(5), None);
        assert_eq!(UdmaState::Normal as u32, 2);
    }
}
