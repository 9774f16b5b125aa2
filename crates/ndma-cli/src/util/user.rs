//! User buffers for the zero-copy commands: a process's address space entered on the calling thread, a
//! guarded user window laid out by a placement policy, and the device window it moves to or from.
//!
//! A [`UserWindow`] is a mapping of whole pages: one guard page, then `offset` bytes, then the `len` bytes the
//! transfer moves, then at least [`GUARD`] more bytes up to the end of the last page. The device side is a chunk
//! of `GUARD + len + GUARD` bytes with the window at `GUARD`. Before a transfer the source holds pattern `seed`
//! at its own offsets and the destination [`DST_FILL`]; afterwards [`UserWindow::verify`] checks every byte of
//! both: the source unchanged, the destination's guards untouched, its window the source's bytes.

use std::ops::Range;
use std::sync::Arc;

use clap::ValueEnum;
use ndma::{BatchOp, MemChunk, NeuronDevice, PAGE_SIZE};
use ndma_emu::user::EnterGuard;
use ndma_emu::{AddressSpace, EmuDevice, HostMemory, MapSpec, MmError, Placement};

use crate::error::{CliError, CliResult};
use ndma_emu::test_utils::{alloc, fill_chunk, fill_pattern, read_chunk, write_pattern, DST_FILL, GUARD};

/// Block size of user-memory I/O.
const BLOCK: u64 = 1 << 20;

/// The direction of a zero-copy transfer: the user buffer is always the host side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UserDir {
    /// User buffer → device memory.
    H2d,
    /// Device memory → user buffer.
    D2h,
}

impl UserDir {
    /// Both directions.
    pub const ALL: [UserDir; 2] = [UserDir::H2d, UserDir::D2h];

    /// `zerocopy_submit`'s `to_device`.
    pub fn to_device(self) -> bool {
        self == UserDir::H2d
    }
    /// `h2d` or `d2h`.
    pub fn name(self) -> &'static str {
        match self {
            UserDir::H2d => "h2d",
            UserDir::D2h => "d2h",
        }
    }
    /// `host→device` or `device→host`.
    pub fn long_name(self) -> &'static str {
        match self {
            UserDir::H2d => "host→device",
            UserDir::D2h => "device→host",
        }
    }
}

/// How the frames of a user buffer are laid out (`--layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One physically contiguous run.
    Contiguous,
    /// Every page on its own frame, no two consecutive.
    Scattered,
    /// Runs of K contiguous frames.
    Runs(usize),
}

impl Layout {
    /// The model's placement policy, seeded by `seed`.
    pub fn placement(self, seed: u64) -> Placement {
        match self {
            Layout::Contiguous => Placement::Contiguous,
            Layout::Scattered => Placement::Scattered { seed },
            Layout::Runs(k) => Placement::Runs { k, seed },
        }
    }

    /// `contiguous`, `scattered` or `runs:K`, as on the command line and in the JSON.
    pub fn name(self) -> String {
        match self {
            Layout::Contiguous => "contiguous".into(),
            Layout::Scattered => "scattered".into(),
            Layout::Runs(k) => format!("runs:{k}"),
        }
    }
}

/// Parses `--layout`: `contiguous`, `scattered` or `runs:K` (K ≥ 1).
///
/// # Errors
///
/// A message naming the accepted forms.
pub fn layout_arg(s: &str) -> Result<Layout, String> {
    let t = s.trim().to_ascii_lowercase();
    let bad = || format!("invalid layout {s:?}: expected contiguous, scattered or runs:K (K ≥ 1 frames per run)");
    match t.as_str() {
        "contiguous" => Ok(Layout::Contiguous),
        "scattered" => Ok(Layout::Scattered),
        _ => {
            let k: usize = t.strip_prefix("runs:").ok_or_else(bad)?.trim().parse().map_err(|_| bad())?;
            if k == 0 {
                return Err(bad());
            }
            Ok(Layout::Runs(k))
        }
    }
}

