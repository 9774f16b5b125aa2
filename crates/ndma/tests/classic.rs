//! The classic path end to end on the emulator: every direction × both arches × the edge sizes, with
//! byte-exact windows and exact descriptor, batch and doorbell counts.

mod common;

use common::*;
use ndma::{NdmaError, Platform, SYNC_THRESHOLD};
use ndma_emu::{ClockKind, ExecPolicy, OrderingMode, PlannedFault};
use udma::Arch;

const BATCH: u64 = SYNC_THRESHOLD as u64 * 65536;

fn edge_sizes() -> Vec<u64> {
    vec![0, 1, 4095, 4096, 65535, 65536, 65537, BATCH, BATCH + 1]
}

fn matrix(arch: Arch, exec: ExecPolicy, sizes: &[u64]) {
    let tb = adversarial(arch, exec);
    let (dev, emu) = tb.device(0);
    for dir in DIRS {
        for (i, &size) in sizes.iter().enumerate() {
            let what = format!("{arch} {dir:?} {size} bytes");
            let w = Windows::new(dev, emu, dir, size, 0, i as u64 + 1);
            let before = dev.ring_stats(0).unwrap();
            let eng_before = emu.engine_stats(dev.h2t_queue(0).unwrap().0).unwrap();
            w.copy(dev).unwrap_or_else(|e| panic!("{what}: {e}"));
            w.verify(emu, &what);
            let d = dev.ring_stats(0).unwrap().since(&before);
            let (data, batches) = expected_split(size);
            assert_eq!(d.batches, batches, "{what}: batches");
            assert_eq!(d.descriptors, data + batches, "{what}: descriptors (data + one marker per batch)");
            assert_eq!(d.doorbells, 2 * batches, "{what}: doorbells (RX and TX per batch)");
            assert_eq!(d.bytes, size, "{what}: bytes");
            assert_eq!(d.transfers, u64::from(size > 0), "{what}: transfers");
            assert_eq!(d.timeouts, 0);
            let eng = emu.engine_stats(dev.h2t_queue(0).unwrap().0).unwrap();
            assert_eq!(eng.descriptors - eng_before.descriptors, data + batches, "{what}: engine executed");
        }
    }
    assert!(emu.faults().is_empty(), "{:?}", emu.faults());
}

#[test]
fn v2_every_direction_and_edge_size_threaded() {
    matrix(Arch::V2, ExecPolicy::Threaded, &edge_sizes());
}

#[test]
fn v3_every_direction_and_edge_size_inline() {
    matrix(Arch::V3, ExecPolicy::Inline, &edge_sizes());
}

#[test]
fn v2_multi_batch_inline() {
    matrix(Arch::V2, ExecPolicy::Inline, &[2 * BATCH + 65537]);
}

#[test]
fn v3_multi_batch_threaded() {
    matrix(Arch::V3, ExecPolicy::Threaded, &[2 * BATCH + 65537]);
}

#[test]
fn every_nc_of_both_arches_copies_on_its_own_ring() {
    for arch in Arch::ALL {
        let tb = adversarial(arch, ExecPolicy::Inline);
        let (dev, emu) = tb.device(0);
        for nc in 0..arch.ncs_per_device() {
            let w = Windows::new(dev, emu, Dir::H2D, 3 * 65536 + 7, nc, u64::from(nc));
            w.copy(dev).unwrap();
            w.verify(emu, &format!("{arch} nc {nc}"));
            assert_eq!(dev.ring_stats(nc).unwrap().batches, 1, "{arch} nc {nc} used its own ring");
        }
    }
}

#[test]
fn out_of_range_windows_are_refused_before_staging() {
    let tb = adversarial(Arch::V2, ExecPolicy::Inline);
    let (dev, _) = tb.device(0);
    let a = dev.alloc_host(4096, 0).unwrap();
    let b = dev.alloc_device(4096, 0).unwrap();
    let err = dev.memcpy_mc(&a, &b, 1, 0, 4096).unwrap_err();
    assert!(matches!(err, NdmaError::OutOfRange { what: "source chunk", offset: 1, size: 4096, limit: 4096 }), "{err}");
    assert_eq!(err.errno(), -22);
    let err = dev.memcpy_mc(&a, &b, 0, u64::MAX, 2).unwrap_err();
    assert!(
        matches!(err, NdmaError::OutOfRange { what: "source chunk", .. })
            || matches!(err, NdmaError::OutOfRange { .. })
    );
    let err = dev.memcpy(0, u64::MAX - 1, 0x10_0000_0000, 4).unwrap_err();
    assert!(matches!(err, NdmaError::OutOfRange { what: "source address", .. }), "{err}");
    assert_eq!(dev.memcpy(9, 0, 0, 4).unwrap_err(), NdmaError::InvalidNc { nc: 9, ncs: 2 });
    assert_eq!(dev.stats().batches, 0, "nothing was staged");
}

#[test]
fn hung_queue_times_out_with_the_exact_poll_budget_and_the_ring_recovers() {
    for arch in Arch::ALL {
        let tb = testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = dev.h2t_queue(0).unwrap();
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let w = Windows::new(dev, emu, Dir::H2D, 4096, 0, 7);
        let t0 = tb.platform.now_us();
        let err = w.copy(dev).unwrap_err();
        // count = 1 data + 1 marker; loop = following + 1; polls = loop + 1; one udelay(1) after each poll.
        let budget = dev.dhal().wait_budget(2, false);
        let polls = budget.following_us + 2;
        assert_eq!(err, NdmaError::Timeout { eng, qid, count: 2, polls });
        assert_eq!(err.errno(), -110);
        assert_eq!(tb.platform.now_us() - t0, budget.first_wait_us + polls, "{arch}: virtual time waited");
        let s = dev.ring_stats(0).unwrap();
        assert_eq!((s.timeouts, s.retries, s.ring_resets), (1, 0, 1), "{arch}: no retry outside a reset window");
        assert!(!emu.is_hung(eng, qid), "the ring re-init cleared the hang");
        // The next copy on the device succeeds, byte-exact.
        let w2 = Windows::new(dev, emu, Dir::H2D, 200_000, 0, 8);
        w2.copy(dev).unwrap();
        w2.verify(emu, "after the hang");
    }
}
