//! Pre-pinned host memory (\[N\], FACTS §6 `ndma_pin_host_memory`): a process pins a range once; zero-copy
//! pieces inside it take a reference instead of pinning, and are not unpinned when they complete, so repeated
//! transfers over the same buffer cost no pinning at all.
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//! # let bed = doctest::testbed(udma::Arch::V3);
//! # let user = doctest::user(&bed, 16); // 16 pages mapped at `user.va`, this thread runs as the process
//! use ndma::BatchOp;
//!
//! let (system, dev) = (&bed.system, &bed.system.devices()[0]);
//! system.pin_host_memory(user.va, 16 * 4096)?;
//! let pinned_once = user.mm.pin_stats().pinned_pages;
//! let hbm = dev.alloc_device(16 * 4096, 0)?;
//! for _ in 0..10 {
//!     let op = BatchOp { offset: 0, size: 16 * 4096, buffer: user.va };
//!     dev.zerocopy_submit(0, &[op], &hbm, 0, -1, true, 0, 0)?;
//! }
//! assert_eq!(user.mm.pin_stats().pinned_pages, pinned_once, "ten transfers, no pinning");
//! system.unpin_host_memory(user.va)?;
//! assert_eq!(user.mm.pin_stats().unpinned_pages, pinned_once);
//! # Ok::<(), ndma::NdmaError>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::pin::{pin_longterm, Pinned};
use crate::{NdmaError, Result, UserMm, PAGE_SIZE};

/// A user range pinned once for its process. The pages stay pinned until the range is unregistered **and**
/// no queued piece refers to it any more. The op layer keeps these for [`System::pin_host_memory`]; no public
/// call hands one out, so the accessors below serve the crate's own bookkeeping (see the
/// [module example](self) for the behaviour).
///
/// [`System::pin_host_memory`]: crate::System::pin_host_memory
pub struct PinnedRange {
    pid: u32,
    va: u64,
    size: u64,
    /// The page-aligned pin covering `[va, va + size)`.
    pin: Pinned,
}

impl PinnedRange {
    /// The owning process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// First user address.
    pub fn va(&self) -> u64 {
        self.va
    }

    /// Bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Frame addresses of every page of the range.
    pub fn pages(&self) -> &[u64] {
        self.pin.pages()
    }

    /// Was the range registered by `mm` (the same address space, not only the same pid)?
    fn belongs_to(&self, mm: &Arc<dyn UserMm>) -> bool {
        self.pin.owner().is_some_and(|own| std::ptr::addr_eq(Arc::as_ptr(own), Arc::as_ptr(mm)))
    }

    /// First page address.
    fn first_page(&self) -> u64 {
        self.va & !(PAGE_SIZE - 1)
    }

    /// Device-visible address of the range when its pages are physically contiguous (`*pa_out`), else
    /// `None` (the driver's `~0`).
    pub fn contiguous_pa(&self, pci_host_base: u64) -> Option<u64> {
        let pages = self.pages();
        let contiguous = pages.windows(2).all(|w| w[1] == w[0] + PAGE_SIZE);
        (contiguous && !pages.is_empty()).then(|| (pages[0] + (self.va & (PAGE_SIZE - 1))) | pci_host_base)
    }
}

impl std::fmt::Debug for PinnedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedRange")
            .field("pid", &self.pid)
            .field("va", &format_args!("{:#x}", self.va))
            .field("size", &self.size)
            .finish()
    }
}

/// Ranges per pid, keyed by start address.
type RangesByPid = HashMap<u32, BTreeMap<u64, Arc<PinnedRange>>>;

/// The system's pre-pinned ranges, per process, keyed by start address.
///
/// A range belongs to the address space that registered it. The driver keys them by pid alone and relies on
/// the process's file release to clean them up; here a process can exit without that, and a new one may reuse
/// its pid at the same user addresses — so every lookup on behalf of an address space first drops its pid's
/// ranges that another address space registered (stale: their pages are the old process's frames), instead
/// of DMAing the new process's transfer through them.
#[derive(Default)]
pub(crate) struct PinnedStore {
    by_pid: Mutex<RangesByPid>,
}

