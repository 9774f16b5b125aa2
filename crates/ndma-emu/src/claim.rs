//! The binding of an emulated device to one op layer, as the PCI core binds a device to one driver: the BAR0
//! an op layer gets through [`crate::device_hw`] is a [`DeviceClaim`], and while one lives the device cannot
//! be claimed again. Two op layers on one device would each program the same queues with rings of their own,
//! and each would see the other's re-initialisations as hangs of its copies — timeouts nobody injected.

use std::sync::Arc;

use udma::Mmio;

use crate::{EmuDevice, EmuError};

/// An emulated device's BAR0 as the one op layer bound to it holds it. The device is released when the last
/// clone of the claim (the op layer's devices hold it as their BAR0) is dropped.
#[derive(Debug)]
pub struct DeviceClaim {
    dev: Arc<EmuDevice>,
}

impl DeviceClaim {
    /// Binds `dev` ([`crate::device_hw`] does, and fills in the rest of the op layer's `DeviceHw`).
    ///
    /// # Errors
    ///
    /// [`EmuError::DeviceClaimed`] (`-EBUSY`) while another claim on it lives.
    pub fn bind(dev: &Arc<EmuDevice>) -> Result<DeviceClaim, EmuError> {
        if !dev.try_claim() {
            return Err(EmuError::DeviceClaimed { device: dev.index() });
        }
        Ok(DeviceClaim { dev: Arc::clone(dev) })
    }
}

impl Mmio for DeviceClaim {
    fn read32(&self, offset: u64) -> u32 {
        self.dev.read32(offset)
    }

    fn write32(&self, offset: u64, value: u32) {
        self.dev.write32(offset, value);
    }
}

impl Drop for DeviceClaim {
    fn drop(&mut self) {
        self.dev.release_claim();
    }
}
