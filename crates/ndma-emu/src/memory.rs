//! A physical memory space (host DRAM or one device's HBM): one lazily committed mapping addressed by
//! physical address, with bounds-checked CPU access and memcpy-speed copies.
//!
//! The mapping is created with `MAP_NORESERVE`, so the kernel commits a page only when it is first touched:
//! 16 devices × 96 GiB of HBM cost address space, not RAM.
//!
//! # Backing
//!
//! A space is either private anonymous memory ([`MemSpace::new`], HBM: only this process reaches it) or a
//! `memfd` mapped `MAP_SHARED` ([`MemSpace::new_shared`], host DRAM): another process can map any range of
//! it by file descriptor and offset ([`MemSpace::share`], [`crate::shared::SharedMapping`]), as a runtime
//! maps a driver's host chunk. A memfd is a sparse tmpfs file created without an up-front commit, so the
//! shared space is as lazily committed as the anonymous one (one difference: a *read* fault on a never
//! written shared page allocates it, where anonymous memory maps the zero page).
//!
//! # Aliasing
//!
//! A space is shared by the CPU side (tests, the op layer through [`crate::HostBuf`]) and the engines. Both
//! write through raw pointers, as a device and a CPU share physical memory; who may touch which bytes when is
//! decided by the DMA protocol (doorbell release, marker acquire), exactly as with real hardware.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;

use memmap2::{MmapMut, MmapOptions};

use crate::shared::SharedRange;
use crate::EmuError;

/// One contiguous physical memory space `[base, base + size)`.
pub struct MemSpace {
    what: &'static str,
    base: u64,
    size: u64,
    ptr: *mut u8,
    // Keeps the mapping alive for as long as `ptr` is used; never accessed through `&mut`.
    _map: MmapMut,
    /// The memfd behind a shared space (offset 0 = `base`); `None` for anonymous memory.
    file: Option<File>,
}

// SAFETY: `MemSpace` is a pointer into an anonymous mapping it owns. The mapping lives as long as the value
// and is never remapped, so the pointer may be used from any thread; concurrent access to the bytes is the
// DMA protocol's business (see the module doc), not a property of the Rust value.
unsafe impl Send for MemSpace {}
// SAFETY: as above; every `&self` method either only reads metadata or goes through bounds-checked raw
// pointer accesses that a device and a CPU are allowed to race on.
unsafe impl Sync for MemSpace {}

impl MemSpace {
    /// Maps `size` bytes of lazily committed, zero-filled memory answering at `[base, base + size)`.
    ///
    /// # Errors
    ///
    /// [`EmuError::InvalidConfig`] for a zero size, a size that does not fit the address space or a range
    /// that overflows; [`EmuError::Map`] when the kernel refuses the mapping.
    pub fn new(what: &'static str, base: u64, size: u64) -> Result<Self, EmuError> {
        let len = Self::checked_len(base, size)?;
        let mut map = MmapOptions::new().len(len).no_reserve_swap().map_anon().map_err(|source| EmuError::Map {
            what,
            len: size,
            source,
        })?;
        let ptr = map.as_mut_ptr();
        Ok(MemSpace { what, base, size, ptr, _map: map, file: None })
    }

