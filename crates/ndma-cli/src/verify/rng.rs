//! Seeds: one RNG per operation, derived from the campaign seed and the operation's index alone, so any
//! operation can be drawn again without drawing the ones before it.

use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The RNG every draw uses.
pub type OpRng = ChaCha8Rng;

/// SplitMix64's finaliser: a bijection on `u64` that spreads every input bit over the output.
pub const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seed for `tag` under `seed` (pattern seeds of an operation, its fault plan's stream, …).
pub const fn derive(seed: u64, tag: u64) -> u64 {
    mix(seed ^ mix(tag.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// The RNG of operation `index` of the campaign seeded `seed`.
pub fn op_rng(seed: u64, index: u64) -> OpRng {
    OpRng::seed_from_u64(derive(seed, index))
}

/// A fresh random campaign seed (when `--seed` is not given): 53 bits, so it survives a JSON reader that
/// keeps numbers as doubles.
pub fn random_seed() -> u64 {
    rand::random::<u64>() >> 11
}

#[cfg(test)]
mod tests {
    use rand::RngExt;

    use super::*;

    #[test]
    fn an_operation_draws_the_same_whatever_ran_before() {
        let draw = |seed, i| op_rng(seed, i).random::<[u64; 4]>();
        assert_eq!(draw(7, 1000), draw(7, 1000));
        assert_ne!(draw(7, 1000), draw(7, 1001));
        assert_ne!(draw(7, 1000), draw(8, 1000));
    }
}
