//! One device's HBM: physical addresses `[HBM_BASE, HBM_BASE + size)`, with a simple allocator for tests
//! and tools (the op layer may keep its own pool on top of raw addresses).

use std::sync::Mutex;

use range_allocator::RangeAllocator;

use crate::lock::lock;
use crate::{EmuError, MemSpace};

/// First HBM physical address of every device.
pub const HBM_BASE: u64 = 0x10_0000_0000;
/// Default HBM per device on V2 (Trn1/Inf2): 32 GiB.
pub const DEFAULT_HBM_SIZE_V2: u64 = 32 << 30;
/// Default HBM per device on V3 (Trn2): 96 GiB.
pub const DEFAULT_HBM_SIZE_V3: u64 = 96 << 30;
/// Smallest alignment [`crate::EmuDevice::alloc_hbm`] hands out.
pub const HBM_MIN_ALIGN: u64 = 64;

/// A range of HBM handed out by [`crate::EmuDevice::alloc_hbm`]; give it back with
/// [`crate::EmuDevice::free_hbm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HbmRange {
    /// First physical address (a device address as a descriptor carries it).
    pub pa: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A device's HBM space plus its allocator.
#[derive(Debug)]
pub(crate) struct Hbm {
    pub(crate) space: MemSpace,
    alloc: Mutex<RangeAllocator>,
}

impl Hbm {
    pub(crate) fn new(size: u64) -> Result<Self, EmuError> {
        Ok(Hbm { space: MemSpace::new("HBM", HBM_BASE, size)?, alloc: Mutex::new(RangeAllocator::new(HBM_BASE, size)) })
    }

    pub(crate) fn alloc(&self, len: u64, align: u64) -> Result<HbmRange, EmuError> {
        let align = align.max(HBM_MIN_ALIGN);
        if len == 0 || !align.is_power_of_two() {
            return Err(EmuError::InvalidAlloc { len, align });
        }
        let pa = lock(&self.alloc).alloc(len, align).ok_or(EmuError::OutOfMemory { what: "HBM", len, align })?;
        Ok(HbmRange { pa, len })
    }

    pub(crate) fn free(&self, r: HbmRange) -> Result<(), EmuError> {
        if self.space.offset_of(r.pa, r.len).is_none() || !lock(&self.alloc).free(r.pa, r.len) {
            return Err(EmuError::BadFree { what: "HBM", pa: r.pa, len: r.len });
        }
        Ok(())
    }
}
