//! The UDMA register map (`udma/udma_regs.h`, FACTS §2.3), as byte offsets inside BAR0.
//!
//! An engine block is `ENGINE_REGS_SIZE` bytes: M2S registers at +0, S2M at +0x20000. Each direction has
//! `DMA_MAX_Q` per-queue blocks of `QUEUE_STRIDE` bytes: M2S queue q at engine + 0x1000 + q·0x1000, S2M
//! queue q at engine + 0x21000 + q·0x1000.

use crate::Direction;

/// M2S (TX) register block, from the engine base.
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

/// M2S `m2s` block (engine state), from the engine base.
pub const M2S_STATE: u64 = M2S_REGS + 0x200;
/// M2S `change_state`, from the engine base.
pub const M2S_CHANGE_STATE: u64 = M2S_REGS + 0x204;
/// S2M `s2m` block state, from the engine base.
pub const S2M_STATE: u64 = S2M_REGS + 0x200;
/// S2M `change_state`, from the engine base.
pub const S2M_CHANGE_STATE: u64 = S2M_REGS + 0x204;

/// `change_state` bit: go to NORMAL.
pub const CHANGE_STATE_NORMAL: u32 = 1 << 0;
/// `change_state` bit: disable.
pub const CHANGE_STATE_DIS: u32 = 1 << 1;
/// `change_state` bit: abort.
pub const CHANGE_STATE_ABORT: u32 = 1 << 2;

/// Per-queue register offsets, relative to the queue block (FACTS §2.3).
pub mod q {
    /// M2S descriptor prefetch configuration.
    pub const DESC_PREF_CFG: u64 = 0x00;
    /// Ring configuration: bit 16 EN_PREF, bit 17 EN_SCHEDULING (S2M: EN_STREAM).
    pub const CFG: u64 = 0x20;
    /// Queue status.
    pub const STATUS: u64 = 0x24;
    /// Descriptor ring base, bits 31:0 (low 6 bits must be 0).
    pub const DRBP_LOW: u64 = 0x28;
    /// Descriptor ring base, bits 63:32.
    pub const DRBP_HIGH: u64 = 0x2c;
    /// Descriptor ring length, in descriptors.
    pub const DRL: u64 = 0x30;
    /// Head pointer: \[23:0\] offset, \[31:30\] ring id.
    pub const DRHP: u64 = 0x34;
    /// The doorbell: writing N hands N more descriptors to the engine.
    pub const DRTP_INC: u64 = 0x38;
    /// Tail pointer: \[23:0\] offset, \[31:30\] ring id.
    pub const DRTP: u64 = 0x3c;
    /// Current pointer.
    pub const DCP: u64 = 0x40;
    /// Completion ring base low (unused on M2M).
    pub const CRBP_LOW: u64 = 0x44;
    /// Completion ring base high (unused on M2M).
    pub const CRBP_HIGH: u64 = 0x48;
    /// Completion head.
    pub const CRHP: u64 = 0x4c;
    /// M2S rate-limiter mask (`rlimit` + 0x14).
    pub const M2S_RLIMIT_MASK: u64 = 0x74;
    /// M2S completion configuration.
    pub const M2S_COMP_CFG: u64 = 0xa0;
    /// M2S software control (bit 8 RST_Q).
    pub const M2S_Q_SW_CTRL: u64 = 0xb0;
    /// S2M completion configuration.
    pub const S2M_COMP_CFG: u64 = 0x54;
    /// S2M software control (bit 8 RST_Q).
    pub const S2M_Q_SW_CTRL: u64 = 0x64;

    /// The registers userspace may never write through a BAR0 mapping (ring bases and the doorbell,
    /// spec §6 `udma_blocked[]`).
    pub const BLOCKED: [u64; 5] = [DRBP_LOW, DRBP_HIGH, CRBP_LOW, CRBP_HIGH, DRTP_INC];
}

/// `cfg` bit 16: enable descriptor prefetch.
pub const Q_CFG_EN_PREF: u32 = 1 << 16;
/// `cfg` bit 17: enable scheduling (S2M: enable stream).
pub const Q_CFG_EN_SCHEDULING: u32 = 1 << 17;
/// `cfg` value out of reset.
pub const Q_CFG_RESET_VALUE: u32 = 3 << 24;
/// `cfg` value of an enabled queue (`udma_q_enable`).
pub const Q_CFG_ENABLED: u32 = Q_CFG_RESET_VALUE | Q_CFG_EN_PREF | Q_CFG_EN_SCHEDULING;
/// `q_sw_ctrl` bit 8: reset the queue's pointers.
pub const Q_SW_CTRL_RST_Q: u32 = 1 << 8;
/// `drbp_low` keeps bits 31:6.
pub const DRBP_LOW_MASK: u32 = 0xFFFF_FFC0;
/// Offset field of `drl`, `drhp`, `drtp`, `drtp_inc`.
pub const PTR_OFFSET_MASK: u32 = 0x00FF_FFFF;
/// Shift of the ring id in `drhp` / `drtp`.
pub const PTR_RING_ID_SHIFT: u32 = 30;
/// M2S rate-limit mask out of reset.
pub const RLIMIT_MASK_RESET_VALUE: u32 = 0b111;
/// rate-limit mask bit 2, `INTERNAL_PAUSE_DMB`; queue init clears it.
pub const RLIMIT_INTERNAL_PAUSE_DMB: u32 = 1 << 2;

/// BAR0 offset of queue `qid`'s register block in direction `dir` of the engine at `engine_base`.
pub const fn queue_base(engine_base: u64, dir: Direction, qid: u32) -> u64 {
    let side = match dir {
        Direction::Tx => M2S_REGS,
        Direction::Rx => S2M_REGS,
    };
    engine_base + side + QUEUES_OFFSET + qid as u64 * QUEUE_STRIDE
}

/// Offset of `q_sw_ctrl` inside a queue block of direction `dir`.
pub const fn q_sw_ctrl(dir: Direction) -> u64 {
    match dir {
        Direction::Tx => q::M2S_Q_SW_CTRL,
        Direction::Rx => q::S2M_Q_SW_CTRL,
    }
}

/// Offset of `comp_cfg` inside a queue block of direction `dir`.
pub const fn comp_cfg(dir: Direction) -> u64 {
    match dir {
        Direction::Tx => q::M2S_COMP_CFG,
        Direction::Rx => q::S2M_COMP_CFG,
    }
}

/// Decoded `drhp`/`drtp` value.
pub const fn ptr_value(offset: u32, ring_id: u8) -> u32 {
    (offset & PTR_OFFSET_MASK) | ((ring_id as u32 & 0x3) << PTR_RING_ID_SHIFT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_blocks_sit_where_facts_say() {
        assert_eq!(queue_base(0, Direction::Tx, 0), 0x1000);
        assert_eq!(queue_base(0, Direction::Tx, 15), 0x1_0000);
        assert_eq!(queue_base(0, Direction::Rx, 0), 0x2_1000);
        assert_eq!(queue_base(0x3060_0000, Direction::Rx, 3), 0x3060_0000 + 0x2_4000);
        assert_eq!(Q_CFG_ENABLED, 0x0303_0000);
        assert_eq!(ptr_value(5, 1), 0x4000_0005);
        assert!(queue_base(0, Direction::Rx, 15) + QUEUE_STRIDE <= GEN_REGS);
    }
}
