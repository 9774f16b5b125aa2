//! How an engine writes a destination: one memmove, with the last aligned word of a host destination stored
//! with `Release` so a CPU that acquire-loads it (the completion marker) sees every earlier engine write.

use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::addr_map::{AddrMap, Loc, Space};
use crate::bulk::{self, Fit};

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

    /// Performs the copy now, with the engine's writes at cache fit `fit` (see [`crate::bulk::copy_in`]).
    pub(crate) fn perform(&self, map: &AddrMap, fit: Fit) {
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
                crate::bulk::copy_in(src, dst, len - 4, fit);
                // Release orders every earlier engine write (this copy's body, earlier descriptors, drained
                // posted writes) before the final word: a CPU that acquire-loads it — the marker poll — sees
                // all of them.
                AtomicU32::from_ptr(dst.add(len - 4) as *mut u32).store(last, Ordering::Release);
            }
        } else {
            // SAFETY: as above; both ranges are inside their mappings and `bulk::copy` tolerates overlap.
            unsafe { crate::bulk::copy_in(src, dst, len, fit) };
        }
    }

    /// The copies at the start of `list` (at least the first) that [`Group::perform`] can perform together:
    /// up to [`bulk::LANES`] that each stream (a page or more to an aligned destination), land in one space,
    /// and are independent — no destination overlaps another copy's source or destination and none overlaps
    /// its own source, so performing them at once equals performing them in turn.
    pub(crate) fn group(map: &AddrMap, list: &[Copy]) -> Group {
        let none = bulk::Lane { src: ptr::null(), dst: ptr::null_mut(), len: 0 };
        let mut g = Group { lanes: [none; bulk::LANES], publish: [false; bulk::LANES], len: 0 };
        if !bulk::streams_available() {
            g.len = 1;
            return g;
        }
        let space = list.first().map_or(Space::Host, |c| c.dst.space);
        // While every lane so far reads another space than the group writes and writes past the end of the
        // lanes before it (a scattered h2d stream: host pages to consecutive HBM), a copy that does the same
        // is independent of them all without a pairwise look.
        let (mut ordered, mut dst_end) = (true, 0);
        while g.len < list.len().min(bulk::LANES) {
            let c = &list[g.len];
            let independent = if ordered && c.src.space != space && c.dst.off >= dst_end {
                true
            } else {
                ordered = false;
                // A copy over its own source needs memmove's order, which interleaved blocks do not keep.
                !c.src.overlaps(c.len, c.dst, c.len)
                    && list[..g.len].iter().all(|p| {
                        !p.dst.overlaps(p.len, c.src, c.len)
                            && !p.dst.overlaps(p.len, c.dst, c.len)
                            && !c.dst.overlaps(c.len, p.src, p.len)
                    })
            };
            dst_end = c.dst.off + c.len;
            let (src, dst) = (map.ptr(c.src), map.ptr(c.dst));
            if c.dst.space != space || !bulk::streams(c.len, dst) || !independent {
                break;
            }
            // A host destination's last word is published on its own, as `perform` does (`len` is a page or
            // more here).
            let published = c.dst.space == Space::Host && (dst as usize + c.len) % 4 == 0;
            let body = if published { c.len - 4 } else { c.len };
            g.lanes[g.len] = bulk::Lane { src, dst, len: body };
            g.publish[g.len] = published;
            g.len += 1;
        }
        g.len = g.len.max(1);
        g
    }
}

/// Copies [`Copy::group`] found can be performed together, as the bulk mover's lanes.
pub(crate) struct Group {
    lanes: [bulk::Lane; bulk::LANES],
    /// Per lane: its copy's last word is the 4 bytes after the lane (a host destination), published after
    /// every lane's body, in lane order.
    publish: [bool; bulk::LANES],
    len: usize,
}

