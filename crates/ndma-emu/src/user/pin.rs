//! Pinning user pages, as the kernel offers it to the driver: [`ndma::UserMm`] for [`AddressSpace`].
//!
//! - `pin_pages_fast` (`pin_user_pages_fast`) and `pin_pages` (`pin_user_pages` on the calling task's own
//!   address space, `pin_user_pages_remote` through a captured one) walk the page table from `va` and pin
//!   frame after frame. They stop at the first hole or, for a write pin, the first read-only page: if that
//!   is the first page the call fails (`-EFAULT`), otherwise it returns the pages it got (a short pin).
//!   Only the fault plan makes a fast pin short on a fully mapped range.
//! - After the process exited every pin fails with `-ESRCH`. (Linux would find an empty address space and
//!   say `-EFAULT`; the distinct errno lets a test tell "exited" from "hole", and the driver treats both
//!   the same way: the request fails.)
//! - `unpin_pages` drops one pin per page and marks the frames dirty when asked; it works after exit too,
//!   and frees frames the exit orphaned. An unpin of a frame this address space did not pin is ignored
//!   and counted ([`super::LeakCheck::bad_unpins`]).
//!
//! The page table lock is held across a whole pin, so pages cannot be unmapped halfway through (the mmap
//! lock's role).

use std::sync::atomic::{AtomicU64, Ordering};

use ndma::{NdmaError, UserMm};

use super::frames::Unpinned;
use super::mm::free_frames;
use super::placement::PAGE;
use super::AddressSpace;
use crate::faults::{PinFaultAction, PinPath};
use crate::HostMemory;

/// Pin activity of one address space, as counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinStats {
    /// `pin_pages_fast` calls.
    pub fast_calls: u64,
    /// `pin_pages` calls.
    pub slow_calls: u64,
    /// Of `slow_calls`, those made from a thread that had not entered this address space (remote pins).
    pub remote_calls: u64,
    /// Calls that pinned fewer pages than asked, but some.
    pub short_pins: u64,
    /// Calls that failed (pinned nothing).
    pub failed_calls: u64,
    /// Pages pinned.
    pub pinned_pages: u64,
    /// Pages passed to `unpin_pages`.
    pub unpinned_pages: u64,
    /// Of `unpinned_pages`, those unpinned dirty.
    pub dirty_unpins: u64,
}

/// The counters behind [`PinStats`]. Relaxed atomics: they are statistics, read when the system is quiet.
#[derive(Debug, Default)]
pub(crate) struct PinCounters {
    fast_calls: AtomicU64,
    slow_calls: AtomicU64,
    remote_calls: AtomicU64,
    short_pins: AtomicU64,
    failed_calls: AtomicU64,
    pinned_pages: AtomicU64,
    unpinned_pages: AtomicU64,
    dirty_unpins: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    // Relaxed: a statistics counter; nothing is ordered by it.
    c.fetch_add(n, Ordering::Relaxed);
}

impl AddressSpace {
    /// Pin activity so far.
    pub fn pin_stats(&self) -> PinStats {
        let c = &self.counters;
        // Relaxed: statistics (see `PinCounters`).
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PinStats {
            fast_calls: get(&c.fast_calls),
            slow_calls: get(&c.slow_calls),
            remote_calls: get(&c.remote_calls),
            short_pins: get(&c.short_pins),
            failed_calls: get(&c.failed_calls),
            pinned_pages: get(&c.pinned_pages),
            unpinned_pages: get(&c.unpinned_pages),
            dirty_unpins: get(&c.dirty_unpins),
        }
    }

    /// One pin call on `path`; see the module documentation.
    fn pin(&self, path: PinPath, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> ndma::Result<usize> {
        let c = &self.counters;
        match path {
            PinPath::Fast => bump(&c.fast_calls, 1),
            PinPath::Slow => {
                bump(&c.slow_calls, 1);
                if !super::current::is_current(self) {
                    bump(&c.remote_calls, 1);
                }
            }
        }
        let result = self.pin_inner(path, va, n, write, pages);
        match result {
            Ok(got) => {
                bump(&c.pinned_pages, got as u64);
                if got < n {
                    bump(&c.short_pins, 1);
                }
            }
            Err(_) => bump(&c.failed_calls, 1),
        }
        result
    }

    fn pin_inner(&self, path: PinPath, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> ndma::Result<usize> {
        let fail = |va, errno: i32| Err(NdmaError::Pin { va, errno });
        if va % PAGE != 0 || (n as u64).checked_mul(PAGE).and_then(|b| va.checked_add(b)).is_none() {
            return fail(va, -libc::EINVAL);
        }
        if n == 0 {
            return Ok(0);
        }
        let limit = match self.faults.on_pin(path) {
            Some(PinFaultAction::Fail(errno)) => return fail(va, errno),
            Some(PinFaultAction::Short(k)) => k.min(n),
            None => n,
        };
        let st = self.lock();
        if st.exited {
            return fail(va, -libc::ESRCH);
        }
        let mut table = self.host().frames().lock();
        let first = va / PAGE;
        if pages.try_reserve(limit).is_err() {
            return fail(va, -libc::ENOMEM);
        }
        // One walk over the mapped pages of the range; it stops at a hole (a page number skipped) or at a write
        // pin of a read-only page.
        let mut got = 0u64;
        for (&vpn, pte) in st.ptes.range(first..first + limit as u64) {
            if vpn != first + got || (write && !pte.writable) {
                break;
            }
            table.pin(pte.pa);
            pages.push(pte.pa);
            got += 1;
        }
        if got == 0 {
            return fail(va, -libc::EFAULT);
        }
        Ok(got as usize)
    }
}

impl UserMm for AddressSpace {
    fn pid(&self) -> u32 {
        AddressSpace::pid(self)
    }

    fn pin_pages_fast(&self, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> ndma::Result<usize> {
        self.pin(PinPath::Fast, va, n, write, pages)
    }

    fn pin_pages(&self, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> ndma::Result<usize> {
        self.pin(PinPath::Slow, va, n, write, pages)
    }

    fn unpin_pages(&self, pages: &[u64], dirty: bool) {
        bump(&self.counters.unpinned_pages, pages.len() as u64);
        if dirty {
            bump(&self.counters.dirty_unpins, pages.len() as u64);
        }
        unpin(self.host(), pages, Some(self.id()), dirty);
    }
}

/// `unpin_user_pages[_dirty_lock]` as the kernel has it: by frame alone, with no address space — what a
/// `Platform` method that unpins without the `mm` would call. Works for frames of any address space on
/// `host`, exited or dropped; an unpin of a frame that is not pinned is ignored and counted
/// ([`super::LeakCheck::bad_unpins`]).
pub fn unpin_user_pages(host: &HostMemory, pages: &[u64], dirty: bool) {
    unpin(host, pages, None, dirty);
}

/// Drops one pin per page (held by `owner`, when given) and frees frames whose last pin that was.
fn unpin(host: &HostMemory, pages: &[u64], owner: Option<u64>, dirty: bool) {
    let mut free = Vec::new();
    {
        let mut table = host.frames().lock();
        for &pa in pages {
            if table.unpin(pa, owner, dirty) == Unpinned::Free {
                free.push(pa);
            }
        }
    }
    free_frames(host, &free);
}