    /// As [`MemSpace::new`], but backed by a `memfd` mapped `MAP_SHARED`, so other processes can map ranges
    /// of it ([`MemSpace::share`]). Byte `pa` of the space is byte `pa - base` of the file.
    ///
    /// # Errors
    ///
    /// As [`MemSpace::new`]; [`EmuError::Map`] also when the memfd cannot be created or sized.
    pub fn new_shared(what: &'static str, base: u64, size: u64) -> Result<Self, EmuError> {
        let len = Self::checked_len(base, size)?;
        let map_err = |source| EmuError::Map { what, len: size, source };
        // SAFETY: the name is a NUL-terminated C string literal; memfd_create has no other preconditions.
        let fd = unsafe { libc::memfd_create(c"ndma host DRAM".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(map_err(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a freshly created descriptor nothing else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        // A sparse file: sizing it commits nothing.
        file.set_len(size).map_err(map_err)?;
        // Sealed at that size: the descriptor is handed to other code and processes ([`MemSpace::share`]), and
        // a file shrunk under a mapping turns every access past its new end into SIGBUS. No one can shrink,
        // grow or unseal it now.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor this function owns, with an integer argument.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(map_err(std::io::Error::last_os_error()));
        }
        // SAFETY: the file is a memfd only this value (and the processes it is explicitly shared with) can
        // reach, sealed against shrinking (above), so no access inside its size can fault. The mapping is accessed only through raw pointers
        // under the DMA protocol (module doc), never as a Rust slice another mapping could change under us.
        let mut map = unsafe { MmapOptions::new().len(len).no_reserve_swap().map_mut(&file) }.map_err(map_err)?;
        let ptr = map.as_mut_ptr();
        Ok(MemSpace { what, base, size, ptr, _map: map, file: Some(file) })
    }

    /// Validates `[base, base + size)` and returns `size` as a mapping length.
    fn checked_len(base: u64, size: u64) -> Result<usize, EmuError> {
        if size == 0 {
            return Err(EmuError::InvalidConfig("a memory space cannot be empty"));
        }
        if base.checked_add(size).is_none() {
            return Err(EmuError::InvalidConfig("a memory space overflows the physical address range"));
        }
        usize::try_from(size)
            .ok()
            .filter(|&l| l <= isize::MAX as usize)
            .ok_or(EmuError::InvalidConfig("a memory space is larger than the host address space"))
    }

    /// The memfd behind a shared space (`None` for an anonymous one).
    pub fn shared_fd(&self) -> Option<BorrowedFd<'_>> {
        self.file.as_ref().map(|f| f.as_fd())
    }

    /// `[pa, pa + len)` as another process can map it: the memfd and the offset of `pa` in it.
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] if the range is not entirely inside the space; [`EmuError::InvalidConfig`]
    /// if the space is anonymous (built by [`MemSpace::new`]).
    pub fn share(&self, pa: u64, len: u64) -> Result<SharedRange<'_>, EmuError> {
        let off = self.checked(pa, len)?;
        let fd = self.shared_fd().ok_or(EmuError::InvalidConfig("this memory space is not shareable"))?;
        Ok(SharedRange { fd, offset: off as u64, len, pa })
    }