impl Group {
    /// How many copies of the list the group covers (at least 1; only a group of 2 or more is worth
    /// [`Group::perform`] — a single copy is performed on its own).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Performs a group of 2 or more copies at once: every body, then the host destinations' last words
    /// with `Release`, in lane order — a CPU that acquire-loads one sees its copy, and every copy of the group,
    /// complete.
    pub(crate) fn perform(&self) {
        debug_assert!(self.len > 1, "a single copy is performed on its own");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: each lane's pointers come from `AddrMap::decode`d locations for its length; `Copy::group`
        // checked that the lanes are independent and their destinations aligned, and (a group of 2 or more)
        // that the CPU has AVX2.
        unsafe {
            bulk::copy_lanes(&self.lanes[..self.len]);
        }
        #[cfg(not(target_arch = "x86_64"))]
        for l in &self.lanes[..self.len] {
            // SAFETY: as above; the lanes are independent, so one after another equals all at once.
            unsafe { bulk::copy(l.src, l.dst, l.len) };
        }
        for (l, _) in self.lanes[..self.len].iter().zip(self.publish).filter(|(_, p)| *p) {
            // SAFETY: the 4 bytes after a publishing lane are the last bytes of its copy's decoded ranges
            // (`group` shortened the lane by them); the destination word is 4-byte aligned (checked by `group`).
            // No lane writes the source word (the lanes are independent). Release orders every body of the
            // group (`copy_lanes` fenced its streaming stores) before the word.
            unsafe {
                let last = ptr::read_unaligned(l.src.add(l.len) as *const u32);
                AtomicU32::from_ptr(l.dst.add(l.len) as *mut u32).store(last, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of each space of the tests' maps.
    const SIZE: usize = 1 << 20;

    /// A group of host-destination copies (a scattered d2h buffer's pages) lands byte-exact — bodies, the
    /// published last words, a lane whose end is not word-aligned — with every byte around the destinations
    /// untouched; a copy to another space, or over a byte another lane reads, ends the group.
    #[test]
    fn a_group_of_host_destinations_lands_byte_exact() {
        if !bulk::streams_available() {
            return;
        }
        let map = AddrMap::for_test(SIZE);
        let whole = |s: Space| {
            // SAFETY: both spaces are SIZE bytes long and only this thread touches them.
            unsafe { std::slice::from_raw_parts_mut(map.ptr(Loc { space: s, off: 0 }), SIZE) }
        };
        whole(Space::Host).fill(0xEE);
        for (i, b) in whole(Space::Hbm).iter_mut().enumerate() {
            *b = (i * 31 + i / 4099) as u8;
        }
        // Destination pages out of order, as a scattered buffer's frames are; lengths from a page up.
        let lens = [4096usize, 8192, 4096 + 4, 4096, 3 * 4096 + 12, 4097, 4096, 2 * 4096];
        let pages = [37usize, 3, 90, 12, 60, 25, 71, 44];
        let copies: Vec<Copy> = (0..bulk::LANES)
            .map(|k| Copy {
                src: Loc { space: Space::Hbm, off: k * 4 * 4096 + 32 },
                dst: Loc { space: Space::Host, off: pages[k] * 4096 },
                len: lens[k],
            })
            .collect();
        let g = Copy::group(&map, &copies);
        assert_eq!(g.len(), bulk::LANES);
        assert_eq!(g.publish.iter().filter(|&&p| p).count(), bulk::LANES - 1, "4097 ends off a word");
        g.perform();
        let (dst, src) = (whole(Space::Host).to_vec(), whole(Space::Hbm).to_vec());
        let mut want = vec![0xEEu8; SIZE];
        for c in &copies {
            want[c.dst.off..c.dst.off + c.len].copy_from_slice(&src[c.src.off..c.src.off + c.len]);
        }
        assert!(dst == want, "every destination byte-exact, every other byte untouched");

        let mut mixed = copies.clone();
        mixed[2].dst = Loc { space: Space::Hbm, off: 200 * 4096 };
        assert_eq!(Copy::group(&map, &mixed).len(), 2, "another space ends the group");
        let mut dependent = copies;
        dependent[3].src = Loc { space: Space::Host, off: pages[1] * 4096 + 8 };
        assert_eq!(Copy::group(&map, &dependent).len(), 3, "reading a lane's destination ends the group");
    }

    /// A scattered h2d stream's group (host pages to consecutive HBM, no pairwise look needed) is full; a
    /// copy that breaks that shape is still checked against every lane before it: writing over an earlier
    /// lane's destination, or reading one, ends the group there, while an independent one out of order
    /// joins.
    #[test]
    fn a_group_of_consecutive_hbm_destinations_checks_what_breaks_the_order() {
        if !bulk::streams_available() {
            return;
        }
        let map = AddrMap::for_test(SIZE);
        let pages = [37usize, 3, 90, 12, 60, 25, 71, 44];
        let page = |space, n: usize| Loc { space, off: n * 4096 };
        let stream: Vec<Copy> = (0..bulk::LANES)
            .map(|k| Copy { src: page(Space::Host, pages[k]), dst: page(Space::Hbm, 100 + k), len: 4096 })
            .collect();
        assert_eq!(Copy::group(&map, &stream).len(), bulk::LANES, "independent: a full group");

        let mut over = stream.clone();
        over[5].dst = page(Space::Hbm, 102);
        assert_eq!(Copy::group(&map, &over).len(), 5, "lane 5 writes over lane 2's destination");
        let mut reads = stream.clone();
        reads[4].src = page(Space::Hbm, 101);
        assert_eq!(Copy::group(&map, &reads).len(), 4, "lane 4 reads lane 1's destination");
        let mut back = stream.clone();
        back[3].dst = page(Space::Hbm, 50);
        assert_eq!(Copy::group(&map, &back).len(), bulk::LANES, "out of order but independent");
        back[6].dst = page(Space::Hbm, 50);
        assert_eq!(Copy::group(&map, &back).len(), 6, "after the order broke, lane 6 over lane 3 is caught");
        back[6].dst = page(Space::Hbm, 105);
        assert_eq!(Copy::group(&map, &back).len(), 6, "and so is lane 6 over lane 5, after it");
        back[4].dst = page(Space::Hbm, 101);
        assert_eq!(Copy::group(&map, &back).len(), 4, "lane 4, past lane 3 but over lane 1, is caught");
    }
}
