//! Device-visible memory the CPU can read and write: descriptor rings, marker words, host chunks.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::UdmaError;

/// A region of host memory that both the CPU (through [`DmaMemory::as_ptr`]) and the device (through
/// [`DmaMemory::phys_addr`], tagged by the caller with the arch's `pci_host_base`) can reach.
///
/// The provided methods are the only accessors the op layer needs; all of them are bounds-checked.
///
/// # Safety
///
/// An implementor guarantees that, for as long as the value lives:
/// - `as_ptr()` is non-null, aligned to at least 256 bytes, and valid for reads and writes of `len()` bytes;
/// - the device reaches the same bytes at host physical address `phys_addr()`;
/// - nothing else in the CPU's address space aliases those bytes except through this value.
///
/// The device may read and write the region concurrently with the CPU; callers order their accesses with
/// the doorbell (release) and the completion marker (acquire), as the driver does.
///
/// # Concurrent CPU access
///
/// The word accessors ([`DmaMemory::word`], [`DmaMemory::load_u32`], [`DmaMemory::store_u32`]) are atomic.
/// The byte accessors ([`DmaMemory::write_bytes`], [`DmaMemory::read_bytes`], [`DmaMemory::fill`]) are plain
/// copies, at memcpy speed, like the device's own accesses: two CPU threads must not make conflicting
/// accesses to the same bytes through them without ordering them (as the protocol that governs the memory
/// does — a doorbell, a marker, a queue's indices), and the same goes for a byte copy against a word atomic.
/// Rust cannot check that for a region shared with a device, and no accessor can be both as fast and free of
/// it: atomic copies must use one access size for every overlapping access (mixing sizes is itself
/// undefined), which would make every byte copy a byte-at-a-time loop. Memory whose every user accesses it
/// atomically is not handed out with these accessors at all (the op layer's completion queues).
///
/// # Example
///
/// An implementation over heap memory, and the bounds-checked accessors every implementation gets:
///
/// ```
/// use std::alloc::{alloc_zeroed, dealloc, Layout};
/// use std::sync::atomic::Ordering;
/// use udma::{DmaMemory, UdmaError};
///
/// /// Heap memory whose "physical" address is its CPU address (enough for a software engine).
/// struct Heap(*mut u8, usize);
///
/// impl Heap {
///     fn new(len: usize) -> Heap {
///         // SAFETY: a non-zero size and a power-of-two alignment make a valid layout.
///         let ptr = unsafe { alloc_zeroed(Layout::from_size_align(len, 256).unwrap()) };
///         assert!(!ptr.is_null());
///         Heap(ptr, len)
///     }
/// }
/// impl Drop for Heap {
///     fn drop(&mut self) {
///         // SAFETY: allocated in `new` with this layout.
///         unsafe { dealloc(self.0, Layout::from_size_align(self.1, 256).unwrap()) };
///     }
/// }
/// // SAFETY: the value owns the allocation; all access goes through `DmaMemory`'s accessors.
/// unsafe impl Send for Heap {}
/// // SAFETY: as above.
/// unsafe impl Sync for Heap {}
/// // SAFETY: non-null, 256-byte aligned, valid for `len` bytes while the value lives, aliased by nothing else.
/// unsafe impl DmaMemory for Heap {
///     fn as_ptr(&self) -> *mut u8 {
///         self.0
///     }
///     fn len(&self) -> usize {
///         self.1
///     }
///     fn phys_addr(&self) -> u64 {
///         self.0 as u64
///     }
/// }
///
/// let m = Heap::new(4096);
/// m.write_bytes(16, b"marker")?;
/// let mut back = [0u8; 6];
/// m.read_bytes(16, &mut back)?;
/// assert_eq!(&back, b"marker");
/// m.fill(0, 4, 0xab)?;
/// assert_eq!(m.load_u32(0, Ordering::Acquire)?, 0xabab_abab);
/// m.store_u32(8, 0xabcd_ef01, Ordering::Release)?;
/// assert_eq!(m.word(8)?.load(Ordering::Acquire), 0xabcd_ef01);
/// assert!(m.check(4092, 4).is_ok() && !m.is_empty());
/// assert_eq!(m.check(4093, 4), Err(UdmaError::OutOfBounds { offset: 4093, len: 4, size: 4096 }));
/// assert_eq!(m.load_u32(2, Ordering::Relaxed), Err(UdmaError::OutOfBounds { offset: 2, len: 4, size: 4096 }));
/// # Ok::<(), UdmaError>(())
/// ```
pub unsafe trait DmaMemory: Send + Sync {
    /// CPU address of the first byte.
    fn as_ptr(&self) -> *mut u8;
    /// Size in bytes.
    fn len(&self) -> usize;
    /// Host physical address of the first byte, without `pci_host_base`.
    fn phys_addr(&self) -> u64;

