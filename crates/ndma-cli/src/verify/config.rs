//! What a campaign runs: the seed, how long, on what instance and engines, which paths, with or without
//! faults.

use std::time::Duration;

use ndma::Instance;
use ndma_emu::{ExecPolicy, OrderingMode, Testbed, TestbedConfig, WaitTiming};

use super::path::PathKind;
use crate::error::CliResult;

/// How long a campaign runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Operations `0..n`.
    Count(u64),
    /// As many operations as fit in this time (each one started before it is up finishes).
    Duration(Duration),
}

/// `--faults`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultMode {
    /// No fault is injected: every operation must succeed (or be refused exactly as its inputs call for).
    None,
    /// A share of the operations (`--fault-rate`) gets one fault of every kind the model has, in turn.
    Mix,
}

/// `--engines`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engines {
    /// A worker thread per engine (the model's default).
    Threaded,
    /// Descriptors execute on the doorbell write, on the calling thread.
    Inline,
}

impl Engines {
    /// The model's execution policy.
    pub fn policy(self) -> ExecPolicy {
        match self {
            Engines::Threaded => ExecPolicy::Threaded,
            Engines::Inline => ExecPolicy::Inline,
        }
    }

    /// `threaded` or `inline`.
    pub fn name(self) -> &'static str {
        match self {
            Engines::Threaded => "threaded",
            Engines::Inline => "inline",
        }
    }
}

/// `--budgets`: the marker-poll budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Budgets {
    /// The driver's silicon budgets: an injected hang times out in milliseconds.
    Silicon,
    /// ×100000, as the driver scales them on an emulation platform: immune to a descheduled engine worker,
    /// but a hang would take minutes to time out, so faults cannot be injected.
    Emulation,
}

impl Budgets {
    /// `silicon` or `emulation`.
    pub fn name(self) -> &'static str {
        match self {
            Budgets::Silicon => "silicon",
            Budgets::Emulation => "emulation",
        }
    }
}

/// `--ordering`: the model's fabric ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ordering {
    /// HBM writes are posted and land only at a barrier, a hazard or a reset: a missing barrier shows at once.
    Adversarial,
    /// HBM writes are posted and also land whenever the engine goes idle.
    Relaxed,
    /// Every write lands when its descriptor executes.
    Strict,
}

impl Ordering {
    /// The model's mode.
    pub fn mode(self) -> OrderingMode {
        match self {
            Ordering::Adversarial => OrderingMode::Adversarial,
            Ordering::Relaxed => OrderingMode::Relaxed,
            Ordering::Strict => OrderingMode::Strict,
        }
    }

    /// `adversarial`, `relaxed` or `strict`.
    pub fn name(self) -> &'static str {
        match self {
            Ordering::Adversarial => "adversarial",
            Ordering::Relaxed => "relaxed",
            Ordering::Strict => "strict",
        }
    }
}

/// One campaign on one instance.
#[derive(Debug, Clone)]
pub struct Config {
    /// The campaign seed.
    pub seed: u64,
    /// How long it runs.
    pub bound: Bound,
    /// Threads issuing operations.
    pub threads: usize,
    /// The instance preset.
    pub instance: Instance,
    /// The paths drawn from (in registry order).
    pub paths: Vec<PathKind>,
    /// Engine execution policy.
    pub engines: Engines,
    /// Faults or not.
    pub faults: FaultMode,
    /// Share of operations that get a fault under [`FaultMode::Mix`].
    pub fault_rate: f64,
    /// `--bystanders`: a faulted operation of a classic path runs with an unfaulted async copy in flight on
    /// its ring ([`super::bystander`]).
    pub bystanders: bool,
    /// Share of segments drawn from the large size classes (batch boundary, several batches).
    pub big_rate: f64,
    /// Poll budgets.
    pub budgets: Budgets,
    /// Fabric ordering.
    pub ordering: Ordering,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// HBM per device (`None`: the arch default; lazily committed either way).
    pub hbm_size: Option<u64>,
    /// Host DRAM (`None`: the model's default; lazily committed).
    pub host_dram_size: Option<u64>,
    /// How the platform times the op layer's marker waits (`--driver-timing`: the driver's timing).
    pub timing: WaitTiming,
}

impl Config {
    /// Defaults for `instance`: 2 threads, every path, threaded engines, no faults, silicon budgets,
    /// adversarial ordering, 10000 operations, no progress bar.
    pub fn new(seed: u64, instance: Instance) -> Config {
        Config {
            seed,
            bound: Bound::Count(10_000),
            threads: 2,
            instance,
            paths: PathKind::ALL.to_vec(),
            engines: Engines::Threaded,
            faults: FaultMode::None,
            fault_rate: DEFAULT_FAULT_RATE,
            bystanders: false,
            big_rate: super::size::DEFAULT_BIG_RATE,
            budgets: Budgets::Silicon,
            ordering: Ordering::Adversarial,
            progress: false,
            hbm_size: None,
            host_dram_size: None,
            timing: WaitTiming::Marker,
        }
    }

    /// Builds the instance this campaign runs on.
    ///
    /// # Errors
    ///
    /// The model's or the op layer's refusal.
    pub fn testbed(&self) -> CliResult<Testbed> {
        let mut cfg = TestbedConfig::new(self.instance);
        cfg.exec = self.engines.policy();
        cfg.ordering = self.ordering.mode();
        cfg.emulation_budgets = self.budgets == Budgets::Emulation;
        cfg.seed = self.seed;
        cfg.timing = self.timing;
        cfg.hbm_size = self.hbm_size;
        if let Some(h) = self.host_dram_size {
            cfg.host_dram_size = h;
        }
        Ok(Testbed::new(cfg)?)
    }
}

/// Default share of faulted operations under `--faults mix`.
pub const DEFAULT_FAULT_RATE: f64 = 0.03;
