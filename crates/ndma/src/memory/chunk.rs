//! A memory chunk: a run of host or device memory the op layer copies to or from.

use std::sync::Arc;

use super::pool::PoolShared;
use crate::{HostBuf, NdmaError, Result};

/// Where a chunk lives (`enum mem_location`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemLocation {
    /// Host DRAM, reached by the device across PCIe (`MEM_LOC_HOST`).
    Host,
    /// Device HBM (`MEM_LOC_DEVICE`).
    Device,
}

/// A chunk of host or device memory (`struct mem_chunk`). Dropping the last reference frees it.
pub struct MemChunk {
    location: MemLocation,
    /// Host: host PA | `pci_host_base` (as the driver stores it); device: the HBM PA.
    pa: u64,
    size: u64,
    nc_id: u32,
    host: Option<HostBuf>,
    pool: Arc<PoolShared>,
}

impl MemChunk {
    pub(super) fn new(
        location: MemLocation,
        pa: u64,
        size: u64,
        nc_id: u32,
        host: Option<HostBuf>,
        pool: Arc<PoolShared>,
    ) -> Self {
        MemChunk { location, pa, size, nc_id, host, pool }
    }

    /// Host or device.
    pub fn location(&self) -> MemLocation {
        self.location
    }
    /// The chunk's physical address: for a host chunk the host PA with `pci_host_base` OR-ed in.
    pub fn pa(&self) -> u64 {
        self.pa
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// The NeuronCore that owns the chunk.
    pub fn nc_id(&self) -> u32 {
        self.nc_id
    }
    /// True for a host chunk.
    pub fn is_host(&self) -> bool {
        self.location == MemLocation::Host
    }
    /// The CPU mapping of a host chunk.
    pub fn host_buf(&self) -> Option<&HostBuf> {
        self.host.as_ref()
    }

    /// Checks that `[offset, offset + size)` lies inside the chunk.
    ///
    /// # Errors
    ///
    /// [`NdmaError::OutOfRange`] when it does not or the end overflows.
    pub fn check_range(&self, what: &'static str, offset: u64, size: u64) -> Result<()> {
        match offset.checked_add(size) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(NdmaError::OutOfRange { what, offset, size, limit: self.size }),
        }
    }

    fn host_mem(&self, what: &'static str) -> Result<&HostBuf> {
        self.host.as_ref().ok_or(NdmaError::NotHostMemory { what })
    }

    /// CPU write into a host chunk.
    ///
    /// # Errors
    ///
    /// [`NdmaError::NotHostMemory`] for a device chunk, [`NdmaError::OutOfRange`] for a range outside the chunk.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_range("host chunk write", offset, data.len() as u64)?;
        Ok(self.host_mem("host chunk write")?.write_bytes(offset as usize, data)?)
    }

    /// CPU read from a host chunk.
    ///
    /// # Errors
    ///
    /// [`NdmaError::NotHostMemory`] for a device chunk, [`NdmaError::OutOfRange`] for a range outside the chunk.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_range("host chunk read", offset, out.len() as u64)?;
        Ok(self.host_mem("host chunk read")?.read_bytes(offset as usize, out)?)
    }

    /// CPU fill of a host chunk.
    ///
    /// # Errors
    ///
    /// [`NdmaError::NotHostMemory`] for a device chunk, [`NdmaError::OutOfRange`] for a range outside the chunk.
    pub fn fill(&self, offset: u64, len: u64, value: u8) -> Result<()> {
        self.check_range("host chunk fill", offset, len)?;
        Ok(self.host_mem("host chunk fill")?.fill(offset as usize, len as usize, value)?)
    }
}

impl Drop for MemChunk {
    fn drop(&mut self) {
        self.pool.release(self.location, self.pa, self.size);
    }
}

impl std::fmt::Debug for MemChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemChunk")
            .field("location", &self.location)
            .field("pa", &format_args!("{:#x}", self.pa))
            .field("size", &self.size)
            .field("nc_id", &self.nc_id)
            .finish()
    }
}
