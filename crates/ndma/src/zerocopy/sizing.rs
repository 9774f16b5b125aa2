//! How much of a request to pin at once, and when a sync submit must wait for descriptors (FACTS §5.4).

use super::{NDMA_ZC_DESC_WAIT_THRESHOLD_HI, NDMA_ZC_PAGES_PER_XFER};
use crate::PAGE_SIZE;

/// Bytes of one full piece: 64 pages.
const PIECE_BYTES: u64 = NDMA_ZC_PAGES_PER_XFER * PAGE_SIZE;

/// `ndma_calc_zc_pin_size`: the pin size for a request of `s` bytes counted from the start of its first page
/// (its size plus the page offset of its first byte). More than two pieces: one piece at a time; at most one
/// piece: all of it; in between: half of it, rounded up to a page, so the two halves overlap pinning with DMA.
///
/// ```
/// use ndma::zerocopy::calc_pin_size;
///
/// assert_eq!(calc_pin_size(10_000), 10_000, "at most one piece (256 KiB): all of it");
/// assert_eq!(calc_pin_size((256 << 10) + 8193), 132 << 10, "between one and two: half, up to a page");
/// assert_eq!(calc_pin_size(16 << 20), 256 << 10, "more than two: a piece at a time");
/// ```
pub const fn calc_pin_size(s: u64) -> u64 {
    if s > 2 * PIECE_BYTES {
        PIECE_BYTES
    } else if s <= PIECE_BYTES {
        s
    } else {
        (s / 2).next_multiple_of(PAGE_SIZE)
    }
}

/// `_ndma_zc_descs_available`: can a piece needing at most `thr` data descriptors (plus its marker) be
/// staged on a ring with `available` free slots?
///
/// ```
/// use ndma::zerocopy::descs_available;
///
/// assert!(descs_available(65, 64), "64 data descriptors and the marker");
/// assert!(!descs_available(64, 64));
/// ```
pub const fn descs_available(available: u32, thr: u32) -> bool {
    available >= thr.saturating_add(1)
}

/// `ndma_zc_should_wait`: must a sync submit wait for (and release) a submitted context before queueing more?
/// True when the pin budget (`pin_budget` pages) is used up, the queue is full, or fewer than `thr` descriptors
/// are free; and then `thr` is raised to the high threshold, so waiting goes on until 521 descriptors are free
/// (hysteresis).
pub(crate) fn should_wait(
    nr_pinned_pages: u64,
    pin_budget: u64,
    queue_full: bool,
    available: u32,
    thr: &mut u32,
) -> bool {
    let wait = nr_pinned_pages >= pin_budget || queue_full || !descs_available(available, *thr);
    if wait {
        *thr = NDMA_ZC_DESC_WAIT_THRESHOLD_HI;
    }
    wait
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zerocopy::{NDMA_CTX_QUEUE_MAX_PINNED_PAGES as MAX, NDMA_ZC_DESC_WAIT_THRESHOLD_LO};

    #[test]
    fn pin_sizes_follow_facts_5_4() {
        assert_eq!(calc_pin_size(1), 1);
        assert_eq!(calc_pin_size(256 << 10), 256 << 10);
        // Integer halving, then up to a page: (256 KiB + 1) / 2 is exactly 128 KiB.
        assert_eq!(calc_pin_size((256 << 10) + 1), 128 << 10);
        assert_eq!(calc_pin_size((256 << 10) + 8193), 132 << 10);
        assert_eq!(calc_pin_size((512 << 10) - 1), 256 << 10);
        assert_eq!(calc_pin_size(512 << 10), 256 << 10);
        assert_eq!(calc_pin_size((512 << 10) + 1), 256 << 10);
        assert_eq!(calc_pin_size(16 << 20), 256 << 10);
    }

    #[test]
    fn waiting_has_hysteresis() {
        let mut thr = NDMA_ZC_DESC_WAIT_THRESHOLD_LO;
        assert!(!should_wait(0, MAX, false, 66, &mut thr), "65 + marker fit");
        assert!(should_wait(0, MAX, false, 65, &mut thr));
        assert_eq!(thr, 520);
        assert!(should_wait(0, MAX, false, 520, &mut thr), "once waiting, 521 must be free");
        assert!(!should_wait(0, MAX, false, 521, &mut thr));
        assert!(should_wait(MAX, MAX, false, 8000, &mut thr));
        assert!(should_wait(0, MAX, true, 8000, &mut thr));
        assert!(descs_available(65, 64) && !descs_available(64, 64) && descs_available(u32::MAX, u32::MAX - 1));
    }
}
