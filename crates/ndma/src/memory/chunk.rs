//! A memory chunk: a run of host or device memory the op layer copies to or from.

use std::sync::Arc;

use super::pool::PoolShared;
use crate::{HostBuf, NdmaError, Result};

/// Where a chunk lives (`enum mem_location`); see [`MemChunk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemLocation {
    /// Host DRAM, reached by the device across PCIe (`MEM_LOC_HOST`).
    Host,
    /// Device HBM (`MEM_LOC_DEVICE`).
    Device,
}

/// A chunk of host or device memory (`struct mem_chunk`). Dropping the last reference frees it; an in-flight
/// transfer holds a reference of its own.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::{MemLocation, NdmaError};
///
/// let mc = dev.alloc_host(4096, 1)?;
/// assert_eq!((mc.location(), mc.size(), mc.nc_id(), mc.is_host()), (MemLocation::Host, 4096, 1, true));
/// assert_eq!(mc.pa(), dev.mc_to_pa(&mc), "a host chunk's PA carries pci_host_base");
/// mc.fill(0, 4096, 0xee)?;
/// mc.write(100, b"hello")?;
/// let mut out = [0u8; 7];
/// mc.read(99, &mut out)?;
/// assert_eq!(&out, b"\xeehello\xee");
/// assert!(mc.check_range("window", 4000, 96).is_ok());
/// let err = mc.read(4095, &mut out).unwrap_err();
/// assert_eq!(err, NdmaError::OutOfRange { what: "host chunk read", offset: 4095, size: 7, limit: 4096 });
/// let hbm = dev.alloc_device(4096, 0)?;
/// assert!(hbm.host_buf().is_none());
/// assert_eq!(hbm.fill(0, 1, 0).unwrap_err(), NdmaError::NotHostMemory { what: "host chunk fill" });
/// # Ok::<(), NdmaError>(())
/// ```
pub struct MemChunk {
    location: MemLocation,
    /// Host: host PA | `pci_host_base` (as the driver stores it); device: the HBM PA.
    pa: u64,
    size: u64,
    nc_id: u32,
    host: Option<HostBuf>,
    /// A completion queue: its words are shared with the producer and other consumers, which access them
    /// atomically, so no plain CPU access (nor the buffer, which offers them) is handed out.
    completion_queue: bool,
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
        MemChunk { location, pa, size, nc_id, host, completion_queue: false, pool }
    }

    /// Marks a freshly allocated chunk as a completion queue (see the field).
    pub(super) fn into_completion_queue(mut self) -> Self {
        self.completion_queue = true;
        self
    }

    /// The pool the chunk came from (and goes back to).
    pub(super) fn pool(&self) -> &Arc<PoolShared> {
        &self.pool
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
    /// The CPU mapping of a host chunk. `None` for a device chunk, and for a completion queue: its memory is
    /// accessed only through [`crate::zerocopy::CqConsumer`] (atomically, as its producer and every other
    /// consumer do); a plain copy racing them would be a data race.
    pub fn host_buf(&self) -> Option<&HostBuf> {
        self.host.as_ref().filter(|_| !self.completion_queue)
    }

    /// The CPU address of a host chunk's first byte (a completion queue's too), e.g. to map it elsewhere or
    /// to hand it to [`crate::zerocopy::CqConsumer::from_raw`]; what is done through it is the caller's
    /// `unsafe` business. `None` for a device chunk.
    pub fn cpu_ptr(&self) -> Option<*mut u8> {
        self.host.as_ref().map(|b| b.as_ptr())
    }

    /// Is this chunk a completion queue ([`crate::NeuronDevice::completion_queue`])?
    pub fn is_completion_queue(&self) -> bool {
        self.completion_queue
    }

    /// The buffer behind a host chunk, a completion queue's included (the op layer's own accesses).
    pub(crate) fn buffer(&self) -> Option<&HostBuf> {
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
        if self.completion_queue {
            return Err(NdmaError::CompletionQueueMemory { what });
        }
        self.host.as_ref().ok_or(NdmaError::NotHostMemory { what })
    }

    /// CPU write into a host chunk.
    ///
    /// # Errors
    ///
    /// [`NdmaError::NotHostMemory`] for a device chunk, [`NdmaError::CompletionQueueMemory`] for a completion
    /// queue, [`NdmaError::OutOfRange`] for a range outside the chunk.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_range("host chunk write", offset, data.len() as u64)?;
        Ok(self.host_mem("host chunk write")?.write_bytes(offset as usize, data)?)
    }

    /// CPU read from a host chunk.
    ///
    /// # Errors
    ///
    /// [`NdmaError::NotHostMemory`] for a device chunk, [`NdmaError::CompletionQueueMemory`] for a completion
    /// queue, [`NdmaError::OutOfRange`] for a range outside the chunk.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_range("host chunk read", offset, out.len() as u64)?;
        Ok(self.host_mem("host chunk read")?.read_bytes(offset as usize, out)?)
    }

    /// CPU fill of a host chunk.
    ///
    /// # Errors
    ///
    /// [`NdmaError::NotHostMemory`] for a device chunk, [`NdmaError::CompletionQueueMemory`] for a completion
    /// queue, [`NdmaError::OutOfRange`] for a range outside the chunk.
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