/// A user process for the zero-copy commands: its address space, entered on the calling thread (so the op
/// layer's `current_mm` is it) until the value drops. Bound to the thread that made it.
pub struct Process {
    /// The address space.
    pub mm: Arc<AddressSpace>,
    _enter: EnterGuard,
}

impl Process {
    /// A fresh address space of process `pid` with frames in `host`, entered on this thread.
    pub fn enter(host: &Arc<HostMemory>, pid: u32) -> Process {
        let mm = AddressSpace::new(host, pid);
        let enter = mm.enter();
        Process { mm, _enter: enter }
    }
}

/// A user-memory error as a CLI error (a refused back-door access: [`crate::error::ExitCode::Device`]).
pub fn mm_err(what: impl Into<String>, e: &MmError) -> CliError {
    CliError::Emu { what: what.into(), msg: e.to_string(), errno: e.errno() }
}

/// What a region should hold.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Pattern `seed`, starting at pattern offset `at`.
    Pattern { seed: u64, at: u64 },
    /// Every byte equal to this.
    Byte(u8),
}

/// Checks `len` bytes read by `read(offset, buf)` from `start` against `want`, in blocks.
fn check(what: &str, start: u64, len: u64, want: Want, mut read: impl FnMut(u64, &mut [u8]) -> CliResult) -> CliResult {
    let n0 = BLOCK.min(len) as usize;
    let (mut got, mut exp) = (vec![0u8; n0], vec![0u8; n0]);
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(BLOCK) as usize;
        read(start + done, &mut got[..n])?;
        match want {
            Want::Pattern { seed, at } => fill_pattern(seed, at + done, &mut exp[..n]),
            Want::Byte(b) => exp[..n].fill(b),
        }
        if got[..n] != exp[..n] {
            let i = (0..n).find(|&i| got[i] != exp[i]).unwrap_or(0);
            return Err(CliError::Verify(format!(
                "{what}: byte at offset {} is {:#04x}, expected {:#04x}",
                start + done + i as u64,
                got[i],
                exp[i]
            )));
        }
        done += n as u64;
    }
    Ok(())
}

/// A guarded user buffer and its device window. See the module documentation.
pub struct UserWindow {
    /// The address space the buffer is mapped in.
    pub mm: Arc<AddressSpace>,
    /// First address of the mapping (the guard page).
    pub map_va: u64,
    /// Bytes mapped (whole pages, holes included).
    pub map_len: u64,
    /// User address of the first byte moved: `map_va + GUARD + offset`.
    pub va: u64,
    /// Bytes moved.
    pub len: u64,
    /// Offset of the window past the guard page (its page offset is `offset % PAGE_SIZE`).
    pub offset: u64,
    /// Pages of the mapping left unmapped (indices from `map_va`).
    pub holes: Vec<u64>,
    /// The device chunk: `GUARD + len + GUARD` bytes, the window at `GUARD`.
    pub mc: Arc<MemChunk>,
    /// Direction: the user buffer is the source (`true`) or the destination.
    pub to_device: bool,
    /// Pattern seed of the source.
    pub seed: u64,
}

