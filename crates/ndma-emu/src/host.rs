//! Host DRAM: one per system, physical addresses `[HOST_DRAM_BASE, HOST_DRAM_BASE + size)`, with a
//! thread-safe allocator handing out [`HostBuf`]s the op layer uses as [`udma::DmaMemory`].

use std::sync::{Arc, Mutex, MutexGuard};

use range_allocator::RangeAllocator;

use crate::lock::lock;
use crate::shared::SharedRange;
use crate::user::FrameTable;
use crate::{EmuError, MemSpace};

/// First host physical address. Not 0, so a descriptor carrying PA 0 is a wild pointer, not host memory.
pub const HOST_DRAM_BASE: u64 = 0x1_0000_0000;
/// Default host DRAM size: 64 GiB (lazily committed).
pub const DEFAULT_HOST_DRAM_SIZE: u64 = 64 << 30;
/// Smallest alignment [`HostMemory::alloc`] hands out (`UDMA_QUEUE_ADDR_BYTE_ALIGNMENT`, and what
/// [`udma::DmaMemory`] promises); lengths are rounded up to it internally so ring ends stay aligned.
pub const HOST_MIN_ALIGN: usize = 256;

/// The system's host DRAM. It is backed by a memfd, so ranges of it can be shared with other processes
/// ([`HostMemory::share`]); user address spaces take their 4 KiB frames from the same allocator as host
/// buffers and account pins in [`HostMemory::frames`].
#[derive(Debug)]
pub struct HostMemory {
    space: MemSpace,
    alloc: Mutex<RangeAllocator>,
    frames: FrameTable,
}

impl HostMemory {
    /// Maps `size` bytes of host DRAM at [`HOST_DRAM_BASE`].
    ///
    /// # Errors
    ///
    /// As [`MemSpace::new`].
    pub fn new(size: u64) -> Result<Self, EmuError> {
        let space = MemSpace::new_shared("host DRAM", HOST_DRAM_BASE, size)?;
        Ok(HostMemory {
            alloc: Mutex::new(RangeAllocator::new(HOST_DRAM_BASE, size)),
            space,
            frames: FrameTable::default(),
        })
    }

    /// The user-page frames taken from this DRAM: pin counts, dirty flags, the leak check.
    pub fn frames(&self) -> &FrameTable {
        &self.frames
    }

    /// `[pa, pa + len)` as another process can map it (memfd + offset).
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] if the range is not inside host DRAM.
    pub fn share(&self, pa: u64, len: u64) -> Result<SharedRange<'_>, EmuError> {
        self.space.share(pa, len)
    }

    /// The allocator, locked (user-page frame placement allocates and frees through it directly).
    pub(crate) fn allocator(&self) -> MutexGuard<'_, RangeAllocator> {
        lock(&self.alloc)
    }

    /// The physical address of the `len` bytes the CPU sees at `cpu`, if they are all this DRAM
    /// ([`MemSpace::pa_of`]).
    pub fn pa_of(&self, cpu: *const u8, len: usize) -> Option<u64> {
        self.space.pa_of(cpu, len)
    }

    /// The underlying space (physical-address read/write/fill for tests).
    pub fn space(&self) -> &MemSpace {
        &self.space
    }

    /// Allocates `len` bytes aligned to `align` (at least [`HOST_MIN_ALIGN`]). The alignment applies to the
    /// physical address; the CPU pointer is aligned to `min(align, page size)`. The contents are whatever a
    /// previous owner left (zero for never-used memory). The range is freed when the [`HostBuf`] drops.
    ///
    /// # Errors
    ///
    /// [`EmuError::InvalidAlloc`] for `len == 0` or a non-power-of-two `align`; [`EmuError::OutOfMemory`]
    /// when no free range fits.
    pub fn alloc(self: &Arc<Self>, len: usize, align: usize) -> Result<HostBuf, EmuError> {
        let align = align.max(HOST_MIN_ALIGN);
        if len == 0 || !align.is_power_of_two() {
            return Err(EmuError::InvalidAlloc { len: len as u64, align: align as u64 });
        }
        let oom = EmuError::OutOfMemory { what: self.space.what(), len: len as u64, align: align as u64 };
        let alloc_len = (len as u64).checked_next_multiple_of(HOST_MIN_ALIGN as u64).ok_or(oom)?;
        let pa = lock(&self.alloc).alloc(alloc_len, align as u64).ok_or(EmuError::OutOfMemory {
            what: self.space.what(),
            len: len as u64,
            align: align as u64,
        })?;
        let off = self.space.offset_of(pa, alloc_len).ok_or(EmuError::OutOfMemory {
            what: self.space.what(),
            len: len as u64,
            align: align as u64,
        })?;
        // SAFETY: `off` comes from `offset_of`, so it lies inside the mapping.
        let ptr = unsafe { self.space.at(off) };
        Ok(HostBuf { mem: Arc::clone(self), pa, len, alloc_len, ptr })
    }

    /// Bytes not currently allocated.
    pub fn free_bytes(&self) -> u64 {
        lock(&self.alloc).free_bytes()
    }
}

