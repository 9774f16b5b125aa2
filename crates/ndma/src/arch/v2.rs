//! V2 (Trn1 / Inf2) DHAL (FACTS §4).

use udma::Arch;

use super::{Dhal, WaitBudget};

/// The V2 DHAL.
#[derive(Debug, Clone, Copy, Default)]
pub struct V2;

/// The D2H engine, which hosts NC 0's H2T ring.
const D2H_ENGINE: u32 = 32;
/// The H2D engine, which hosts every other NC's H2T ring.
const H2D_ENGINE: u32 = 33;

impl Dhal for V2 {
    fn arch(&self) -> Arch {
        Arch::V2
    }

    fn h2t_eng_id(&self, nc: u32) -> u32 {
        if nc == 0 {
            D2H_ENGINE
        } else {
            H2D_ENGINE
        }
    }

    fn h2t_def_qid(&self, _nc: u32) -> u32 {
        0
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
