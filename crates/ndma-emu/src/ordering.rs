//! The fabric ordering model (DESIGN §3): writes to HBM and writes to host memory travel different routes.
//!
//! - [`OrderingMode::Strict`]: every write lands in order, when the descriptor executes.
//! - [`OrderingMode::Relaxed`] and [`OrderingMode::Adversarial`]: a copy whose destination is HBM is *posted*
//!   — recorded on the engine's posted list and performed later, in order — while host-destination writes
//!   (the completion marker) land immediately and can overtake them.
//!
//! Posted writes drain (all of them, in order):
//! - before a descriptor whose TX carries DMB or whose RX carries SOW (V3 on: V2 has no SOW, and the bit
//!   orders nothing there);
//! - before the descriptor that follows one whose TX meta carries WRITE_BARRIER (its own write included):
//!   the barrier orders its write and the earlier ones before the *later* descriptors, so misplaced on the
//!   marker it orders nothing before the marker;
//! - before an immediate write that would observe the difference: a host-destination write over the
//!   *source* of a posted write (write-after-read), or a read of a posted write's *destination*;
//! - on queue reset (`RST_Q`);
//! - Relaxed only: when the engine runs out of work;
//! - on [`crate::EmuDevice::flush_posted_writes`].
//!
//! Adversarial therefore makes a missing barrier deterministically visible: the marker lands, the data
//! does not, until something drains.

use crate::addr_map::{AddrMap, Loc, Space};
use crate::bulk::Fit;
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

    /// Whether the engine posts copy `c` (an HBM destination in a posting mode) instead of performing it at
    /// once.
    pub(crate) fn posts(self, c: &Copy) -> bool {
        self.posts_hbm_writes() && c.dst.space == Space::Hbm
    }
}

/// An engine's posted (not yet landed) writes, oldest first.
#[derive(Debug, Default)]
pub(crate) struct PostedWrites {
    list: Vec<Copy>,
    /// Where the posted writes read from and write to, for [`PostedWrites::conflicts`]: each built on
    /// demand, so posting stays a push and a side no query asks about is never indexed.
    sources: Extents,
    destinations: Extents,
    /// The spaces posted writes land in (a bit per [`Space`]): a read from another space cannot see them.
    dst_spaces: u8,
}

/// Below this many posted writes, a conflict check scans them; above, it consults the index. Recording a
/// page-sized write in the index costs a few looks at it in a scan, and a batch of page writes asks once per
/// piece marker: scanning first until scans had cost a few times the index (as this model once did) saved
/// 1 % of a 1 MiB scattered transfer's instructions and cost 5 % of a 16 MiB one's (callgrind).
const SCAN_MAX: usize = 16;

fn space_bit(s: Space) -> u8 {
    1 << s.index()
}

impl PostedWrites {
    /// Appends a write, merging it into the previous one when that is equivalent.
    pub(crate) fn post(&mut self, c: Copy) {
        self.dst_spaces |= space_bit(c.dst.space);
        if let Some(last) = self.list.last_mut() {
            if let Some(m) = last.merged(&c) {
                *last = m;
                return;
            }
        }
        self.list.push(c);
    }

    /// Performs every posted write, in order, at cache fit `fit` (beyond the caches: streamed, up to
    /// [`crate::bulk::LANES`] independent page-sized writes at a time). Returns how many writes it performed
    /// in such groups.
    pub(crate) fn drain(&mut self, map: &AddrMap, fit: Fit) -> usize {
        let mut i = 0;
        let mut grouped = 0;
        while i < self.list.len() {
            let group = (fit == Fit::BeyondCache).then(|| Copy::group(map, &self.list[i..]));
            match group {
                Some(g) if g.len() > 1 => {
                    g.perform();
                    i += g.len();
                    grouped += g.len();
                }
                _ => {
                    self.list[i].perform(map, fit);
                    i += 1;
                }
            }
        }
        self.list.clear();
        self.sources.clear();
        self.destinations.clear();
        self.dst_spaces = 0;
        grouped
    }

