//! Pinned pages and who releases them (FACTS §5.6 `ndma_zerocopy_pin_pages`).
//!
//! A pin is a counted reference on a frame, released exactly once. The crate-internal `Pinned` is the only
//! way to unpin: dropping it unpins the pages it pinned (dirty when the device wrote them, chosen when it was
//! made) or drops its reference on a pre-pinned range, whose pages stay pinned. Nothing here is called
//! directly; what it guarantees shows in the platform's pin accounting:
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//! # let bed = doctest::testbed(udma::Arch::V3);
//! # let user = doctest::user(&bed, 32); // 32 pages mapped at `user.va`, this thread runs as the process
//! use ndma::BatchOp;
//!
//! let dev = &bed.system.devices()[0];
//! let hbm = dev.alloc_device(32 * 4096, 0)?;
//! // Device → host over 20 pages: the device writes them, so they are unpinned dirty.
//! let op = BatchOp { offset: 0, size: 20 * 4096, buffer: user.va };
//! dev.zerocopy_submit(0, &[op], &hbm, 0, -1, false, 0, 0)?;
//! let pins = user.mm.pin_stats(); // the model's count of what the op layer pinned
//! assert_eq!((pins.pinned_pages, pins.unpinned_pages, pins.dirty_unpins), (20, 20, 20));
//! assert_eq!(dev.zerocopy_status(0)?.pinned_pages, 0);
//! # Ok::<(), ndma::NdmaError>(())
//! ```

use std::sync::Arc;

use super::prepinned::PinnedRange;
use crate::{NdmaError, Result, UserMm};

/// `-ENOMEM`: a pin that got some pages but not all, or a page array that could not be allocated.
const ENOMEM: i32 = -udma::errno::ENOMEM;
/// `-EFAULT`: a long-term pin (`ndma_pin_host_memory`) that got some pages but not all (FACTS §6).
const EFAULT: i32 = -udma::errno::EFAULT;

/// The pinned pages of one piece: frame physical addresses, one per page.
pub(crate) struct Pinned {
    pages: Vec<u64>,
    hold: Hold,
}

enum Hold {
    /// Pinned by the piece itself; unpinned on drop, marked dirty when the device wrote them.
    Owned { mm: Arc<dyn UserMm>, dirty: bool },
    /// Inside a range pinned once for the process: a reference on the range, nothing to unpin.
    Prepinned(#[allow(dead_code)] Arc<PinnedRange>),
}

impl Pinned {
    /// Frame addresses, one per page.
    pub(crate) fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// The address space whose pages these are, when the piece pinned them itself.
    pub(crate) fn owner(&self) -> Option<&Arc<dyn UserMm>> {
        match &self.hold {
            Hold::Owned { mm, .. } => Some(mm),
            Hold::Prepinned(_) => None,
        }
    }

    /// `n` pages of `range` starting at its page `first`.
    pub(crate) fn from_range(range: &Arc<PinnedRange>, first: usize, n: usize) -> Pinned {
        Pinned { pages: range.pages()[first..first + n].to_vec(), hold: Hold::Prepinned(Arc::clone(range)) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Hold::Owned { mm, dirty } = &self.hold {
            mm.unpin_pages(&self.pages, *dirty);
        }
    }
}

/// Pins `n` pages of the calling task's address space from the page-aligned `va`: the fast path, then —
/// after a short fast pin, whose pages are unpinned first — the slow path. `device_writes`: the device will
/// write the pages (a device→host transfer): pin for writing, and unpin dirty.
///
/// # Errors
///
/// [`NdmaError::Pin`] with the errno of the first page that could not be pinned, or `-ENOMEM` when the slow
/// path pinned only part (which it unpins first) or when the page array cannot be allocated.
pub(crate) fn pin_local(mm: &Arc<dyn UserMm>, va: u64, n: usize, device_writes: bool) -> Result<Pinned> {
    pin_local_or(mm, va, n, device_writes, ENOMEM)
}

/// [`pin_local`] for a long-term pin of a pre-pinned range (`ndma_pin_host_memory`), whose partial pin is
/// `-EFAULT` rather than `-ENOMEM` (FACTS §6).
///
/// # Errors
///
/// As [`pin_local`], with `-EFAULT` for a partial pin.
pub(crate) fn pin_longterm(mm: &Arc<dyn UserMm>, va: u64, n: usize) -> Result<Pinned> {
    pin_local_or(mm, va, n, true, EFAULT)
}

fn pin_local_or(mm: &Arc<dyn UserMm>, va: u64, n: usize, device_writes: bool, partial: i32) -> Result<Pinned> {
    let mut pages = page_array(va, n)?;
    match mm.pin_pages_fast(va, n, device_writes, &mut pages) {
        Ok(got) if got == n && pages.len() == n => return Ok(owned(mm, pages, device_writes)),
        // A short (or failed) fast pin: give back what it got, then take the slow path.
        _ => {
            mm.unpin_pages(&pages, false);
            pages.clear();
        }
    }
    pin_slow(mm, va, n, device_writes, pages, partial)
}

/// Pins through a captured address space (`pin_user_pages_remote`), as the completion thread does for a
/// deferred piece.
///
/// # Errors
///
/// As [`pin_local`].
pub(crate) fn pin_remote(mm: &Arc<dyn UserMm>, va: u64, n: usize, device_writes: bool) -> Result<Pinned> {
    pin_slow(mm, va, n, device_writes, page_array(va, n)?, ENOMEM)
}

/// The array the pinned pages' addresses go to, as the driver allocates it before pinning: an allocation
/// failure (a range of 2^50 pages, say) is `-ENOMEM`, not an abort.
fn page_array(va: u64, n: usize) -> Result<Vec<u64>> {
    let mut pages = Vec::new();
    pages.try_reserve_exact(n).map_err(|_| NdmaError::Pin { va, errno: ENOMEM })?;
    Ok(pages)
}

/// The slow pin; a pin of only part of the pages is `partial` (an errno), after they are unpinned.
fn pin_slow(
    mm: &Arc<dyn UserMm>,
    va: u64,
    n: usize,
    device_writes: bool,
    mut pages: Vec<u64>,
    partial: i32,
) -> Result<Pinned> {
    match mm.pin_pages(va, n, device_writes, &mut pages) {
        Ok(got) if got == n && pages.len() == n => Ok(owned(mm, pages, device_writes)),
        Ok(_) => {
            mm.unpin_pages(&pages, false);
            let missing = va + pages.len() as u64 * crate::PAGE_SIZE;
            Err(NdmaError::Pin { va: missing, errno: partial })
        }
        Err(e) => {
            mm.unpin_pages(&pages, false);
            Err(e)
        }
    }
}

fn owned(mm: &Arc<dyn UserMm>, pages: Vec<u64>, dirty: bool) -> Pinned {
    Pinned { pages, hold: Hold::Owned { mm: Arc::clone(mm), dirty } }
}
