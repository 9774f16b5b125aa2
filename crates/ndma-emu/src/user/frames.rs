//! The frames of host DRAM that back user pages, and what the kernel keeps per `struct page` for pinning:
//! a pin count (`FOLL_PIN`), a dirty flag, and whether a page table still maps the frame.
//!
//! # Lifetime of a frame
//!
//! A frame is taken from host DRAM when an address space maps a page ([`super::AddressSpace::map`]) and
//! given back when the page is unmapped *and* no pin holds it: unmapping (or the process exiting) with pins
//! outstanding leaves the frame alive and "orphaned" until the last unpin frees it. So a device never
//! transfers into a frame that was freed and handed to someone else.
//!
//! # Leak check
//!
//! After any sequence of operations, successful or failed, no frame may stay pinned and no unpin may have
//! hit a frame that was not pinned: [`FrameTable::leak_check`].

use rustc_hash::FxHashMap;
use std::sync::{Mutex, MutexGuard};

use crate::lock::lock;

/// Per-frame state, as the tests see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    /// Outstanding pins.
    pub pins: u64,
    /// Set by an unpin after the device wrote the frame (`unpin_user_pages_dirty_lock(.., true)`).
    pub dirty: bool,
    /// A page table maps it (false: unmapped or exited, alive only because it is pinned).
    pub mapped: bool,
}

/// A snapshot of the pin accounting. "Staleness": with transfers in flight it is out of date as soon as it
/// is taken; check it when the system is quiet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeakCheck {
    /// Frames backing user pages (mapped or orphaned).
    pub user_frames: usize,
    /// Frames with at least one pin.
    pub pinned_frames: usize,
    /// Outstanding pins over all frames.
    pub pins: u64,
    /// Unmapped frames kept alive only by pins.
    pub orphaned_frames: usize,
    /// Unpins of a frame that was not pinned, not a user frame, or pinned through another address space
    /// (each one a bug in the caller; the unpin was ignored).
    pub bad_unpins: u64,
}

impl LeakCheck {
    /// No frame is pinned and no unpin went wrong.
    pub fn is_clean(&self) -> bool {
        self.pinned_frames == 0 && self.pins == 0 && self.bad_unpins == 0
    }
}

/// The user frames of one host DRAM.
#[derive(Default)]
pub struct FrameTable {
    inner: Mutex<Frames>,
}

impl core::fmt::Debug for FrameTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "FrameTable({:?})", self.leak_check())
    }
}

impl FrameTable {
    /// The state of the frame at `pa` (page-aligned), if it backs a user page.
    pub fn info(&self, pa: u64) -> Option<FrameInfo> {
        lock(&self.inner).map.get(&pa).map(|f| FrameInfo { pins: f.pins, dirty: f.dirty, mapped: f.mapped })
    }

    /// Outstanding pins on the frame at `pa` (0 for a frame that is not a user frame).
    pub fn pin_count(&self, pa: u64) -> u64 {
        self.info(pa).map_or(0, |f| f.pins)
    }

    /// Whether an unpin marked the frame at `pa` dirty.
    pub fn is_dirty(&self, pa: u64) -> bool {
        self.info(pa).is_some_and(|f| f.dirty)
    }

    /// Frames with at least one pin.
    pub fn pinned_frames(&self) -> usize {
        lock(&self.inner).pinned_frames
    }

    /// The pin accounting (see [`LeakCheck::is_clean`]).
    pub fn leak_check(&self) -> LeakCheck {
        let f = lock(&self.inner);
        LeakCheck {
            user_frames: f.map.len(),
            pinned_frames: f.pinned_frames,
            pins: f.pins,
            orphaned_frames: f.map.values().filter(|x| !x.mapped).count(),
            bad_unpins: f.bad_unpins,
        }
    }

    /// The table, locked, for a batch of frame operations.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Frames> {
        lock(&self.inner)
    }
}

/// One frame.
#[derive(Debug)]
struct Frame {
    /// The address space that maps (or mapped) it.
    owner: u64,
    pins: u64,
    dirty: bool,
    mapped: bool,
}

