//! Where a mapping's frames come from: the placement policy, and taking frames from host DRAM by it.
//!
//! What each policy promises, about the frames of consecutive mapped pages:
//! - [`Placement::Contiguous`]: one physically contiguous run;
//! - [`Placement::Runs`]: runs of exactly `k` contiguous frames (the last run holds the remainder), placed
//!   at seeded random positions, and no run starts at the frame right after the previous run ends — so
//!   coalescing physically consecutive pages finds exactly `ceil(pages / k)` runs;
//! - [`Placement::Scattered`]: runs of 1: no page's frame follows the previous page's frame.
//!
//! Seeded placements are reproducible: the same seed over the same host-DRAM allocation state gives the
//! same frames. They are drawn from a window of free host DRAM a few times larger than the mapping (the
//! rest of the window stays free), so a scattered buffer is spread over a bounded region, not all of DRAM.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::MmError;
use crate::{EmuError, HostMemory};

/// Bytes in a user page and a frame.
pub(crate) const PAGE: u64 = ndma::PAGE_SIZE;

/// How many times larger than the mapping the window seeded frames are drawn from; the next is tried when
/// host DRAM has no free window that large.
const WINDOW_SPREADS: [usize; 2] = [4, 2];

/// A mapping's placement policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// All frames physically contiguous, in page order.
    Contiguous,
    /// Every page on its own frame, no two consecutive pages on consecutive frames; seeded.
    Scattered {
        /// Seed of the frame choice.
        seed: u64,
    },
    /// Runs of `k` contiguous frames at seeded random places (`k` ≥ 1).
    Runs {
        /// Frames per run.
        k: usize,
        /// Seed of the run placement.
        seed: u64,
    },
}

/// Takes `pages` frames from `host` as `placement` says; returns their physical addresses in page order.
/// The frames' contents are whatever a previous owner left.
pub(crate) fn take_frames(host: &HostMemory, pages: usize, placement: Placement) -> Result<Vec<u64>, MmError> {
    let oom = |pages: usize| {
        MmError::Host(EmuError::OutOfMemory {
            what: host.space().what(),
            len: (pages as u64).saturating_mul(PAGE),
            align: PAGE,
        })
    };
    match placement {
        Placement::Contiguous => {
            let len = (pages as u64).checked_mul(PAGE).ok_or_else(|| oom(pages))?;
            let pa = host.allocator().alloc(len, PAGE).ok_or_else(|| oom(pages))?;
            Ok((0..pages as u64).map(|i| pa + i * PAGE).collect())
        }
        Placement::Scattered { seed } => take_runs(host, pages, 1, seed).ok_or_else(|| oom(pages)),
        Placement::Runs { k: 0, .. } => Err(MmError::InvalidMapping("a run holds at least one frame")),
        Placement::Runs { k, seed } => take_runs(host, pages, k.min(pages), seed).ok_or_else(|| oom(pages)),
    }
}

/// Runs of `k` frames (`1 ≤ k ≤ pages`) in seeded random slots of a free window; `None` when no window fits.
fn take_runs(host: &HostMemory, pages: usize, k: usize, seed: u64) -> Option<Vec<u64>> {
    let runs = pages.div_ceil(k);
    let slot_len = k as u64 * PAGE;
    let run_len = |i: usize| if i + 1 == runs { (pages - i * k) as u64 * PAGE } else { slot_len };
    // One lock for the whole choice: the window found free stays free while the runs are carved out of it.
    let mut a = host.allocator();
    for spread in WINDOW_SPREADS {
        let slots = runs.checked_mul(spread)?;
        let Some(window_len) = (slots as u64).checked_mul(slot_len) else { continue };
        let Some(base) = a.alloc(window_len, PAGE) else { continue };
        let order = choose_slots(slots, runs, seed);
        let mut taken: Vec<(u64, u64)> =
            order.iter().enumerate().map(|(i, &s)| (base + s as u64 * slot_len, run_len(i))).collect();
        let frames = taken.iter().flat_map(|&(at, len)| (0..len / PAGE).map(move |p| at + p * PAGE)).collect();
        // Give back everything of the window outside the chosen runs.
        taken.sort_unstable();
        let mut cursor = base;
        for (at, len) in taken {
            if at > cursor {
                let freed = a.free(cursor, at - cursor);
                debug_assert!(freed, "window gap [{cursor:#x}, {at:#x}) was not allocated");
            }
            cursor = at + len;
        }
        if base + window_len > cursor {
            let freed = a.free(cursor, base + window_len - cursor);
            debug_assert!(freed, "window tail at {cursor:#x} was not allocated");
        }
        return Some(frames);
    }
    None
}

/// Picks `runs` distinct slots of `slots` (≥ 2·runs) in a seeded random order such that no chosen slot is
/// the one right after the slot chosen before it.
fn choose_slots(slots: usize, runs: usize, seed: u64) -> Vec<usize> {
    debug_assert!(slots >= 2 * runs);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..slots).collect();
    // The first `runs` steps of a Fisher–Yates shuffle (the modulo bias is irrelevant here).
    for i in 0..runs {
        let j = i + (rng.next_u64() % (slots - i) as u64) as usize;
        order.swap(i, j);
    }
    for i in 1..runs {
        if order[i] == order[i - 1] + 1 {
            // Slots are distinct, so the value at `i + 1` (which exists: slots > runs) is not the forbidden
            // one; later positions are checked as the loop goes on.
            order.swap(i, i + 1);
        }
    }
    order.truncate(runs);
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn chosen_slots_are_distinct_in_range_and_never_ascend_by_one(runs in 1usize..200, spread in 2usize..5, seed: u64) {
            let slots = runs * spread;
            let order = choose_slots(slots, runs, seed);
            prop_assert_eq!(order.len(), runs);
            let mut seen = std::collections::HashSet::new();
            for (i, &s) in order.iter().enumerate() {
                prop_assert!(s < slots);
                prop_assert!(seen.insert(s), "slot {} chosen twice", s);
                if i > 0 {
                    prop_assert_ne!(s, order[i - 1] + 1);
                }
            }
            prop_assert_eq!(choose_slots(slots, runs, seed), order, "reproducible");
        }
    }
}
