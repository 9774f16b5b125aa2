//! The OS services the op layer needs, behind one trait so its logic runs against a fake clock in tests and
//! against the emulator (or a real back end) in production.

use std::sync::Arc;

use udma::DmaMemory;

use crate::Result;

/// A host DMA buffer: device-visible host memory the CPU can read and write.
pub type HostBuf = Arc<dyn DmaMemory>;

/// Time, delays and host DMA memory, as the kernel provides them to the driver.
pub trait Platform: Send + Sync {
    /// `get_jiffies_64()`: a monotonic tick counter (the reset-window clock).
    fn jiffies(&self) -> u64;
    /// A monotonic microsecond clock (for statistics; the poll budget counts polls, not this clock).
    fn now_us(&self) -> u64;
    /// `udelay(us)`: wait at least `us` microseconds.
    fn udelay(&self, us: u64);
    /// `narch_is_qemu() || narch_is_emu()`: scale the poll budget ×100000 for slow virtual platforms.
    fn is_emulation(&self) -> bool;
    /// Coherent DMA allocation of at least `len` bytes, 256-byte aligned (`dma_alloc_coherent`).
    ///
    /// # Errors
    ///
    /// [`crate::NdmaError::NoMemory`] when host memory is exhausted.
    fn alloc_coherent(&self, len: usize) -> Result<HostBuf>;
    /// Best-effort fault-in of a user range (`ndma_prefetch_user_pages`); failures are for logging only.
    fn prefetch_user_pages(&self, addr: u64, len: u64) -> std::result::Result<(), String> {
        let _ = (addr, len);
        Ok(())
    }
}
