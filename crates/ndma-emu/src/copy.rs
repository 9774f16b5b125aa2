//! How an engine writes a destination: one memmove, with the last aligned word of a host destination stored
//! with `Release` so a CPU that acquire-loads it (the completion marker) sees every earlier engine write.

use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::addr_map::{AddrMap, Loc, Space};
use crate::bulk::{self, Batch};

/// One copy the engine performs: `len` bytes from `src` to `dst`, both decoded and bounds-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Copy {
    pub(crate) src: Loc,
    pub(crate) dst: Loc,
    pub(crate) len: usize,
}

impl Copy {
    /// The copy that does `self` then `next`, if they are contiguous on both sides and doing them as one
    /// memmove is indistinguishable from doing them in turn (no byte of either destination is a source).
    pub(crate) fn merged(&self, next: &Copy) -> Option<Copy> {
        let contiguous = self.src.space == next.src.space
            && self.dst.space == next.dst.space
            && self.src.off + self.len == next.src.off
            && self.dst.off + self.len == next.dst.off;
        let len = self.len + next.len;
        (contiguous && !self.src.overlaps(len, self.dst, len)).then_some(Copy { src: self.src, dst: self.dst, len })
    }

    /// Performs the copy now, as one copy of a batch of class `batch` (see [`crate::bulk::copy_in`]).
    pub(crate) fn perform(&self, map: &AddrMap, batch: Batch) {
        let src = map.ptr(self.src);
        let dst = map.ptr(self.dst);
        let len = self.len;
        let end = dst as usize + len;
        if self.dst.space == Space::Host && len >= 4 && end % 4 == 0 {
            // SAFETY: `src`/`dst` come from `AddrMap::decode` for `len` bytes, so `[src, src + len)` and
            // `[dst, dst + len)` are inside their mappings. The last source word is read first so the result
            // equals one memmove even when the ranges overlap; `bulk::copy` tolerates overlap; the last
            // destination word is 4-byte aligned (checked) and stays inside the mapping, which lives as
            // long as `map`.
            unsafe {
                let last = ptr::read_unaligned(src.add(len - 4) as *const u32);
                crate::bulk::copy_in(src, dst, len - 4, batch);
                // Release orders every earlier engine write (this copy's body, earlier descriptors, drained
                // posted writes) before the final word: a CPU that acquire-loads it — the marker poll — sees
                // all of them.
                AtomicU32::from_ptr(dst.add(len - 4) as *mut u32).store(last, Ordering::Release);
            }
        } else {
            // SAFETY: as above; both ranges are inside their mappings and `bulk::copy` tolerates overlap.
            unsafe { crate::bulk::copy_in(src, dst, len, batch) };
        }
    }

    /// The copies at the start of `list` (at least the first) that [`Group::perform`] can perform together:
    /// up to [`bulk::LANES`] that each stream (a page or more to an aligned destination), land in HBM, and
    /// are independent — no destination overlaps another copy's source or destination and none overlaps its
    /// own source, so performing them at once equals performing them in turn.
    pub(crate) fn group(map: &AddrMap, list: &[Copy]) -> Group {
        let mut g =
            Group { lanes: [bulk::Lane { src: ptr::null(), dst: ptr::null_mut(), len: 0 }; bulk::LANES], len: 0 };
        if !bulk::streams_available() {
            g.len = 1;
            return g;
        }
        while g.len < list.len().min(bulk::LANES) {
            let c = &list[g.len];
            // A copy over its own source needs memmove's order, which interleaved blocks do not keep.
            let independent = !c.src.overlaps(c.len, c.dst, c.len)
                && list[..g.len].iter().all(|p| {
                    !p.dst.overlaps(p.len, c.src, c.len)
                        && !p.dst.overlaps(p.len, c.dst, c.len)
                        && !c.dst.overlaps(c.len, p.src, p.len)
                });
            let lane = Self::lane(map, c);
            if c.dst.space != Space::Hbm || !lane.streams() || !independent {
                break;
            }
            g.lanes[g.len] = lane;
            g.len += 1;
        }
        g.len = g.len.max(1);
        g
    }

    fn lane(map: &AddrMap, c: &Copy) -> bulk::Lane {
        bulk::Lane { src: map.ptr(c.src), dst: map.ptr(c.dst), len: c.len }
    }
}

/// Copies [`Copy::group`] found can be performed together, as the bulk mover's lanes.
pub(crate) struct Group {
    lanes: [bulk::Lane; bulk::LANES],
    len: usize,
}

impl Group {
    /// How many copies of the list the group covers (at least 1; only a group of 2 or more is worth
    /// [`Group::perform`] — a single copy is performed on its own).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Performs a group of 2 or more copies at once.
    pub(crate) fn perform(&self) {
        debug_assert!(self.len > 1, "a single copy is performed on its own");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: each lane's pointers come from `AddrMap::decode`d locations for its length; `Copy::group`
        // checked that the lanes are independent and stream, and (a group of 2 or more) that the CPU has AVX2.
        // HBM destinations need no Release word (no CPU polls HBM).
        unsafe {
            bulk::copy_lanes(&self.lanes[..self.len]);
        }
        #[cfg(not(target_arch = "x86_64"))]
        for l in &self.lanes[..self.len] {
            // SAFETY: as above; the lanes are independent, so one after another equals all at once.
            unsafe { bulk::copy(l.src, l.dst, l.len) };
        }
    }
}