    /// True if performing `c` now could observe a posted write not having landed: its destination overlaps
    /// a posted source, or its source overlaps a posted destination.
    pub(crate) fn conflicts(&mut self, c: &Copy) -> bool {
        if self.list.is_empty() {
            return false;
        }
        let hit = |p: &Copy| c.dst.overlaps(c.len, p.src, p.len) || c.src.overlaps(c.len, p.dst, p.len);
        // A long write asks about more pages than there are posted writes to scan.
        let n = self.list.len();
        if n <= SCAN_MAX || c.len / PAGE > n {
            return self.list.iter().any(hit);
        }
        let over_sources = self.sources.overlaps(&self.list, |p| p.src, c.dst, c.len);
        let over_destinations = if self.dst_spaces & space_bit(c.src.space) != 0 {
            self.destinations.overlaps(&self.list, |p| p.dst, c.src, c.len)
        } else {
            Overlap::No
        };
        match (over_sources, over_destinations) {
            (Overlap::Yes, _) | (_, Overlap::Yes) => true,
            (Overlap::No, Overlap::No) => false,
            // A shared page is not yet a shared byte: the scan decides.
            _ => self.list.iter().any(hit),
        }
    }

    /// Writes waiting (after merging).
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Bytes of the pages [`Extents`] indexes short ranges by.
const PAGE: usize = 4096;

/// A range spanning more pages than this is kept whole in [`Extents::long`] instead of page by page.
const SHORT_MAX_PAGES: usize = 64;

/// What [`Extents::overlaps`] can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overlap {
    /// A long range shares a byte with the query.
    Yes,
    /// No range shares a page with the query.
    No,
    /// A short range shares a page with the query; whether it shares a byte is not known.
    Page,
}

/// One side (sources or destinations) of the posted writes, indexed so that an overlap query costs a few
/// bit tests instead of a look at every posted write (a scattered buffer posts thousands of page-sized
/// writes per batch, and each immediate write of the batch asks). Short ranges are recorded by the pages they
/// touch; the few long ones (merged contiguous runs) are kept whole and compared one by one.
#[derive(Debug, Default)]
struct Extents {
    /// Pages touched by short ranges.
    pages: PageBits,
    /// Long ranges.
    long: Vec<(Loc, usize)>,
    /// The last range inserted is `long`'s last entry (so a range that grew is updated in place).
    last_long: bool,
    /// Posted writes indexed so far (the last of them may have grown by merging since).
    indexed: usize,
}

/// A set of pages of each space: a bit per page, up to the highest page ever recorded (32 KiB of bits per
/// GiB of offsets, see `insert` for what of it is committed), with the words set since the last clear listed
/// so that clearing costs what was recorded. Written by hand rather than a hash set: recording a page is a
/// shift and an or, where hashing it cost ~95 instructions, and its inserts were a third of the engine
/// worker's bookkeeping samples on a 256 MiB scattered transfer (perf).
#[derive(Debug, Default)]
struct PageBits {
    /// Per space (by [`Space::index`]), bit `p % 64` of word `p / 64` for page `p`.
    words: [Vec<u64>; Space::COUNT],
    /// `(space, word)` of every word that went from zero to non-zero since the last clear.
    dirty: Vec<(u8, usize)>,
}

impl PageBits {
    fn is_empty(&self) -> bool {
        self.dirty.is_empty()
    }

    fn insert(&mut self, space: Space, page: usize) {
        let (k, w) = (space.index(), page / 64);
        let words = &mut self.words[k];
        if w >= words.len() {
            // A fresh zeroed allocation rather than `resize`, which writes every new word: a large one comes
            // as untouched zero pages, so a write at a high HBM offset costs memory only where bits are set.
            let mut grown = vec![0; (w + 1).next_power_of_two()];
            grown[..words.len()].copy_from_slice(words);
            *words = grown;
        }
        if words[w] == 0 {
            self.dirty.push((k as u8, w));
        }
        words[w] |= 1 << (page % 64);
    }

    fn contains(&self, space: Space, page: usize) -> bool {
        self.words[space.index()].get(page / 64).is_some_and(|w| w & (1 << (page % 64)) != 0)
    }

    fn clear(&mut self) {
        for (k, w) in self.dirty.drain(..) {
            self.words[usize::from(k)][w] = 0;
        }
    }
}

