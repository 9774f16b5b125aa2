//! Host memory shared with another process: a range of the memfd behind host DRAM, named by file
//! descriptor and offset ([`SharedRange`]), and that range mapped into a process ([`SharedMapping`]).
//!
//! This is how user space reaches driver-owned host memory: the runtime mmaps the completion queue the
//! driver allocated in a host chunk. The owner of host DRAM ([`crate::HostMemory`], [`crate::HostBuf`])
//! hands out a [`SharedRange`]; the descriptor travels to the other process (inherited across `exec`, or
//! over a Unix socket), which builds a [`SharedMapping`] from it. Both sides then see the same bytes.

use std::os::fd::{AsRawFd, BorrowedFd};

use memmap2::{MmapMut, MmapOptions};

use crate::EmuError;

/// Page size of the mappings (`mmap` offsets must be multiples of it).
const MAP_PAGE: u64 = 4096;
/// Alignment a [`SharedMapping`]'s first byte needs to be [`udma::DmaMemory`] (256 bytes, like a host chunk).
const SHARED_MIN_ALIGN: u64 = 256;

/// `[pa, pa + len)` of host DRAM as another process can map it: byte `offset` of the memfd `fd`.
#[derive(Debug, Clone, Copy)]
pub struct SharedRange<'a> {
    /// The memfd backing host DRAM (close-on-exec: clear the flag in the child, or send it over a socket).
    pub fd: BorrowedFd<'a>,
    /// Offset of the first byte in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Host physical address of the first byte.
    pub pa: u64,
}

/// A shared range mapped read-write (`MAP_SHARED`) into this process. Implements [`udma::DmaMemory`], so
/// code written against a driver's host buffer (a completion-queue consumer) runs unchanged over it.
pub struct SharedMapping {
    // Keeps the mapping alive for as long as `ptr` is used; never accessed through `&mut` after creation.
    _map: MmapMut,
    ptr: *mut u8,
    len: usize,
    pa: u64,
}

// SAFETY: a `SharedMapping` owns its mapping and only exposes a raw pointer into it; the pointer is valid from
// any thread while the value lives. Concurrent access to the bytes is governed by the protocol of whatever
// lives there (acquire/release on shared indices), as with a host buffer.
unsafe impl Send for SharedMapping {}
// SAFETY: as above; `&SharedMapping` only hands out the pointer and bounds-checked accessors.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps `len` bytes at `offset` of `fd` read-write and shared. `pa` is the host physical address those
    /// bytes have in the owner's host DRAM (reported by [`udma::DmaMemory::phys_addr`]; pass 0 if unknown).
    ///
    /// # Errors
    ///
    /// [`EmuError::InvalidConfig`] for `len == 0`, an offset not 256-byte aligned, a range that overflows, or a
    /// file not sealed against shrinking (a file shrunk under the mapping would fault every access past its
    /// new end: host DRAM's memfd is sealed, [`crate::MemSpace::new_shared`]); [`EmuError::Map`] when the
    /// kernel refuses the mapping (a bad descriptor, a range past the file end).
    pub fn map(fd: BorrowedFd<'_>, offset: u64, len: usize, pa: u64) -> Result<Self, EmuError> {
        if len == 0 {
            return Err(EmuError::InvalidConfig("a shared mapping cannot be empty"));
        }
        if offset % SHARED_MIN_ALIGN != 0 {
            return Err(EmuError::InvalidConfig("a shared range must start 256-byte aligned"));
        }
        let page_off = offset - offset % MAP_PAGE;
        let delta = (offset - page_off) as usize;
        let map_len = delta
            .checked_add(len)
            .filter(|&l| offset.checked_add(len as u64).is_some() && l <= isize::MAX as usize)
            .ok_or(EmuError::InvalidConfig("a shared range overflows"))?;
        let map_err = |source| EmuError::Map { what: "shared host memory", len: len as u64, source };
        // A file that can shrink could fault any access later: only a file sealed against it is mapped.
        // SAFETY: fcntl(F_GET_SEALS), which takes no argument, on a descriptor the caller lent us.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(EmuError::InvalidConfig("a shared range's file must be sealed against shrinking"));
        }
        // A file past whose end the range reaches would map, then SIGBUS on access: refuse it up front.
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is writable storage for one `stat`; fstat fully initialises it when it returns 0.
        if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            return Err(map_err(std::io::Error::last_os_error()));
        }
        // SAFETY: fstat returned 0, so `st` is initialised.
        let file_size = unsafe { st.assume_init() }.st_size as u64;
        if offset + len as u64 > file_size {
            return Err(map_err(std::io::Error::from_raw_os_error(libc::EINVAL)));
        }
        // SAFETY: the file cannot shrink (sealed, checked above) and is large enough for the range (checked
        // above), so no access to the mapping can fault. The bytes may change under us — that is the point of sharing — so they are only ever
        // accessed through raw pointers and atomics, never as a Rust slice.
        let mut map =
            unsafe { MmapOptions::new().offset(page_off).len(map_len).map_mut(fd.as_raw_fd()) }.map_err(map_err)?;
        // SAFETY: `delta < MAP_PAGE <= map_len`, so the pointer stays inside the mapping.
        let ptr = unsafe { map.as_mut_ptr().add(delta) };
        Ok(SharedMapping { _map: map, ptr, len, pa })
    }

    /// Maps a range handed out by this process (a second view of the same bytes, mostly for tests).
    ///
    /// # Errors
    ///
    /// As [`SharedMapping::map`].
    pub fn of(range: &SharedRange<'_>) -> Result<Self, EmuError> {
        let len = usize::try_from(range.len).map_err(|_| EmuError::InvalidConfig("a shared range overflows"))?;
        Self::map(range.fd, range.offset, len, range.pa)
    }
}

