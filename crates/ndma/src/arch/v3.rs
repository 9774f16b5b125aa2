//! V3 (Trn2) DHAL (FACTS §4, the ×400 following wait of driver 2.26+).

use udma::Arch;

use super::{Dhal, WaitBudget};

/// The V3 DHAL: ~2 µs per 64 KiB descriptor (and a ×400 following wait), no reset-window retry, async
/// zero-copy on the four IO engines.
///
/// ```
/// use ndma::arch::{Dhal, WaitBudget, V3};
///
/// assert_eq!(V3.wait_budget(2032, false), WaitBudget { first_wait_us: 4061, following_us: 162_073_900 });
/// assert!(!V3.retry_memcpy());
/// // Async zero-copy: one completion-thread bit per queue of the four IO engines.
/// assert_eq!((V3.ctx_queue_bit(128, 0), V3.ctx_queue_bit(131, 15)), (Some(0), Some(63)));
/// assert_eq!(V3.ctx_queue_bit(0, 0), None);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct V3;

impl Dhal for V3 {
    fn arch(&self) -> Arch {
        Arch::V3
    }

    fn wait_budget(&self, count: u32, is_async: bool) -> WaitBudget {
        // "~2 µs per 64 KiB descriptor at 32 GB/s".
        let est = 2 * u64::from(count.saturating_sub(1));
        let first_wait_us = if is_async { 1 } else { est.saturating_sub(1) };
        WaitBudget { first_wait_us, following_us: (est * 400).saturating_sub(first_wait_us) * 100 }
    }

    fn retry_memcpy(&self) -> bool {
        false
    }

    fn ctx_queue_bit(&self, eng: u32, qid: u32) -> Option<u32> {
        // (eng − 128)·16 + q over the four IO engines that host H2T rings: 64 bits.
        const FIRST_IO_ENGINE: u32 = 128;
        ((FIRST_IO_ENGINE..FIRST_IO_ENGINE + 4).contains(&eng) && qid < udma::DMA_MAX_Q)
            .then(|| (eng - FIRST_IO_ENGINE) * udma::DMA_MAX_Q + qid)
    }
}
