//! A first-fit allocator of address ranges: the device memory pool's genpool, and the emulator's host DRAM
//! and HBM allocators.

use std::collections::BTreeMap;

/// Hands out aligned, non-overlapping sub-ranges of `[base, base + size)`; frees coalesce with their
/// neighbours and a double free is refused. Not synchronised: callers wrap it in their own lock.
#[derive(Debug)]
pub struct RangeAllocator {
    /// Free ranges: start → length.
    free: BTreeMap<u64, u64>,
}

impl RangeAllocator {
    /// An allocator over `[base, base + size)`, all free.
    pub fn new(base: u64, size: u64) -> Self {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(base, size);
        }
        RangeAllocator { free }
    }

    /// First fit: the lowest free range that holds `len` bytes at an `align`-aligned start. `None` when
    /// nothing fits, `len` is 0 or `align` is not a power of two.
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

    /// Returns `[at, at + len)` to the free set, merging with adjacent free ranges. Refuses (returns false)
    /// a range that overlaps free space — a double free — or whose end overflows.
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

    /// Bytes currently free.
    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// Number of separate free ranges.
    pub fn free_ranges(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    proptest! {
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
