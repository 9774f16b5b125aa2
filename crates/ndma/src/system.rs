//! A system of Neuron devices (one instance), and the device registry cross-device lookups use.

use std::sync::{Arc, RwLock, Weak};

use udma::Arch;

use crate::device::{DeviceHw, NeuronDevice};
use crate::memory::HostDomain;
use crate::zerocopy::prepinned::PinnedStore;
use crate::{arch, Platform, Result};

/// Every device of the system, by index, for `is_valid_host_mem`'s cross-device search.
#[derive(Default)]
pub(crate) struct Registry {
    devices: RwLock<Vec<Weak<NeuronDevice>>>,
    /// Pre-pinned host memory of every process (`ndma_pin_host_memory`).
    pub(crate) pinned: PinnedStore,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("devices", &self.len()).field("pinned_ranges", &self.pinned.len()).finish()
    }
}

impl Registry {
    pub(crate) fn get(&self, index: u32) -> Option<Arc<NeuronDevice>> {
        self.devices.read().unwrap_or_else(|p| p.into_inner()).get(index as usize)?.upgrade()
    }

    pub(crate) fn len(&self) -> u32 {
        self.devices.read().unwrap_or_else(|p| p.into_inner()).len() as u32
    }
}

/// The Neuron devices of one machine, all of one generation, over one [`Platform`].
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (model, platform) = doctest::model(udma::Arch::V3, 2); // a two-device model and its platform
/// use std::sync::Arc;
///
/// use ndma::{NdmaError, System};
/// use udma::Arch;
///
/// let hw: Vec<_> = model.devices().iter().map(|d| ndma_emu::device_hw(d).expect("free")).collect();
/// // The generation is declared, and checked against what each device reports.
/// let err = System::new(Arch::V2, Arc::clone(&platform), hw.clone()).unwrap_err();
/// assert_eq!(err, NdmaError::ArchMismatch { device: 0, declared: Arch::V2, found: Arch::V3 });
/// let system = System::new(Arch::V3, platform, hw)?;
/// assert_eq!((system.arch(), system.devices().len()), (Arch::V3, 2));
/// let dev1 = system.device(1).unwrap();
/// assert_eq!((dev1.index(), dev1.h2t_queue(7)?), (1, (131, 1)));
/// assert!(system.device(2).is_none());
/// assert!(!system.platform().is_emulation());
/// # Ok::<(), NdmaError>(())
/// ```
pub struct System {
    arch: Arch,
    devices: Vec<Arc<NeuronDevice>>,
    registry: Arc<Registry>,
    platform: Arc<dyn Platform>,
}

impl System {
    /// Brings up one device per entry of `hw`, all of generation `arch` (examples on [`System`] and
    /// [`DeviceHw`]).
    ///
    /// # Errors
    ///
    /// [`crate::NdmaError::ArchMismatch`] when a device reports another generation than `arch` (nothing is
    /// brought up then); otherwise the first device bring-up failure ([`crate::NdmaError::OutOfRange`] for an
    /// HBM range that ends past the 64-bit address space).
    pub fn new(arch: Arch, platform: Arc<dyn Platform>, hw: Vec<DeviceHw>) -> Result<System> {
        if let Some((device, h)) = hw.iter().enumerate().find(|(_, h)| h.arch != arch) {
            return Err(crate::NdmaError::ArchMismatch { device: device as u32, declared: arch, found: h.arch });
        }
        let registry = Arc::new(Registry::default());
        let dhal = arch::dhal(arch);
        // The devices share the platform, so each other's host chunks.
        let host_domain = Arc::new(HostDomain);
        let devices = hw
            .into_iter()
            .enumerate()
            .map(|(i, hw)| {
                let (platform, registry, domain) =
                    (Arc::clone(&platform), Arc::downgrade(&registry), Arc::clone(&host_domain));
                NeuronDevice::new(i as u32, dhal, platform, hw, registry, domain).map(Arc::new)
            })
            .collect::<Result<Vec<_>>>()?;
        for d in &devices {
            d.set_self_ref(Arc::downgrade(d));
        }
        *registry.devices.write().unwrap_or_else(|p| p.into_inner()) = devices.iter().map(Arc::downgrade).collect();
        Ok(System { arch, devices, registry, platform })
    }

    /// Device generation.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Device `index`.
    pub fn device(&self, index: u32) -> Option<&Arc<NeuronDevice>> {
        self.devices.get(index as usize)
    }

    /// Every device.
    pub fn devices(&self) -> &[Arc<NeuronDevice>] {
        &self.devices
    }

    /// The platform the devices run on.
    pub fn platform(&self) -> &Arc<dyn Platform> {
        &self.platform
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }
}

impl Drop for System {
    /// Stops every device's completion thread (each drains what its queues hold) before the devices go.
    fn drop(&mut self) {
        for d in &self.devices {
            d.completion_thread.stop();
        }
    }
}

impl std::fmt::Debug for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("System").field("arch", &self.arch).field("devices", &self.devices).finish()
    }
}