/// What an unpin did to a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpinned {
    /// The frame stays (still pinned, or still mapped).
    Kept,
    /// That was the last pin of an unmapped frame: the caller gives it back to host DRAM.
    Free,
    /// The frame was not pinned through this owner: ignored and counted in [`LeakCheck::bad_unpins`].
    Refused,
}

/// The locked table.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    map: FxHashMap<u64, Frame>,
    pinned_frames: usize,
    pins: u64,
    bad_unpins: u64,
}

impl Frames {
    /// Records a freshly mapped frame of `owner`.
    pub(crate) fn insert(&mut self, pa: u64, owner: u64) {
        let old = self.map.insert(pa, Frame { owner, pins: 0, dirty: false, mapped: true });
        debug_assert!(old.is_none(), "frame {pa:#x} handed out twice");
    }

    /// Takes one pin on the mapped frame at `pa`.
    pub(crate) fn pin(&mut self, pa: u64) {
        if let Some(f) = self.map.get_mut(&pa) {
            if f.pins == 0 {
                self.pinned_frames += 1;
            }
            f.pins += 1;
            self.pins += 1;
        }
    }

    /// Drops one pin on `pa` — one that `owner` holds, when given — marking the frame dirty when `dirty`.
    pub(crate) fn unpin(&mut self, pa: u64, owner: Option<u64>, dirty: bool) -> Unpinned {
        let Some(f) = self.map.get_mut(&pa).filter(|f| owner.is_none_or(|o| o == f.owner) && f.pins > 0) else {
            self.bad_unpins += 1;
            return Unpinned::Refused;
        };
        f.pins -= 1;
        f.dirty |= dirty;
        self.pins -= 1;
        if f.pins > 0 {
            return Unpinned::Kept;
        }
        self.pinned_frames -= 1;
        if f.mapped {
            return Unpinned::Kept;
        }
        self.map.remove(&pa);
        Unpinned::Free
    }

    /// The page table no longer maps `pa`. Returns true when the frame can go back to host DRAM now, false
    /// when pins keep it (the last unpin frees it).
    pub(crate) fn unmap(&mut self, pa: u64) -> bool {
        match self.map.get_mut(&pa) {
            Some(f) if f.pins > 0 => {
                f.mapped = false;
                false
            }
            Some(_) => {
                self.map.remove(&pa);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_frame_outlives_its_mapping_until_the_last_unpin() {
        let t = FrameTable::default();
        let mut f = t.lock();
        f.insert(0x1000, 7);
        f.pin(0x1000);
        f.pin(0x1000);
        assert!(!f.unmap(0x1000), "pinned: kept");
        assert_eq!(f.unpin(0x1000, Some(7), false), Unpinned::Kept);
        assert_eq!(f.unpin(0x1000, Some(8), false), Unpinned::Refused, "another owner");
        assert_eq!(f.unpin(0x1000, None, true), Unpinned::Free);
        assert_eq!(f.unpin(0x1000, Some(7), false), Unpinned::Refused, "gone");
        drop(f);
        assert_eq!(t.leak_check(), LeakCheck { bad_unpins: 2, ..LeakCheck::default() });
        assert!(!t.leak_check().is_clean());
    }

    #[test]
    fn dirty_sticks_and_unpinned_frames_unmap_at_once() {
        let t = FrameTable::default();
        let mut f = t.lock();
        f.insert(0x2000, 1);
        f.pin(0x2000);
        drop(f);
        assert_eq!(t.leak_check().pinned_frames, 1);
        assert_eq!(t.lock().unpin(0x2000, Some(1), true), Unpinned::Kept, "still mapped");
        assert_eq!(t.info(0x2000), Some(FrameInfo { pins: 0, dirty: true, mapped: true }));
        assert!(t.lock().unmap(0x2000));
        assert_eq!(t.info(0x2000), None);
        assert!(t.leak_check().is_clean());
    }
}
