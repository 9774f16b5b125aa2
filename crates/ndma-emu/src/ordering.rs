//! The fabric ordering model (DESIGN §3): writes to HBM and writes to host memory travel different routes.
//!
//! - [`OrderingMode::Strict`]: every write lands in order, when the descriptor executes.
//! - [`OrderingMode::Relaxed`] and [`OrderingMode::Adversarial`]: a copy whose destination is HBM is *posted*
//!   — recorded on the engine's posted list and performed later, in order — while host-destination writes
//!   (the completion marker) land immediately and can overtake them.
//!
//! Posted writes drain (all of them, in order):
//! - before a descriptor whose TX carries DMB or whose RX carries SOW;
//! - right after a descriptor whose TX meta carries WRITE_BARRIER is enqueued (its own write included);
//! - before an immediate write that would observe the difference: a host-destination write over the
//!   *source* of a posted write (write-after-read), or a read of a posted write's *destination*;
//! - on queue reset (`RST_Q`);
//! - Relaxed only: when the engine runs out of work;
//! - on [`crate::EmuDevice::flush_posted_writes`].
//!
//! Adversarial therefore makes a missing barrier deterministically visible: the marker lands, the data
//! does not, until something drains.

use std::collections::BTreeMap;

use crate::addr_map::{AddrMap, Loc, Space};
use crate::bulk::Batch;
use crate::copy::Copy;

/// How the fabric orders an engine's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderingMode {
    /// Every write lands in order.
    Strict,
    /// HBM writes are posted; they drain on barriers, hazards, resets and when the engine goes idle.
    #[default]
    Relaxed,
    /// HBM writes are posted and drain only on barriers, hazards, resets and explicit flushes.
    Adversarial,
}

impl OrderingMode {
    /// HBM-destination writes are posted in this mode.
    pub fn posts_hbm_writes(self) -> bool {
        self != OrderingMode::Strict
    }
}

/// An engine's posted (not yet landed) writes, oldest first.
#[derive(Debug, Default)]
pub(crate) struct PostedWrites {
    list: Vec<Copy>,
    /// Where the posted writes read from and write to, for [`PostedWrites::conflicts`]: built on demand
    /// from `list[..indexed]`, so posting stays a push.
    sources: Extents,
    destinations: Extents,
    indexed: usize,
}

/// Below this many posted writes, a conflict check scans them; above, it consults the index.
const SCAN_MAX: usize = 16;

impl PostedWrites {
    /// Appends a write, merging it into the previous one when that is equivalent.
    pub(crate) fn post(&mut self, c: Copy) {
        if let Some(last) = self.list.last_mut() {
            if let Some(m) = last.merged(&c) {
                *last = m;
                return;
            }
        }
        self.list.push(c);
    }

    /// Performs every posted write, in order (streaming them when together they are a large batch).
    pub(crate) fn drain(&mut self, map: &AddrMap) {
        let batch = Batch::of(self.list.iter().map(|c| c.len).sum());
        for c in self.list.drain(..) {
            c.perform(map, batch);
        }
        self.sources.clear();
        self.destinations.clear();
        self.indexed = 0;
    }

    /// True if performing `c` now could observe a posted write not having landed: its destination overlaps
    /// a posted source, or its source overlaps a posted destination.
    pub(crate) fn conflicts(&mut self, c: &Copy) -> bool {
        let hit = |p: &Copy| c.dst.overlaps(c.len, p.src, p.len) || c.src.overlaps(c.len, p.dst, p.len);
        if self.list.len() <= SCAN_MAX {
            return self.list.iter().any(hit);
        }
        // The last indexed write may have grown by merging since: index it again (an index entry keeps the
        // furthest end of its start).
        for p in &self.list[self.indexed.saturating_sub(1)..] {
            self.sources.insert(p.src, p.len);
            self.destinations.insert(p.dst, p.len);
        }
        self.indexed = self.list.len();
        self.sources.overlaps(c.dst, c.len) || self.destinations.overlaps(c.src, c.len)
    }

