//! The V2 reset-window retry (spec §5): a copy whose doorbell rings while its NeuronCore is being reset hangs
//! on V2 silicon; the op layer re-initialises the ring and replays — only on V2, only inside the window,
//! boundedly.

use ndma::{AsyncPipeline, CtxHandle, NdmaError, Platform, MAX_RESET_WINDOW_REPLAYS};
use ndma_emu::test_utils::*;
use ndma_emu::{ClockKind, ExecPolicy, OrderingMode, PlannedFault};
use udma::Arch;

fn fake(arch: Arch) -> ndma_emu::Testbed {
    testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake)
}

/// Jiffies (ms) the wait of a 3-descriptor V2 batch takes on the fake clock: first wait 5 µs, then 79 502
/// polls of 1 µs ≈ 80 ms.
const V2_3_DESC_WAIT_JIFFIES: u64 = 80;

#[test]
fn v2_sync_copy_started_during_a_reset_recovers_with_correct_data() {
    let tb = fake(Arch::V2);
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::H2d, 100_000, 0, 1).unwrap();
    // The reset outlasts the first wait, so the first replay hangs too; the second runs after the reset.
    assert!(emu.reset_nc(0, V2_3_DESC_WAIT_JIFFIES + 20));
    assert!(emu.nc_reset_in_progress(0));
    w.copy_all().unwrap();
    w.verify("v2 sync copy through a reset", true).unwrap();
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.retries, s.replays, s.transfers), (2, 2, 2, 1), "{s:?}");
    assert!(!emu.nc_reset_in_progress(0));
    // A reset of the other NC does not touch NC 0's ring.
    assert!(emu.reset_nc(1, 1000));
    let w2 = Window::new(dev, emu, Dir::D2h, 70_000, 0, 2).unwrap();
    w2.copy_all().unwrap();
    w2.verify("nc 0 while nc 1 resets", true).unwrap();
    assert_eq!(dev.ring_stats(0).unwrap().retries, 2);
}

#[test]
fn v2_async_chain_replays_both_contexts() {
    let tb = fake(Arch::V2);
    let (dev, emu) = tb.device(0);
    let a = Window::new(dev, emu, Dir::H2d, 64 * 1024 + 3, 0, 3).unwrap();
    let b = Window::new(dev, emu, Dir::H2d, 5000, 0, 4).unwrap();
    assert!(emu.reset_nc(0, 10));
    let h = dev.memcpy_mc_async(&a.src, &a.dst, GUARD, GUARD, a.len, 0, CtxHandle::None).unwrap();
    // a hangs (doorbell inside the reset); b is staged behind it, then a's wait times out inside the window:
    // the ring is re-initialised and both contexts are replayed.
    let h2 = dev.memcpy_mc_async(&b.src, &b.dst, GUARD, GUARD, b.len, 0, h).unwrap();
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.retries, s.replays), (1, 2), "{s:?}");
    dev.memcpy_mc_wait(&b.src, &b.dst, h2).unwrap();
    a.verify("a replayed", true).unwrap();
    b.verify("b replayed", true).unwrap();
    assert_eq!(dev.ring_stats(0).unwrap().transfers, 2);
}

#[test]
fn the_retry_is_bounded_and_the_ring_is_usable_afterwards() {
    let tb = fake(Arch::V2);
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::D2d, 4096, 0, 5).unwrap();
    assert!(emu.reset_nc(0, 1_000_000));
    let err = w.copy_all().unwrap_err();
    assert_eq!(err, NdmaError::RetryExhausted { replays: MAX_RESET_WINDOW_REPLAYS, state: ndma::RingSnapshot::NONE });
    assert_eq!(err.errno(), -110);
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.retries, s.replays), (u64::from(MAX_RESET_WINDOW_REPLAYS), u64::from(MAX_RESET_WINDOW_REPLAYS)));
    // Let the reset finish, then the ring works.
    tb.platform.advance_us(1_000_000 * 1000);
    assert!(!emu.nc_reset_in_progress(0));
    w.copy_all().unwrap();
    w.verify("after the bounded retry", true).unwrap();
}