    /// True when the region has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that `[offset, offset + len)` lies inside the region.
    ///
    /// # Errors
    ///
    /// [`UdmaError::OutOfBounds`] when it does not (or the end overflows).
    fn check(&self, offset: usize, len: usize) -> Result<(), UdmaError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(UdmaError::OutOfBounds { offset, len, size: self.len() }),
        }
    }

    /// Atomically loads the aligned 32-bit word at `offset` with `order` (the marker poll uses `Acquire`).
    ///
    /// # Errors
    ///
    /// [`UdmaError::OutOfBounds`] for an access outside the region or not 4-byte aligned.
    fn load_u32(&self, offset: usize, order: Ordering) -> Result<u32, UdmaError> {
        Ok(self.word(offset)?.load(order))
    }

    /// Atomically stores `value` to the aligned 32-bit word at `offset` with `order`.
    ///
    /// # Errors
    ///
    /// [`UdmaError::OutOfBounds`] for an access outside the region or not 4-byte aligned.
    fn store_u32(&self, offset: usize, value: u32, order: Ordering) -> Result<(), UdmaError> {
        self.word(offset)?.store(value, order);
        Ok(())
    }

    /// The aligned 32-bit word at `offset` as an atomic.
    ///
    /// # Errors
    ///
    /// [`UdmaError::OutOfBounds`] for an access outside the region or not 4-byte aligned.
    fn word(&self, offset: usize) -> Result<&AtomicU32, UdmaError> {
        self.check(offset, 4)?;
        if offset % 4 != 0 {
            return Err(UdmaError::OutOfBounds { offset, len: 4, size: self.len() });
        }
        // SAFETY: the range is inside the region (checked above), the base is 256-byte aligned and offset is
        // a multiple of 4, so the pointer is valid and aligned for an AtomicU32 for the life of `self`. All
        // CPU-side accesses to marker words go through atomics; the device writes them with release stores.
        Ok(unsafe { &*(self.as_ptr().add(offset) as *const AtomicU32) })
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Errors
    ///
    /// [`UdmaError::OutOfBounds`] when the write does not fit.
    fn write_bytes(&self, offset: usize, src: &[u8]) -> Result<(), UdmaError> {
        self.check(offset, src.len())?;
        // SAFETY: the destination range is inside the region (checked above) and `src` is a distinct Rust
        // slice, so the ranges cannot overlap. Concurrent access to the region's bytes is ordered by its users
        // (see "Concurrent CPU access" above).
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(offset), src.len()) };
        Ok(())
    }

    /// Copies bytes of the region at `offset` into `dst`.
    ///
    /// # Errors
    ///
    /// [`UdmaError::OutOfBounds`] when the read does not fit.
    fn read_bytes(&self, offset: usize, dst: &mut [u8]) -> Result<(), UdmaError> {
        self.check(offset, dst.len())?;
        // SAFETY: the source range is inside the region (checked above); `dst` is a distinct exclusive slice.
        // Concurrent access to the region's bytes is ordered by its users (see "Concurrent CPU access").
        unsafe { core::ptr::copy_nonoverlapping(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `value`.
    ///
    /// # Errors
    ///
    /// [`UdmaError::OutOfBounds`] when the range does not fit.
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<(), UdmaError> {
        self.check(offset, len)?;
        // SAFETY: the range is inside the region (checked above). Concurrent access to the region's bytes is
        // ordered by its users (see "Concurrent CPU access").
        unsafe { core::ptr::write_bytes(self.as_ptr().add(offset), value, len) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region of no bytes: a dangling but aligned pointer, which no accessor may dereference.
    struct Empty;

    // SAFETY: a zero-length region; every accessor bounds-checks before it touches `as_ptr`.
    unsafe impl DmaMemory for Empty {
        fn as_ptr(&self) -> *mut u8 {
            core::ptr::NonNull::<u32>::dangling().as_ptr().cast()
        }
        fn len(&self) -> usize {
            0
        }
        fn phys_addr(&self) -> u64 {
            0x1000
        }
    }

    #[test]
    fn an_empty_region_is_empty_and_refuses_every_access() {
        let m = Empty;
        assert!(m.is_empty());
        assert_eq!(m.check(0, 0), Ok(()));
        assert_eq!(m.check(0, 1), Err(UdmaError::OutOfBounds { offset: 0, len: 1, size: 0 }));
        assert_eq!(m.load_u32(0, Ordering::Relaxed), Err(UdmaError::OutOfBounds { offset: 0, len: 4, size: 0 }));
        assert_eq!(m.write_bytes(0, b"x"), Err(UdmaError::OutOfBounds { offset: 0, len: 1, size: 0 }));
    }
}
