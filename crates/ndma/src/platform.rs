//! The OS services the op layer needs, behind one trait so its logic runs against a fake clock in tests and
//! against the emulator (or a real back end) in production.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use udma::DmaMemory;

use crate::{NdmaError, Result};

/// A host DMA buffer: device-visible host memory the CPU can read and write.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::HostBuf;
///
/// let buf: HostBuf = dev.platform().alloc_coherent(5000)?;
/// assert!(buf.len() >= 5000 && buf.as_ptr() as usize % 256 == 0);
/// buf.write_bytes(4990, b"0123456789")?;
/// assert!(buf.write_bytes(buf.len() - 1, b"01").is_err(), "bounds-checked");
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub type HostBuf = Arc<dyn DmaMemory>;

/// Size of a user page (`PAGE_SIZE`): the unit of pinning ([`UserMm`], [`crate::zerocopy`]).
pub const PAGE_SIZE: u64 = 4096;

/// A user address space, as the kernel's `struct mm_struct` is to the driver: something pages can be pinned
/// in. Reference-counted: holding an `Arc` is `mmget`, dropping it `mmput`. A pinned page is named by the
/// physical address of its frame (without `pci_host_base`); a pin is a counted reference on the frame that
/// keeps it from being freed or moved until it is unpinned (the kernel's `FOLL_PIN`).
///
/// The device model's user processes implement it; this is what the zero-copy path does with one:
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let bed = doctest::testbed(udma::Arch::V3);
/// # let user = doctest::user(&bed, 4); // a process with 4 pages mapped at `user.va`, current on this thread
/// use ndma::{NdmaError, Platform, PAGE_SIZE};
///
/// let mm = bed.system.platform().current_mm().expect("this thread runs as a user process");
/// let mut frames = Vec::new();
/// assert_eq!(mm.pin_pages_fast(user.va, 4, true, &mut frames)?, 4);
/// assert!(frames.len() == 4 && frames.iter().all(|pa| pa % PAGE_SIZE == 0));
/// mm.unpin_pages(&frames, true); // each page exactly once; dirty: the device wrote it
/// let unmapped = user.va + 64 * PAGE_SIZE;
/// assert!(matches!(mm.pin_pages(unmapped, 1, false, &mut Vec::new()), Err(NdmaError::Pin { .. })));
/// # Ok::<(), NdmaError>(())
/// ```
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
///
/// A platform of your own is a struct with five methods (`examples/custom_backend.rs` has a complete back end
/// over plain memory). Here, one that wraps another and counts the delays the op layer asks for:
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (model, model_platform) = doctest::model(udma::Arch::V2, 1); // a device model and its platform
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use std::sync::Arc;
/// use ndma::{HostBuf, Platform, System};
///
/// struct Counting {
///     inner: Arc<dyn Platform>,
///     delays: AtomicU64,
/// }
///
/// impl Platform for Counting {
///     fn jiffies(&self) -> u64 {
///         self.inner.jiffies()
///     }
///     fn now_us(&self) -> u64 {
///         self.inner.now_us()
///     }
///     fn udelay(&self, us: u64) {
///         self.delays.fetch_add(1, Relaxed);
///         self.inner.udelay(us)
///     }
///     fn is_emulation(&self) -> bool {
///         false
///     }
///     fn alloc_coherent(&self, len: usize) -> ndma::Result<HostBuf> {
///         self.inner.alloc_coherent(len)
///     }
///     fn virt_to_phys(&self, cpu: *const u8, len: usize) -> Option<u64> {
///         self.inner.virt_to_phys(cpu, len)
///     }
/// }
///
/// let platform = Arc::new(Counting { inner: model_platform, delays: AtomicU64::new(0) });
/// let hw = model.devices().iter().map(|d| ndma_emu::device_hw(d).expect("free")).collect();
/// let system = System::new(udma::Arch::V2, Arc::<Counting>::clone(&platform), hw)?;
/// let dev = system.device(0).unwrap();
/// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
/// dev.memcpy_mc(&src, &dst, 0, 0, 4096)?;
/// // The default `delay_until` is `udelay` then one look at the marker word: one delay, one poll.
/// assert_eq!((platform.delays.load(Relaxed), dev.ring_stats(0)?.polls), (1, 1));
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub trait Platform: Send + Sync {
    /// `get_jiffies_64()`: a monotonic tick counter (the reset-window clock).
    fn jiffies(&self) -> u64;
    /// A monotonic microsecond clock (for statistics; the poll budget counts polls, not this clock).
    fn now_us(&self) -> u64;
    /// `udelay(us)`: wait at least `us` microseconds.
    fn udelay(&self, us: u64);

    /// A marker-aware `udelay`: wait `us` microseconds, returning as soon as `word` holds `value`.
    /// Returns true when it saw `word == value` (with `Acquire`). The op layer uses it for the first wait and
    /// every poll interval of the marker poll; the poll still counts its polls, so budgets, poll counts and
    /// timeouts are those of the driver. A platform that keeps the driver's timing (or cannot watch memory
    /// while it waits) waits the whole `us` first — the default. A platform whose waiting thread assists an
    /// emulated engine may outlast `us` while an engine is mid-batch (the emulator's waiter sleeps until the
    /// batch ends); the op layer still counts the delay as one poll.
    fn delay_until(&self, word: &AtomicU32, value: u32, us: u64) -> bool {
        self.udelay(us);
        word.load(Ordering::Acquire) == value
    }

    /// `narch_is_qemu() || narch_is_emu()`: scale the poll budget ×100000 for slow virtual platforms.
    fn is_emulation(&self) -> bool;
    /// Coherent DMA allocation of at least `len` bytes, 256-byte aligned (`dma_alloc_coherent`). The op
    /// layer checks both (a safe implementation cannot be trusted with what unsafe code relies on) and
    /// refuses a buffer that falls short with [`crate::NdmaError::NoMemory`].
    ///
    /// # Errors
    ///
    /// [`crate::NdmaError::NoMemory`] when host memory is exhausted.
    fn alloc_coherent(&self, len: usize) -> Result<HostBuf>;
    /// `virt_to_phys`: the host physical address (without `pci_host_base`) at which this platform's devices
    /// reach the `len` bytes the CPU sees at `cpu`, or `None` when they are not all host memory its devices
    /// reach at one run of addresses — memory of another platform (another system's host DRAM, another
    /// IOMMU domain) among them. The buffer copies ask it rather than trust a buffer's own
    /// [`DmaMemory::phys_addr`], as the driver derives a kernel buffer's device address from its virtual one.
    fn virt_to_phys(&self, cpu: *const u8, len: usize) -> Option<u64>;
    /// Best-effort fault-in of a user range (`ndma_prefetch_user_pages`); failures are for logging only.
    fn prefetch_user_pages(&self, addr: u64, len: u64) -> std::result::Result<(), String> {
        let _ = (addr, len);
        Ok(())
    }

    /// `current->mm`: the calling task's address space, if it has one (a kernel thread has none). Cloning
    /// the returned `Arc` is capturing the address space (`mmget`) for a later remote pin. Every call on behalf
    /// of one address space must return a clone of the same `Arc`: the op layer tells address spaces apart
    /// by it (a pre-pinned range belongs to the one that registered it, not to whoever reuses its pid).
    fn current_mm(&self) -> Option<Arc<dyn UserMm>> {
        None
    }

    /// What the back end knows about queue pair `qid` of engine `engine` on device `device` that the
    /// registers do not show — a device model's recorded fault: a halted queue and why, a hung one, a dropped
    /// write, the descriptors it stopped on. Human-readable; [`crate::RingState`] carries it. `None` (the
    /// default): nothing to add.
    fn device_diagnostics(&self, device: u32, engine: u32, qid: u32) -> Option<String> {
        let _ = (device, engine, qid);
        None
    }
}

/// Alignment [`Platform::alloc_coherent`] promises.
pub(crate) const COHERENT_ALIGN: usize = 256;

/// [`Platform::alloc_coherent`], checked: what the op layer then relies on — rings and completion queues
/// addressed through raw pointers, chunks bounds-checked against the size asked for — holds only if the buffer
/// is as long and as aligned as promised, and the platform is a safe trait.
///
/// # Errors
///
/// The platform's; [`NdmaError::NoMemory`] for a buffer shorter than `len` or misaligned.
pub(crate) fn alloc_coherent(platform: &dyn Platform, len: usize) -> Result<HostBuf> {
    let buf = platform.alloc_coherent(len)?;
    if buf.len() < len || buf.as_ptr() as usize % COHERENT_ALIGN != 0 {
        tracing::error!(asked = len, got = buf.len(), "the platform's coherent buffer is short or misaligned");
        return Err(NdmaError::NoMemory { what: "coherent host (short or misaligned buffer)", size: len as u64 });
    }
    Ok(buf)
}