#[test]
fn a_hang_outside_any_reset_window_is_not_retried() {
    let tb = fake(Arch::V2);
    let (dev, emu) = tb.device(0);
    assert!(emu.reset_nc(0, 5));
    tb.platform.advance_us(10_000);
    assert!(!emu.nc_reset_in_progress(0));
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let w = Window::new(dev, emu, Dir::H2d, 4096, 0, 6).unwrap();
    assert!(matches!(w.copy_all(), Err(NdmaError::Timeout { .. })));
    assert_eq!(dev.ring_stats(0).unwrap().retries, 0);
    w.copy_all().unwrap();
    w.verify("after a plain hang", true).unwrap();
}

#[test]
fn v3_has_no_reset_bug_and_never_retries() {
    let tb = fake(Arch::V3);
    let (dev, emu) = tb.device(0);
    // A reset in progress does not hang V3 queues.
    assert!(emu.reset_nc(0, 1000));
    let w = Window::new(dev, emu, Dir::H2d, 100_000, 0, 7).unwrap();
    w.copy_all().unwrap();
    w.verify("v3 during a reset", true).unwrap();
    // A hang inside the window times out without a retry: V3 has no retry flag.
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let t0 = tb.platform.jiffies();
    assert!(matches!(w.copy_all(), Err(NdmaError::Timeout { .. })));
    assert!(tb.platform.jiffies() > t0);
    assert_eq!(dev.ring_stats(0).unwrap().retries, 0);
    w.copy_all().unwrap();
}

#[test]
fn pipelines_survive_a_reset() {
    let tb = fake(Arch::V2);
    let (dev, emu) = tb.device(0);
    let ws: Vec<Window> =
        (0..6).map(|i| Window::new(dev, emu, Dir::ALL[i % 4], 30_000 + i as u64, 0, 10 + i as u64).unwrap()).collect();
    let mut p = AsyncPipeline::new(dev);
    for (i, w) in ws.iter().enumerate() {
        if i == 2 {
            assert!(emu.reset_nc(0, 20));
        }
        p.submit(&w.transfer()).unwrap();
    }
    p.finish().unwrap();
    for (i, w) in ws.iter().enumerate() {
        w.verify(&format!("pipeline copy {i}"), true).unwrap();
    }
    // Copy 2 rang its doorbell inside the 20 ms reset and hung; submitting copy 3 staged it behind copy 2 and
    // waited for copy 2 with the async budget (≈ 40 ms on V2), which outlasts the reset: one timeout, one
    // retry that replays copies 2 and 3 after the reset, and nothing else hangs.
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.retries, s.replays, s.transfers), (1, 1, 2, 6), "{s:?}");
}

/// `nr_op_in_reset_wnd` (FACTS §4), at its boundaries, through the one thing it decides — whether a V2
/// timeout is retried: in a window while a reset is in progress (end ≤ start, which includes "never reset",
/// both 0) or when the op started at or before the latest reset's end; outside once it started a jiffy after.
#[test]
fn the_reset_window_is_end_at_most_start_or_op_start_at_most_end() {
    use std::sync::{Arc, Mutex};
    struct Times(Mutex<(u64, u64)>);
    impl ndma::ResetClock for Times {
        fn reset_times(&self, _nc: u32) -> (u64, u64) {
            *self.0.lock().unwrap()
        }
    }
    let emu = ndma_emu::EmuSystem::new(ndma_emu::EmuConfig {
        exec: ExecPolicy::Inline,
        hbm_size: Some(1 << 30),
        host_dram_size: 1 << 30,
        ..ndma_emu::EmuConfig::new(Arch::V2)
    })
    .unwrap();
    let platform = Arc::new(ndma_emu::EmuPlatform::new(emu.host().clone(), ClockKind::Fake));
    platform.advance_us(1_000_000);
    let times = Arc::new(Times(Mutex::new((0, 0))));
    let hw = ndma::DeviceHw { resets: Some(times.clone()), ..ndma_emu::device_hw(emu.device(0)).unwrap() };
    let sys = ndma::System::new(Arch::V2, platform.clone(), vec![hw]).unwrap();
    let dev = &sys.devices()[0];
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let (src, dst) = (dev.alloc_host(4096, 0).unwrap(), dev.alloc_device(4096, 0).unwrap());
    // (reset start, reset end) relative to the copy's start jiffy `j`, and whether its hang is retried.
    type Window = fn(u64) -> (u64, u64);
    let cases: [(&str, Window, bool); 6] = [
        ("never reset: both 0", |_| (0, 0), true),
        ("the op started at the reset's end", |j| (j - 10, j), true),
        ("the op started before the reset's end", |j| (j - 10, j + 1), true),
        ("the op started a jiffy after the reset's end", |j| (j - 10, j - 1), false),
        ("a reset in progress: end = start", |j| (j - 1, j - 1), true),
        ("a reset in progress: end < start", |j| (j - 1, j - 5), true),
    ];
    for (what, window, retried) in cases {
        let j = platform.jiffies();
        *times.0.lock().unwrap() = window(j);
        emu.device(0).fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let before = dev.ring_stats(0).unwrap().retries;
        let result = dev.memcpy_mc(&src, &dst, 0, 0, 4096);
        let retries = dev.ring_stats(0).unwrap().retries - before;
        if retried {
            assert_eq!((result, retries), (Ok(()), 1), "{what}");
        } else {
            assert!(matches!(result, Err(NdmaError::Timeout { .. })), "{what}: {result:?}");
            assert_eq!(retries, 0, "{what}");
        }
    }
}

