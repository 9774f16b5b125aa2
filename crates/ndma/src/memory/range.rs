//! A first-fit allocator of address ranges (the driver uses a genpool for device memory).

use std::collections::BTreeMap;

/// Hands out aligned sub-ranges of `[base, base + size)`; frees coalesce with their neighbours.
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

    /// Allocates `len` bytes aligned to `align` (a power of two); `None` when no free range fits.
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
        let tail = start + free_len - (at + len);
        if tail > 0 {
            self.free.insert(at + len, tail);
        }
        Some(at)
    }

    /// Returns `[start, start + len)` to the free set, merging with adjacent free ranges.
    pub fn free(&mut self, start: u64, len: u64) {
        let (mut start, mut len) = (start, len);
        if let Some((&prev, &prev_len)) = self.free.range(..start).next_back() {
            if prev + prev_len == start {
                self.free.remove(&prev);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(next_len) = self.free.remove(&(start + len)) {
            len += next_len;
        }
        self.free.insert(start, len);
    }

    /// Bytes currently free.
    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn aligned_first_fit_and_coalescing() {
        let mut a = RangeAllocator::new(0x1000, 0x10000);
        let x = a.alloc(0x100, 0x1000).unwrap();
        assert_eq!(x, 0x1000);
        let y = a.alloc(0x100, 0x1000).unwrap();
        assert_eq!(y, 0x2000);
        assert_eq!(a.free_bytes(), 0x10000 - 0x200);
        a.free(x, 0x100);
        a.free(y, 0x100);
        assert_eq!(a.free_bytes(), 0x10000);
        assert_eq!(a.free.len(), 1, "frees coalesce back to one range");
        assert_eq!(a.alloc(0x10001, 1), None);
        assert_eq!(a.alloc(0, 1), None);
    }

    proptest! {
        #[test]
        fn allocations_never_overlap(lens in proptest::collection::vec(1u64..5000, 1..40)) {
            let mut a = RangeAllocator::new(0, 1 << 20);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (i, len) in lens.iter().enumerate() {
                if i % 3 == 2 && !live.is_empty() {
                    let (s, l) = live.remove(0);
                    a.free(s, l);
                }
                if let Some(s) = a.alloc(*len, 256) {
                    prop_assert_eq!(s % 256, 0);
                    for &(t, m) in &live {
                        prop_assert!(s + len <= t || t + m <= s);
                    }
                    live.push((s, *len));
                }
            }
            for (s, l) in live { a.free(s, l); }
            prop_assert_eq!(a.free_bytes(), 1 << 20);
        }
    }
}