/// An allocation of host DRAM: CPU-reachable through [`udma::DmaMemory::as_ptr`], device-reachable at
/// [`udma::DmaMemory::phys_addr`] (OR the arch's `pci_host_base` into it for a descriptor).
pub struct HostBuf {
    mem: Arc<HostMemory>,
    pa: u64,
    len: usize,
    alloc_len: u64,
    ptr: *mut u8,
}

// SAFETY: a `HostBuf` is an owned, exclusive range of a mapping kept alive by the `Arc<HostMemory>` it holds;
// the raw pointer is valid from any thread.
unsafe impl Send for HostBuf {}
// SAFETY: `&HostBuf` only exposes the pointer; concurrent byte access is governed by the `DmaMemory` contract
// (atomics for words the device and CPU share, the doorbell/marker protocol for the rest).
unsafe impl Sync for HostBuf {}

// SAFETY:
// - `ptr` is non-null and valid for `len` bytes for as long as the value lives: it points into the mapping
//   owned by `mem`, which this value keeps alive, at an offset checked by `offset_of` for `alloc_len >= len`;
// - it is aligned to at least 256 bytes: the mapping is page-aligned and `pa - HOST_DRAM_BASE` is a multiple
//   of the allocation alignment (≥ 256) because `HOST_DRAM_BASE` is;
// - the device reaches the same bytes at `pa` (the engines decode host PAs through the same `MemSpace`);
// - the allocator never hands the range to anyone else until this value drops, so nothing else aliases it.
unsafe impl udma::DmaMemory for HostBuf {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn phys_addr(&self) -> u64 {
        self.pa
    }
}

impl HostBuf {
    /// This buffer as another process can map it (memfd + offset, see [`crate::shared`]).
    ///
    /// # Errors
    ///
    /// Only if host DRAM were not shareable, which [`HostMemory::new`] rules out.
    pub fn share(&self) -> Result<SharedRange<'_>, EmuError> {
        self.mem.space.share(self.pa, self.len as u64)
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        let freed = lock(&self.mem.alloc).free(self.pa, self.alloc_len);
        debug_assert!(freed, "host buffer {:#x} freed twice", self.pa);
    }
}

impl core::fmt::Debug for HostBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "HostBuf(pa {:#x}, {:#x} bytes)", self.pa, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use udma::DmaMemory;

    #[test]
    fn buffers_are_aligned_distinct_and_freed() {
        let host = Arc::new(HostMemory::new(1 << 20).unwrap());
        let a = host.alloc(100, 0).unwrap();
        let b = host.alloc(4096, 4096).unwrap();
        assert_eq!(a.as_ptr() as usize % 256, 0);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert_eq!(b.phys_addr() % 4096, 0);
        assert!(a.phys_addr() + 256 <= b.phys_addr() || b.phys_addr() + 4096 <= a.phys_addr());
        a.store_u32(96, 7, core::sync::atomic::Ordering::Release).unwrap();
        let mut w = [0u8; 4];
        host.space().read(a.phys_addr() + 96, &mut w).unwrap();
        assert_eq!(u32::from_le_bytes(w), 7);
        drop(a);
        drop(b);
        assert_eq!(host.free_bytes(), 1 << 20);
        assert!(host.alloc(0, 256).is_err());
        assert!(host.alloc(2 << 20, 256).is_err());
        assert!(host.alloc(16, 300).is_err());
    }

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn host_buf_is_send_and_sync() {
        assert_send_sync::<HostBuf>();
        assert_send_sync::<Arc<HostBuf>>();
    }
}