// SAFETY:
// - `ptr` is non-null and valid for reads and writes of `len` bytes while the value lives: it points `delta`
//   bytes into a live mapping of `delta + len` bytes that this value owns;
// - it is 256-byte aligned: the mapping is page-aligned and `delta = offset % 4096` is a multiple of 256
//   (checked in `map`);
// - the device reaches the same bytes at `pa`: they are the same file pages the owner's host DRAM maps there;
// - inside this process nothing else maps them unless the caller maps the range twice on purpose, in which
//   case both views are raw-pointer/atomic accessors of shared memory, as two processes would be.
unsafe impl udma::DmaMemory for SharedMapping {
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

impl core::fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SharedMapping(pa {:#x}, {:#x} bytes)", self.pa, self.len)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use udma::DmaMemory;

    use super::*;
    use crate::HostMemory;

    #[test]
    fn a_second_mapping_sees_the_same_bytes_both_ways() {
        let host = Arc::new(HostMemory::new(1 << 20).unwrap());
        let _pad = host.alloc(4096 + 256, 256).unwrap();
        let buf = host.alloc(3000, 256).unwrap();
        assert_ne!(buf.phys_addr() % MAP_PAGE, 0, "exercise a range that does not start on a page");
        let pattern: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
        buf.write_bytes(0, &pattern).unwrap();
        let range = buf.share().unwrap();
        assert_eq!((range.pa, range.len), (buf.phys_addr(), 3000));
        let view = SharedMapping::of(&range).unwrap();
        assert_eq!((view.len(), view.phys_addr()), (3000, buf.phys_addr()));
        let mut got = vec![0u8; 3000];
        view.read_bytes(0, &mut got).unwrap();
        assert_eq!(got, pattern);
        view.store_u32(512, 0xfeed_f00d, Ordering::Release).unwrap();
        assert_eq!(buf.load_u32(512, Ordering::Acquire).unwrap(), 0xfeed_f00d);
        assert!(view.read_bytes(2999, &mut [0u8; 2]).is_err(), "the view is bounds-checked to the range");
    }

    #[test]
    fn bad_ranges_are_refused() {
        let host = Arc::new(HostMemory::new(1 << 20).unwrap());
        let fd = host.space().shared_fd().unwrap();
        assert!(matches!(SharedMapping::map(fd, 0, 0, 0), Err(EmuError::InvalidConfig(_))));
        assert!(matches!(SharedMapping::map(fd, 100, 16, 0), Err(EmuError::InvalidConfig(_))));
        assert!(matches!(SharedMapping::map(fd, (1 << 20) - 256, 512, 0), Err(EmuError::Map { .. })));
        assert!(matches!(SharedMapping::map(fd, u64::MAX - 255, 512, 0), Err(EmuError::InvalidConfig(_))));
        let anon = crate::MemSpace::new("hbm", 0, 4096).unwrap();
        assert!(matches!(anon.share(0, 16), Err(EmuError::InvalidConfig(_))));
        assert!(matches!(
            host.space().share(host.space().base() + (1 << 20) - 8, 16),
            Err(EmuError::OutOfBounds { .. })
        ));
    }
}
