//! Byte-for-byte checks of a chunk region against what it must hold, and the report of a mismatch: the first
//! bad offset, the length of the bad run, the bytes expected and found, and what the found bytes look like
//! (poison never overwritten, or bytes of the source from another offset).

use ndma::MemChunk;
use ndma_emu::EmuDevice;
use serde::Serialize;

use super::buffers::{read, with_scratch, BLOCK};
use super::pattern::Pattern;
use crate::error::CliResult;

/// What a region must hold.
#[derive(Debug, Clone, Copy)]
pub enum Expect<'a> {
    /// Byte `i` of the region is byte `at + i` of the pattern.
    Pattern {
        /// The pattern.
        pattern: Pattern,
        /// Pattern offset of the region's first byte.
        at: u64,
    },
    /// Every byte is this one.
    Byte(u8),
    /// Exactly these bytes.
    Bytes(&'a [u8]),
}

impl Expect<'_> {
    /// Fills `buf` with the bytes expected at region offsets `[off, off + buf.len())`.
    fn fill(&self, off: u64, buf: &mut [u8]) {
        match *self {
            Expect::Pattern { pattern, at } => pattern.fill(at + off, buf),
            Expect::Byte(b) => buf.fill(b),
            Expect::Bytes(bytes) => buf.copy_from_slice(&bytes[off as usize..off as usize + buf.len()]),
        }
    }
}

/// A region that does not hold what it must.
#[derive(Debug, Clone, Serialize)]
pub struct Mismatch {
    /// Which region, e.g. "destination window of segment 0".
    pub region: String,
    /// Chunk offset of the first bad byte.
    pub chunk_offset: u64,
    /// Its offset from the start of the region.
    pub region_offset: u64,
    /// Bytes from the first bad one to the last bad one before 16 good ones in a row.
    pub run: u64,
    /// Bad bytes in the whole region.
    pub bad_bytes: u64,
    /// Up to 16 bytes expected from the first bad one.
    pub expected: String,
    /// The bytes found there.
    pub found: String,
    /// What the found bytes are, if recognised.
    pub diagnosis: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: first bad byte at offset {} of the region (chunk offset {}), bad run {} bytes, {} bad bytes in \
             the region; expected {} found {} ({})",
            self.region,
            self.region_offset,
            self.chunk_offset,
            self.run,
            self.bad_bytes,
            self.expected,
            self.found,
            self.diagnosis
        )
    }
}

/// What helps name the found bytes of a mismatch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clues {
    /// The poison of the chunk checked (a byte equal to it was never written).
    pub poison: Option<Pattern>,
    /// The source of the transfer and its chunk size (found bytes may come from another offset of it).
    pub source: Option<(Pattern, u64)>,
}

/// A region of a chunk to check.
#[derive(Debug, Clone, Copy)]
pub struct Region<'a> {
    /// Its name in a report.
    pub name: &'a str,
    /// Chunk offset of its first byte.
    pub off: u64,
    /// Bytes.
    pub len: u64,
}

/// Checks a region of `mc`: every byte must be `expect`'s, or — when `or_poison` is given (a transfer that
/// failed part-way) — either that or the poison byte at the same chunk offset.
///
/// # Errors
///
/// Back-door read failures; a mismatch is `Ok(Some(_))`.
pub fn region(
    emu: &EmuDevice,
    mc: &MemChunk,
    r: Region<'_>,
    expect: Expect<'_>,
    or_poison: Option<Pattern>,
    clues: Clues,
) -> CliResult<Option<Mismatch>> {
    region_with(|off, buf| read(emu, mc, off, buf), r, expect, or_poison, clues)
}

/// As [`region`], of memory `read(offset, buf)` reads (a user buffer: offsets from its mapping's start).
///
/// # Errors
///
/// `read`'s failures; a mismatch is `Ok(Some(_))`.
pub fn region_with(
    mut read: impl FnMut(u64, &mut [u8]) -> CliResult,
    r: Region<'_>,
    expect: Expect<'_>,
    or_poison: Option<Pattern>,
    clues: Clues,
) -> CliResult<Option<Mismatch>> {
    with_scratch(|got| {
        let mut want = Vec::new();
        let mut alt = Vec::new();
        let mut scan = Scan::default();
        let mut done = 0u64;
        while done < r.len {
            let n = (r.len - done).min(BLOCK as u64) as usize;
            let got = &mut got[..n];
            read(r.off + done, got)?;
            // The common case, a clean block, is decided without generating the expected bytes.
            let fast = match (or_poison, expect) {
                (None, Expect::Pattern { pattern, at }) => Some(pattern.matches(at + done, got)),
                // A fold with no early exit, so it vectorises.
                (None, Expect::Byte(b)) => Some(got.iter().fold(0u8, |acc, &x| acc | (x ^ b)) == 0),
                (None, Expect::Bytes(bytes)) => Some(*got == bytes[done as usize..done as usize + n]),
                (Some(_), _) => None,
            };
            if fast == Some(true) && !scan.open() {
                done += n as u64;
                continue;
            }
            want.resize(n, 0);
            expect.fill(done, &mut want[..n]);
            let clean = match or_poison {
                None => fast.unwrap_or(false),
                Some(p) => {
                    alt.resize(n, 0);
                    p.fill(r.off + done, &mut alt[..n]);
                    (0..n).all(|i| got[i] == want[i] || got[i] == alt[i])
                }
            };
            if !clean || scan.open() {
                for i in 0..n {
                    let ok = got[i] == want[i] || (or_poison.is_some() && got[i] == alt[i]);
                    if scan.step(done + i as u64, ok) {
                        scan.capture(&got[i..n], &want[i..n]);
                    }
                }
            }
            done += n as u64;
        }
        Ok(report(scan, r, expect, clues))
    })
}

