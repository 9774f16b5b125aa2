//! A first-fit allocator of address ranges: hands out aligned, non-overlapping sub-ranges of one address
//! range and takes them back, merging free neighbours.
//!
//! It knows nothing about what the addresses mean. The op layer's memory pool uses it as the driver's genpool
//! over a device's HBM; the device model uses it for its own host DRAM and HBM; a user address space uses it
//! to place mappings (including at a fixed address, [`RangeAllocator::alloc_at`]). None of them depends on
//! another for it.
//!
//! ```
//! use range_allocator::RangeAllocator;
//!
//! // A device's 1 GiB of HBM at 0x40_0000_0000, handed out in 256-byte aligned chunks.
//! let mut hbm = RangeAllocator::new(0x40_0000_0000, 1 << 30);
//! let a = hbm.alloc(1000, 256).unwrap();
//! let b = hbm.alloc(4096, 256).unwrap();
//! assert_eq!((a, b), (0x40_0000_0000, 0x40_0000_0400));
//! assert!(hbm.free(a, 1000));
//! assert_eq!(hbm.alloc(512, 256), Some(a), "first fit reuses the freed range");
//! ```
#![no_std]
#![warn(missing_docs)]

extern crate alloc;

use alloc::collections::BTreeMap;

/// Hands out aligned, non-overlapping sub-ranges of `[base, base + size)`; frees coalesce with their
/// neighbours and a double free is refused. Not synchronised: callers wrap it in their own lock.
///
/// ```
/// use range_allocator::RangeAllocator;
///
/// let mut a = RangeAllocator::new(0x1000, 0x1_0000);
/// assert!(a.alloc_at(0x1000, 0x100)); // reserve the first 256 bytes
/// let x = a.alloc(0x800, 0x1000).unwrap(); // first fit, 4 KiB aligned
/// assert_eq!(x, 0x2000);
/// assert!(a.free(x, 0x800));
/// assert!(!a.free(x, 0x800), "a double free is refused");
/// assert_eq!(a.free_bytes(), 0x1_0000 - 0x100);
/// ```
#[derive(Debug)]
pub struct RangeAllocator {
    /// Free ranges: start → length.
    free: BTreeMap<u64, u64>,
}

