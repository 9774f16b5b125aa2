//! Chunk I/O for tests and tools: host chunks through the CPU mapping, device chunks through the model's back
//! door ([`EmuDevice::hbm_read`]/[`EmuDevice::hbm_write`]), in 1 MiB blocks so a check of a large chunk needs
//! no scratch buffer of its size.

use std::sync::Arc;

use ndma::{MemChunk, NeuronDevice};

use super::pattern::fill_pattern;
use super::HarnessError;
use crate::EmuDevice;

/// Block size of chunk I/O.
const BLOCK: usize = 1 << 20;

fn op_err(what: &str) -> impl FnOnce(ndma::NdmaError) -> HarnessError + '_ {
    move |err| HarnessError::Ndma { what: what.to_string(), err }
}

fn emu_err(what: &str) -> impl FnOnce(crate::EmuError) -> HarnessError + '_ {
    move |err| HarnessError::Emu { what: what.to_string(), err }
}

/// Allocates a host (`host`) or device chunk of `size` bytes owned by NC `nc`.
///
/// # Errors
///
/// [`HarnessError::Ndma`] with the op layer's refusal ([`ndma::NdmaError::NoMemory`], an invalid NC).
pub fn alloc(dev: &NeuronDevice, host: bool, size: u64, nc: u32) -> Result<Arc<MemChunk>, HarnessError> {
    let (r, kind) = if host { (dev.alloc_host(size, nc), "host") } else { (dev.alloc_device(size, nc), "device") };
    r.map_err(|err| HarnessError::Ndma { what: format!("allocating {size} bytes of {kind} memory"), err })
}

/// Writes `data` at `off` of a chunk.
///
/// # Errors
///
/// The op layer's ([`HarnessError::Ndma`]) or the model's ([`HarnessError::Emu`]) refusal: out of range.
pub fn write_chunk(emu: &EmuDevice, mc: &MemChunk, off: u64, data: &[u8]) -> Result<(), HarnessError> {
    if mc.is_host() {
        mc.write(off, data).map_err(op_err("writing a host chunk"))
    } else {
        emu.hbm_write(mc.pa() + off, data).map_err(emu_err("writing HBM"))
    }
}

/// Reads `out.len()` bytes at `off` of a chunk.
///
/// # Errors
///
/// As [`write_chunk`].
pub fn read_chunk(emu: &EmuDevice, mc: &MemChunk, off: u64, out: &mut [u8]) -> Result<(), HarnessError> {
    if mc.is_host() {
        mc.read(off, out).map_err(op_err("reading a host chunk"))
    } else {
        emu.hbm_read(mc.pa() + off, out).map_err(emu_err("reading HBM"))
    }
}

/// Reads `len` bytes at `off` of a chunk into a new vector.
///
/// # Errors
///
/// As [`write_chunk`].
pub fn read_vec(emu: &EmuDevice, mc: &MemChunk, off: u64, len: u64) -> Result<Vec<u8>, HarnessError> {
    let mut out = vec![0u8; len as usize];
    read_chunk(emu, mc, off, &mut out)?;
    Ok(out)
}

/// Sets `len` bytes at `off` of a chunk to `byte`.
///
/// # Errors
///
/// As [`write_chunk`].
pub fn fill_chunk(emu: &EmuDevice, mc: &MemChunk, off: u64, len: u64, byte: u8) -> Result<(), HarnessError> {
    if mc.is_host() {
        mc.fill(off, len, byte).map_err(op_err("filling a host chunk"))
    } else {
        emu.hbm_fill(mc.pa() + off, len, byte).map_err(emu_err("filling HBM"))
    }
}

/// Writes pattern `seed` into `[off, off + len)` of a chunk; byte `k` of the chunk gets pattern byte `k`.
///
/// # Errors
///
/// As [`write_chunk`].
pub fn write_pattern(emu: &EmuDevice, mc: &MemChunk, off: u64, len: u64, seed: u64) -> Result<(), HarnessError> {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
/// [`HarnessError::Mismatch`] naming `what`, the first wrong offset, the byte found and the byte expected;
/// I/O errors as [`read_chunk`].
pub fn verify_chunk(
    emu: &EmuDevice,
    mc: &MemChunk,
    off: u64,
    len: u64,
    expect: Expect,
    what: &str,
) -> Result<(), HarnessError> {
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
        if let Some(i) = (0..n).find(|&i| got[i] != want[i]) {
            return Err(HarnessError::Mismatch {
                what: what.to_string(),
                offset: off + done + i as u64,
                found: got[i],
                expected: want[i],
            });
        }
        done += n as u64;
    }
    Ok(())
}