/// The mismatch a finished scan of `r` describes, if any.
fn report(scan: Scan, r: Region<'_>, expect: Expect<'_>, clues: Clues) -> Option<Mismatch> {
    scan.first.map(|first| {
        let expected_from = match expect {
            Expect::Pattern { pattern: Pattern::Source(_), at } => Some(at + first),
            _ => None,
        };
        let diagnosis = diagnose(&scan.found, r.off + first, expected_from, clues);
        Mismatch {
            region: r.name.to_string(),
            chunk_offset: r.off + first,
            region_offset: first,
            run: scan.last_bad - first + 1,
            bad_bytes: scan.bad,
            expected: hex(&scan.expected),
            found: hex(&scan.found),
            diagnosis,
        }
    })
}

/// The mismatch scan: the first bad byte, the end of its run, the count of bad bytes.
#[derive(Debug, Default)]
struct Scan {
    first: Option<u64>,
    last_bad: u64,
    /// Good bytes since the last bad one while the run is open.
    good_streak: u32,
    run_closed: bool,
    bad: u64,
    expected: Vec<u8>,
    found: Vec<u8>,
}

/// Good bytes in a row that end a bad run.
const RUN_END: u32 = 16;
/// Bytes shown of a mismatch.
const SHOWN: usize = 16;

impl Scan {
    /// Is a run still open (so the next block must be scanned byte by byte even if it is clean)?
    fn open(&self) -> bool {
        self.first.is_some() && !self.run_closed
    }

    /// Accounts byte `at`; returns true when it is the first bad byte (capture its neighbourhood then).
    fn step(&mut self, at: u64, ok: bool) -> bool {
        if ok {
            if self.open() {
                self.good_streak += 1;
                if self.good_streak >= RUN_END {
                    self.run_closed = true;
                }
            }
            return false;
        }
        self.bad += 1;
        match self.first {
            None => {
                self.first = Some(at);
                self.last_bad = at;
                true
            }
            Some(_) => {
                if !self.run_closed {
                    self.last_bad = at;
                    self.good_streak = 0;
                }
                false
            }
        }
    }

    fn capture(&mut self, got: &[u8], want: &[u8]) {
        let n = got.len().min(SHOWN);
        self.found = got[..n].to_vec();
        self.expected = want[..n].to_vec();
    }
}

/// Are `found` (the bytes from chunk offset `at`) the poison of those offsets?
fn is_poison_here(found: &[u8], at: u64, poison: Pattern) -> bool {
    found.iter().enumerate().all(|(i, &b)| b == poison.byte(at + i as u64))
}

/// What `found` (the bytes from chunk offset `at`, which should have come from source offset
/// `expected_from` if that is known) looks like.
fn diagnose(found: &[u8], at: u64, expected_from: Option<u64>, clues: Clues) -> String {
    if let Some(p) = clues.poison {
        if !found.is_empty() && is_poison_here(found, at, p) {
            return "the destination's poison: never written".into();
        }
    }
    if found.iter().all(|b| b & 0x80 == 0) && clues.poison.is_some() {
        return "bit 7 clear: poison, but not this offset's (a stray write of destination bytes?)".into();
    }
    if let Some((src, total)) = clues.source {
        let needle = &found[..found.len().min(8)];
        if needle.len() == 8 {
            if let Some(from) = src.find(needle, total) {
                return match expected_from {
                    Some(want) => format!(
                        "bytes of source chunk offset {from}, expected from offset {want}: shifted by {}",
                        from as i128 - want as i128
                    ),
                    None => format!("bytes of source chunk offset {from}"),
                };
            }
        }
    }
    "unrecognised bytes".into()
}

/// Bytes as `aa bb cc`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_ends_after_sixteen_good_bytes() {
        let mut s = Scan::default();
        let pattern = [true, false, false, true, false]; // bad at 1, 2, 4
        for (i, ok) in pattern.iter().enumerate() {
            s.step(i as u64, *ok);
        }
        for i in 5..30 {
            s.step(i, true);
        }
        s.step(40, false);
        assert_eq!((s.first, s.last_bad, s.bad), (Some(1), 4, 4));
    }
}
