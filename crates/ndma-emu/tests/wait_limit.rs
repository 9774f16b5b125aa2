//! The test harness's bound on marker waits: a lost completion fails a test within the platform's wait limit
//! even under emulation budgets, which would otherwise keep the op layer polling for hours.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use ndma::Platform;
use ndma_emu::test_utils::{bounded, testbed, testbed_config, Dir, Window, TEST_WAIT_LIMIT};
use ndma_emu::{ClockKind, ExecPolicy, OrderingMode, PlannedFault, Testbed, TestbedConfig};
use udma::Arch;

#[test]
fn a_lost_completion_panics_within_the_wait_limit_under_emulation_budgets() {
    for clock in [ClockKind::Real, ClockKind::Fake] {
        let cfg = testbed_config(Arch::V2, ExecPolicy::Threaded, OrderingMode::Relaxed, clock);
        let tb = bounded(cfg);
        assert!(tb.platform.is_emulation(), "threaded test beds keep emulation budgets");
        // Shorter than the harness's limit, to keep the test quick. Unbounded, this wait would run out the
        // emulation budget of a 2-descriptor device-to-device batch: 19 950 002 polls, then -ETIMEDOUT.
        tb.platform.set_wait_limit(Some(Duration::from_millis(200)));
        let (dev, emu) = tb.device(0);
        let (eng, qid) = dev.h2t_queue(0).unwrap();
        let w = Window::new(dev, emu, Dir::D2d, 100, 0, 1).unwrap();
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let outcome = catch_unwind(AssertUnwindSafe(|| w.copy_all()));
        let payload = match outcome {
            Err(p) => p,
            Ok(r) => panic!("{clock:?}: the lost completion ended as {r:?}, not as the wait limit's panic"),
        };
        let msg = payload.downcast_ref::<String>().map_or("", String::as_str);
        assert!(msg.starts_with("lost completion: the marker word at 0x"), "{clock:?}: {msg}");
        assert!(msg.contains("test wait limit 200ms"), "{clock:?}: {msg}");
        assert!(emu.is_hung(eng, qid), "{clock:?}: the queue is still the hung one");
    }
}

#[test]
fn the_harness_bounds_its_test_beds_and_a_plain_testbed_is_unbounded() {
    let tb = testbed(Arch::V3, ExecPolicy::Inline, OrderingMode::Relaxed, ClockKind::Fake);
    assert_eq!(tb.platform.wait_limit(), Some(TEST_WAIT_LIMIT));
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::H2d, 70_000, 1, 2).unwrap();
    w.copy_all().unwrap();
    w.verify("a bounded wait that sees its marker", true).unwrap();

    let plain = Testbed::new(TestbedConfig::new(ndma_emu::test_utils::instance(Arch::V2))).unwrap();
    assert_eq!(plain.platform.wait_limit(), None);
    plain.platform.set_wait_limit(Some(Duration::from_secs(3)));
    assert_eq!(plain.platform.wait_limit(), Some(Duration::from_secs(3)));
    plain.platform.set_wait_limit(None);
    assert_eq!(plain.platform.wait_limit(), None);
}
