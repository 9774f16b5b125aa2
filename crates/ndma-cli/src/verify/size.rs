//! The size distribution: mostly ordinary sizes, with a steady share of the edges where a split goes wrong —
//! 0, 1–3, a page ± 1, a descriptor (64 KiB) ± 1, whole numbers of descriptors ± 1, the 2031-descriptor batch
//! boundary ± 1 byte and ± one descriptor, and sizes of several batches. Every draw comes from the
//! operation's own RNG.

use rand::RngExt;

use super::rng::OpRng;
use ndma::MAX_BATCH_BYTES;

/// Bytes one descriptor moves at most (`MAX_DMA_DESC_SIZE`).
pub const DESC: u64 = udma::MAX_DMA_DESC_SIZE as u64;

/// Largest "ordinary" size: the log-uniform part of the distribution stays below it.
pub const RANDOM_MAX: u64 = 4 << 20;

/// A class of sizes and its weight (per 100 000 draws).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeClass {
    /// 0: moves nothing.
    Zero,
    /// 1, 2 or 3 bytes.
    Tiny,
    /// 4095, 4096 or 4097.
    Page,
    /// 65535, 65536 or 65537: one descriptor ± 1.
    Desc,
    /// k × 64 KiB − 1, + 0 or + 1 for k in 2..=64.
    Descs,
    /// Log-uniform in 1..=4 MiB.
    Random,
    /// The batch boundary 2031 × 64 KiB, ± 1 byte or ± one descriptor.
    BatchEdge,
    /// Two or three batches and a random remainder.
    MultiBatch,
}

/// `(class, weight)` of the ordinary classes: weights out of 100 000.
pub const MIX: [(SizeClass, u32); 6] = [
    (SizeClass::Zero, 500),
    (SizeClass::Tiny, 8_000),
    (SizeClass::Page, 8_000),
    (SizeClass::Desc, 8_000),
    (SizeClass::Descs, 10_000),
    (SizeClass::Random, 65_500),
];

const _: () = {
    let mut sum = 0;
    let mut i = 0;
    while i < MIX.len() {
        sum += MIX[i].1;
        i += 1;
    }
    assert!(sum == 100_000);
};

/// Default share of operations (segments) drawn from the large classes — the batch boundary (three in four)
/// and several batches (one in four). Rare, because each such operation writes, copies and checks hundreds
/// of MiB; `--big-rate` raises it.
pub const DEFAULT_BIG_RATE: f64 = 0.0008;

/// The sizes of the batch-boundary class (the last one puts memset's replicate, which follows its first
/// 64 KiB, one byte past the boundary).
pub const BATCH_EDGES: [u64; 6] = [
    MAX_BATCH_BYTES - DESC,
    MAX_BATCH_BYTES - 1,
    MAX_BATCH_BYTES,
    MAX_BATCH_BYTES + 1,
    MAX_BATCH_BYTES + DESC,
    MAX_BATCH_BYTES + DESC + 1,
];

/// The sizes a faulted operation draws from: small (one batch of at most four pairs, so an injected hang
/// times out within tens of ms) and never 0 (the operation must reach the engine).
pub const SMALL_EDGES: [u64; 12] = [1, 2, 3, 4095, 4096, 4097, 65535, 65536, 65537, 131071, 131072, 131073];

/// A class: a large one with probability `big_rate`, else an ordinary one by its weight.
pub fn draw_class(rng: &mut OpRng, big_rate: f64) -> SizeClass {
    if rng.random_bool(big_rate.clamp(0.0, 1.0)) {
        return if rng.random_bool(0.75) { SizeClass::BatchEdge } else { SizeClass::MultiBatch };
    }
    let mut x = rng.random_range(0..100_000u32);
    for (class, w) in MIX {
        if x < w {
            return class;
        }
        x -= w;
    }
    SizeClass::Random
}

/// A size of `class`.
pub fn draw_in(rng: &mut OpRng, class: SizeClass) -> u64 {
    let pm1 = |rng: &mut OpRng, centre: u64| centre - 1 + rng.random_range(0..3u64);
    match class {
        SizeClass::Zero => 0,
        SizeClass::Tiny => rng.random_range(1..=3),
        SizeClass::Page => pm1(rng, 4096),
        SizeClass::Desc => pm1(rng, DESC),
        SizeClass::Descs => {
            let k = rng.random_range(2..=64u64);
            pm1(rng, k * DESC)
        }
        SizeClass::Random => {
            // Log-uniform: as many sizes in 1–2 KiB as in 1–2 MiB.
            let bits = rng.random_range(0.0..(RANDOM_MAX as f64).log2());
            (2f64.powf(bits) as u64).clamp(1, RANDOM_MAX)
        }
        SizeClass::BatchEdge => BATCH_EDGES[rng.random_range(0..BATCH_EDGES.len())],
        SizeClass::MultiBatch => {
            let batches = rng.random_range(2..=3u64);
            batches * MAX_BATCH_BYTES + rng.random_range(0..MAX_BATCH_BYTES / 4)
        }
    }
}

/// A size from the whole distribution.
pub fn draw(rng: &mut OpRng, big_rate: f64) -> u64 {
    let class = draw_class(rng, big_rate);
    draw_in(rng, class)
}

/// A size for a faulted operation.
pub fn draw_small(rng: &mut OpRng) -> u64 {
    SMALL_EDGES[rng.random_range(0..SMALL_EDGES.len())]
}

/// An offset into a chunk beyond its guard: 0, a small unaligned one, or anywhere in a page.
pub fn draw_offset(rng: &mut OpRng) -> u64 {
    match rng.random_range(0..10u32) {
        0 | 1 => 0,
        2 | 3 => rng.random_range(1..16),
        _ => rng.random_range(0..4096),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::rng::op_rng;

    #[test]
    fn every_class_is_drawn_and_in_its_range() {
        let mut seen = std::collections::BTreeSet::new();
        let mut rng = op_rng(1, 2);
        for _ in 0..400_000 {
            let class = draw_class(&mut rng, 0.001);
            let s = draw_in(&mut rng, class);
            let ok = match class {
                SizeClass::Zero => s == 0,
                SizeClass::Tiny => (1..=3).contains(&s),
                SizeClass::Page => (4095..=4097).contains(&s),
                SizeClass::Desc => (DESC - 1..=DESC + 1).contains(&s),
                SizeClass::Descs => (2 * DESC - 1..=64 * DESC + 1).contains(&s),
                SizeClass::Random => (1..=RANDOM_MAX).contains(&s),
                SizeClass::BatchEdge => BATCH_EDGES.contains(&s),
                SizeClass::MultiBatch => (2 * MAX_BATCH_BYTES..4 * MAX_BATCH_BYTES).contains(&s),
            };
            assert!(ok, "{class:?}: {s}");
            seen.insert(format!("{class:?}"));
        }
        assert_eq!(seen.len(), MIX.len() + 2, "{seen:?}");
    }
}
