//! A guarded copy window, dmatest-style: source and destination chunks with guard bytes before and after
//! the payload, so a copy that writes one byte too many or too few, or in the wrong place, shows.

use std::sync::Arc;

use ndma::{MemChunk, NeuronDevice, Transfer};

use super::chunk::{alloc, fill_chunk, verify_chunk, write_pattern, Expect};
use super::pattern::pattern;
use super::{Dir, HarnessError};
use crate::EmuDevice;

/// Guard bytes before and after every window.
pub const GUARD: u64 = 4096;
/// What a destination holds before a copy (guards and payload).
pub const DST_FILL: u8 = 0xEE;

/// A source and a destination chunk of `len + 2 × GUARD` bytes each, payload at offset [`GUARD`]. The source
/// holds pattern `seed` everywhere (guards included), the destination [`DST_FILL`].
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
    /// Allocates both chunks on NC `nc` (host or device memory as `dir` says) and fills them.
    ///
    /// # Errors
    ///
    /// [`HarnessError::TooLarge`], allocation and back-door write failures.
    pub fn new(
        dev: &'a NeuronDevice,
        emu: &'a EmuDevice,
        dir: Dir,
        len: u64,
        nc: u32,
        seed: u64,
    ) -> Result<Self, HarnessError> {
        let total = len.checked_add(2 * GUARD).ok_or(HarnessError::TooLarge { len })?;
        let src = alloc(dev, dir.src_host(), total, nc)?;
        let dst = alloc(dev, dir.dst_host(), total, nc)?;
        write_pattern(emu, &src, 0, total, seed)?;
        let w = Window { dev, emu, src, dst, len, seed };
        w.reset_dst()?;
        Ok(w)
    }

    /// Bytes of each chunk: the payload and both guards.
    pub fn total(&self) -> u64 {
        self.len + 2 * GUARD
    }

    /// What the source holds, guards included.
    pub fn source_bytes(&self) -> Vec<u8> {
        pattern(self.seed, 0, self.total() as usize)
    }

    /// Refills the whole destination with [`DST_FILL`].
    ///
    /// # Errors
    ///
    /// Back-door write failures.
    pub fn reset_dst(&self) -> Result<(), HarnessError> {
        fill_chunk(self.emu, &self.dst, 0, self.total(), DST_FILL)
    }

    /// Copies payload bytes `[off, off + size)` synchronously (`memcpy_mc`).
    ///
    /// # Errors
    ///
    /// The op layer's.
    pub fn copy(&self, off: u64, size: u64) -> ndma::Result<()> {
        self.dev.memcpy_mc(&self.src, &self.dst, GUARD + off, GUARD + off, size)
    }

    /// Copies the whole payload synchronously (`memcpy_mc`).
    ///
    /// # Errors
    ///
    /// The op layer's.
    pub fn copy_all(&self) -> ndma::Result<()> {
        self.copy(0, self.len)
    }

    /// The copy of the whole payload as a [`Transfer`].
    pub fn transfer(&self) -> Transfer {
        Transfer::new(&self.src, &self.dst, self.len).src_offset(GUARD).dst_offset(GUARD)
    }

    /// Destination = guard, the source's payload, guard; and (if `check_source`) the source untouched.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Mismatch`] on the first wrong byte; back-door read failures.
    pub fn verify(&self, what: &str, check_source: bool) -> Result<(), HarnessError> {
        let emu = self.emu;
        if check_source {
            verify_chunk(emu, &self.src, 0, self.total(), Expect::Pattern(self.seed), &format!("{what}: source"))?;
        }
        let dst = &self.dst;
        verify_chunk(emu, dst, 0, GUARD, Expect::Byte(DST_FILL), &format!("{what}: guard before destination"))?;
        verify_chunk(emu, dst, GUARD, self.len, Expect::Pattern(self.seed), &format!("{what}: destination"))?;
        let after = format!("{what}: guard after destination");
        verify_chunk(emu, dst, GUARD + self.len, GUARD, Expect::Byte(DST_FILL), &after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_utils::{testbed, write_chunk};
    use crate::{ClockKind, ExecPolicy, OrderingMode};
    use udma::Arch;

    #[test]
    fn verify_names_the_first_wrong_byte_in_either_guard_and_in_the_payload() {
        let tb = testbed(Arch::V2, ExecPolicy::Inline, OrderingMode::Strict, ClockKind::Fake);
        let (dev, emu) = tb.device(0);
        for dir in Dir::ALL {
            let w = Window::new(dev, emu, dir, 1000, 0, 5).unwrap();
            let err = w.verify("fresh", false).unwrap_err();
            // Nothing copied yet: the destination's payload still holds DST_FILL.
            let first = pattern(5, GUARD, 1);
            assert!(
                matches!(err, HarnessError::Mismatch { offset: GUARD, found: DST_FILL, expected, .. } if expected == first[0]),
                "{dir}: {err}"
            );
            w.copy_all().unwrap();
            w.verify("copied", true).unwrap();
            for (at, what) in [
                (GUARD - 1, "guard before destination"),
                (GUARD + 1000, "guard after destination"),
                (GUARD + 500, "destination"),
            ] {
                let was = crate::test_utils::read_vec(emu, &w.dst, at, 1).unwrap()[0];
                write_chunk(emu, &w.dst, at, &[!was]).unwrap();
                match w.verify("tampered", false).unwrap_err() {
                    HarnessError::Mismatch { what: region, offset, found, .. } => {
                        assert_eq!((offset, found), (at, !was), "{dir} {what}");
                        assert_eq!(region, format!("tampered: {what}"), "{dir}");
                    }
                    e => panic!("{dir} {what}: {e}"),
                }
                write_chunk(emu, &w.dst, at, &[was]).unwrap();
            }
            w.verify("restored", true).unwrap();
        }
    }
}
