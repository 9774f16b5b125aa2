//! Test beds: instances and [`Testbed`]s with the tests' memory sizes, every marker wait bounded in
//! wall-clock time.

use std::time::Duration;

use ndma::Instance;
use udma::Arch;

use crate::{ClockKind, ExecPolicy, OrderingMode, Testbed, TestbedConfig};

/// How long a test's marker wait may go without its completion before the test fails (see
/// [`EmuPlatform::set_wait_limit`](crate::EmuPlatform::set_wait_limit)): far beyond any batch a test copies,
/// even on a loaded machine, so only a lost completion reaches it.
pub const TEST_WAIT_LIMIT: Duration = Duration::from_secs(10);

/// A one-device instance of `arch` (V2: trn1.2xlarge; V3: one trn2 device).
pub fn instance(arch: Arch) -> Instance {
    match arch {
        Arch::V2 => Instance::TRN1_2XLARGE,
        Arch::V3 => Instance { name: "trn2-1dev", arch: Arch::V3, devices: 1 },
    }
}

/// The tests' configuration of [`instance`]`(arch)`: 4 GiB of HBM, 8 GiB of host DRAM (both committed
/// lazily). Threaded engines get emulation budgets (×100000): they share two cores with the other tests, and
/// the silicon budget of a small device-to-device batch (~200 µs) is shorter than a descheduled worker;
/// [`bounded`] bounds their waits instead. Inline engines keep silicon budgets, so injected hangs time out in
/// milliseconds.
pub fn testbed_config(arch: Arch, exec: ExecPolicy, ordering: OrderingMode, clock: ClockKind) -> TestbedConfig {
    let mut cfg = TestbedConfig::new(instance(arch));
    cfg.exec = exec;
    cfg.ordering = ordering;
    cfg.clock = clock;
    cfg.emulation_budgets = exec == ExecPolicy::Threaded;
    cfg.hbm_size = Some(4 << 30);
    cfg.host_dram_size = 8 << 30;
    cfg
}

/// Builds `cfg` with every marker wait bounded by [`TEST_WAIT_LIMIT`].
///
/// # Panics
///
/// If the testbed cannot be built (a test set-up failure).
pub fn bounded(cfg: TestbedConfig) -> Testbed {
    let tb = Testbed::new(cfg).unwrap_or_else(|e| panic!("test bed: {e}"));
    tb.platform.set_wait_limit(Some(TEST_WAIT_LIMIT));
    tb
}

/// [`bounded`]`(`[`testbed_config`]`(…))`.
///
/// # Panics
///
/// As [`bounded`].
pub fn testbed(arch: Arch, exec: ExecPolicy, ordering: OrderingMode, clock: ClockKind) -> Testbed {
    bounded(testbed_config(arch, exec, ordering, clock))
}

/// The strictest model on a real clock: posted HBM writes drain only on barriers, so a missing barrier shows.
///
/// # Panics
///
/// As [`bounded`].
pub fn adversarial(arch: Arch, exec: ExecPolicy) -> Testbed {
    testbed(arch, exec, OrderingMode::Adversarial, ClockKind::Real)
}
