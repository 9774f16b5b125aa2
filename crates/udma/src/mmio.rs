//! Register access: the only way the HAL reaches the engine's BAR0.

/// 32-bit access to a device's BAR0, by byte offset from the start of the BAR.
///
/// A real back end maps BAR0 (VFIO, a kernel port); the emulator implements it with its register file.
/// Writes to a queue's `drtp_inc` are doorbells, so an implementation must not reorder a write before
/// memory operations that precede it in program order once the caller has issued its release fence.
pub trait Mmio: Send + Sync {
    /// Reads the 32-bit register at `offset`.
    fn read32(&self, offset: u64) -> u32;
    /// Writes `value` to the 32-bit register at `offset`.
    fn write32(&self, offset: u64, value: u32);
}

impl<T: Mmio + ?Sized> Mmio for &T {
    fn read32(&self, offset: u64) -> u32 {
        (**self).read32(offset)
    }
    fn write32(&self, offset: u64, value: u32) {
        (**self).write32(offset, value)
    }
}
