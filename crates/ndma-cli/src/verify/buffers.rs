//! The memory of one segment of an operation: a source chunk and a destination chunk, each a window with
//! [`GUARD`] bytes before and after it (more before: the window starts at an unaligned offset beyond the
//! guard). Sources are filled with [`Pattern::Source`] everywhere, destinations with [`Pattern::Poison`].

use std::sync::Arc;

use ndma::{MemChunk, NeuronDevice};
use ndma_emu::EmuDevice;

use super::pattern::Pattern;
use crate::error::{CliError, CliResult, OpContext};
use ndma_emu::test_utils::{read_chunk, write_chunk};

/// Guard bytes on each side of a window (before it: plus the window's unaligned offset).
pub const GUARD: u64 = 4096;

/// Block size of chunk I/O: a 256 MiB window needs no 256 MiB buffer.
pub const BLOCK: usize = 1 << 20;

/// One chunk with a window in it.
#[derive(Debug, Clone)]
pub struct Side {
    /// The chunk.
    pub chunk: Arc<MemChunk>,
    /// Offset of the window in the chunk (the guard before it plus an unaligned offset).
    pub lead: u64,
    /// Window bytes.
    pub len: u64,
}

impl Side {
    /// Allocates a chunk for a window of `len` bytes at `GUARD + off`, on `dev`'s host or HBM, owned by NC `nc`.
    ///
    /// # Errors
    ///
    /// The pool's refusal.
    pub fn alloc(dev: &NeuronDevice, host: bool, nc: u32, off: u64, len: u64) -> CliResult<Side> {
        let lead = GUARD + off;
        let total = lead + len + GUARD;
        let chunk = if host {
            dev.alloc_host(total, nc).op_ctx(|| format!("allocating {total} bytes of host memory"))?
        } else {
            dev.alloc_device(total, nc).op_ctx(|| format!("allocating {total} bytes of device memory"))?
        };
        Ok(Side { chunk, lead, len })
    }

    /// Bytes of the chunk.
    pub fn total(&self) -> u64 {
        self.lead + self.len + GUARD
    }

    /// Fills the whole chunk with `p` (at chunk offsets).
    ///
    /// # Errors
    ///
    /// The back door's refusal.
    pub fn fill(&self, emu: &EmuDevice, p: Pattern) -> CliResult {
        let total = self.total();
        with_scratch(|buf| {
            let mut done = 0u64;
            while done < total {
                let n = (total - done).min(BLOCK as u64) as usize;
                p.fill(done, &mut buf[..n]);
                write_chunk(emu, &self.chunk, done, &buf[..n])?;
                done += n as u64;
            }
            Ok(())
        })
    }
}

/// Reads `out.len()` bytes at `off` of `mc` (host chunks through the CPU mapping, device chunks through the
/// model's back door).
///
/// # Errors
///
/// The back door's refusal.
pub fn read(emu: &EmuDevice, mc: &MemChunk, off: u64, out: &mut [u8]) -> CliResult {
    Ok(read_chunk(emu, mc, off, out)?)
}

/// Writes `data` at `off` of `mc`.
///
/// # Errors
///
/// The back door's refusal.
pub fn write(emu: &EmuDevice, mc: &MemChunk, off: u64, data: &[u8]) -> CliResult {
    Ok(write_chunk(emu, mc, off, data)?)
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's block-sized scratch buffer (allocated once per thread).
pub fn with_scratch<T>(f: impl FnOnce(&mut [u8]) -> T) -> T {
    SCRATCH.with(|s| {
        // Taken out while in use, so a nested call gets a buffer of its own instead of a borrow panic.
        let mut buf = std::mem::take(&mut *s.borrow_mut());
        buf.resize(BLOCK, 0);
        let r = f(&mut buf);
        *s.borrow_mut() = buf;
        r
    })
}

/// A usage error for a window that cannot be laid out (a size near `u64::MAX`).
pub fn too_large(len: u64) -> CliError {
    CliError::Usage(format!("a window of {len} bytes plus guards does not fit"))
}
