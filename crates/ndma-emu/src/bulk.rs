//! The engine's bulk byte mover. A DMA engine writes memory without pulling it through the CPU caches; for
//! large copies the model does the same with non-temporal stores.
//!
//! Written by hand because it was measured to matter: on this machine glibc's memmove moves a 127 MiB batch
//! (the op layer's largest) at 4.5–5.1 GB/s while the same bytes in one 256 MiB memcpy — the benchmarks'
//! baseline — reach 7.5–9 GB/s (glibc picks a different strategy by size). A plain AVX2 streaming loop
//! moved the 127 MiB batch at 7.4–8 GB/s; copying four pages at a time with their blocks interleaved and
//! prefetched, as glibc's large-copy loop does, moves it at 11–12 GB/s (measured side by side: 127 MiB in
//! 11.4 ms against 16.7 ms for the plain loop and 18.6 ms for glibc's memmove).

use std::ptr;

/// Copies at least this long use non-temporal stores (when the CPU has AVX2 and the ranges do not overlap).
const NON_TEMPORAL_MIN: usize = 8 << 20;

/// While the engine's writes are [`Fit::BeyondCache`], copies at least this long use non-temporal stores too: a
/// scattered user buffer is a batch of page-sized descriptors, each its own copy, which a cache-polluting
/// memmove moved at half the rate the same bytes reach in merged streaming copies.
const NON_TEMPORAL_PIECE_MIN: usize = 4096;

/// Whether the engine's recent writes cover more than the caches hold, which decides whether a page-sized
/// copy streams (see [`crate::footprint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The engine's recent destinations fit the caches (or a copy on its own): only long copies stream;
    /// the rest stay cached, since the CPU or the next copy usually touches them again (a 4 KiB round
    /// trip's data, a buffer transferred over and over).
    InCache,
    /// The engine's recent destinations cover more than the caches hold: every copy of a page or more
    /// streams.
    BeyondCache,
}

/// Copies `len` bytes from `src` to `dst` with memmove semantics.
///
/// # Safety
///
/// `[src, src + len)` must be valid for reads and `[dst, dst + len)` valid for writes.
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { copy_in(src, dst, len, Fit::InCache) }
}

/// [`copy`] for one copy made while the engine's writes have the cache fit `fit`.
///
/// # Safety
///
/// As [`copy`].
pub(crate) unsafe fn copy_in(src: *const u8, dst: *mut u8, len: usize, fit: Fit) {
    let disjoint =
        (src as usize).saturating_add(len) <= dst as usize || (dst as usize).saturating_add(len) <= src as usize;
    let min = match fit {
        Fit::InCache => NON_TEMPORAL_MIN,
        Fit::BeyondCache => NON_TEMPORAL_PIECE_MIN,
    };
    #[cfg(target_arch = "x86_64")]
    if len >= min && disjoint && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the caller guarantees both ranges; they are disjoint (checked) and AVX2 is present (checked).
        unsafe { copy_streaming(src, dst, len) };
        return;
    }
    let _ = (disjoint, min);
    // SAFETY: the caller guarantees both ranges; `ptr::copy` tolerates overlap.
    unsafe { ptr::copy(src, dst, len) };
}

/// Non-temporal copy of disjoint ranges.
///
/// # Safety
///
/// As [`copy`], the ranges must not overlap, `len` must be at least 32, and the CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_streaming(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _mm_sfence, _MM_HINT_T0};
    const BLOCK: usize = 128;
    const PREFETCH: usize = 512;
    const PAGE: usize = 4096;
    // Streaming stores need a 32-byte-aligned destination: copy the head normally.
    let head = (32 - dst as usize % 32) % 32;
    // SAFETY: `head < 32 <= len` bytes, inside both ranges, which do not overlap.
    unsafe { ptr::copy_nonoverlapping(src, dst, head) };
    let mut i = head;
    // Four pages at a time, their blocks interleaved, each page's next block prefetched: four streams keep
    // more DRAM pages open than one (what glibc's large-copy loop does too).
    while i + PAGES_AT_ONCE * PAGE <= len {
        for off in (0..PAGE).step_by(BLOCK) {
            for lane in 0..PAGES_AT_ONCE {
                let at = i + lane * PAGE + off;
                // Prefetch hints never fault, wherever they point.
                _mm_prefetch::<_MM_HINT_T0>(src.wrapping_add(at + PREFETCH) as *const i8);
                // SAFETY: `at + BLOCK <= i + PAGES_AT_ONCE * PAGE <= len`; `dst + at` is aligned (head, PAGE and
                // BLOCK keep 32-byte alignment).
                unsafe { stream_block(src, dst, at) };
            }
        }
        i += PAGES_AT_ONCE * PAGE;
    }
    while i + BLOCK <= len {
        // SAFETY: `[i, i + BLOCK)` lies inside both ranges; stores stay 32-byte aligned.
        unsafe { stream_block(src, dst, i) };
        i += BLOCK;
    }
    // Non-temporal stores are weakly ordered: the fence makes them globally visible before any later store,
    // in particular the Release store of a marker word that tells the CPU the copy is done.
    _mm_sfence();
    // SAFETY: the tail `[i, len)` lies inside both ranges.
    unsafe { ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i) };
}

