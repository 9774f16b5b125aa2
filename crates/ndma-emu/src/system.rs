//! A whole emulated instance: one host DRAM, N devices, one clock and the platform the op layer runs on.

use std::sync::Arc;

use udma::Arch;

use crate::activity::Activity;
use crate::clock::{Clock, ClockKind};
use crate::delay::Engines;
use crate::hbm::{DEFAULT_HBM_SIZE_V2, DEFAULT_HBM_SIZE_V3};
use crate::host::DEFAULT_HOST_DRAM_SIZE;
use crate::{EmuDevice, EmuError, EmuPlatform, HostMemory, OrderingMode};

/// `MAX_NEURON_DEVICE_COUNT` (FACTS §4).
pub const MAX_DEVICES: usize = 64;

/// Who executes descriptors. Under every policy a CPU thread waiting in the system platform's delay also
/// executes pending work that nobody else is executing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecPolicy {
    /// A worker thread per engine (spawned on first doorbell), spinning briefly then parking.
    #[default]
    Threaded,
    /// The doorbell write executes everything runnable on the calling thread before it returns:
    /// deterministic, for tests.
    Inline,
    /// A doorbell only hands work over; it executes when a thread waits in the system platform's delay
    /// (`udelay`, `delay_until`). Deterministic like `Inline`, but work stays pending between a doorbell and
    /// the next wait, as with a real engine: for tests of the waiting path and of what is observable while
    /// work is in flight.
    Deferred,
}

/// How to build an [`EmuSystem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmuConfig {
    /// Device generation.
    pub arch: Arch,
    /// Number of devices (1..=64).
    pub devices: usize,
    /// HBM per device; `None` = the arch default (32 GiB V2, 96 GiB V3).
    pub hbm_size: Option<u64>,
    /// Host DRAM size (default 64 GiB).
    pub host_dram_size: u64,
    /// Execution policy.
    pub exec: ExecPolicy,
    /// Fabric ordering model.
    pub ordering: OrderingMode,
    /// The clock of the system's platform and of its NeuronCore reset model.
    pub clock: ClockKind,
    /// Seed of every random choice the model makes (fault plans).
    pub seed: u64,
}

impl EmuConfig {
    /// One device of `arch` with default sizes, threaded execution, relaxed ordering and a real clock.
    pub fn new(arch: Arch) -> Self {
        EmuConfig {
            arch,
            devices: 1,
            hbm_size: None,
            host_dram_size: DEFAULT_HOST_DRAM_SIZE,
            exec: ExecPolicy::default(),
            ordering: OrderingMode::default(),
            clock: ClockKind::default(),
            seed: 0x6e64_6d61,
        }
    }

    /// HBM per device actually used.
    pub fn hbm_size(&self) -> u64 {
        self.hbm_size.unwrap_or(match self.arch {
            Arch::V2 => DEFAULT_HBM_SIZE_V2,
            Arch::V3 => DEFAULT_HBM_SIZE_V3,
        })
    }
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig::new(Arch::V2)
    }
}

/// An emulated instance. Dropping it stops and joins every engine worker.
#[derive(Debug)]
pub struct EmuSystem {
    cfg: EmuConfig,
    host: Arc<HostMemory>,
    devices: Vec<Arc<EmuDevice>>,
    platform: Arc<EmuPlatform>,
}

impl EmuSystem {
    /// Builds host DRAM, `cfg.devices` devices and the platform over them, and connects every device's
    /// NeuronCore reset model to the platform's clock (bring-up counts as a reset that just finished). Memory
    /// is committed lazily, page by page.
    ///
    /// # Errors
    ///
    /// [`EmuError::InvalidConfig`] for 0 or more than [`MAX_DEVICES`] devices or empty memories;
    /// [`EmuError::Map`] if the kernel refuses a mapping.
    pub fn new(cfg: EmuConfig) -> Result<Self, EmuError> {
        if cfg.devices == 0 || cfg.devices > MAX_DEVICES {
            return Err(EmuError::InvalidConfig("device count must be 1..=64"));
        }
        let host = Arc::new(HostMemory::new(cfg.host_dram_size)?);
        let activity = Arc::new(Activity::new(cfg.arch, cfg.devices));
        let devices: Vec<Arc<EmuDevice>> = (0..cfg.devices)
            .map(|i| EmuDevice::new(i, &cfg, Arc::clone(&host), Arc::clone(&activity)).map(Arc::new))
            .collect::<Result<_, _>>()?;
        let clock = Arc::new(Clock::new(cfg.clock));
        for d in &devices {
            let c = Arc::clone(&clock);
            d.core().resets.set_clock(Arc::new(move || c.jiffies()));
        }
        let engines = Engines { cores: devices.iter().map(|d| Arc::clone(d.core())).collect(), activity };
        let platform = Arc::new(EmuPlatform::with(Arc::clone(&host), clock, Some(engines)));
        Ok(EmuSystem { cfg, host, devices, platform })
    }

    /// The platform the op layer runs on: the system's clock, and delays that execute the system's pending
    /// engine work while they wait.
    pub fn platform(&self) -> &Arc<EmuPlatform> {
        &self.platform
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &EmuConfig {
        &self.cfg
    }
    /// Host DRAM.
    pub fn host(&self) -> &Arc<HostMemory> {
        &self.host
    }
    /// Device `i`.
    ///
    /// # Panics
    ///
    /// If `i >= devices().len()`; use [`EmuSystem::try_device`] for a checked lookup.
    pub fn device(&self, i: usize) -> &Arc<EmuDevice> {
        &self.devices[i]
    }
    /// Device `i`, if it exists.
    pub fn try_device(&self, i: usize) -> Option<&Arc<EmuDevice>> {
        self.devices.get(i)
    }
    /// Every device.
    pub fn devices(&self) -> &[Arc<EmuDevice>] {
        &self.devices
    }
}

impl Drop for EmuSystem {
    fn drop(&mut self) {
        for d in &self.devices {
            d.shutdown();
        }
    }
}
