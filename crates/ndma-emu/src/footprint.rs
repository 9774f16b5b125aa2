//! How much distinct memory an engine's recent writes cover — what decides whether its page-sized copies
//! bypass the CPU caches ([`Fit::BeyondCache`]) or go through them ([`Fit::InCache`]).
//!
//! Streaming (non-temporal) stores win only when the destinations will have left the caches before they are
//! written again; below that they lose badly. Measured on this machine, 4 KiB page copies streamed against
//! cached, by the distinct bytes a repeated stream covers: 1 MiB 26 / 39 GB/s, 4 MiB 23 / 31, 8 MiB 23 / 24,
//! 16 MiB 20 / 12, 64 MiB and more 15 / 10. The bytes of one batch do not tell the two apart: eight async
//! requests over one 1 MiB buffer are an 8 MiB batch covering 1 MiB (streaming cut that d2h stream from
//! ~35 to ~20 GB/s), while a 256 MiB scattered buffer arrives as batches of 2031 pages, each under 8 MiB.
//!
//! So the engine keeps a small sketch of the destinations it wrote lately: of each 64 KiB granule of a space,
//! it notes whether a write crossed the granule's start (a 1-in-16 sample of page-sized writes, every granule
//! of a long one) in a hashed bit set, over windows of [`WINDOW`] bytes moved. A stream whose sampled
//! destinations cover at least [`STREAM_MIN`] bytes in the current or the last window is beyond the caches.

use crate::addr_map::{Loc, Space};
use crate::bulk::Fit;

/// The sampling granule: a write is noted when it crosses the start of one.
const GRANULE: usize = 64 << 10;

/// Distinct destination bytes at and above which page-sized copies stream (the crossover measured above).
pub(crate) const STREAM_MIN: usize = 8 << 20;

/// Bytes moved per window: four times [`STREAM_MIN`], so a large stream shows as large within one window
/// and a small one repeated many times never does.
pub(crate) const WINDOW: usize = 4 * STREAM_MIN;

/// Bits in the sketch: far more than the [`STREAM_MIN`] / [`GRANULE`] = 128 granules that decide, so
/// collisions barely lower the count below it.
const BITS: usize = 4096;

/// The granules counted that make a stream large.
const LARGE_GRANULES: u32 = (STREAM_MIN / GRANULE) as u32;

/// An engine's sketch of its recent destinations.
#[derive(Debug)]
pub(crate) struct Footprint {
    seen: [u64; BITS / 64],
    /// Distinct granules noted in this window (stops counting at [`LARGE_GRANULES`]).
    granules: u32,
    /// The count the last window ended with.
    last: u32,
    /// Bytes moved in this window.
    moved: usize,
}

impl Default for Footprint {
    fn default() -> Self {
        Footprint { seen: [0; BITS / 64], granules: 0, last: 0, moved: 0 }
    }
}

impl Footprint {
    /// Notes a write of `len` bytes at `dst`.
    pub(crate) fn note(&mut self, dst: Loc, len: usize) {
        self.moved += len;
        let end = dst.off.saturating_add(len);
        let mut g = dst.off.next_multiple_of(GRANULE);
        while g < end && self.granules < LARGE_GRANULES {
            let bit = hash(dst.space, g / GRANULE);
            let word = &mut self.seen[bit / 64];
            let mask = 1u64 << (bit % 64);
            if *word & mask == 0 {
                *word |= mask;
                self.granules += 1;
            }
            g += GRANULE;
        }
        if self.moved >= WINDOW {
            self.last = self.granules;
            self.granules = 0;
            self.moved = 0;
            self.seen = [0; BITS / 64];
        }
    }

    /// Whether the engine's copies now write within the caches or beyond them.
    pub(crate) fn class(&self) -> Fit {
        if self.granules.max(self.last) >= LARGE_GRANULES {
            Fit::BeyondCache
        } else {
            Fit::InCache
        }
    }
}

/// The sketch bit of granule `n` of `space` (Fibonacci hashing: neighbouring granules spread out).
fn hash(space: Space, n: usize) -> usize {
    let key = (n as u64) << 1 | u64::from(space == Space::Hbm);
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BITS.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn host(off: usize) -> Loc {
        Loc { space: Space::Host, off }
    }

    /// The same 1 MiB written over and over — one long copy or page by page, for many windows — stays small.
    #[test]
    fn a_small_buffer_written_again_and_again_stays_small() {
        let mut f = Footprint::default();
        for round in 0..3 * WINDOW / (1 << 20) {
            if round % 2 == 0 {
                f.note(host(1 << 30), 1 << 20);
            } else {
                (0..256).for_each(|p| f.note(host((1 << 30) + p * PAGE), PAGE));
            }
            assert_eq!(f.class(), Fit::InCache, "round {round}");
        }
    }

    /// Distinct destinations make a stream large once they cover [`STREAM_MIN`] bytes, not before; it stays
    /// large through the next window and turns small again after a window of small work.
    #[test]
    fn distinct_destinations_make_a_stream_large_until_a_window_of_small_work() {
        let mut f = Footprint::default();
        let granules = STREAM_MIN / GRANULE;
        for g in 0..granules {
            assert_eq!(f.class(), Fit::InCache, "after {g} granules");
            // One page at the start of each granule, HBM: sampled every time.
            f.note(Loc { space: Space::Hbm, off: g * GRANULE }, PAGE);
        }
        assert_eq!(f.class(), Fit::BeyondCache);
        // Small work: the window that saw the large stream ends, and its count carries into the next one.
        let mut moved = granules * PAGE;
        while moved < WINDOW {
            f.note(host(0), 1 << 20);
            moved += 1 << 20;
        }
        assert_eq!(f.class(), Fit::BeyondCache, "the last window was large");
        for _ in 0..WINDOW / (1 << 20) {
            f.note(host(0), 1 << 20);
        }
        assert_eq!(f.class(), Fit::InCache, "a whole window of one small buffer");
    }

    /// A long copy counts every granule it crosses; pages that cross none (not at a granule start) and small
    /// writes count nothing; the two spaces are told apart.
    #[test]
    fn long_copies_count_every_granule_and_spaces_are_apart() {
        let mut f = Footprint::default();
        f.note(host(GRANULE + 1), STREAM_MIN - 2 * GRANULE);
        assert_eq!(f.granules as usize, STREAM_MIN / GRANULE - 2);
        (1..16).for_each(|p| f.note(host(p * PAGE), PAGE));
        f.note(host(3 * GRANULE - 4), 4);
        assert_eq!(f.granules as usize, STREAM_MIN / GRANULE - 2, "no granule start crossed");
        f.note(Loc { space: Space::Hbm, off: 2 * GRANULE }, PAGE);
        f.note(host(STREAM_MIN), PAGE);
        assert_eq!(f.class(), Fit::BeyondCache, "the HBM granule and the host one are new");
    }
}
