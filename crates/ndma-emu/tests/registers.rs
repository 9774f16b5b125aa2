//! BAR0 read-back after queue init, cursor registers, unmapped offsets.

use ndma_emu::test_utils::rig::{Rig, POLICIES};
use ndma_emu::{engine_state, OrderingMode};
use udma::Direction::{Rx, Tx};
use udma::{regs, Arch, Barrier, DmaMemory, Mmio};

#[test]
fn registers_read_back_what_queue_init_wrote() {
    for arch in Arch::ALL {
        let rig = Rig::new(arch, ndma_emu::ExecPolicy::Inline, OrderingMode::Relaxed);
        let d = &*rig.dev;
        for (dir, q) in [(Tx, rig.q.tx()), (Rx, rig.q.rx())] {
            let b = regs::queue_base(rig.base, dir, 0);
            assert_eq!(d.read32(b + regs::q::DRBP_LOW), q.dma_addr() as u32);
            assert_eq!(d.read32(b + regs::q::DRBP_HIGH), (q.dma_addr() >> 32) as u32);
            assert_eq!(d.read32(b + regs::q::DRL), 256);
            assert_eq!(d.read32(b + regs::q::CFG), regs::Q_CFG_ENABLED);
            assert_eq!(d.read32(b + regs::comp_cfg(dir)), 0);
            assert_eq!(d.read32(b + regs::q::DRHP), regs::ptr_value(0, 1));
            assert_eq!(d.read32(b + regs::q::DRTP), regs::ptr_value(0, 1));
            assert_eq!(d.read32(b + regs::q::STATUS), 0);
        }
        let tb = regs::queue_base(rig.base, Tx, 0);
        assert_eq!(d.read32(tb + regs::q::M2S_RLIMIT_MASK), 0b011);
        assert_eq!(d.read32(rig.base + regs::M2S_STATE), engine_state::NORMAL);
        assert_eq!(d.read32(rig.base + regs::S2M_STATE), engine_state::NORMAL);
        // An untouched queue keeps its reset value.
        let other = regs::queue_base(rig.base, Rx, 7);
        assert_eq!(d.read32(other + regs::q::CFG), regs::Q_CFG_RESET_VALUE);
    }
}

#[test]
fn cursors_follow_doorbells_and_execution() {
    for exec in POLICIES {
        let mut rig = Rig::new(Arch::V2, exec, OrderingMode::Relaxed);
        let (_src, dst, s) = rig.page_pair();
        for _ in 0..3 {
            rig.copy(s, dst.pa, 4096, Barrier::WriteBarrier);
        }
        // 3 × (1 data + 1 marker): the engine has executed everything it was given.
        let d = &*rig.dev;
        for dir in [Tx, Rx] {
            let b = regs::queue_base(rig.base, dir, 0);
            assert!(ndma_emu::test_utils::rig::poll(|| d.read32(b + regs::q::DRHP) == regs::ptr_value(6, 1)));
            assert_eq!(d.read32(b + regs::q::DRTP), regs::ptr_value(6, 1));
        }
    }
}

#[test]
fn paused_queue_holds_work_until_enabled() {
    let mut rig = Rig::new(Arch::V3, ndma_emu::ExecPolicy::Inline, OrderingMode::Strict);
    let (src, dst, s) = rig.page_pair();
    src.fill(0, 4096, 0x11).unwrap();
    let cfg = regs::queue_base(rig.base, Tx, 0) + regs::q::CFG;
    rig.dev.write32(cfg, regs::Q_CFG_RESET_VALUE);
    let n = rig.stage(s, dst.pa, 4096, Barrier::None) + 1;
    rig.stage_marker();
    rig.q.copy_start(&*rig.dev, n, n).unwrap();
    assert!(!rig.marker_landed(), "a paused queue must not execute");
    assert_eq!(rig.dev.pending(rig.eng, 0, Tx), n);
    rig.dev.write32(cfg, regs::Q_CFG_ENABLED);
    assert!(rig.marker_landed(), "enabling the queue resumes it");
    rig.q.ack(n);
    // Same with the engine state.
    rig.dev.write32(rig.base + regs::S2M_CHANGE_STATE, regs::CHANGE_STATE_DIS);
    assert_eq!(rig.dev.read32(rig.base + regs::S2M_STATE), engine_state::DISABLE);
    let n = rig.stage(s, dst.pa, 4096, Barrier::None) + 1;
    rig.stage_marker();
    rig.q.copy_start(&*rig.dev, n, n).unwrap();
    assert!(!rig.marker_landed());
    rig.dev.write32(rig.base + regs::S2M_CHANGE_STATE, regs::CHANGE_STATE_NORMAL);
    assert!(rig.marker_landed());
}

#[test]
fn unmapped_offsets_read_zero_and_ignore_writes() {
    for arch in Arch::ALL {
        let rig = Rig::new(arch, ndma_emu::ExecPolicy::Inline, OrderingMode::Relaxed);
        let d = &*rig.dev;
        for off in [0, 4, 0x1000, rig.base + regs::GEN_REGS, rig.base + 0x1001, u64::MAX - 3, 1 << 40] {
            d.write32(off, 0xffff_ffff);
            assert_eq!(d.read32(off), 0, "{arch} {off:#x}");
        }
        // Reads of the doorbell register return 0; writes to read-only cursors are ignored.
        let b = regs::queue_base(rig.base, Tx, 0);
        assert_eq!(d.read32(b + regs::q::DRTP_INC), 0);
        d.write32(b + regs::q::DRHP, 0x1234);
        assert_eq!(d.read32(b + regs::q::DRHP), regs::ptr_value(0, 1));
        assert!(d.faults().is_empty());
    }
}
