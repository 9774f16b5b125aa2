//! The OS services the op layer needs, behind one trait so its logic runs against a fake clock in tests and
//! against the emulator (or a real back end) in production.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use udma::DmaMemory;

use crate::Result;

/// A host DMA buffer: device-visible host memory the CPU can read and write.
pub type HostBuf = Arc<dyn DmaMemory>;

/// Size of a user page (`PAGE_SIZE`).
pub const PAGE_SIZE: u64 = 4096;

/// A user address space, as the kernel's `struct mm_struct` is to the driver: something pages can be pinned
/// in. Reference-counted: holding an `Arc` is `mmget`, dropping it `mmput`. A pinned page is named by the
/// physical address of its frame (without `pci_host_base`); a pin is a counted reference on the frame that
/// keeps it from being freed or moved until it is unpinned (the kernel's `FOLL_PIN`).
pub trait UserMm: Send + Sync {
    /// The owning process (`tgid`).
    fn pid(&self) -> u32;

    /// `pin_user_pages_fast`: pins up to `n` pages starting at the page-aligned user address `va` (for the
    /// device to write them when `write`), appending each frame's physical address to `pages`. Returns how
    /// many pages it pinned, which may be fewer than `n` (a short pin): the caller unpins what it got and
    /// falls back to [`UserMm::pin_pages`].
    ///
    /// # Errors
    ///
    /// [`crate::NdmaError::Pin`] with the kernel's errno when not even the first page could be pinned (`-EFAULT`
    /// for an unmapped page or a write pin of a read-only one, `-ESRCH` once the process has exited).
    fn pin_pages_fast(&self, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> Result<usize>;

    /// `pin_user_pages` under the mmap lock, or `pin_user_pages_remote` through a captured address space: as
    /// [`UserMm::pin_pages_fast`], the slow path.
    ///
    /// # Errors
    ///
    /// As [`UserMm::pin_pages_fast`].
    fn pin_pages(&self, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> Result<usize>;

    /// `unpin_user_pages` (`dirty` = false) or `unpin_user_pages_dirty_lock(.., true)` after the device wrote
    /// the pages. Each page must have been pinned by this address space and is unpinned exactly once.
    fn unpin_pages(&self, pages: &[u64], dirty: bool);
}

/// Time, delays, host DMA memory and user address spaces, as the kernel provides them to the driver.
pub trait Platform: Send + Sync {
    /// `get_jiffies_64()`: a monotonic tick counter (the reset-window clock).
    fn jiffies(&self) -> u64;
    /// A monotonic microsecond clock (for statistics; the poll budget counts polls, not this clock).
    fn now_us(&self) -> u64;
    /// `udelay(us)`: wait at least `us` microseconds.
    fn udelay(&self, us: u64);

    /// A marker-aware `udelay`: wait at most `us` microseconds, returning as soon as `word` holds `value`.
    /// Returns true when it saw `word == value` (with `Acquire`). The op layer uses it for the first wait and
    /// every poll interval of the marker poll; the poll still counts its polls, so budgets, poll counts and
    /// timeouts are those of the driver. A platform that keeps the driver's timing (or cannot watch memory
    /// while it waits) waits the whole `us` first — the default.
    fn delay_until(&self, word: &AtomicU32, value: u32, us: u64) -> bool {
        self.udelay(us);
        word.load(Ordering::Acquire) == value
    }

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

    /// `current->mm`: the calling task's address space, if it has one (a kernel thread has none). Cloning
    /// the returned `Arc` is capturing the address space (`mmget`) for a later remote pin.
    fn current_mm(&self) -> Option<Arc<dyn UserMm>> {
        None
    }
}