impl PinnedStore {
    fn lock(&self) -> MutexGuard<'_, RangesByPid> {
        // Every update is a single insert/remove: a panic cannot leave the maps half-changed.
        self.by_pid.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock, with `mm`'s pid holding only ranges `mm` registered. The stale ones removed come first, so
    /// that `let (_stale, all) = ...` drops (unpins) them after the lock is released.
    fn lock_for(&self, mm: &Arc<dyn UserMm>) -> (Vec<Arc<PinnedRange>>, MutexGuard<'_, RangesByPid>) {
        let mut all = self.lock();
        let pid = mm.pid();
        let mut stale = Vec::new();
        if let Some(map) = all.get_mut(&pid) {
            map.retain(|_, r| {
                let mine = r.belongs_to(mm);
                if !mine {
                    stale.push(Arc::clone(r));
                }
                mine
            });
            if map.is_empty() {
                all.remove(&pid);
            }
        }
        if !stale.is_empty() {
            tracing::warn!(pid, ranges = stale.len(), "pre-pinned ranges of an exited process with this pid released");
        }
        (stale, all)
    }

    /// `ndma_pin_host_memory`: pins `[va, va + size)` of `mm` for as long as it stays registered.
    pub(crate) fn pin(&self, mm: &Arc<dyn UserMm>, va: u64, size: u64) -> Result<Arc<PinnedRange>> {
        let end = va.checked_add(size).filter(|_| va != 0 && size != 0);
        let Some(end) = end else {
            return Err(NdmaError::InvalidPinRange { va, size });
        };
        let pid = mm.pid();
        {
            let (_stale, all) = self.lock_for(mm);
            if let Some(r) = all.get(&pid).and_then(|m| overlapping(m, va, end)) {
                return Err(NdmaError::PinnedRangeExists { va, existing: r.va });
            }
        }
        let first = va & !(PAGE_SIZE - 1);
        let n = (end - first).div_ceil(PAGE_SIZE) as usize;
        // Long-term pin, for writing: the device may write the range in either direction later. A partial pin
        // is -EFAULT here (FACTS §6), not the zero-copy path's -ENOMEM.
        let pin = pin_longterm(mm, first, n)?;
        let range = Arc::new(PinnedRange { pid, va, size, pin });
        let (_stale, mut all) = self.lock_for(mm);
        let map = all.entry(pid).or_default();
        // Checked again under the lock: another thread may have registered an overlapping range meanwhile.
        if let Some(r) = overlapping(map, va, end) {
            return Err(NdmaError::PinnedRangeExists { va, existing: r.va });
        }
        map.insert(va, Arc::clone(&range));
        Ok(range)
    }

    /// `ndma_unpin_host_memory`: unregisters `mm`'s range starting exactly at `va`.
    pub(crate) fn unpin(&self, mm: &Arc<dyn UserMm>, va: u64) -> Result<()> {
        let pid = mm.pid();
        let (_stale, mut all) = self.lock_for(mm);
        let removed = all.get_mut(&pid).and_then(|m| m.remove(&va));
        if all.get(&pid).is_some_and(BTreeMap::is_empty) {
            all.remove(&pid);
        }
        removed.map(|_| ()).ok_or(NdmaError::NoPinnedRange { va })
    }

    /// `ndma_pinned_mem_cleanup_process`: unregisters every range of `pid`.
    pub(crate) fn cleanup_process(&self, pid: u32) {
        self.lock().remove(&pid);
    }

    /// The pre-pinned pages covering `n` pages from the page-aligned `va` of `mm`, if one range it registered
    /// holds them all (`ndma_pinned_mem_try_populate`). `current`: `mm` is the calling task's, so its pid's
    /// ranges another address space registered are stale and go; a lookup on behalf of a captured address
    /// space (the completion thread's remote pin) evicts nothing — that process may have exited, and a new one
    /// reusing its pid owns the live ranges.
    pub(crate) fn try_populate(&self, mm: &Arc<dyn UserMm>, va: u64, n: usize, current: bool) -> Option<Pinned> {
        let (_stale, all) = if current { self.lock_for(mm) } else { (Vec::new(), self.lock()) };
        let (_, r) = all.get(&mm.pid())?.range(..=(va | (PAGE_SIZE - 1))).next_back()?;
        if !r.belongs_to(mm) {
            return None;
        }
        let first = usize::try_from((va - r.first_page()) / PAGE_SIZE).ok()?;
        (va >= r.first_page() && first + n <= r.pages().len()).then(|| Pinned::from_range(r, first, n))
    }