impl Extents {
    /// Whether a range of `list` (the side `side` picks) can share a byte with `[at, at + len)`, after
    /// indexing the writes posted since the last query.
    fn overlaps(&mut self, list: &[Copy], side: impl Fn(&Copy) -> Loc, at: Loc, len: usize) -> Overlap {
        // The last write indexed may have grown by merging since: it is indexed again, as grown.
        if let Some(regrown) = self.indexed.checked_sub(1).filter(|&i| i < list.len()) {
            self.insert(side(&list[regrown]), list[regrown].len, true);
        }
        for p in list.iter().skip(self.indexed) {
            self.insert(side(p), p.len, false);
        }
        self.indexed = list.len();
        if len == 0 {
            return Overlap::No;
        }
        if self.long.iter().any(|&(l, n)| at.overlaps(len, l, n)) {
            return Overlap::Yes;
        }
        if !self.pages.is_empty() && Self::pages(at.off, len).any(|p| self.pages.contains(at.space, p)) {
            return Overlap::Page;
        }
        Overlap::No
    }

    /// Records `[at, at + len)`; `again` says it is the last range inserted, grown since (it starts where
    /// it did).
    // Inlined: it runs once per posted write; out of line, the call cost 0.5 % of a scattered 1 MiB
    // transfer's instructions (callgrind).
    #[inline(always)]
    fn insert(&mut self, at: Loc, len: usize, again: bool) {
        if len == 0 {
            // Nothing to record, but this is now the last range: if it grows, it is not `long`'s last.
            self.last_long = false;
            return;
        }
        // Most posted writes are a page or less inside one page (a long range that grew never is).
        if at.off % PAGE + len <= PAGE {
            self.pages.insert(at.space, at.off / PAGE);
            self.last_long = false;
            return;
        }
        if again && self.last_long {
            if let Some(last) = self.long.last_mut() {
                last.1 = len;
                return;
            }
        }
        let pages = Self::pages(at.off, len);
        if pages.end() - pages.start() >= SHORT_MAX_PAGES {
            self.long.push((at, len));
            self.last_long = true;
        } else {
            pages.for_each(|p| self.pages.insert(at.space, p));
            self.last_long = false;
        }
    }

    /// Page numbers that `[off, off + len)` touches (`len > 0`).
    fn pages(off: usize, len: usize) -> std::ops::RangeInclusive<usize> {
        off / PAGE..=(off + len - 1) / PAGE
    }

