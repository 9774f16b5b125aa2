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
    /// # Errors
    ///
    /// [`crate::NdmaError::OutOfRange`] when the window falls outside the chunk (nothing written); otherwise
    /// as [`NeuronDevice::memcpy`].
    pub fn memset(&self, mc: &MemChunk, offset: u64, value: u8, size: u64) -> Result<()> {
        mc.check_range("memset window", offset, size)?;
        if size == 0 {
            return Ok(());
        }
        let _memset = self.memset_lock.lock().unwrap_or_else(|p| p.into_inner());
        let first = size.min(MEMSET_HOST_BUF_SIZE);
        self.memset_mc.fill(0, first, value)?;
        self.memcpy_mc(&self.memset_mc, mc, 0, offset, first)?;
        let rest = size - first;
        if rest > 0 {
            let pa = self.mc_to_pa(mc) + offset;
            // The chunk's own NC for both steps (the first copy's NC is the destination's, `mc_pair_to_nc`).
            self.offset_move(mc.nc_id(), pa, pa + first, rest, Moves { smove: false, dmove: true }, None)?;
        }
        Ok(())
    }
}