/// FACTS §7.2 V2 retry step 5: once a retry has re-staged, the waits that follow are synchronous — an async
/// chain's first wait has the async budget (1 µs first wait), every wait after a replay the sync one. Seen in the
/// polls of a wait that times out twice inside a long reset: the async budget, then the sync one.
#[test]
fn after_a_replay_the_wait_is_synchronous() {
    let tb = fake(Arch::V2);
    let (dev, emu) = tb.device(0);
    // Three data descriptors + the marker: a batch whose sync and async budgets differ (first 9 µs vs 1 µs).
    let a = Window::new(dev, emu, Dir::H2d, 3 * 65536, 0, 8).unwrap();
    let b = Window::new(dev, emu, Dir::H2d, 5000, 0, 9).unwrap();
    let (async_plan, sync_plan) = (
        ndma::poll_plan(ndma::dhal(Arch::V2), false, 4, true, false),
        ndma::poll_plan(ndma::dhal(Arch::V2), false, 4, false, false),
    );
    assert_ne!(async_plan.1, sync_plan.1);
    // The first wait (async, ≈ 120 ms) and the first replay fall inside the 200 ms reset; the second wait
    // (sync, ≈ 119 ms) outlasts it, so the second replay runs.
    assert!(emu.reset_nc(0, 200));
    let h = dev.memcpy_mc_async(&a.src, &a.dst, GUARD, GUARD, a.len, 0, CtxHandle::None).unwrap();
    let h2 = dev.memcpy_mc_async(&b.src, &b.dst, GUARD, GUARD, b.len, 0, h).unwrap();
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.retries), (2, 2), "{s:?}");
    // A timed-out wait makes loop + 1 polls; the wait after the second replay sees A's marker at its first.
    assert_eq!(s.polls, (async_plan.1 + 1) + (sync_plan.1 + 1) + 1, "async budget, then sync: {s:?}");
    dev.memcpy_mc_wait(&b.src, &b.dst, h2).unwrap();
    a.verify("a after two replays", true).unwrap();
    b.verify("b after two replays", true).unwrap();
}

/// FACTS §7.2 V2 retry step 2 (spec §5, "resetting start_time each lap"): each retry restarts the op's clock,
/// so a copy that still hangs once the reset is over leaves the window and reports its timeout — after one
/// retry here — instead of being replayed as long as its *first* start lies before the reset's end.
#[test]
fn each_retry_restarts_the_ops_clock_so_a_hang_past_the_reset_is_reported() {
    let tb = fake(Arch::V2);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let w = Window::new(dev, emu, Dir::H2d, 4096, 0, 10).unwrap();
    // A 10 ms reset, and a queue that hangs whatever happens: the first wait (≈ 40 ms) ends after the reset.
    assert!(emu.reset_nc(0, 10));
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: true });
    let err = w.copy_all().unwrap_err();
    assert!(matches!(err, NdmaError::Timeout { count: 2, .. }), "{err}");
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.retries), (2, 1), "one retry, then outside the window: {s:?}");
    emu.fault_plan().clear();
    w.copy_all().unwrap();
    w.verify("after the hang", true).unwrap();
}
