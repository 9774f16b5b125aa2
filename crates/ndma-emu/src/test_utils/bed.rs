//! Test beds: instances and [`Testbed`]s with the tests' memory sizes and the driver's silicon budgets, so a
//! lost completion fails a test within milliseconds of polling.

use ndma::Instance;
use udma::Arch;

use crate::{ClockKind, ExecPolicy, OrderingMode, Testbed, TestbedConfig};

/// A one-device instance of `arch` (V2: trn1.2xlarge; V3: one trn2 device).
pub fn instance(arch: Arch) -> Instance {
    match arch {
        Arch::V2 => Instance::TRN1_2XLARGE,
        Arch::V3 => Instance { name: "trn2-1dev", arch: Arch::V3, devices: 1 },
    }
}

/// The tests' configuration of [`instance`]`(arch)`: 4 GiB of HBM, 8 GiB of host DRAM (both committed
/// lazily), silicon budgets for every engine policy. Threaded engines hold them on a loaded two-core machine:
/// a waiting thread executes pending work itself when the worker is not running, and its delay outlasts the
/// poll interval while an engine is mid-batch, so a descheduled worker does not use up the budget. A lost
/// completion (or an injected hang) therefore times out after the driver's budget — milliseconds — instead of
/// the hours of polls that emulation budgets (×100000) allow.
pub fn testbed_config(arch: Arch, exec: ExecPolicy, ordering: OrderingMode, clock: ClockKind) -> TestbedConfig {
    let mut cfg = TestbedConfig::new(instance(arch));
    cfg.exec = exec;
    cfg.ordering = ordering;
    cfg.clock = clock;
    cfg.emulation_budgets = false;
    cfg.hbm_size = Some(4 << 30);
    cfg.host_dram_size = 8 << 30;
    cfg
}

/// Builds `cfg`, whose budgets bound every marker wait (the driver's silicon budgets unless the caller asked
/// for emulation budgets).
///
/// # Panics
///
/// If the testbed cannot be built (a test set-up failure).
pub fn bounded(cfg: TestbedConfig) -> Testbed {
    Testbed::new(cfg).unwrap_or_else(|e| panic!("test bed: {e}"))
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
