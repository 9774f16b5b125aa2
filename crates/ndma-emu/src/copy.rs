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

    /// How many copies at the start of `list` (at least 1) can be performed together by
    /// [`Copy::perform_group`]: up to [`bulk::LANES`] that each stream (a page or more to an aligned
    /// destination), land in HBM, and are independent — no destination overlaps another copy's source or
    /// destination and none overlaps its own source, so performing them at once equals performing them
    /// in turn.
    pub(crate) fn group_len(map: &AddrMap, list: &[Copy]) -> usize {
        if !bulk::streams_available() {
            return 1;
        }
        let streams = |c: &Copy| c.dst.space == Space::Hbm && Self::lane(map, c).streams();
        let mut n = 0;
        while n < list.len().min(bulk::LANES) {
            let c = &list[n];
            // A copy over its own source needs memmove's order, which interleaved blocks do not keep.
            let independent = !c.src.overlaps(c.len, c.dst, c.len)
                && list[..n].iter().all(|p| {
                    !p.dst.overlaps(p.len, c.src, c.len)
                        && !p.dst.overlaps(p.len, c.dst, c.len)
                        && !c.dst.overlaps(c.len, p.src, p.len)
                });
            if !streams(c) || !independent {
                break;
            }
            n += 1;
        }
        n.max(1)
    }

    /// Performs a group [`Copy::group_len`] accepted.
    pub(crate) fn perform_group(map: &AddrMap, group: &[Copy]) {
        let mut lanes = [bulk::Lane { src: ptr::null(), dst: ptr::null_mut(), len: 0 }; bulk::LANES];
        for (l, c) in lanes.iter_mut().zip(group) {
            *l = Self::lane(map, c);
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: each lane's pointers come from `AddrMap::decode`d locations for its length; `group_len`
        // checked that the lanes are independent, stream, and that the CPU has AVX2. HBM destinations need
        // no Release word (no CPU polls HBM).
        unsafe {
            bulk::copy_lanes(&lanes[..group.len()]);
        }
        #[cfg(not(target_arch = "x86_64"))]
        group.iter().for_each(|c| c.perform(map, Batch::Large));
    }

    fn lane(map: &AddrMap, c: &Copy) -> bulk::Lane {
        bulk::Lane { src: map.ptr(c.src), dst: map.ptr(c.dst), len: c.len }
    }
}
