//! Deterministic byte patterns: an endless sequence of hashed little-endian 64-bit words per seed, so any
//! window of a pattern regenerates on its own (a 256 MiB check needs no 256 MiB reference buffer).

fn word(seed: u64, index: u64) -> u64 {
    (index ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ seed
}

/// Fills `buf` with bytes `[offset, offset + buf.len())` of pattern `seed`.
///
/// ```
/// use ndma_emu::test_utils::{fill_pattern, pattern};
///
/// let mut tail = [0u8; 5];
/// fill_pattern(7, 3, &mut tail);
/// assert_eq!(tail[..], pattern(7, 0, 8)[3..]);
/// ```
pub fn fill_pattern(seed: u64, offset: u64, buf: &mut [u8]) {
    let len = buf.len();
    let mut pos = 0usize;
    // Unaligned head (and tiny buffers), byte-wise.
    while pos < buf.len() && (offset + pos as u64) % 8 != 0 {
        let abs = offset + pos as u64;
        buf[pos] = word(seed, abs / 8).to_le_bytes()[(abs % 8) as usize];
        pos += 1;
    }
    let first_word = (offset + pos as u64) / 8;
    let mut words = buf[pos..].chunks_exact_mut(8);
    for (i, c) in (&mut words).enumerate() {
        c.copy_from_slice(&word(seed, first_word + i as u64).to_le_bytes());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let n = tail.len();
        let w = word(seed, (offset + (len - n) as u64) / 8).to_le_bytes();
        tail.copy_from_slice(&w[..n]);
    }
}

/// Bytes `[offset, offset + len)` of pattern `seed` as a vector.
pub fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_pattern(seed, offset, &mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_window_regenerates_the_same_bytes() {
        let whole = pattern(7, 0, 100);
        for off in 0..20 {
            for len in [0, 1, 5, 8, 13, 64] {
                assert_eq!(pattern(7, off as u64, len), whole[off..off + len], "off {off} len {len}");
            }
        }
        assert_ne!(pattern(7, 0, 64), pattern(8, 0, 64));
    }
}