/// Pages of one long copy that [`copy_streaming`] interleaves.
const PAGES_AT_ONCE: usize = 4;

/// Copies of a group that [`copy_lanes`] interleaves, at most. Measured with the engine bench's layout rows
/// (30 MiB of page-sized pairs from pages spread over 1 GiB against consecutive ones, same run): 4 lanes
/// prefetching 512 bytes ahead reached 0.63–0.65 of the consecutive pages, 8 lanes prefetching 128 bytes ahead
/// 0.83–0.94 (6: 0.88–0.97; 16: 0.66–0.71, their sources' lines crowding one L1 set).
pub(crate) const LANES: usize = 8;

/// One copy of a group: `len` bytes from `src` to `dst`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lane {
    pub(crate) src: *const u8,
    pub(crate) dst: *mut u8,
    pub(crate) len: usize,
}

/// Whether a copy of `len` bytes to `dst` can join a streamed group ([`copy_lanes`]): a page or more, to a
/// 32-byte-aligned destination.
pub(crate) fn streams(len: usize, dst: *const u8) -> bool {
    len >= NON_TEMPORAL_PIECE_MIN && dst as usize % 32 == 0
}

/// Performs up to [`LANES`] copies of a stream beyond the caches at once, with non-temporal stores: their blocks
/// interleaved and prefetched, as [`copy_streaming`] interleaves the pages of one long copy. A scattered
/// user buffer is a batch of page-sized copies from pages all over host DRAM; copied one after another
/// they reach half the rate of the same bytes in one streamed copy, because each page's first loads wait
/// on memory alone, while interleaved pages keep several streams of loads in flight.
///
/// # Safety
///
/// Every lane's ranges are valid as for [`copy`]; no lane's destination overlaps any lane's source or
/// destination (so the order of the copies does not matter); every lane's destination is 32-byte aligned;
/// the CPU supports AVX2 (see [`streams_available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn copy_lanes(lanes: &[Lane]) {
    use std::arch::x86_64::{_mm_prefetch, _mm_sfence, _MM_HINT_T0};
    const BLOCK: usize = 128;
    // One block ahead per lane (see LANES): with eight lanes, further ahead was slower.
    const PREFETCH: usize = 128;
    let common = lanes.iter().map(|l| l.len).min().unwrap_or(0) / BLOCK * BLOCK;
    let mut off = 0;
    while off < common {
        for l in lanes {
            // Prefetch hints never fault, wherever they point.
            _mm_prefetch::<_MM_HINT_T0>(l.src.wrapping_add(off + PREFETCH) as *const i8);
            // SAFETY: `off + BLOCK <= common <= l.len`; the destination is 32-byte aligned (`streams`) and
            // `off` is a multiple of BLOCK.
            unsafe { stream_block(l.src, l.dst, off) };
        }
        off += BLOCK;
    }
    // Orders the streamed blocks before the tails' ordinary stores and anything after (see copy_streaming).
    _mm_sfence();
    for l in lanes.iter().filter(|l| l.len > common) {
        let (src, dst, rest) = (l.src.wrapping_add(common), l.dst.wrapping_add(common), l.len - common);
        if rest >= NON_TEMPORAL_PIECE_MIN {
            // SAFETY: the rest of each lane lies inside its ranges (a page or more); lanes do not overlap.
            unsafe { copy_streaming(src, dst, rest) };
        } else {
            // A short tail (a page copy less its published last word: 124 bytes) through the caches: no
            // second fence per lane.
            // SAFETY: as above.
            unsafe { ptr::copy_nonoverlapping(src, dst, rest) };
        }
    }
}

