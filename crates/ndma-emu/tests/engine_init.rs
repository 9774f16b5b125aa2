//! Engine bring-up as the device sees it: an engine the HAL never brought up does no work, the engine-level
//! registers the HAL declares are stored, what engine init programs the model honours (the DMB unmasked by
//! queue init), and every declared register behaves through BAR0 as its declaration says.

use std::sync::Arc;

use ndma_emu::test_utils::pattern;
use ndma_emu::test_utils::rig::{config, ring, Rig, MARKER};
use ndma_emu::{engine_state, EmuSystem, ExecPolicy, OrderingMode};
use udma::regs::{self, EngineReg, QueueReg, Register};
use udma::Direction::{Rx, Tx};
use udma::{Arch, Barrier, DmaMemory, Mmio, Udma, UdmaState};

/// An `Mmio` that goes nowhere: a queue handle made through it leaves the device's engine untouched.
struct Nowhere;

impl Mmio for Nowhere {
    fn read32(&self, _offset: u64) -> u32 {
        0
    }
    fn write32(&self, _offset: u64, _value: u32) {}
}

#[test]
fn an_engine_never_brought_up_does_no_work_until_it_is() {
    for arch in Arch::ALL {
        let sys = EmuSystem::new(config(arch, ExecPolicy::Inline, OrderingMode::Strict)).unwrap();
        let dev = Arc::clone(sys.device(0));
        let eng = 3;
        // The queue is programmed on the device, but the engine's state machine never left DISABLE.
        let mut q =
            Udma::init(&Nowhere, arch, eng).unwrap().init_queue(&*dev, 0, ring(&dev, 64), ring(&dev, 64), 64).unwrap();
        let base = arch.engine_base(eng).unwrap();
        assert_eq!(dev.read32(base + regs::M2S_STATE), engine_state::DISABLE);
        let src = dev.host().alloc(4096, 4096).unwrap();
        let data = pattern(9, 0, 4096);
        src.write_bytes(0, &data).unwrap();
        let marker = dev.host().alloc(256, 256).unwrap();
        marker.store_u32(0, MARKER, std::sync::atomic::Ordering::Relaxed).unwrap();
        let dst = dev.alloc_hbm(4096, 4096).unwrap().pa;
        dev.hbm_fill(dst, 4096, 0xee).unwrap();
        let (s, m) = (src.phys_addr() | arch.pci_host_base(), marker.phys_addr() | arch.pci_host_base());
        q.copy_prepare_one(s, dst, 4096, Barrier::WriteBarrier, false).unwrap();
        q.copy_prepare_one(m, m + 4, 4, Barrier::None, false).unwrap();
        q.copy_start(&*dev, 2, 2).unwrap();
        assert_eq!(dev.pending(eng, 0, Rx), 2, "{arch}: the work waits");
        assert_eq!(marker.load_u32(4, std::sync::atomic::Ordering::Acquire).unwrap(), 0);
        let mut got = vec![0; 4096];
        dev.hbm_read(dst, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == 0xee), "{arch}: nothing was written");
        assert!(dev.faults().is_empty());
        // Bringing the engine up through the HAL starts it.
        let engine = Udma::init(&*dev, arch, eng).unwrap();
        assert_eq!(engine.state(&*dev, Tx), Some(UdmaState::Normal));
        assert_eq!(engine.state(&*dev, Rx), Some(UdmaState::Normal));
        assert_eq!(marker.load_u32(4, std::sync::atomic::Ordering::Acquire).unwrap(), MARKER);
        dev.hbm_read(dst, &mut got).unwrap();
        assert!(got == data, "{arch}");
    }
}

#[test]
fn engine_level_registers_are_stored_where_declared() {
    for arch in Arch::ALL {
        let rig = Rig::new(arch, ExecPolicy::Inline, OrderingMode::Relaxed);
        let d = &*rig.dev;
        assert_eq!(d.read32(rig.base + regs::M2S_CFG_LEN), 0, "reset value");
        d.write32(rig.base + regs::M2S_CFG_LEN, 0x0101_0000);
        assert_eq!(d.read32(rig.base + regs::M2S_CFG_LEN), 0x0101_0000, "{arch}");
        // FACTS declare no S2M cfg_len: nothing is stored there.
        d.write32(rig.base + regs::S2M_REGS + 0x254, 7);
        assert_eq!(d.read32(rig.base + regs::S2M_REGS + 0x254), 0);
        // `state` is read-only, `change_state` write-only.
        d.write32(rig.base + regs::M2S_STATE, UdmaState::Abort as u32);
        assert_eq!(d.read32(rig.base + regs::M2S_STATE), engine_state::NORMAL);
        assert_eq!(d.read32(rig.base + regs::M2S_CHANGE_STATE), 0);
        // Another engine's register is its own.
        let other = arch.engine_base(1).unwrap();
        assert_eq!(d.read32(other + regs::M2S_CFG_LEN), 0);
    }
}

