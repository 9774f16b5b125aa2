//! The bytes a source holds and the poison a destination holds before a transfer, dmatest-style.
//!
//! - Every source byte has bit 7 set (dmatest's `PATTERN_SRC`); every poison byte has it clear. A destination
//!   byte the engine never wrote is therefore told from a copied one by itself, whatever its neighbours.
//! - The other seven bits come from a bijective scramble of the byte's 8-byte word index in its chunk and a
//!   seed, so each byte
//!   encodes its position: a shifted, duplicated or misdirected block differs from what belongs there
//!   (by 7 bits a byte), and the position it came from can be found again ([`Pattern::find`]).
//!
//! Patterns are pure functions of `(seed, position)`: any window regenerates independently, in blocks.

use super::rng::mix;

/// Bit 7 of every byte of a word.
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// A deterministic byte stream over chunk offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// What a source holds: bit 7 set in every byte.
    Source(u64),
    /// What a destination holds before the transfer: bit 7 clear in every byte.
    Poison(u64),
}

impl Pattern {
    /// `(seed, bits to set, bits to keep)`.
    fn parts(self) -> (u64, u64, u64) {
        match self {
            Pattern::Source(seed) => (seed, HIGH_BITS, u64::MAX),
            Pattern::Poison(seed) => (mix(seed), 0, !HIGH_BITS),
        }
    }

    /// The 8 bytes (little-endian) at word index `w`: an odd multiply and a xor-shift of `w ^ seed`, both
    /// bijections, so every word index of a chunk gets its own value. Cheap enough to vectorise: a campaign
    /// generates each byte four times (fill source, fill poison, check both).
    #[inline(always)]
    fn word_of(w: u64, (seed, set, keep): (u64, u64, u64)) -> u64 {
        let x = (w ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((x ^ (x >> 29)) | set) & keep
    }

    fn word(self, w: u64) -> u64 {
        Self::word_of(w, self.parts())
    }

    /// The byte at chunk offset `pos`.
    pub fn byte(self, pos: u64) -> u8 {
        self.word(pos / 8).to_le_bytes()[(pos % 8) as usize]
    }

    /// Fills `buf` with the bytes at chunk offsets `[offset, offset + buf.len())`.
    pub fn fill(self, offset: u64, buf: &mut [u8]) {
        let len = buf.len();
        let mut pos = 0usize;
        // Unaligned head, byte by byte.
        while pos < buf.len() && (offset + pos as u64) % 8 != 0 {
            buf[pos] = self.byte(offset + pos as u64);
            pos += 1;
        }
        let first_word = (offset + pos as u64) / 8;
        let parts = self.parts();
        let mut words = buf[pos..].chunks_exact_mut(8);
        for (i, c) in (&mut words).enumerate() {
            c.copy_from_slice(&Self::word_of(first_word + i as u64, parts).to_le_bytes());
        }
        let tail = words.into_remainder();
        let n = tail.len();
        if n > 0 {
            let at = offset + len as u64 - n as u64;
            tail.copy_from_slice(&self.word(at / 8).to_le_bytes()[..n]);
        }
    }

    /// Do `got` hold exactly the bytes at chunk offsets `[offset, offset + got.len())`? Compares word by
    /// word as it generates, without a buffer of expected bytes (the campaign's common case: a clean region).
    pub fn matches(self, offset: u64, got: &[u8]) -> bool {
        let mut pos = 0usize;
        while pos < got.len() && (offset + pos as u64) % 8 != 0 {
            if got[pos] != self.byte(offset + pos as u64) {
                return false;
            }
            pos += 1;
        }
        let first_word = (offset + pos as u64) / 8;
        let parts = self.parts();
        let mut words = got[pos..].chunks_exact(8);
        // Fold the differences of a run of words so the loop has no early exit to break its pipelining.
        let mut diff = 0u64;
        for (i, c) in (&mut words).enumerate() {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            diff |= w ^ Self::word_of(first_word + i as u64, parts);
        }
        if diff != 0 {
            return false;
        }
        let tail = words.remainder();
        let at = offset + (got.len() - tail.len()) as u64;
        tail.iter().enumerate().all(|(i, &b)| b == self.byte(at + i as u64))
    }

    /// The first chunk offset in `[0, limit)` whose bytes are `needle` (at most 64 MiB are searched).
    pub fn find(self, needle: &[u8], limit: u64) -> Option<u64> {
        const BLOCK: u64 = 1 << 20;
        const MAX_SEARCH: u64 = 64 << 20;
        if needle.is_empty() {
            return None;
        }
        let n = needle.len() as u64;
        let limit = limit.min(MAX_SEARCH);
        let mut buf = vec![0u8; (BLOCK + n) as usize];
        let mut at = 0u64;
        while at + n <= limit {
            let len = (BLOCK + n).min(limit - at) as usize;
            self.fill(at, &mut buf[..len]);
            if let Some(i) = buf[..len].windows(needle.len()).position(|w| w == needle) {
                return Some(at + i as u64);
            }
            at += BLOCK;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(p: Pattern, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        p.fill(off, &mut v);
        v
    }

    #[test]
    fn any_window_regenerates_the_same_bytes() {
        for p in [Pattern::Source(3), Pattern::Poison(3)] {
            let whole = bytes(p, 0, 200);
            for off in 0..24 {
                for len in [0, 1, 5, 8, 13, 64, 150] {
                    assert_eq!(bytes(p, off as u64, len), whole[off..off + len], "{p:?} off {off} len {len}");
                }
            }
            assert_eq!(p.byte(77), whole[77]);
        }
    }

    #[test]
    fn matches_agrees_with_fill() {
        let p = Pattern::Source(21);
        let whole = bytes(p, 0, 300);
        for off in 0..20usize {
            for len in [0, 1, 7, 8, 9, 64, 201] {
                assert!(p.matches(off as u64, &whole[off..off + len]), "off {off} len {len}");
                let mut bad = whole[off..off + len].to_vec();
                if let Some(b) = bad.get_mut(len / 2) {
                    *b ^= 1;
                    assert!(!p.matches(off as u64, &bad), "off {off} len {len}");
                }
            }
        }
    }

    #[test]
    fn source_and_poison_differ_in_every_byte() {
        let s = bytes(Pattern::Source(9), 0, 4096);
        let p = bytes(Pattern::Poison(9), 0, 4096);
        assert!(s.iter().all(|b| b & 0x80 != 0) && p.iter().all(|b| b & 0x80 == 0));
    }

    #[test]
    fn a_block_is_found_where_it_came_from() {
        let p = Pattern::Source(11);
        let window = bytes(p, 123_457, 16);
        assert_eq!(p.find(&window, 1 << 20), Some(123_457));
        assert_eq!(p.find(&window, 100_000), None);
    }
}
