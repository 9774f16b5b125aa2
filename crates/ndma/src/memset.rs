//! `ndma_memset` (spec §6): fill ≤64 KiB through a host buffer, then replicate it forward device-to-device.

use crate::classic::Moves;
use crate::device::{NeuronDevice, MEMSET_HOST_BUF_SIZE};
use crate::memory::MemChunk;
use crate::Result;

impl NeuronDevice {
    /// Sets `size` bytes of `mc` at `offset` to `value`. Under the device's memset lock: fill the 64 KiB
    /// host buffer, copy min(size, 64 KiB) to the chunk, then copy the rest chunk→chunk from that first window
    /// with a fixed source (smove = false) and an advancing destination. Both copies run on the chunk's NC,
    /// host chunks included.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::MEMSET_HOST_BUF_SIZE;
    ///
    /// let mc = dev.alloc_host(1 << 20, 0)?;
    /// mc.fill(0, 1 << 20, 0xee)?;
    /// let before = dev.ring_stats(0)?;
    /// dev.memset(&mc, 4096, 0x5a, 300_000)?; // more than the 64 KiB fill buffer: fill, then replicate
    /// let mut out = vec![0u8; 1 << 20];
    /// mc.read(0, &mut out)?;
    /// assert!(out[..4096].iter().all(|&b| b == 0xee));
    /// assert!(out[4096..304_096].iter().all(|&b| b == 0x5a));
    /// assert!(out[304_096..].iter().all(|&b| b == 0xee));
    /// assert_eq!(MEMSET_HOST_BUF_SIZE, 65536);
    /// assert_eq!(dev.ring_stats(0)?.since(&before).transfers, 2, "the fill copy and the replicate copy");
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::NdmaError::OutOfRange`] when the window falls outside the chunk, [`crate::NdmaError::ForeignChunk`]
    /// for a device chunk of another device (nothing written either way); otherwise
    /// as [`NeuronDevice::memcpy`].
    pub fn memset(&self, mc: &MemChunk, offset: u64, value: u8, size: u64) -> Result<()> {
        let pa = self.chunk_window("memset window", mc, offset, size)?;
        if size == 0 {
            return Ok(());
        }
        let _memset = self.memset_lock.lock().unwrap_or_else(|p| p.into_inner());
        let first = size.min(MEMSET_HOST_BUF_SIZE);
        self.memset_mc.fill(0, first, value)?;
        self.memcpy_mc(&self.memset_mc, mc, 0, offset, first)?;
        let rest = size - first;
        if rest > 0 {
            // The chunk's own NC for both steps (the first copy's NC is the destination's, `mc_pair_to_nc`).
            self.offset_move(mc.nc_id(), pa, pa + first, rest, Moves { smove: false, dmove: true }, None)?;
        }
        Ok(())
    }
}