/// Writes a distinctive value to every declared register of one engine (both directions, every queue) and
/// reads it back: plainly stored registers return it; the rest behave as their declaration says.
#[test]
fn every_declared_register_behaves_through_bar0() {
    const V: u32 = 0x5a5a_0040; // RST_Q (bit 8) clear, so a q_sw_ctrl write is stored, not a reset.
    for arch in Arch::ALL {
        let sys = EmuSystem::new(config(arch, ExecPolicy::Inline, OrderingMode::Relaxed)).unwrap();
        let d = Arc::clone(sys.device(0));
        let eng = arch.h2t_engine(0).unwrap();
        let base = arch.engine_base(eng).unwrap();
        for dir in [Tx, Rx] {
            for &reg in EngineReg::ALL {
                let Some(off) = (Register::Engine { dir, reg }).offset() else { continue };
                d.write32(base + off, V);
                let want = match reg {
                    EngineReg::State => engine_state::DISABLE,
                    EngineReg::ChangeState => 0,
                    EngineReg::CfgLen => V,
                };
                assert_eq!(d.read32(base + off), want, "{arch} {dir} {}", reg.name());
            }
            for qid in [0, 7, 15] {
                for &reg in QueueReg::ALL {
                    let Some(off) = (Register::Queue { dir, qid, reg }).offset() else { continue };
                    let before = d.read32(base + off);
                    assert_eq!(
                        before,
                        match reg {
                            QueueReg::Drhp | QueueReg::Drtp | QueueReg::Dcp => regs::ptr_value(0, 1),
                            _ => reg.reset_value(),
                        },
                        "{arch} {dir} q{qid} {} out of reset",
                        reg.name()
                    );
                    if reg == QueueReg::DrtpInc {
                        // Write-only, and a write is a doorbell (tests/halt.rs): only the read is checked here.
                        continue;
                    }
                    d.write32(base + off, V);
                    let want = match reg {
                        QueueReg::Status | QueueReg::Drhp | QueueReg::Drtp | QueueReg::Dcp | QueueReg::Crhp => before,
                        _ => V,
                    };
                    assert_eq!(d.read32(base + off), want, "{arch} {dir} q{qid} {}", reg.name());
                }
            }
        }
        assert!(d.faults().is_empty(), "{arch}: no write had a side effect");
    }
}

/// `drtp_inc` is a 24-bit count (FACTS §2.3): bits above it are not part of the doorbell.
#[test]
fn a_doorbell_counts_only_its_24_bit_field() {
    let mut rig = Rig::new(Arch::V2, ExecPolicy::Inline, OrderingMode::Strict);
    let src = rig.dev.host().alloc(4096, 4096).unwrap();
    src.write_bytes(0, &pattern(5, 0, 4096)).unwrap();
    let dst = rig.dev.alloc_hbm(4096, 4096).unwrap().pa;
    let s = rig.host_addr(&src, 0);
    let n = rig.stage(s, dst, 4096, Barrier::WriteBarrier) + 1;
    rig.stage_marker();
    for dir in [Rx, Tx] {
        rig.dev.write32(regs::queue_base(rig.base, dir, 0) + regs::q::DRTP_INC, 0xAB00_0000 | n);
    }
    assert!(rig.marker_landed());
    assert!(rig.dev.faults().is_empty(), "{:?}", rig.dev.faults());
    let mut got = vec![0; 4096];
    rig.dev.hbm_read(dst, &mut got).unwrap();
    assert!(got == pattern(5, 0, 4096));
    rig.q.ack(n);
}

/// Queue init unmasks the DMB pause in the TX rate-limit mask; the model honours the mask. With the mask
/// back at its reset value a DMB on the marker does not drain, so in Adversarial ordering the marker lands
/// while HBM still holds the old bytes.
#[test]
fn a_dmb_pauses_only_once_queue_init_unmasked_it() {
    const LEN: usize = 2 * 65536;
    for arch in Arch::ALL {
        for unmasked in [true, false] {
            let mut rig = Rig::new(arch, ExecPolicy::Inline, OrderingMode::Adversarial);
            let rlimit = regs::queue_base(rig.base, Tx, 0) + regs::q::M2S_RLIMIT_MASK;
            assert_eq!(rig.dev.read32(rlimit), 0b011, "queue init wrote the unmasked value");
            if !unmasked {
                rig.dev.write32(rlimit, regs::RLIMIT_MASK_RESET_VALUE);
            }
            let src = rig.dev.host().alloc(LEN, 4096).unwrap();
            let data = pattern(3, 0, LEN);
            src.write_bytes(0, &data).unwrap();
            let dst = rig.dev.alloc_hbm(LEN as u64, 4096).unwrap().pa;
            rig.dev.hbm_fill(dst, LEN as u64, 0xee).unwrap();
            let s = rig.host_addr(&src, 0);
            let n = rig.stage(s, dst, LEN as u64, Barrier::None) + 1;
            rig.marker.store_u32(0, MARKER, std::sync::atomic::Ordering::Relaxed).unwrap();
            let m = rig.host_addr(&rig.marker, 0);
            rig.q.copy_prepare_one(m, m + 4, 4, Barrier::Dmb, false).unwrap();
            rig.q.copy_start(&*rig.dev, n, n).unwrap();
            assert!(rig.marker_landed());
            let mut got = vec![0; LEN];
            rig.dev.hbm_read(dst, &mut got).unwrap();
            if unmasked {
                assert!(got == data, "{arch}: the DMB drained the data before the marker");
            } else {
                assert!(got.iter().all(|&b| b == 0xee), "{arch}: a masked DMB does not drain");
                rig.dev.flush_posted_writes();
                rig.dev.hbm_read(dst, &mut got).unwrap();
                assert!(got == data, "{arch}");
            }
        }
    }
}