impl RangeAllocator {
    /// An allocator over `[base, base + size)`, all free. A range running past the end of the address space
    /// is cut short so that its end, `u64::MAX` at most, stays representable.
    ///
    /// ```
    /// let a = range_allocator::RangeAllocator::new(0x1000, 0x4000);
    /// assert_eq!((a.free_bytes(), a.free_ranges()), (0x4000, 1));
    /// let top = range_allocator::RangeAllocator::new(u64::MAX - 0xff, 0x1000);
    /// assert_eq!(top.free_bytes(), 0xff, "cut at u64::MAX");
    /// ```
    pub fn new(base: u64, size: u64) -> Self {
        let size = size.min(u64::MAX - base);
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(base, size);
        }
        RangeAllocator { free }
    }

    /// First fit: the lowest free range that holds `len` bytes at an `align`-aligned start. `None` when
    /// nothing fits, `len` is 0 or `align` is not a power of two.
    ///
    /// ```
    /// let mut a = range_allocator::RangeAllocator::new(0x1100, 0x8000);
    /// assert_eq!(a.alloc(0x100, 0x1000), Some(0x2000), "the first 4 KiB aligned start");
    /// assert_eq!(a.alloc(0x100, 0x100), Some(0x1100), "the gap left before it is still free");
    /// assert_eq!(a.alloc(0x10_0000, 1), None, "too large");
    /// assert_eq!(a.alloc(0x100, 3), None, "not a power of two");
    /// ```
    pub fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        if len == 0 || !align.is_power_of_two() {
            return None;
        }
        let (start, free_len, at) = self.free.iter().find_map(|(&start, &free_len)| {
            let at = start.checked_add(align - 1)? & !(align - 1);
            let end = at.checked_add(len)?;
            (end <= start + free_len).then_some((start, free_len, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        let end = at + len;
        if end < start + free_len {
            self.free.insert(end, start + free_len - end);
        }
        Some(at)
    }

    /// Reserves exactly `[at, at + len)`: succeeds (returns true) only when every byte of it is free. Refuses
    /// (returns false, nothing changed) a zero `len`, an end that overflows, or a range that is not wholly
    /// inside one free range — partly allocated already, or outside the allocator's space.
    ///
    /// ```
    /// let mut a = range_allocator::RangeAllocator::new(0, 0x1000);
    /// assert!(a.alloc_at(0x800, 0x100));
    /// assert!(!a.alloc_at(0x880, 0x100), "overlaps the range just reserved");
    /// assert!(!a.alloc_at(0xf80, 0x100), "runs past the end");
    /// assert_eq!(a.free_ranges(), 2);
    /// ```
    pub fn alloc_at(&mut self, at: u64, len: u64) -> bool {
        let Some(end) = at.checked_add(len).filter(|_| len > 0) else { return false };
        // The only free range that can hold `at` is the last one starting at or before it.
        let Some((start, free_len)) = self.free.range(..=at).next_back().map(|(&s, &l)| (s, l)) else {
            return false;
        };
        let free_end = start + free_len;
        if end > free_end {
            return false;
        }
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        if end < free_end {
            self.free.insert(end, free_end - end);
        }
        true
    }

    /// Returns `[at, at + len)` to the free set, merging with adjacent free ranges. Refuses (returns false)
    /// a range that overlaps free space — a double free — or whose end overflows.
    ///
    /// ```
    /// let mut a = range_allocator::RangeAllocator::new(0, 0x3000);
    /// let (x, y) = (a.alloc(0x1000, 0x1000).unwrap(), a.alloc(0x1000, 0x1000).unwrap());
    /// assert!(a.free(x, 0x1000) && a.free(y, 0x1000));
    /// assert_eq!(a.free_ranges(), 1, "neighbours merged back into one range");
    /// assert!(!a.free(x, 0x1000), "a double free is refused");
    /// ```
    pub fn free(&mut self, at: u64, len: u64) -> bool {
        let Some(end) = at.checked_add(len) else { return false };
        let prev = self.free.range(..=at).next_back().map(|(&s, &l)| (s, l));
        let next = self.free.range(at..).next().map(|(&s, &l)| (s, l));
        if prev.is_some_and(|(s, l)| s + l > at) || next.is_some_and(|(s, _)| s < end) {
            return false;
        }
        let (mut start, mut stop) = (at, end);
        if let Some((s, _)) = prev.filter(|&(s, l)| s + l == at) {
            self.free.remove(&s);
            start = s;
        }
        if let Some((s, l)) = next.filter(|&(s, _)| s == end) {
            self.free.remove(&s);
            stop = s + l;
        }
        self.free.insert(start, stop - start);
        true
    }

    /// Bytes currently free (examples on [`RangeAllocator::new`] and the type).
    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// Number of separate free ranges (example on [`RangeAllocator::free`]).
    pub fn free_ranges(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    #[test]
    fn first_fit_aligns_merges_back_and_refuses_double_frees() {
        let mut a = RangeAllocator::new(0x1000, 0x10000);
        let x = a.alloc(0x100, 0x100).unwrap();
        let y = a.alloc(0x100, 0x1000).unwrap();
        assert_eq!((x, y), (0x1000, 0x2000));
        assert!(a.free(x, 0x100));
        assert!(!a.free(x, 0x100), "double free must be refused");
        assert!(a.free(y, 0x100));
        assert_eq!(a.free_bytes(), 0x10000);
        assert_eq!(a.free_ranges(), 1);
        assert_eq!(a.alloc(0x10000, 0x100), Some(0x1000));
        assert_eq!(a.alloc(1, 0x100), None);
        assert_eq!(RangeAllocator::new(0, 100).alloc(0, 1), None);
        assert_eq!(RangeAllocator::new(0, 100).alloc(1, 3), None);
    }

    #[test]
    fn alloc_at_reserves_exactly_the_range_asked_for() {
        let mut a = RangeAllocator::new(0x1000, 0x10000);
        // In the middle of the one free range: splits it in two.
        assert!(a.alloc_at(0x4000, 0x1000));
        assert_eq!(a.free_bytes(), 0xF000);
        assert_eq!(a.free_ranges(), 2);
        // Overlapping it (start inside, end inside, covering it) or touching nothing free: refused, unchanged.
        for (at, len) in [(0x4000, 0x1000), (0x3800, 0x1000), (0x4800, 0x1000), (0x3000, 0x3000), (0x4fff, 2)] {
            assert!(!a.alloc_at(at, len), "{at:#x}+{len:#x} overlaps the reservation");
        }
        // Outside the space, empty, or overflowing: refused.
        for (at, len) in [(0, 0x10), (0xff0, 0x20), (0x10ff0, 0x20), (0x11000, 1), (0x2000, 0), (u64::MAX, 2)] {
            assert!(!a.alloc_at(at, len), "{at:#x}+{len:#x}");
        }
        assert_eq!((a.free_bytes(), a.free_ranges()), (0xF000, 2));
        // Exactly a free range's edges: the first byte, then the last byte of the space.
        assert!(a.alloc_at(0x1000, 0x10));
        assert!(a.alloc_at(0x10ff0, 0x10));
        assert_eq!((a.free_bytes(), a.free_ranges()), (0xEFE0, 2));
        // First fit skips what alloc_at took.
        assert_eq!(a.alloc(0x10, 0x10), Some(0x1010));
        // Freed, the reservations merge back into one range.
        assert!(a.free(0x4000, 0x1000));
        assert!(a.free(0x1000, 0x10));
        assert!(a.free(0x1010, 0x10));
        assert!(a.free(0x10ff0, 0x10));
        assert_eq!((a.free_bytes(), a.free_ranges()), (0x10000, 1));
    }

    proptest! {
        /// A reservation at a fixed address succeeds exactly when no live range overlaps it (and it lies in
        /// the space); live ranges — reserved or allocated — never overlap.
        #[test]
        fn alloc_at_agrees_with_the_live_set(ops in proptest::collection::vec((0u64..0x2_0000, 1u64..0x3000, any::<bool>()), 1..60)) {
            let (base, size) = (0x1000u64, 0x10_0000u64);
            let mut a = RangeAllocator::new(base, size);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (at, len, fixed) in ops {
                if fixed {
                    let fits = at >= base && at + len <= base + size;
                    let free = live.iter().all(|&(o, ol)| at + len <= o || o + ol <= at);
                    prop_assert_eq!(a.alloc_at(at, len), fits && free, "{:#x}+{:#x}", at, len);
                    if fits && free {
                        live.push((at, len));
                    }
                } else if let Some(got) = a.alloc(len, 64) {
                    for &(o, ol) in &live {
                        prop_assert!(got + len <= o || o + ol <= got, "{got:#x}+{len} overlaps {o:#x}+{ol}");
                    }
                    live.push((got, len));
                }
            }
            let used: u64 = live.iter().map(|&(_, l)| l).sum();
            prop_assert_eq!(a.free_bytes(), size - used);
            for (at, l) in live {
                prop_assert!(a.free(at, l));
            }
            prop_assert_eq!(a.free_ranges(), 1);
        }

        /// Live ranges never overlap, stay inside the space and are aligned; freeing everything merges the
        /// free set back into one range.
        #[test]
        fn ranges_never_overlap(ops in proptest::collection::vec((1u64..5000, 0u32..6, any::<bool>()), 1..80)) {
            let (base, size) = (0x1000u64, 0x10_0000u64);
            let mut a = RangeAllocator::new(base, size);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (len, align_log, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (at, l) = live.remove(len as usize % live.len());
                    prop_assert!(a.free(at, l));
                    continue;
                }
                let align = 64u64 << align_log;
                if let Some(at) = a.alloc(len, align) {
                    prop_assert_eq!(at % align, 0);
                    prop_assert!(at >= base && at + len <= base + size);
                    for &(o, ol) in &live {
                        prop_assert!(at + len <= o || o + ol <= at, "{at:#x}+{len} overlaps {o:#x}+{ol}");
                    }
                    live.push((at, len));
                }
            }
            for (at, l) in live {
                prop_assert!(a.free(at, l));
            }
            prop_assert_eq!(a.free_bytes(), size);
            prop_assert_eq!(a.free_ranges(), 1);
        }
    }
}
