//! The per-device memory pool: host chunks from the platform's coherent allocator, device chunks from the
//! device's HBM range, and the "which chunk holds this PA" search `is_valid_host_mem` needs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use range_allocator::RangeAllocator;

use super::{MemChunk, MemLocation};
use crate::{NdmaError, Platform, Result};

/// Alignment of device chunks.
const DEVICE_CHUNK_ALIGN: u64 = 256;

pub(crate) struct PoolShared {
    inner: Mutex<PoolInner>,
    /// Whose host memory the pool's host chunks are: one token for every device of a [`crate::System`] (they
    /// share its platform), a token of its own for a pool made apart from a system.
    host_domain: Arc<HostDomain>,
}

/// The identity of one host-memory domain (see [`PoolShared`]): a host chunk's device address means something
/// only to devices of the domain that allocated it.
#[derive(Debug, Default)]
pub(crate) struct HostDomain;

struct PoolInner {
    /// Live host chunks: tagged PA → size.
    host: BTreeMap<u64, u64>,
    /// Live host chunks of the op layer's own (the memset buffer, completion queues): tagged PA → size. They
    /// count in the pool's usage, but no user-authored descriptor may name them ([`MemPool::holds_host_range`]).
    internal: BTreeMap<u64, u64>,
    hbm: RangeAllocator,
    /// Live device chunks (the allocator knows their bytes, not their number).
    device_chunks: u64,
}

impl PoolShared {
    fn lock(&self) -> MutexGuard<'_, PoolInner> {
        // A panic while holding this lock cannot leave the maps inconsistent (every update is a single
        // insert/remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn release(&self, location: MemLocation, pa: u64, size: u64) {
        let mut inner = self.lock();
        match location {
            MemLocation::Host => {
                if inner.host.remove(&pa).is_none() {
                    inner.internal.remove(&pa);
                }
            }
            MemLocation::Device => {
                // Chunks free exactly what they allocated, once (on drop): a refusal cannot happen.
                let freed = inner.hbm.free(pa, size);
                debug_assert!(freed, "device chunk {pa:#x}+{size:#x} freed twice");
                inner.device_chunks -= u64::from(freed);
            }
        }
    }
}

/// One device's memory pool (`mpset`). Every device has one ([`NeuronDevice::alloc_host`],
/// [`NeuronDevice::alloc_device`] allocate from it); a pool of your own is for tools that manage memory apart
/// from a device.
///
/// [`NeuronDevice::alloc_host`]: crate::NeuronDevice::alloc_host
/// [`NeuronDevice::alloc_device`]: crate::NeuronDevice::alloc_device
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::memory::MemPool;
///
/// // Device chunks come from an HBM range, host chunks from a platform's coherent allocator.
/// let pool = MemPool::new(0x40_0000_0000, 1 << 20, udma::Arch::V2.pci_host_base())?;
/// let a = pool.alloc_device(1000, 0)?;
/// let b = pool.alloc_device(1000, 0)?;
/// assert_eq!((a.pa(), b.pa()), (0x40_0000_0000, 0x40_0000_0400), "256-byte aligned");
/// assert!(pool.alloc_device(1 << 20, 0).is_err(), "no room left for 1 MiB");
/// let host = pool.alloc_host(&**dev.platform(), 8192, 0)?;
/// assert!(pool.holds_host_range(host.pa() + 4096, 4096));
/// assert!(!pool.holds_host_range(host.pa() + 4096, 4097), "the end must lie in the chunk too");
/// let pa = host.pa();
/// drop(host);
/// assert!(!pool.holds_host_range(pa, 1), "freed with its last reference");
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub struct MemPool {
    shared: Arc<PoolShared>,
    pci_host_base: u64,
    hbm_size: u64,
}

/// What a pool has handed out and not yet got back: the leak check of a long run. A snapshot: other threads
/// may allocate or free right after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// Live host chunks.
    pub host_chunks: u64,
    /// Bytes of the live host chunks.
    pub host_bytes: u64,
    /// Live device (HBM) chunks.
    pub device_chunks: u64,
    /// Bytes of HBM allocated (alignment padding excluded: chunks are allocated at their exact size).
    pub device_bytes: u64,
}

impl MemPool {
    /// A pool whose device chunks come from `[hbm_base, hbm_base + hbm_size)`; host chunks' PAs get
    /// `pci_host_base` (example on [`MemPool`]).
    ///
    /// # Errors
    ///
    /// [`NdmaError::OutOfRange`] when the HBM range ends past the 64-bit address space.
    ///
    /// ```
    /// use ndma::{memory::MemPool, NdmaError};
    ///
    /// let err = MemPool::new(u64::MAX - 0xff, 0x1000, 0).err();
    /// assert_eq!(err, Some(NdmaError::OutOfRange { what: "HBM range", offset: u64::MAX - 0xff, size: 0x1000, limit: u64::MAX }));
    /// ```
    pub fn new(hbm_base: u64, hbm_size: u64, pci_host_base: u64) -> Result<Self> {
        Self::in_domain(hbm_base, hbm_size, pci_host_base, Arc::default())
    }

