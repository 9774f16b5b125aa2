//! The emulated instance the commands run on, copy directions, and guarded copy windows.

use std::sync::Arc;

use clap::ValueEnum;
use ndma::{Instance, MemChunk, NeuronDevice};
use ndma_emu::{EmuDevice, ExecPolicy, Testbed, TestbedConfig, WaitTiming};

use super::pattern::{fill_chunk, verify_chunk, write_pattern, Expect};
use crate::error::{CliError, CliResult, OpContext};

/// Guard bytes before and after every window.
pub const GUARD: u64 = 4096;
/// What a destination holds before a copy (guards and window).
pub const DST_FILL: u8 = 0xEE;

/// How to build the instance.
#[derive(Debug, Clone, Copy)]
pub struct BedOpts {
    /// The instance preset.
    pub instance: Instance,
    /// Scale poll budgets as on an emulation platform (×100000) instead of silicon budgets.
    pub emulation_budgets: bool,
    /// How the platform times the op layer's marker waits (`--driver-timing`: [`WaitTiming::Driver`]).
    pub timing: WaitTiming,
}

/// Builds the instance with `exec` engines, the default (relaxed) fabric ordering, a real clock and
/// `opts.timing`.
///
/// # Errors
///
/// The model's or the op layer's refusal.
pub fn testbed(opts: BedOpts, exec: ExecPolicy) -> CliResult<Testbed> {
    let mut cfg = TestbedConfig::new(opts.instance);
    cfg.exec = exec;
    cfg.emulation_budgets = opts.emulation_budgets;
    cfg.timing = opts.timing;
    tracing::debug!(
        instance = opts.instance.name,
        ?exec,
        emulation_budgets = opts.emulation_budgets,
        timing = ?opts.timing,
        "building testbed"
    );
    Ok(Testbed::new(cfg)?)
}

/// A copy direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dir {
    /// Host → device.
    H2d,
    /// Device → host.
    D2h,
    /// Device → device.
    D2d,
    /// Host → host.
    H2h,
}

impl Dir {
    /// Every direction.
    pub const ALL: [Dir; 4] = [Dir::H2d, Dir::D2h, Dir::D2d, Dir::H2h];

    /// Is the source host memory?
    pub fn src_host(self) -> bool {
        matches!(self, Dir::H2d | Dir::H2h)
    }
    /// Is the destination host memory?
    pub fn dst_host(self) -> bool {
        matches!(self, Dir::D2h | Dir::H2h)
    }
    /// `h2d`, `d2h`, …
    pub fn name(self) -> &'static str {
        match self {
            Dir::H2d => "h2d",
            Dir::D2h => "d2h",
            Dir::D2d => "d2d",
            Dir::H2h => "h2h",
        }
    }
    /// `host→device`, …
    pub fn long_name(self) -> &'static str {
        match self {
            Dir::H2d => "host→device",
            Dir::D2h => "device→host",
            Dir::D2d => "device→device",
            Dir::H2h => "host→host",
        }
    }
}

/// Allocates a host or device chunk owned by NC `nc`.
///
/// # Errors
///
/// [`ndma::NdmaError::NoMemory`].
pub fn alloc(dev: &NeuronDevice, host: bool, size: u64, nc: u32) -> CliResult<Arc<MemChunk>> {
    if host {
        dev.alloc_host(size, nc).op_ctx(|| format!("allocating {size} bytes of host memory"))
    } else {
        dev.alloc_device(size, nc).op_ctx(|| format!("allocating {size} bytes of device memory"))
    }
}

/// A source and a destination chunk of `len + 2 × GUARD` bytes each; payload offset `GUARD`. The source holds
/// pattern `seed` everywhere, the destination [`DST_FILL`].
pub struct Window<'a> {
    /// The op-layer device.
    pub dev: &'a NeuronDevice,
    /// Its model.
    pub emu: &'a EmuDevice,
    /// Source chunk.
    pub src: Arc<MemChunk>,
    /// Destination chunk.
    pub dst: Arc<MemChunk>,
    /// Payload bytes.
    pub len: u64,
    /// Pattern seed of the source.
    pub seed: u64,
}

impl<'a> Window<'a> {
    /// Allocates and fills both chunks.
    ///
    /// # Errors
    ///
    /// Allocation and back-door write failures.
    pub fn new(dev: &'a NeuronDevice, emu: &'a EmuDevice, dir: Dir, len: u64, nc: u32, seed: u64) -> CliResult<Self> {
        let total = len
            .checked_add(2 * GUARD)
            .ok_or_else(|| CliError::Usage(format!("a window of {len} bytes plus guards does not fit 64 bits")))?;
        let src = alloc(dev, dir.src_host(), total, nc)?;
        let dst = alloc(dev, dir.dst_host(), total, nc)?;
        write_pattern(emu, &src, 0, total, seed)?;
        let w = Window { dev, emu, src, dst, len, seed };
        w.reset_dst()?;
        Ok(w)
    }

    /// Refills the whole destination with [`DST_FILL`].
    ///
    /// # Errors
    ///
    /// Back-door write failures.
    pub fn reset_dst(&self) -> CliResult {
        fill_chunk(self.emu, &self.dst, 0, self.len + 2 * GUARD, DST_FILL)
    }

    /// Copies payload bytes `[off, off + size)` synchronously (`memcpy_mc`).
    ///
    /// # Errors
    ///
    /// The op layer's.
    pub fn copy(&self, off: u64, size: u64) -> ndma::Result<()> {
        self.dev.memcpy_mc(&self.src, &self.dst, GUARD + off, GUARD + off, size)
    }

    /// Destination = guard, the source's payload, guard; and (if `check_source`) the source untouched.
    ///
    /// # Errors
    ///
    /// [`crate::error::CliError::Verify`] on the first wrong byte.
    pub fn verify(&self, what: &str, check_source: bool) -> CliResult {
        let total = self.len + 2 * GUARD;
        if check_source {
            verify_chunk(self.emu, &self.src, 0, total, Expect::Pattern(self.seed), &format!("{what}: source"))?;
        }
        let dst = &self.dst;
        verify_chunk(self.emu, dst, 0, GUARD, Expect::Byte(DST_FILL), &format!("{what}: guard before destination"))?;
        verify_chunk(self.emu, dst, GUARD, self.len, Expect::Pattern(self.seed), &format!("{what}: destination"))?;
        let after = format!("{what}: guard after destination");
        verify_chunk(self.emu, dst, GUARD + self.len, GUARD, Expect::Byte(DST_FILL), &after)
    }
}