/// Whether [`copy_lanes`] can run on this CPU.
pub(crate) fn streams_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One 128-byte block at offset `at`: four unaligned loads, four streaming stores.
///
/// # Safety
///
/// `[at, at + 128)` lies inside both ranges, `dst + at` is 32-byte aligned, and the CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn stream_block(src: *const u8, dst: *mut u8, at: usize) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
    // SAFETY: the caller guarantees the block is inside both ranges and the destination aligned.
    unsafe {
        let s = src.add(at) as *const __m256i;
        let d = dst.add(at) as *mut __m256i;
        let (a, b, c, e) = (
            _mm256_loadu_si256(s),
            _mm256_loadu_si256(s.add(1)),
            _mm256_loadu_si256(s.add(2)),
            _mm256_loadu_si256(s.add(3)),
        );
        _mm256_stream_si256(d, a);
        _mm256_stream_si256(d.add(1), b);
        _mm256_stream_si256(d.add(2), c);
        _mm256_stream_si256(d.add(3), e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_and_small_copies_and_overlaps_match_memmove() {
        let n = NON_TEMPORAL_MIN + 4099;
        let src: Vec<u8> = (0..n + 64).map(|i| (i * 7 + i / 251) as u8).collect();
        for (s_off, d_off) in [(0usize, 0usize), (3, 17), (31, 1)] {
            let mut dst = vec![0xEEu8; n + 64];
            // SAFETY: both ranges lie inside their vectors.
            unsafe { copy(src.as_ptr().add(s_off), dst.as_mut_ptr().add(d_off), n) };
            assert!(dst[d_off..d_off + n] == src[s_off..s_off + n]);
            assert!(dst[..d_off].iter().all(|&b| b == 0xEE) && dst[d_off + n..].iter().all(|&b| b == 0xEE));
        }
        // Overlapping ranges fall back to memmove semantics.
        let mut buf = src.clone();
        let p = buf.as_mut_ptr();
        // SAFETY: both ranges lie inside `buf`.
        unsafe { copy(p, p.add(5), n) };
        assert!(buf[5..5 + n] == src[..n]);
    }

    /// Beyond the caches, copies from a page up stream too: page-sized and odd lengths, aligned and not, are
    /// byte-exact with untouched bytes around them (the guards).
    #[test]
    fn page_sized_copies_of_a_large_batch_match_memmove() {
        for len in [4095usize, 4096, 4097, 3 * 4096 + 5, 5 * 4096] {
            let src: Vec<u8> = (0..len + 64).map(|i| (i * 13 + i / 97) as u8).collect();
            for (s_off, d_off) in [(0usize, 0usize), (1, 0), (0, 7), (33, 65)] {
                let mut dst = vec![0xEEu8; len + 128];
                // SAFETY: both ranges lie inside their vectors.
                unsafe { copy_in(src.as_ptr().add(s_off), dst.as_mut_ptr().add(d_off), len, Fit::BeyondCache) };
                assert!(dst[d_off..d_off + len] == src[s_off..s_off + len], "len {len} at {s_off}/{d_off}");
                assert!(dst[..d_off].iter().all(|&b| b == 0xEE) && dst[d_off + len..].iter().all(|&b| b == 0xEE));
            }
        }
    }

    /// A full group of lanes of unequal lengths — tails from 0 to thousands of bytes past the common part,
    /// some shorter than one 32-byte store — lands
    /// byte-exact, with the bytes around every destination untouched.
    #[test]
    fn lanes_of_unequal_lengths_match_memmove() {
        if !streams_available() {
            return;
        }
        let lens = [4096usize + 7, 4096 * 2 + 33, 4096, 4096 + 100, 4096 * 3, 4096 + 31, 4096 + 32, 5000];
        assert_eq!(lens.len(), LANES, "a full group");
        let stride = 4 * 4096;
        assert!(lens.iter().all(|&l| l + 3 < stride));
        let src: Vec<u8> = (0..stride * lens.len()).map(|i| (i * 11 + i / 509) as u8).collect();
        // 32-byte-aligned destinations with guard bytes around them.
        let mut dst = vec![0xEEu8; stride * lens.len() + 64];
        let base = (32 - dst.as_ptr() as usize % 32) % 32;
        let mut lanes = [Lane { src: ptr::null(), dst: ptr::null_mut(), len: 0 }; LANES];
        for (k, (l, &len)) in lanes.iter_mut().zip(&lens).enumerate() {
            // SAFETY: every range lies inside its vector (stride > len, base < 32 < 64 spare bytes).
            *l = unsafe {
                Lane { src: src.as_ptr().add(k * stride + 3), dst: dst.as_mut_ptr().add(base + k * stride), len }
            };
            assert!(streams(l.len, l.dst));
        }
        // SAFETY: the lanes' ranges are valid and pairwise disjoint; AVX2 is present (checked above).
        #[cfg(target_arch = "x86_64")]
        unsafe {
            copy_lanes(&lanes[..lens.len()])
        };
        for (k, &len) in lens.iter().enumerate() {
            let at = base + k * stride;
            assert!(dst[at..at + len] == src[k * stride + 3..k * stride + 3 + len], "lane {k}");
            let next = if k + 1 < lens.len() { base + (k + 1) * stride } else { dst.len() };
            assert!(dst[at + len..next].iter().all(|&b| b == 0xEE), "after lane {k}");
        }
        assert!(dst[..base].iter().all(|&b| b == 0xEE));
    }
}
