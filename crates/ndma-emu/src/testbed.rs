//! A ready-to-use emulated instance with the op layer brought up on it: what the CLI, the benches and the
//! integration tests start from.

use std::sync::Arc;

use ndma::{DeviceHw, Instance, NeuronDevice, System};

use crate::clock::ClockKind;
use crate::delay::WaitTiming;
use crate::platform::EmuPlatform;
use crate::{DeviceClaim, EmuConfig, EmuDevice, EmuError, EmuSystem, ExecPolicy, OrderingMode};

/// How to build a [`Testbed`].
#[derive(Debug, Clone)]
pub struct TestbedConfig {
    /// Instance preset (arch and device count).
    pub instance: Instance,
    /// Engine execution policy.
    pub exec: ExecPolicy,
    /// Fabric ordering model.
    pub ordering: OrderingMode,
    /// Platform clock.
    pub clock: ClockKind,
    /// How the platform's marker-aware delay times the op layer's waits.
    pub timing: WaitTiming,
    /// HBM per device (`None`: the arch default).
    pub hbm_size: Option<u64>,
    /// Host DRAM size.
    pub host_dram_size: u64,
    /// Seed for the fault plans.
    pub seed: u64,
    /// Scale poll budgets ×100000 as the driver does on emulation platforms (off: silicon budgets, so a
    /// hang times out in milliseconds; on: immune to a loaded machine descheduling the engine workers).
    pub emulation_budgets: bool,
}

impl TestbedConfig {
    /// Defaults for `instance`: threaded engines, relaxed ordering, real clock, marker timing, default sizes.
    pub fn new(instance: Instance) -> Self {
        let emu = EmuConfig::new(instance.arch);
        TestbedConfig {
            instance,
            exec: emu.exec,
            ordering: emu.ordering,
            clock: ClockKind::Real,
            timing: WaitTiming::Marker,
            hbm_size: None,
            host_dram_size: emu.host_dram_size,
            seed: emu.seed,
            emulation_budgets: false,
        }
    }

    /// The device model of this configuration, its platform's budgets and timing set as the op layer will
    /// run on it — without an op layer: [`Testbed::new`] brings one up over the model's platform, a test may
    /// bring one up over a platform of its own that wraps it.
    ///
    /// # Errors
    ///
    /// The model's refusal of the configuration.
    pub fn model(&self) -> Result<EmuSystem, EmuError> {
        let emu = EmuSystem::new(EmuConfig {
            arch: self.instance.arch,
            devices: self.instance.devices as usize,
            hbm_size: self.hbm_size,
            host_dram_size: self.host_dram_size,
            exec: self.exec,
            ordering: self.ordering,
            clock: self.clock,
            seed: self.seed,
        })?;
        emu.platform().set_emulation(self.emulation_budgets);
        emu.platform().set_timing(self.timing);
        Ok(emu)
    }
}

/// Why a testbed could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// The device model refused the configuration.
    #[error("emulator: {0}")]
    Emu(#[from] EmuError),
    /// Device bring-up in the op layer failed.
    #[error("op layer: {0}")]
    Ndma(#[from] ndma::NdmaError),
}

/// An emulated instance and the op layer's [`System`] over it. Fields drop in order: the op layer first,
/// then the platform handle, then the device model (which joins its engine workers).
pub struct Testbed {
    /// The op layer's devices.
    pub system: System,
    /// The platform the op layer runs on ([`EmuSystem::platform`]).
    pub platform: Arc<EmuPlatform>,
    /// The device model.
    pub emu: EmuSystem,
}

impl Testbed {
    /// Builds the device model and brings every device up in the op layer.
    ///
    /// # Errors
    ///
    /// [`TestbedError`] from either side.
    pub fn new(cfg: TestbedConfig) -> Result<Testbed, TestbedError> {
        let emu = cfg.model()?;
        let platform = Arc::clone(emu.platform());
        let hw = emu.devices().iter().map(device_hw).collect::<Result<_, _>>()?;
        let system = System::new(cfg.instance.arch, platform.clone(), hw)?;
        Ok(Testbed { system, platform, emu })
    }

    /// Op-layer device `i` and its model.
    ///
    /// # Panics
    ///
    /// If `i` is not a device of the instance.
    pub fn device(&self, i: u32) -> (&Arc<NeuronDevice>, &Arc<EmuDevice>) {
        (&self.system.devices()[i as usize], self.emu.device(i as usize))
    }
}

/// What the op layer needs of one emulated device, binding the device to that op layer: its BAR0 is a
/// [`DeviceClaim`], and the device is free again once the op layer (every clone of the `DeviceHw`) is gone.
///
/// ```
/// use ndma_emu::{device_hw, EmuConfig, EmuError, EmuSystem};
///
/// let model = EmuSystem::new(EmuConfig { host_dram_size: 1 << 24, ..EmuConfig::new(udma::Arch::V3) })?;
/// let dev = model.device(0);
/// let hw = device_hw(dev)?;
/// assert!(dev.is_claimed());
/// let again = device_hw(dev).err().expect("one op layer at a time");
/// assert!(matches!(again, EmuError::DeviceClaimed { device: 0 }));
/// assert_eq!(again.errno(), -16);
/// drop(hw);
/// assert!(!dev.is_claimed() && device_hw(dev).is_ok());
/// # Ok::<(), EmuError>(())
/// ```
///
/// # Errors
///
/// [`EmuError::DeviceClaimed`] (`-EBUSY`) while another op layer holds the device.
pub fn device_hw(dev: &Arc<EmuDevice>) -> Result<DeviceHw, EmuError> {
    Ok(DeviceHw {
        arch: dev.arch(),
        bar0: Arc::new(DeviceClaim::bind(dev)?),
        hbm_base: dev.hbm().base(),
        hbm_size: dev.hbm().size(),
        resets: Some(dev.clone()),
        nc_map: ndma::ALL_NCS,
    })
}
