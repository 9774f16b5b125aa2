//! Taking completions from a zero-copy completion queue, as the runtime does, with a bound.

use ndma::zerocopy::{CqConsumer, CqEntry};

/// Takes `n` completions from `cq`, yielding while none is posted.
///
/// # Panics
///
/// When they do not all come within 50 000 000 empty looks (a lost completion: a test fails instead of hanging).
pub fn take_completions(cq: &CqConsumer, n: usize) -> Vec<CqEntry> {
    let mut got = Vec::new();
    let mut spins = 0u64;
    while got.len() < n {
        match cq.pop() {
            Some(e) => got.push(e),
            None => {
                spins += 1;
                assert!(spins < 50_000_000, "completions lost: got {} of {n}", got.len());
                std::thread::yield_now();
            }
        }
    }
    got
}
