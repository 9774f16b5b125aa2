//! A first-fit range allocator over a free list (`BTreeMap` of start → length), shared by the host DRAM
//! allocator and the per-device HBM allocator.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::lock::lock;

/// Hands out aligned, non-overlapping ranges of `[base, base + size)`.
#[derive(Debug)]
pub(crate) struct RangeAllocator {
    free: Mutex<BTreeMap<u64, u64>>,
}

const fn align_up(v: u64, align: u64) -> Option<u64> {
    match v.checked_add(align - 1) {
        Some(x) => Some(x & !(align - 1)),
        None => None,
    }
}

impl RangeAllocator {
    pub(crate) fn new(base: u64, size: u64) -> Self {
        let mut free = BTreeMap::new();
        free.insert(base, size);
        RangeAllocator { free: Mutex::new(free) }
    }

    /// First fit: the lowest free range that holds `len` bytes at an `align`-aligned start. `align` must be a
    /// power of two and `len` non-zero (the callers check).
    pub(crate) fn alloc(&self, len: u64, align: u64) -> Option<u64> {
        let mut free = lock(&self.free);
        let (start, blen, at) = free.iter().find_map(|(&start, &blen)| {
            let at = align_up(start, align)?;
            let end = at.checked_add(len)?;
            (end <= start + blen).then_some((start, blen, at))
        })?;
        free.remove(&start);
        if at > start {
            free.insert(start, at - start);
        }
        let end = at + len;
        if end < start + blen {
            free.insert(end, start + blen - end);
        }
        Some(at)
    }

    /// Returns `[at, at + len)` to the free list, merging with its neighbours. Refuses (returns false) a
    /// range that overlaps free space: a double free.
    pub(crate) fn free(&self, at: u64, len: u64) -> bool {
        let Some(end) = at.checked_add(len) else { return false };
        let mut free = lock(&self.free);
        let prev = free.range(..=at).next_back().map(|(&s, &l)| (s, l));
        let next = free.range(at..).next().map(|(&s, &l)| (s, l));
        if prev.is_some_and(|(s, l)| s + l > at) || next.is_some_and(|(s, _)| s < end) {
            return false;
        }
        let mut start = at;
        let mut stop = end;
        if let Some((s, l)) = prev.filter(|&(s, l)| s + l == at) {
            free.remove(&s);
            start = s;
            stop = end.max(s + l);
        }
        if let Some((s, l)) = next.filter(|&(s, _)| s == end) {
            free.remove(&s);
            stop = s + l;
        }
        free.insert(start, stop - start);
        true
    }

    /// Bytes currently free.
    pub(crate) fn free_bytes(&self) -> u64 {
        lock(&self.free).values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_aligns_and_merges_back() {
        let a = RangeAllocator::new(0x1000, 0x10000);
        let x = a.alloc(0x100, 0x100).unwrap();
        let y = a.alloc(0x100, 0x1000).unwrap();
        assert_eq!(x, 0x1000);
        assert_eq!(y, 0x2000);
        assert!(a.free(x, 0x100));
        assert!(!a.free(x, 0x100), "double free must be refused");
        assert!(a.free(y, 0x100));
        assert_eq!(a.free_bytes(), 0x10000);
        assert_eq!(a.alloc(0x10000, 0x100), Some(0x1000));
        assert_eq!(a.alloc(1, 0x100), None);
    }

    proptest::proptest! {
        /// Live ranges never overlap, stay inside the space and are aligned; freeing everything merges the
        /// free list back into one range.
        #[test]
        fn ranges_never_overlap(ops in proptest::collection::vec((1u64..5000, 0u32..6, proptest::bool::ANY), 1..80)) {
            let (base, size) = (0x1000u64, 0x10_0000u64);
            let a = RangeAllocator::new(base, size);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (len, align_log, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (at, l) = live.remove(len as usize % live.len());
                    proptest::prop_assert!(a.free(at, l));
                    continue;
                }
                let align = 64u64 << align_log;
                if let Some(at) = a.alloc(len, align) {
                    proptest::prop_assert_eq!(at % align, 0);
                    proptest::prop_assert!(at >= base && at + len <= base + size);
                    for &(o, ol) in &live {
                        proptest::prop_assert!(at + len <= o || o + ol <= at, "{at:#x}+{len} overlaps {o:#x}+{ol}");
                    }
                    live.push((at, len));
                }
            }
            for (at, l) in live {
                proptest::prop_assert!(a.free(at, l));
            }
            proptest::prop_assert_eq!(a.free_bytes(), size);
            proptest::prop_assert_eq!(lock(&a.free).len(), 1);
        }
    }
}
