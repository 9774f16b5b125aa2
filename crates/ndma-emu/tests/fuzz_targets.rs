//! The fuzz targets' bodies on stable (feature `fuzzing`): each runs over the seeds committed under
//! `fuzz/seeds/<target>/` and over inputs `arbitrary` builds from seeded random bytes, exactly as libFuzzer
//! would hand them over — so a target that stops compiling or starts failing is caught by `cargo test`, not
//! only by the next nightly fuzz run (the README's "Fuzzing" section says how to run them).

use std::path::PathBuf;

use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeSet;

use ndma_emu::test_utils::fuzz::descriptors::Outcome;
use ndma_emu::test_utils::fuzz::{bar0, decode, descriptors};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Feeds `check` the committed seeds of `target`, then `n` random inputs of up to `max_len` bytes; returns
/// what `check` returned for each.
fn drive<T: for<'a> Arbitrary<'a>, R>(target: &str, n: usize, max_len: usize, check: impl Fn(&T) -> R) -> Vec<R> {
    let mut out = Vec::new();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds").join(target);
    let mut seeds: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.map(|e| e.expect("seed entry").path()).collect()).unwrap_or_default();
    seeds.sort();
    for path in seeds {
        let bytes = std::fs::read(&path).expect("seed");
        if let Ok(input) = T::arbitrary_take_rest(Unstructured::new(&bytes)) {
            out.push(check(&input));
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0xf022);
    let mut bytes = vec![0u8; max_len];
    let mut ran = 0;
    for _ in 0..n {
        let len = (rng.next_u32() as usize) % max_len;
        rng.fill_bytes(&mut bytes[..len]);
        if let Ok(input) = T::arbitrary_take_rest(Unstructured::new(&bytes[..len])) {
            out.push(check(&input));
            ran += 1;
        }
    }
    assert!(ran > n / 2, "{target}: only {ran} of {n} random inputs decoded");
    out
}

#[test]
fn decode_target_body_holds() {
    drive("decode", 2000, 64, decode::check);
}

#[test]
fn bar0_gate_target_body_holds() {
    let blocked: BTreeSet<bool> = drive("bar0_gate", 2000, 32, bar0::check).into_iter().collect();
    assert_eq!(blocked, BTreeSet::from([false, true]), "both verdicts occur");
}

#[test]
fn copy_descriptors_target_body_holds() {
    let seen: BTreeSet<Outcome> = drive("copy_descriptors", 400, 512, descriptors::check).into_iter().collect();
    let all = [Outcome::Refused, Outcome::Copied, Outcome::Faulted, Outcome::Ran];
    assert_eq!(seen, BTreeSet::from(all), "every outcome occurs");
}
