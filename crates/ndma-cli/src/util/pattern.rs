//! Deterministic test patterns and chunk I/O: host chunks through the CPU mapping, device chunks through the
//! device model's back door (`EmuDevice::hbm_read`/`hbm_write`), in 1 MiB blocks so a 256 MiB check needs no
//! 256 MiB scratch buffer.

use ndma::MemChunk;
use ndma_emu::EmuDevice;

use crate::error::{CliError, CliResult, OpContext};

/// Block size of chunk I/O.
const BLOCK: usize = 1 << 20;

fn word(seed: u64, index: u64) -> u64 {
    (index ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ seed
}

/// Fills `buf` with bytes `[offset, offset + buf.len())` of pattern `seed`: an endless sequence of hashed
/// little-endian 64-bit words, so any window of it can be regenerated independently.
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

/// A pattern window as a vector.
pub fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_pattern(seed, offset, &mut v);
    v
}

/// Writes `data` at `off` of a chunk.
///
/// # Errors
///
/// The op layer's or the model's refusal (out of range).
pub fn write_chunk(emu: &EmuDevice, mc: &MemChunk, off: u64, data: &[u8]) -> CliResult {
    if mc.is_host() {
        mc.write(off, data).op_ctx(|| "writing a host chunk")
    } else {
        emu.hbm_write(mc.pa() + off, data).map_err(|e| CliError::emu("writing HBM", &e))
    }
}

/// Reads `out.len()` bytes at `off` of a chunk.
///
/// # Errors
///
/// As [`write_chunk`].
pub fn read_chunk(emu: &EmuDevice, mc: &MemChunk, off: u64, out: &mut [u8]) -> CliResult {
    if mc.is_host() {
        mc.read(off, out).op_ctx(|| "reading a host chunk")
    } else {
        emu.hbm_read(mc.pa() + off, out).map_err(|e| CliError::emu("reading HBM", &e))
    }
}

/// Sets `len` bytes at `off` of a chunk to `byte`.
///
/// # Errors
///
/// As [`write_chunk`].
pub fn fill_chunk(emu: &EmuDevice, mc: &MemChunk, off: u64, len: u64, byte: u8) -> CliResult {
    if mc.is_host() {
        mc.fill(off, len, byte).op_ctx(|| "filling a host chunk")
    } else {
        emu.hbm_fill(mc.pa() + off, len, byte).map_err(|e| CliError::emu("filling HBM", &e))
    }
}

/// Writes pattern `seed` into `[off, off + len)` of a chunk; byte `k` of the chunk gets pattern byte `k`.
///
/// # Errors
///
/// As [`write_chunk`].
pub fn write_pattern(emu: &EmuDevice, mc: &MemChunk, off: u64, len: u64, seed: u64) -> CliResult {
    let mut buf = vec![0u8; BLOCK.min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(BLOCK as u64) as usize;
        fill_pattern(seed, off + done, &mut buf[..n]);
        write_chunk(emu, mc, off + done, &buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// What a region of a chunk should hold.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// Pattern `seed` at the chunk's own offsets.
    Pattern(u64),
    /// Every byte equal to this.
    Byte(u8),
}

/// Checks `[off, off + len)` of a chunk against `expect`.
///
/// # Errors
///
/// [`CliError::Verify`] naming `what`, the first wrong offset, the byte found and the byte expected; I/O
/// errors as [`read_chunk`].
pub fn verify_chunk(emu: &EmuDevice, mc: &MemChunk, off: u64, len: u64, expect: Expect, what: &str) -> CliResult {
    let mut got = vec![0u8; BLOCK.min(len as usize)];
    let mut want = vec![0u8; got.len()];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(BLOCK as u64) as usize;
        read_chunk(emu, mc, off + done, &mut got[..n])?;
        match expect {
            Expect::Pattern(seed) => fill_pattern(seed, off + done, &mut want[..n]),
            Expect::Byte(b) => want[..n].fill(b),
        }
        if got[..n] != want[..n] {
            let i = (0..n).find(|&i| got[i] != want[i]).unwrap_or(0);
            return Err(CliError::Verify(format!(
                "{what}: byte at offset {} is {:#04x}, expected {:#04x}",
                off + done + i as u64,
                got[i],
                want[i]
            )));
        }
        done += n as u64;
    }
    Ok(())
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
