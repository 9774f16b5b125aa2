//! V2 (Trn1 / Inf2) DHAL (FACTS §4).

use udma::Arch;

use super::{Dhal, WaitBudget};

/// The V2 DHAL: ~4 µs per 64 KiB descriptor, the reset-window retry, no async zero-copy.
///
/// ```
/// use ndma::arch::{Dhal, WaitBudget, V2};
///
/// assert_eq!(V2.wait_budget(2, false), WaitBudget { first_wait_us: 1, following_us: 39_900 });
/// assert!(V2.retry_memcpy());
/// assert_eq!(V2.ctx_queue_bit(33, 0), None);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct V2;

impl Dhal for V2 {
    fn arch(&self) -> Arch {
        Arch::V2
    }

    fn wait_budget(&self, count: u32, is_async: bool) -> WaitBudget {
        // "~4 µs per 64 KiB descriptor at 16 GB/s".
        let est = 4 * u64::from(count.saturating_sub(1));
        let first_wait_us = if is_async { 1 } else { est.saturating_sub(3) };
        WaitBudget { first_wait_us, following_us: (est * 100).saturating_sub(first_wait_us) * 100 }
    }

    fn retry_memcpy(&self) -> bool {
        true
    }

    fn ctx_queue_bit(&self, _eng: u32, _qid: u32) -> Option<u32> {
        None
    }
}