    /// [`MemPool::new`] in host-memory domain `host_domain` (a system's devices share one).
    pub(crate) fn in_domain(
        hbm_base: u64,
        hbm_size: u64,
        pci_host_base: u64,
        host_domain: Arc<HostDomain>,
    ) -> Result<Self> {
        if hbm_base.checked_add(hbm_size).is_none() {
            return Err(NdmaError::OutOfRange { what: "HBM range", offset: hbm_base, size: hbm_size, limit: u64::MAX });
        }
        let inner = PoolInner {
            host: BTreeMap::new(),
            internal: BTreeMap::new(),
            hbm: RangeAllocator::new(hbm_base, hbm_size),
            device_chunks: 0,
        };
        let shared = Arc::new(PoolShared { inner: Mutex::new(inner), host_domain });
        Ok(MemPool { shared, pci_host_base, hbm_size })
    }

    /// Did `mc` come from this pool?
    pub(crate) fn owns(&self, mc: &MemChunk) -> bool {
        Arc::ptr_eq(&self.shared, mc.pool())
    }

    /// Did `mc` come from a pool of this pool's host-memory domain?
    pub(crate) fn shares_host_domain(&self, mc: &MemChunk) -> bool {
        Arc::ptr_eq(&self.shared.host_domain, &mc.pool().host_domain)
    }

    /// Allocates a host chunk of `size` bytes owned by NC `nc_id` (example on [`MemPool`]).
    ///
    /// # Errors
    ///
    /// [`NdmaError::NoMemory`] when the platform cannot allocate it (or `size` is 0).
    pub fn alloc_host(&self, platform: &dyn Platform, size: u64, nc_id: u32) -> Result<Arc<MemChunk>> {
        self.alloc_host_in(platform, size, nc_id, false)
    }

    /// [`MemPool::alloc_host`] for the op layer's own use: a chunk no user-authored descriptor may name.
    pub(crate) fn alloc_host_internal(&self, platform: &dyn Platform, size: u64, nc_id: u32) -> Result<Arc<MemChunk>> {
        self.alloc_host_in(platform, size, nc_id, true)
    }

    /// [`MemPool::alloc_host_internal`] for a completion queue: a chunk whose memory is accessed only
    /// atomically ([`MemChunk::is_completion_queue`]).
    pub(crate) fn alloc_completion_queue(
        &self,
        platform: &dyn Platform,
        size: u64,
        nc_id: u32,
    ) -> Result<Arc<MemChunk>> {
        let chunk = self.alloc_chunk(platform, size, nc_id, true)?;
        Ok(Arc::new(chunk.into_completion_queue()))
    }

    fn alloc_host_in(&self, platform: &dyn Platform, size: u64, nc_id: u32, internal: bool) -> Result<Arc<MemChunk>> {
        self.alloc_chunk(platform, size, nc_id, internal).map(Arc::new)
    }

    fn alloc_chunk(&self, platform: &dyn Platform, size: u64, nc_id: u32, internal: bool) -> Result<MemChunk> {
        let len = usize::try_from(size).ok().filter(|&l| l > 0).ok_or(NdmaError::NoMemory { what: "host", size })?;
        let buf = crate::platform::alloc_coherent(platform, len)?;
        let pa = buf.phys_addr() | self.pci_host_base;
        let mut inner = self.shared.lock();
        if internal { &mut inner.internal } else { &mut inner.host }.insert(pa, size);
        drop(inner);
        Ok(MemChunk::new(MemLocation::Host, pa, size, nc_id, Some(buf), self.shared.clone()))
    }

    /// Allocates a device (HBM) chunk of `size` bytes owned by NC `nc_id` (example on [`MemPool`]).
    ///
    /// # Errors
    ///
    /// [`NdmaError::NoMemory`] when HBM has no free range that large (or `size` is 0).
    pub fn alloc_device(&self, size: u64, nc_id: u32) -> Result<Arc<MemChunk>> {
        let pa = {
            let mut inner = self.shared.lock();
            let pa = inner.hbm.alloc(size, DEVICE_CHUNK_ALIGN).ok_or(NdmaError::NoMemory { what: "device", size })?;
            inner.device_chunks += 1;
            pa
        };
        Ok(Arc::new(MemChunk::new(MemLocation::Device, pa, size, nc_id, None, self.shared.clone())))
    }

    /// The chunks handed out and not yet dropped.
    pub fn usage(&self) -> PoolUsage {
        let inner = self.shared.lock();
        PoolUsage {
            host_chunks: (inner.host.len() + inner.internal.len()) as u64,
            host_bytes: inner.host.values().chain(inner.internal.values()).sum(),
            device_chunks: inner.device_chunks,
            device_bytes: self.hbm_size - inner.hbm.free_bytes(),
        }
    }

    /// `mpset_search_mc` for host memory: is `[pa, pa + len)` inside one live host chunk of this pool? (The
    /// driver checks only the start address; we also require the end to stay inside the chunk, and the op
    /// layer's own chunks — the memset buffer, completion queues — are never a match.) Example on [`MemPool`].
    pub fn holds_host_range(&self, pa: u64, len: u64) -> bool {
        let inner = self.shared.lock();
        match inner.host.range(..=pa).next_back() {
            Some((&start, &size)) => pa.checked_add(len).is_some_and(|end| end <= start + size && pa < start + size),
            None => false,
        }
    }
}