    /// Ranges registered now.
    pub(crate) fn len(&self) -> usize {
        self.lock().values().map(BTreeMap::len).sum()
    }
}

/// A range of `map` sharing a byte with `[va, end)`.
fn overlapping(map: &BTreeMap<u64, Arc<PinnedRange>>, va: u64, end: u64) -> Option<&Arc<PinnedRange>> {
    map.range(..end).next_back().map(|(_, r)| r).filter(|r| r.va + r.size > va)
}

impl crate::System {
    /// `ndma_pin_host_memory`: pins `[va, va + size)` of the calling task's address space once; zero-copy pieces
    /// inside it then take a reference instead of pinning. Returns the range's device address (host PA |
    /// `pci_host_base`) when its pages are physically contiguous, `None` otherwise (the driver's `~0`).
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let bed = doctest::testbed(udma::Arch::V3);
    /// # let user = doctest::user(&bed, 16); // 16 scattered pages at `user.va`, this thread runs as the process
    /// use ndma::NdmaError;
    ///
    /// let system = &bed.system;
    /// assert_eq!(system.pin_host_memory(user.va + 100, 3 * 4096)?, None, "the pages are not contiguous");
    /// assert_eq!(system.pinned_ranges(), 1);
    /// let overlap = system.pin_host_memory(user.va + 4096, 4096).unwrap_err();
    /// assert_eq!(overlap, NdmaError::PinnedRangeExists { va: user.va + 4096, existing: user.va + 100 });
    /// assert_eq!(system.pin_host_memory(0, 4096), Err(NdmaError::InvalidPinRange { va: 0, size: 4096 }));
    /// system.unpin_host_memory(user.va + 100)?;
    /// assert_eq!(system.unpin_host_memory(user.va + 100), Err(NdmaError::NoPinnedRange { va: user.va + 100 }));
    /// # Ok::<(), NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidPinRange`] (`-EINVAL`) for an address or size of 0, [`NdmaError::NoAddressSpace`],
    /// [`NdmaError::PinnedRangeExists`] (`-EEXIST`) for an overlap with a range of the same process, pin errors
    /// ([`NdmaError::Pin`]: `-EFAULT` when only part of the range could be pinned, `-ENOMEM` when its page
    /// array cannot be allocated).
    pub fn pin_host_memory(&self, va: u64, size: u64) -> Result<Option<u64>> {
        let mm = self.platform().current_mm().ok_or(NdmaError::NoAddressSpace)?;
        let range = self.registry().pinned.pin(&mm, va, size)?;
        Ok(range.contiguous_pa(self.arch().pci_host_base()))
    }

    /// `ndma_unpin_host_memory`: unregisters the calling process's range starting at `va`; its pages are
    /// unpinned once no queued piece uses them (examples on [`Self::pin_host_memory`] and the
    /// [module](self)).
    ///
    /// # Errors
    ///
    /// [`NdmaError::NoAddressSpace`], [`NdmaError::NoPinnedRange`] (`-ENOENT`).
    pub fn unpin_host_memory(&self, va: u64) -> Result<()> {
        let mm = self.platform().current_mm().ok_or(NdmaError::NoAddressSpace)?;
        self.registry().pinned.unpin(&mm, va)
    }

    /// `ndma_pinned_mem_cleanup_process`: unregisters every range of process `pid` (at its exit).
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let bed = doctest::testbed(udma::Arch::V3);
    /// # let user = doctest::user(&bed, 16); // pid 4242, 16 pages mapped at `user.va`, the current process
    /// bed.system.pin_host_memory(user.va, 4096)?;
    /// bed.system.pin_host_memory(user.va + 8 * 4096, 4096)?;
    /// assert_eq!(bed.system.pinned_ranges(), 2);
    /// bed.system.pinned_mem_cleanup_process(4242);
    /// assert_eq!(bed.system.pinned_ranges(), 0);
    /// assert_eq!(user.mm.pin_stats().unpinned_pages, 2);
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    pub fn pinned_mem_cleanup_process(&self, pid: u32) {
        self.registry().pinned.cleanup_process(pid);
    }

    /// Pre-pinned ranges registered now, over all processes (example on
    /// [`Self::pinned_mem_cleanup_process`]).
    pub fn pinned_ranges(&self) -> usize {
        self.registry().pinned.len()
    }
}