    fn clear(&mut self) {
        self.pages.clear();
        self.long.clear();
        self.last_long = false;
        self.indexed = 0;
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
            let indexed = n > SCAN_MAX;
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
                assert_eq!(p.conflicts(c), scan(&p, c), "{n} writes (index {indexed}), probe {c:?}");
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

    /// An empty write posted after a long one and indexed, then grown by merging: the index records the
    /// grown write (and leaves the long one as it was), so a write over either source is a conflict.
    #[test]
    fn an_empty_write_that_grows_after_a_long_one_is_indexed() {
        let mut p = posted(SCAN_MAX, 0x10_0000, 0x20_0000);
        let long = Copy { src: at(Space::Host, 0x100_0000), dst: at(Space::Hbm, 0x80_0000), len: 300 * 4096 };
        let empty = Copy { src: at(Space::Host, 0x300_0000), dst: at(Space::Hbm, 0x40_0000), len: 0 };
        p.post(long);
        p.post(empty);
        assert!(p.list.len() > SCAN_MAX, "the checks below ask the index");
        let over = |off: usize| Copy { src: at(Space::Host, 0x100), dst: at(Space::Host, off), len: 4 };
        assert!(!p.conflicts(&over(0x300_0000)), "nothing is read at the empty write's source yet");
        p.post(Copy { src: at(Space::Host, 0x300_0000), dst: at(Space::Hbm, 0x40_0000), len: 4096 });
        assert_eq!(p.list.len(), SCAN_MAX + 2, "merged into the empty write");
        assert!(p.conflicts(&over(0x300_0000 + 8)), "a write over the grown write's source");
        assert!(p.conflicts(&over(0x100_0000 + 299 * 4096)), "a write over the long write's last page");
    }

    /// A drain forgets what it landed: after it, a write over an old source conflicts with nothing, while one
    /// over a source posted since does.
    #[test]
    fn a_drain_clears_the_index() {
        let map = AddrMap::for_test(4 << 20);
        let over = |off: usize| Copy { src: at(Space::Host, 0x100), dst: at(Space::Host, off), len: 4 };
        let mut p = posted(100, 0x10_0000, 0x20_0000);
        assert!(p.conflicts(&over(0x10_0000 + 8)), "over the first source");
        p.drain(&map, Fit::InCache);
        assert!(!p.conflicts(&over(0x10_0000 + 8)), "nothing is posted");
        for i in 0..100 {
            p.post(Copy { src: at(Space::Host, 0x30_0000 + 2 * i * 4096), dst: at(Space::Hbm, i * 4096), len: 4096 });
        }
        assert!(!p.conflicts(&over(0x10_0000 + 8)), "the old source is no longer indexed");
        assert!(!p.conflicts(&over(0x10_0000 + 2 * 99 * 4096)), "nor the old last one");
        assert!(p.conflicts(&over(0x30_0000 + 2 * 99 * 4096 + 4092)), "the new last source is");
        // Every write posted since is indexed, not only the last: an index that kept its old count would
        // skip the first hundred and miss this one.
        assert!(p.conflicts(&over(0x30_0000 + 2 * 50 * 4096)), "a new middle source is");
        assert!(p.conflicts(&over(0x30_0000)), "and the new first one");
    }

    /// A drain beyond the caches performs independent page writes (host pages to consecutive HBM) in groups
    /// of up to [`crate::bulk::LANES`] and says how many it grouped; one inside the caches groups none. Both
    /// land the same bytes.
    #[test]
    fn a_drain_groups_page_writes_only_beyond_the_caches() {
        const N: usize = 20;
        let map = AddrMap::for_test(4 << 20);
        let (src0, dst0) = (0x10_0000, 0x20_0000);
        for (fit, want) in [(Fit::InCache, 0), (Fit::BeyondCache, if crate::bulk::streams_available() { N } else { 0 })]
        {
            // SAFETY: both spaces are 4 MiB long and only this thread touches them.
            let (host, hbm) = unsafe {
                (
                    std::slice::from_raw_parts_mut(map.ptr(at(Space::Host, 0)), 4 << 20),
                    std::slice::from_raw_parts_mut(map.ptr(at(Space::Hbm, 0)), 4 << 20),
                )
            };
            for (i, b) in host.iter_mut().enumerate() {
                *b = (i * 7 + i / 4096) as u8;
            }
            hbm.fill(0xee);
            let mut p = posted(N, src0, dst0);
            assert_eq!(p.len(), N, "no two of them merge");
            assert_eq!(p.drain(&map, fit), want, "{fit:?}");
            assert!(p.is_empty());
            for i in 0..N {
                let (s, d) = (src0 + 2 * i * 4096, dst0 + i * 4096);
                assert!(hbm[d..d + 4096] == host[s..s + 4096], "{fit:?}: page {i}");
            }
            assert!(hbm[..dst0].iter().chain(&hbm[dst0 + N * 4096..]).all(|&b| b == 0xee), "{fit:?}: outside");
        }
    }

    /// The page index holds exactly the pages recorded since its last clear, in each space apart, including
    /// pages far past any recorded before (the bits grow) and pages sharing a word.
    #[test]
    fn the_page_index_holds_what_was_recorded_since_the_last_clear() {
        let mut b = PageBits::default();
        let recorded = [(Space::Host, 3), (Space::Host, 63), (Space::Host, 64), (Space::Hbm, 3), (Space::Hbm, 1 << 20)];
        for &(s, p) in &recorded {
            b.insert(s, p);
        }
        let probes = [0, 2, 3, 4, 62, 63, 64, 65, 127, 1 << 20, (1 << 20) + 1, 1 << 30];
        for s in [Space::Host, Space::Hbm] {
            for p in probes {
                assert_eq!(b.contains(s, p), recorded.contains(&(s, p)), "{s:?} page {p}");
            }
        }
        b.clear();
        assert!(b.is_empty());
        assert!(probes.iter().all(|&p| !b.contains(Space::Host, p) && !b.contains(Space::Hbm, p)), "all cleared");
        b.insert(Space::Hbm, 64);
        assert!(b.contains(Space::Hbm, 64) && !b.contains(Space::Host, 64) && !b.contains(Space::Hbm, 3));
    }

    /// Random writes — sub-page, page-sized and long, host and HBM, some merging into the last — with random
    /// probes among them: the indexed check always answers as the scan does, including for probes that share
    /// a page with a posted write but no byte.
    #[test]
    fn random_writes_and_probes_match_the_scan() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n) as usize
        };
        let scan = |p: &PostedWrites, c: &Copy| {
            p.list.iter().any(|w| c.dst.overlaps(c.len, w.src, w.len) || c.src.overlaps(c.len, w.dst, w.len))
        };
        let space = |r: usize| if r == 0 { Space::Host } else { Space::Hbm };
        for round in 0..40 {
            let mut p = PostedWrites::default();
            let (mut yes, mut no) = (0, 0);
            for _ in 0..400 {
                let len = match rnd(4) {
                    0 => rnd(200),
                    1 => 4096,
                    2 => 4096 * (1 + rnd(100)) + rnd(3),
                    _ => 1 + rnd(9000),
                };
                let w = match (p.list.last().copied(), rnd(3)) {
                    // Continues the last write on both sides: merges into it.
                    (Some(l), 0) => {
                        Copy { src: at(l.src.space, l.src.off + l.len), dst: at(Space::Hbm, l.dst.off + l.len), len }
                    }
                    _ => {
                        // Posted writes land in HBM; a few in host memory check the space filter too.
                        let dst = at(space((rnd(8) != 0) as usize), (8 << 20) + rnd(4 << 20));
                        Copy { src: at(space(rnd(2)), rnd(4 << 20)), dst, len }
                    }
                };
                p.post(w);
                let probe = Copy {
                    src: at(space(rnd(2)), rnd(12 << 20)),
                    dst: at(space(rnd(2)), rnd(12 << 20)),
                    len: if rnd(2) == 0 { 4 } else { 1 + rnd(3 << 20) },
                };
                let want = scan(&p, &probe);
                assert_eq!(p.conflicts(&probe), want, "round {round}, {} writes, probe {probe:?}", p.list.len());
                if want {
                    yes += 1
                } else {
                    no += 1
                }
            }
            assert!(yes > 0 && no > 0, "round {round}: probes must both hit and miss ({yes}/{no})");
        }
    }

    /// A drain beyond the caches (which streams, and performs independent page-sized writes in groups) lands
    /// exactly what performing the writes one by one would: writes here read what earlier ones wrote, write
    /// over earlier destinations and over earlier sources, among independent ones, aligned and not.
    #[test]
    fn a_grouped_drain_equals_writes_in_turn() {
        const SIZE: usize = 4 << 20;
        let map = AddrMap::for_test(SIZE);
        let whole = |s: Space| {
            // SAFETY: both spaces are SIZE bytes long and only this thread touches them.
            unsafe { std::slice::from_raw_parts_mut(map.ptr(at(s, 0)), SIZE) }
        };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for round in 0..4 {
            let mut want = [vec![0u8; SIZE], vec![0u8; SIZE]];
            for (k, w) in want.iter_mut().enumerate() {
                for (i, b) in w.iter_mut().enumerate() {
                    *b = (i * 31 + i / 4099 + k * 7 + round) as u8;
                }
            }
            whole(Space::Host).copy_from_slice(&want[0]);
            whole(Space::Hbm).copy_from_slice(&want[1]);
            let mut p = PostedWrites::default();
            let mut bytes = 0;
            while bytes < 3 << 20 {
                let len = [4096, 4096, 8192 + 64, 4096 * 3 + 7][rnd(4)];
                // Page-aligned destinations (they stream) in a 1 MiB window, so writes overlap often.
                let dst = at(Space::Hbm, rnd(256) * 4096 + [0, 0, 0, 32, 5][rnd(5)]);
                let src = match (rnd(4), p.list.last()) {
                    // Reads what the write before it writes (part of it still to come, block by block).
                    (0, Some(l)) => at(Space::Hbm, l.dst.off + 1 + rnd(2048)),
                    (1, _) => at(Space::Hbm, rnd(1 << 20)),
                    _ => at(Space::Host, rnd(SIZE - len)),
                };
                let c = Copy { src, dst, len };
                let (s, d) = (c.src.space == Space::Hbm, c.dst.space == Space::Hbm);
                let from = want[s as usize][src.off..src.off + len].to_vec();
                want[d as usize][dst.off..dst.off + len].copy_from_slice(&from);
                p.post(c);
                bytes += len;
            }
            p.drain(&map, Fit::BeyondCache);
            assert!(p.is_empty());
            assert!(whole(Space::Hbm) == want[1].as_slice(), "round {round}: HBM differs from writes in turn");
            assert!(whole(Space::Host) == want[0].as_slice(), "round {round}: host memory was written");
        }
    }
}
