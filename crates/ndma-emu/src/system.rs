//! A whole emulated instance: one host DRAM and N devices.

use std::sync::Arc;

use udma::Arch;

use crate::hbm::{DEFAULT_HBM_SIZE_V2, DEFAULT_HBM_SIZE_V3};
use crate::host::DEFAULT_HOST_DRAM_SIZE;
use crate::{EmuDevice, EmuError, HostMemory, OrderingMode};

/// `MAX_NEURON_DEVICE_COUNT` (FACTS §4).
pub const MAX_DEVICES: usize = 64;

/// Who executes descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecPolicy {
    /// A worker thread per engine (spawned on first doorbell), spinning briefly then parking.
    #[default]
    Threaded,
    /// The doorbell write executes everything runnable on the calling thread before it returns:
    /// deterministic, for tests.
    Inline,
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
    /// Seed of every random choice the model makes (fault plans).
    pub seed: u64,
}

impl EmuConfig {
    /// One device of `arch` with default sizes, threaded execution and relaxed ordering.
    pub fn new(arch: Arch) -> Self {
        EmuConfig {
            arch,
            devices: 1,
            hbm_size: None,
            host_dram_size: DEFAULT_HOST_DRAM_SIZE,
            exec: ExecPolicy::default(),
            ordering: OrderingMode::default(),
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
}

impl EmuSystem {
    /// Builds host DRAM and `cfg.devices` devices. Memory is committed lazily, page by page.
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
        let devices = (0..cfg.devices)
            .map(|i| {
                let seed = cfg.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                EmuDevice::new(i, cfg.arch, Arc::clone(&host), cfg.hbm_size(), cfg.exec, cfg.ordering, seed)
                    .map(Arc::new)
            })
            .collect::<Result<_, _>>()?;
        Ok(EmuSystem { cfg, host, devices })
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