impl UserWindow {
    /// Maps the user buffer (`layout` seeded by `seed`, `holes` = window pages to leave unmapped, counted from
    /// the window's first page), allocates the device chunk on NC `nc`, and fills both.
    ///
    /// # Errors
    ///
    /// Mapping, allocation and fill failures; a window too large for 64 bits is a usage error.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: &NeuronDevice,
        emu: &EmuDevice,
        mm: &Arc<AddressSpace>,
        dir: UserDir,
        len: u64,
        offset: u64,
        layout: Layout,
        seed: u64,
        holes: &[u64],
        nc: u32,
    ) -> CliResult<UserWindow> {
        let too_big = || CliError::Usage(format!("a user window of {len} bytes at offset {offset} does not fit"));
        let user_bytes = GUARD.checked_add(offset).and_then(|b| b.checked_add(len)).ok_or_else(too_big)?;
        let map_len = user_bytes.checked_add(GUARD).ok_or_else(too_big)?.next_multiple_of(PAGE_SIZE);
        let dev_len = len.checked_add(2 * GUARD).ok_or_else(too_big)?;
        let pages = usize::try_from(map_len / PAGE_SIZE).map_err(|_| too_big())?;
        let first_window_page = (GUARD + offset) / PAGE_SIZE;
        let holes: Vec<u64> = holes.iter().map(|h| first_window_page + h).collect();
        let spec = MapSpec::new(pages, layout.placement(seed)).holes(holes.iter().map(|&h| h as usize));
        let map_va = mm.map(&spec).map_err(|e| mm_err(format!("mapping {pages} user pages"), &e))?;
        let mc = alloc(dev, false, dev_len, nc)?;
        let w = UserWindow {
            mm: Arc::clone(mm),
            map_va,
            map_len,
            va: map_va + GUARD + offset,
            len,
            offset,
            holes,
            mc,
            to_device: dir.to_device(),
            seed,
        };
        if w.to_device {
            w.user_segments(0..map_len).into_iter().try_for_each(|r| w.write_user_pattern(r))?;
            fill_chunk(emu, &w.mc, 0, dev_len, DST_FILL)?;
        } else {
            write_pattern(emu, &w.mc, 0, dev_len, seed)?;
            w.reset_dst(emu)?;
        }
        Ok(w)
    }

    /// The mapped (non-hole) parts of `range` (offsets from `map_va`).
    fn user_segments(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        let mut at = range.start;
        while at < range.end {
            let page = at / PAGE_SIZE;
            let end = ((page + 1) * PAGE_SIZE).min(range.end);
            if !self.holes.contains(&page) {
                match out.last_mut() {
                    Some(last) if last.end == at => last.end = end,
                    _ => out.push(at..end),
                }
            }
            at = end;
        }
        out
    }

    fn write_user_pattern(&self, r: Range<u64>) -> CliResult {
        let mut buf = vec![0u8; BLOCK.min(r.end - r.start) as usize];
        let mut at = r.start;
        while at < r.end {
            let n = (r.end - at).min(BLOCK) as usize;
            fill_pattern(self.seed, at, &mut buf[..n]);
            self.mm.write(self.map_va + at, &buf[..n]).map_err(|e| mm_err("writing the user buffer", &e))?;
            at += n as u64;
        }
        Ok(())
    }

    fn read_user(&self, off: u64, buf: &mut [u8]) -> CliResult {
        self.mm.read(self.map_va + off, buf).map_err(|e| mm_err("reading the user buffer", &e))
    }

    /// Refills the destination (and its guards) with [`DST_FILL`].
    ///
    /// # Errors
    ///
    /// Back-door and user-memory write failures.
    pub fn reset_dst(&self, emu: &EmuDevice) -> CliResult {
        if self.to_device {
            return Ok(fill_chunk(emu, &self.mc, 0, self.len + 2 * GUARD, DST_FILL)?);
        }
        for r in self.user_segments(0..self.map_len) {
            self.mm
                .fill(self.map_va + r.start, r.end - r.start, DST_FILL)
                .map_err(|e| mm_err("filling the user buffer", &e))?;
        }
        Ok(())
    }

    /// `requests` requests of `ops` batch ops each, cutting the window into `requests × ops` consecutive parts
    /// (sizes differ by at most one byte; parts may be empty when the window is smaller), for
    /// `zerocopy_submit(.., &self.mc, 0, ..)`.
    pub fn requests(&self, requests: u64, ops: u64) -> Vec<Vec<BatchOp>> {
        let (requests, ops) = (requests.max(1), ops.max(1));
        let parts = u128::from(requests) * u128::from(ops);
        // Part boundaries: floor(len × i / parts), so the sizes differ by at most one byte.
        let at = |i: u64| (u128::from(self.len) * u128::from(i) / parts) as u64;
        (0..requests).map(|r| (0..ops).map(|o| self.op(at(r * ops + o)..at(r * ops + o + 1))).collect()).collect()
    }

    /// One op over window bytes `range`.
    pub fn op(&self, range: Range<u64>) -> BatchOp {
        BatchOp { offset: GUARD + range.start, size: range.end - range.start, buffer: self.va + range.start }
    }

    /// Verifies every byte: the source unchanged, the destination's guards untouched and its window equal to
    /// the source's.
    ///
    /// # Errors
    ///
    /// [`CliError::Verify`] at the first wrong byte; read failures.
    pub fn verify(&self, emu: &EmuDevice, what: &str) -> CliResult {
        self.verify_parts(emu, what, Some(0..self.len))
    }

    /// Verifies only the source: the user buffer (h2d) or the device chunk (d2h) holds what it was filled with
    /// (after the process exited, only a device source can still be read).
    ///
    /// # Errors
    ///
    /// As [`UserWindow::verify`].
    pub fn verify_source(&self, emu: &EmuDevice, what: &str) -> CliResult {
        if self.to_device {
            for r in self.user_segments(0..self.map_len) {
                let want = Want::Pattern { seed: self.seed, at: r.start };
                check(&format!("{what}: user buffer (source)"), r.start, r.end - r.start, want, |o, b| {
                    self.read_user(o, b)
                })?;
            }
            Ok(())
        } else {
            let want = Want::Pattern { seed: self.seed, at: 0 };
            check(&format!("{what}: device chunk (source)"), 0, self.len + 2 * GUARD, want, |o, b| {
                Ok(read_chunk(emu, &self.mc, o, b)?)
            })
        }
    }

    /// As [`UserWindow::verify`], but of the destination's window only the window-relative `parts` are checked
    /// (the rest may hold anything, e.g. after a failed request); guards and source are checked whole.
    ///
    /// # Errors
    ///
    /// As [`UserWindow::verify`].
    pub fn verify_parts(&self, emu: &EmuDevice, what: &str, parts: impl IntoIterator<Item = Range<u64>>) -> CliResult {
        let (seed, len) = (self.seed, self.len);
        let user_window = GUARD + self.offset;
        let dev = |off: u64, buf: &mut [u8]| Ok(read_chunk(emu, &self.mc, off, buf)?);
        let user = |off: u64, buf: &mut [u8]| self.read_user(off, buf);
        if self.to_device {
            for r in self.user_segments(0..self.map_len) {
                let want = Want::Pattern { seed, at: r.start };
                check(&format!("{what}: user buffer (source)"), r.start, r.end - r.start, want, user)?;
            }
            check(&format!("{what}: device guard before"), 0, GUARD, Want::Byte(DST_FILL), dev)?;
            check(&format!("{what}: device guard after"), GUARD + len, GUARD, Want::Byte(DST_FILL), dev)?;
            for p in parts {
                let want = Want::Pattern { seed, at: user_window + p.start };
                check(&format!("{what}: device window"), GUARD + p.start, p.end - p.start, want, dev)?;
            }
        } else {
            check(&format!("{what}: device chunk (source)"), 0, len + 2 * GUARD, Want::Pattern { seed, at: 0 }, dev)?;
            for r in self.user_segments(0..user_window) {
                check(&format!("{what}: user bytes before"), r.start, r.end - r.start, Want::Byte(DST_FILL), user)?;
            }
            for r in self.user_segments(user_window + len..self.map_len) {
                check(&format!("{what}: user bytes after"), r.start, r.end - r.start, Want::Byte(DST_FILL), user)?;
            }
            for p in parts {
                for r in self.user_segments(user_window + p.start..user_window + p.end) {
                    // User byte `user_window + k` is device byte `GUARD + k`.
                    let want = Want::Pattern { seed, at: r.start - user_window + GUARD };
                    check(&format!("{what}: user window"), r.start, r.end - r.start, want, user)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_and_print_back() {
        for (s, l) in
            [("contiguous", Layout::Contiguous), ("Scattered", Layout::Scattered), ("runs:3", Layout::Runs(3))]
        {
            assert_eq!(layout_arg(s), Ok(l), "{s}");
            assert_eq!(layout_arg(&l.name()), Ok(l));
        }
        for s in ["runs:0", "runs:", "runs", "runs:x", "spread", ""] {
            assert!(layout_arg(s).is_err_and(|e| e.contains("runs:K")), "{s:?}");
        }
    }
}