    /// Writes waiting (after merging).
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Byte ranges indexed by where they start, so that an overlap query looks only at the ranges that can reach
/// it instead of at every posted write (a scattered buffer posts thousands of page-sized writes per batch, and
/// each immediate write of the batch asks).
#[derive(Debug, Default)]
struct Extents {
    /// Start → the furthest end of a range starting there.
    ends: BTreeMap<(Space, usize), usize>,
    /// The longest range inserted: a range that overlaps `[off, off + len)` starts after `off - longest`.
    longest: usize,
}

impl Extents {
    fn insert(&mut self, at: Loc, len: usize) {
        if len == 0 {
            return;
        }
        let end = self.ends.entry((at.space, at.off)).or_insert(0);
        *end = (*end).max(at.off + len);
        self.longest = self.longest.max(len);
    }

    /// Some range shares a byte with `[at, at + len)`.
    fn overlaps(&self, at: Loc, len: usize) -> bool {
        if len == 0 || self.ends.is_empty() {
            return false;
        }
        let from = (at.space, at.off.saturating_sub(self.longest));
        self.ends.range(from..(at.space, at.off + len)).any(|(_, &end)| end > at.off)
    }

    fn clear(&mut self) {
        self.ends.clear();
        self.longest = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(space: Space, off: usize) -> Loc {
        Loc { space, off }
    }

    /// `n` scattered page writes host → HBM: sources every other page from `src0`, destinations consecutive
    /// from `dst0` (so they merge into one destination range only when the sources are consecutive too).
    fn posted(n: usize, src0: usize, dst0: usize) -> PostedWrites {
        let mut p = PostedWrites::default();
        for i in 0..n {
            p.post(Copy { src: at(Space::Host, src0 + 2 * i * 4096), dst: at(Space::Hbm, dst0 + i * 4096), len: 4096 });
        }
        p
    }

    /// The conflict check answers as a scan of every posted write would, below and above the scan limit, at
    /// the edges of each range, and after the last write grew by merging.
    #[test]
    fn conflicts_match_a_scan_of_every_posted_write() {
        for n in [1, SCAN_MAX, SCAN_MAX + 1, 300] {
            let mut p = posted(n, 0x10_0000, 0x20_0000);
            let scan = |p: &PostedWrites, c: &Copy| {
                p.list.iter().any(|w| c.dst.overlaps(c.len, w.src, w.len) || c.src.overlaps(c.len, w.dst, w.len))
            };
            let mut probes = Vec::new();
            for off in [0x10_0000 - 4, 0x10_0000 - 1, 0x10_0000, 0x10_0000 + 4095, 0x10_0000 + 4096, 0x10_1ffc] {
                // A host write over (or beside) the first source page, and one over a gap between sources.
                probes.push(Copy { src: at(Space::Host, 0x100), dst: at(Space::Host, off), len: 4 });
                probes.push(Copy {
                    src: at(Space::Host, 0x100),
                    dst: at(Space::Host, off + 2 * 4096 * (n - 1)),
                    len: 4,
                });
            }
            for off in [0x20_0000 - 4, 0x20_0000, 0x20_0000 + n * 4096 - 1, 0x20_0000 + n * 4096] {
                // A read of (or beside) the posted HBM destinations.
                probes.push(Copy { src: at(Space::Hbm, off), dst: at(Space::Host, 0x100), len: 4 });
            }
            for c in &probes {
                assert_eq!(p.conflicts(c), scan(&p, c), "{n} writes, probe {c:?}");
            }
            // The last write grows by merging after the index was built: the index sees the new bytes.
            let last = *p.list.last().unwrap();
            let next = Copy {
                src: at(Space::Host, last.src.off + last.len),
                dst: at(Space::Hbm, last.dst.off + last.len),
                len: 4096,
            };
            p.post(next);
            assert_eq!(p.list.len(), n, "merged into the last write");
            let probe = Copy { src: at(Space::Host, 0x100), dst: at(Space::Host, next.src.off + 8), len: 4 };
            assert!(p.conflicts(&probe), "{n} writes: a write over the merged source");
            assert!(scan(&p, &probe));
        }
    }
}
