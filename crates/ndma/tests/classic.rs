//! The classic path end to end on the emulator: every direction × both arches × the edge sizes, with
//! byte-exact windows and exact descriptor, batch and doorbell counts.

use ndma::{NdmaError, Platform, SYNC_THRESHOLD};
use ndma_emu::test_utils::*;
use ndma_emu::{ClockKind, ExecPolicy, OrderingMode, PlannedFault};
use udma::Arch;

const BATCH: u64 = SYNC_THRESHOLD as u64 * 65536;

fn edge_sizes() -> Vec<u64> {
    vec![0, 1, 4095, 4096, 65535, 65536, 65537, BATCH, BATCH + 1]
}

/// Data descriptors and batches the classic split produces for `size` bytes.
fn expected_split(size: u64) -> (u64, u64) {
    let data = size.div_ceil(65536);
    let batches = data.div_ceil(u64::from(SYNC_THRESHOLD));
    (data, batches)
}

fn matrix(arch: Arch, exec: ExecPolicy, sizes: &[u64]) {
    let tb = adversarial(arch, exec);
    let (dev, emu) = tb.device(0);
    for dir in Dir::ALL {
        for (i, &size) in sizes.iter().enumerate() {
            let what = format!("{arch} {dir:?} {size} bytes");
            let w = Window::new(dev, emu, dir, size, 0, i as u64 + 1).unwrap();
            let before = dev.ring_stats(0).unwrap();
            let eng_before = emu.engine_stats(dev.h2t_queue(0).unwrap().0).unwrap();
            w.copy_all().unwrap_or_else(|e| panic!("{what}: {e}"));
            w.verify(&what, true).unwrap();
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
            let w = Window::new(dev, emu, Dir::H2d, 3 * 65536 + 7, nc, u64::from(nc)).unwrap();
            w.copy_all().unwrap();
            w.verify(&format!("{arch} nc {nc}"), true).unwrap();
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
    assert_eq!(err, NdmaError::OutOfRange { what: "destination chunk", offset: u64::MAX, size: 2, limit: 4096 });
    // SAFETY: refused before anything is staged (the source end overflows), so no memory is touched.
    let err = unsafe { dev.memcpy(0, u64::MAX - 1, 0x10_0000_0000, 4) }.unwrap_err();
    assert!(matches!(err, NdmaError::OutOfRange { what: "source address", .. }), "{err}");
    // SAFETY: refused before anything is staged (NC 9 does not exist).
    assert_eq!(unsafe { dev.memcpy(9, 0, 0, 4) }.unwrap_err(), NdmaError::InvalidNc { nc: 9, ncs: 2 });
    assert_eq!(dev.stats().batches, 0, "nothing was staged");
}

#[test]
fn hung_queue_times_out_with_the_exact_poll_budget_and_the_ring_recovers() {
    for arch in Arch::ALL {
        let tb = testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = dev.h2t_queue(0).unwrap();
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let w = Window::new(dev, emu, Dir::H2d, 4096, 0, 7).unwrap();
        let t0 = tb.platform.now_us();
        let err = w.copy_all().unwrap_err();
        // count = 1 data + 1 marker; loop = following + 1; polls = loop + 1; one udelay(1) after each poll.
        let budget = dev.dhal().wait_budget(2, false);
        let polls = budget.following_us + 2;
        assert_eq!(err, NdmaError::Timeout { eng, qid, count: 2, polls, state: ndma::RingSnapshot::NONE });
        assert_eq!(err.errno(), -110);
        assert_eq!(tb.platform.now_us() - t0, budget.first_wait_us + polls, "{arch}: virtual time waited");
        let s = dev.ring_stats(0).unwrap();
        assert_eq!((s.timeouts, s.retries, s.ring_resets), (1, 0, 1), "{arch}: no retry outside a reset window");
        // The wait counters hold the budget consumed: the first wait and one 1 µs interval per poll.
        assert_eq!((s.polls, s.wait_us), (polls, budget.first_wait_us + polls), "{arch}: wait counters");
        assert!(!emu.is_hung(eng, qid), "the ring re-init cleared the hang");
        // The next copy on the device succeeds, byte-exact.
        let w2 = Window::new(dev, emu, Dir::H2d, 200_000, 0, 8).unwrap();
        w2.copy_all().unwrap();
        w2.verify("after the hang", true).unwrap();
    }
}

#[test]
fn device_to_device_hang_uses_the_d2d_shortcut_budget() {
    let tb = testbed(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let w = Window::new(dev, emu, Dir::D2d, 100, 0, 1).unwrap();
    let t0 = tb.platform.now_us();
    let err = w.copy_all().unwrap_err();
    // V2, count 2: following 39 900 µs / 200 = 199 → loop 200 → 201 polls, after a fixed 10 µs first wait.
    assert_eq!(err, NdmaError::Timeout { eng, qid, count: 2, polls: 201, state: ndma::RingSnapshot::NONE });
    assert_eq!(tb.platform.now_us() - t0, 10 + 201);
    w.copy_all().unwrap();
    w.verify("d2d after the hang", true).unwrap();
}

#[test]
fn poll_plans_follow_the_driver_scalings() {
    let v2 = ndma::dhal(Arch::V2);
    let v3 = ndma::dhal(Arch::V3);
    // Silicon, sync: DHAL first wait; loop = following + 1.
    assert_eq!(ndma::poll_plan(v2, false, 2032, false, false), (8121, 80_427_901));
    assert_eq!(ndma::poll_plan(v3, false, 2032, false, false), (4061, 162_073_901));
    // Emulation platforms scale the following wait ×100000.
    assert_eq!(ndma::poll_plan(v2, true, 2, false, false), (1, 39_900 * 100_000 + 1));
    // Device-to-device sync: 10 µs first wait, following ÷200; async disables the shortcut.
    assert_eq!(ndma::poll_plan(v2, false, 2032, false, true), (10, 80_427_900 / 200 + 1));
    assert_eq!(ndma::poll_plan(v3, true, 2032, false, true), (10, 162_073_900 * 100_000 / 200 + 1));
    assert_eq!(ndma::poll_plan(v2, false, 2032, true, true), (1, (812_400 - 1) * 100 + 1));
}

#[test]
fn the_emulation_switch_scales_the_wait_budget() {
    // The cheapest hang to wait out with emulation budgets: a V2 device-to-device batch of 2 descriptors
    // (1 data + marker). Silicon: following 39 900 µs / 200 → loop 200 → 201 polls. Emulation: following
    // ×100 000 → 39 900 × 100 000 / 200 = 19 950 000 → loop 19 950 001 → 19 950 002 polls, on the fake clock.
    let tb = testbed(Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    assert!(!tb.platform.is_emulation());
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let w = Window::new(dev, emu, Dir::D2d, 100, 0, 9).unwrap();
    let hung_copy = || {
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let t0 = tb.platform.now_us();
        let err = w.copy_all().unwrap_err();
        (err, tb.platform.now_us() - t0)
    };

    let (err, waited) = hung_copy();
    assert_eq!(
        err,
        NdmaError::Timeout { eng, qid, count: 2, polls: 201, state: ndma::RingSnapshot::NONE },
        "silicon budget"
    );
    assert_eq!(waited, 10 + 201);

    tb.platform.set_emulation(true);
    assert!(tb.platform.is_emulation());
    // The hang is waited out on purpose here: ~20 million polls of virtual time, seconds of real time.
    assert_eq!(ndma::poll_plan(dev.dhal(), true, 2, false, true), (10, 19_950_001));
    let (err, waited) = hung_copy();
    assert_eq!(
        err,
        NdmaError::Timeout { eng, qid, count: 2, polls: 19_950_002, state: ndma::RingSnapshot::NONE },
        "emulation budget"
    );
    assert_eq!(waited, 10 + 19_950_002, "virtual time waited");
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.ring_resets, s.transfers), (2, 2, 0), "{s:?}");

    // The ring recovered: the copy goes through, byte-exact, on the first poll.
    w.copy_all().unwrap();
    w.verify("d2d with emulation budgets after two hangs", true).unwrap();
    assert_eq!(dev.ring_stats(0).unwrap().polls - s.polls, 1, "inline engine: the first poll sees the marker");
}

#[test]
fn kernel_buffer_copies_use_the_chunk_nc_and_stay_in_their_windows() {
    for arch in Arch::ALL {
        let tb = adversarial(arch, ExecPolicy::Inline);
        let (dev, emu) = tb.device(0);
        let nc = arch.ncs_per_device() - 1;
        let buf = dev.platform().alloc_coherent(200_000).unwrap();
        let data = pattern(77, 0, 150_000);
        buf.write_bytes(1000, &data).unwrap();
        let mc = dev.alloc_device(300_000, nc).unwrap();
        emu.hbm_fill(mc.pa(), 300_000, 0xEE).unwrap();
        dev.memcpy_buf_to_mc(&*buf, 1000, &mc, 5000, 150_000).unwrap();
        let back = read_vec(emu, &mc, 0, 300_000).unwrap();
        assert!(back[..5000].iter().all(|&b| b == 0xEE) && back[155_000..].iter().all(|&b| b == 0xEE));
        assert!(back[5000..155_000] == data[..]);
        assert_eq!(dev.ring_stats(nc).unwrap().transfers, 1, "{arch}: the device chunk's NC");
        let out = dev.platform().alloc_coherent(200_000).unwrap();
        out.fill(0, 200_000, 0x11).unwrap();
        dev.memcpy_buf_from_mc(&*out, 7, &mc, 5000, 150_000).unwrap();
        let mut got = vec![0u8; 200_000];
        out.read_bytes(0, &mut got).unwrap();
        assert!(got[..7].iter().all(|&b| b == 0x11) && got[150_007..].iter().all(|&b| b == 0x11));
        assert!(got[7..150_007] == data[..]);
        assert_eq!(
            dev.memcpy_buf_to_mc(&*buf, 100_000, &mc, 0, 100_001),
            Err(NdmaError::OutOfRange { what: "source buffer", offset: 100_000, size: 100_001, limit: 200_000 })
        );
        // FACTS §6: a *host* chunk's NC is not used — the buffer copies run on NC 0 (the chunk's NC "0 if host").
        let host_mc = dev.alloc_host(8192, nc).unwrap();
        let (on0, on_nc) = (dev.ring_stats(0).unwrap().transfers, dev.ring_stats(nc).unwrap().transfers);
        dev.memcpy_buf_to_mc(&*buf, 1000, &host_mc, 0, 4096).unwrap();
        dev.memcpy_buf_from_mc(&*out, 0, &host_mc, 0, 4096).unwrap();
        assert_eq!(dev.ring_stats(0).unwrap().transfers - on0, 2, "{arch}: host chunk of NC {nc}: NC 0's ring");
        assert_eq!(dev.ring_stats(nc).unwrap().transfers, on_nc, "{arch}: nothing on NC {nc}");
        let mut round = vec![0u8; 4096];
        out.read_bytes(0, &mut round).unwrap();
        assert!(round[..] == data[..4096], "{arch}: through the host chunk and back");
    }
}