    /// What this space is ("host DRAM", "HBM").
    pub fn what(&self) -> &'static str {
        self.what
    }
    /// First physical address.
    pub fn base(&self) -> u64 {
        self.base
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The physical address of the `len` bytes the CPU sees at `cpu`, if they all lie in this space's mapping
    /// (the model's `virt_to_phys`): pointer arithmetic only, nothing is dereferenced.
    pub fn pa_of(&self, cpu: *const u8, len: usize) -> Option<u64> {
        let off = (cpu as usize).checked_sub(self.ptr as usize)?;
        let end = off.checked_add(len)?;
        // `off < end <= size`, which fits u64.
        (end as u64 <= self.size).then(|| self.base + off as u64)
    }

    /// Offset of `[pa, pa + len)` inside the space, or `None` if any byte of it lies outside.
    pub fn offset_of(&self, pa: u64, len: u64) -> Option<usize> {
        offset_in(self.base, self.size, pa, len)
    }

    fn checked(&self, pa: u64, len: u64) -> Result<usize, EmuError> {
        self.offset_of(pa, len).ok_or(EmuError::OutOfBounds {
            what: self.what,
            pa,
            len,
            base: self.base,
            size: self.size,
        })
    }

    /// Raw pointer to byte `off` of the space.
    ///
    /// # Safety
    ///
    /// `off` must be at most `size` (an offset returned by [`MemSpace::offset_of`] qualifies), so the result
    /// stays inside (or one past) the mapping.
    pub(crate) unsafe fn at(&self, off: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `off <= size`, and the mapping is `size` bytes long.
        unsafe { self.ptr.add(off) }
    }

    /// Copies `dst.len()` bytes at physical address `pa` into `dst`.
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] if the range is not entirely inside the space.
    pub fn read(&self, pa: u64, dst: &mut [u8]) -> Result<(), EmuError> {
        let off = self.checked(pa, dst.len() as u64)?;
        // SAFETY: `[off, off + len)` is inside the mapping (checked) and `dst` is a distinct exclusive slice.
        unsafe { ptr::copy_nonoverlapping(self.at(off), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` to physical address `pa`.
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] if the range is not entirely inside the space.
    pub fn write(&self, pa: u64, src: &[u8]) -> Result<(), EmuError> {
        let off = self.checked(pa, src.len() as u64)?;
        // SAFETY: `[off, off + len)` is inside the mapping (checked) and `src` is a distinct Rust slice.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.at(off), src.len()) };
        Ok(())
    }

    /// Sets `len` bytes at physical address `pa` to `byte`.
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] if the range is not entirely inside the space.
    pub fn fill(&self, pa: u64, len: u64, byte: u8) -> Result<(), EmuError> {
        let off = self.checked(pa, len)?;
        // SAFETY: `[off, off + len)` is inside the mapping (checked); `len <= size` fits a usize.
        unsafe { ptr::write_bytes(self.at(off), byte, len as usize) };
        Ok(())
    }

    /// Copies `len` bytes from `src_pa` in `src` to `dst_pa` in `dst` (memmove semantics when both are the
    /// same space and the ranges overlap).
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] if either range is not entirely inside its space; nothing is copied then.
    pub fn copy(src: &MemSpace, src_pa: u64, dst: &MemSpace, dst_pa: u64, len: u64) -> Result<(), EmuError> {
        let s = src.checked(src_pa, len)?;
        let d = dst.checked(dst_pa, len)?;
        // SAFETY: both ranges are inside their mappings (checked); `bulk::copy` tolerates overlap.
        unsafe { crate::bulk::copy(src.at(s), dst.at(d), len as usize) };
        Ok(())
    }
}

impl core::fmt::Debug for MemSpace {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let backing = if self.file.is_some() { "memfd" } else { "anonymous" };
        write!(f, "MemSpace({} [{:#x}, +{:#x}), {backing})", self.what, self.base, self.size)
    }
}

/// Offset of `[pa, pa + len)` inside a space of `size` bytes at `base` (at most `isize::MAX` bytes, as every
/// mapping is), or `None` if any byte of it lies outside.
#[inline]
pub(crate) fn offset_in(base: u64, size: u64, pa: u64, len: u64) -> Option<usize> {
    let off = pa.checked_sub(base)?;
    let end = off.checked_add(len)?;
    // `end <= size <= isize::MAX`, so the cast is lossless.
    (end <= size).then_some(off as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_are_bounds_checked() {
        let m = MemSpace::new("test", 0x1000, 0x2000).unwrap();
        m.write(0x1000, &[1, 2, 3]).unwrap();
        let mut b = [0u8; 3];
        m.read(0x1000, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3]);
        assert!(m.read(0xfff, &mut b).is_err());
        assert!(m.write(0x2ffe, &b).is_err());
        assert!(m.fill(0x2fff, 1, 9).is_ok());
        assert!(m.fill(0x2fff, 2, 9).is_err());
        assert!(m.fill(u64::MAX, 2, 9).is_err());
        assert_eq!(m.offset_of(0x1000, 0x2000), Some(0));
        assert_eq!(m.offset_of(0x1000, 0x2001), None);
    }

    #[test]
    fn copy_moves_overlapping_ranges() {
        let m = MemSpace::new("test", 0, 4096).unwrap();
        m.write(0, &[1, 2, 3, 4, 5]).unwrap();
        MemSpace::copy(&m, 0, &m, 1, 4).unwrap();
        let mut b = [0u8; 5];
        m.read(0, &mut b).unwrap();
        assert_eq!(b, [1, 1, 2, 3, 4]);
        assert!(MemSpace::copy(&m, 4000, &m, 0, 97).is_err());
    }
}
