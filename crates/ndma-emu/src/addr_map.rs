//! Address decode as one device's engines see it (DESIGN §3): an address with the arch's host bits goes
//! across PCIe to host DRAM at `addr & !pci_host_base`; anything else is this device's HBM. An address that
//! decodes outside both is a DMA fault, never an access.

use std::sync::Arc;

use udma::Arch;

use crate::hbm::Hbm;
use crate::memory::offset_in;
use crate::{HostMemory, MemSpace};

/// Which physical space a decoded address lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    /// Host DRAM (reached over PCIe).
    Host,
    /// The device's own HBM.
    Hbm,
}

impl Space {
    /// How many spaces there are: the length of a table indexed by [`Space::index`].
    pub(crate) const COUNT: usize = 2;

    /// This space's slot in a table of [`Space::COUNT`] entries.
    pub(crate) fn index(self) -> usize {
        match self {
            Space::Host => 0,
            Space::Hbm => 1,
        }
    }
}

/// A decoded, bounds-checked location: a space and a byte offset inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc {
    pub(crate) space: Space,
    pub(crate) off: usize,
}

impl Loc {
    /// `[self, self + len)` and `[other, other + olen)` share a byte.
    pub(crate) fn overlaps(self, len: usize, other: Loc, olen: usize) -> bool {
        self.space == other.space && self.off < other.off + olen && other.off < self.off + len
    }
}

/// One device's view of memory.
#[derive(Debug)]
pub(crate) struct AddrMap {
    /// The arch's `pci_host_base` and `host_addr_mask`, read once: every descriptor decodes two addresses.
    pci_host_base: u64,
    host_addr_mask: u64,
    /// Each space's bounds and mapping, by [`Space::index`], copied out once for the same reason: read
    /// through the `Arc`s below, a decode was a chain of dependent loads, the costliest lines of a scattered
    /// stream's descriptor fetch (perf).
    bounds: [Bounds; Space::COUNT],
    host: Arc<HostMemory>,
    hbm: Arc<Hbm>,
}

/// A space's physical range and the CPU address of its first byte (see [`AddrMap::bounds`]).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    base: u64,
    size: u64,
    ptr: *mut u8,
}

impl Bounds {
    fn of(s: &MemSpace) -> Self {
        // SAFETY: offset 0 is inside every space (a space is never empty).
        Bounds { base: s.base(), size: s.size(), ptr: unsafe { s.at(0) } }
    }
}

// SAFETY: `ptr` points into a mapping owned by the `MemSpace` it was copied from, which the map's `Arc`s keep
// alive; the map only computes addresses from it, and `MemSpace` itself is `Send` and `Sync` (every access to
// the memory is a raw-pointer access under the DMA protocol).
unsafe impl Send for AddrMap {}
// SAFETY: as for `Send`: shared use only reads the copied bounds.
unsafe impl Sync for AddrMap {}

impl AddrMap {
    pub(crate) fn new(arch: Arch, host: Arc<HostMemory>, hbm: Arc<Hbm>) -> Self {
        let bounds = [Bounds::of(host.space()), Bounds::of(&hbm.space)];
        AddrMap { pci_host_base: arch.pci_host_base(), host_addr_mask: arch.host_addr_mask(), bounds, host, hbm }
    }

    /// The space and physical address a device address selects (the test of [`Arch::is_host_addr`]).
    pub(crate) fn route(&self, addr: u64) -> (Space, u64) {
        if addr & self.host_addr_mask == self.pci_host_base {
            (Space::Host, addr & !self.pci_host_base)
        } else {
            (Space::Hbm, addr)
        }
    }

    /// Decodes `[addr, addr + len)`, or `None` when any byte of it is outside memory.
    pub(crate) fn decode(&self, addr: u64, len: u64) -> Option<Loc> {
        let (space, pa) = self.route(addr);
        // `MemSpace::offset_of`, on the copied bounds.
        let b = &self.bounds[space.index()];
        offset_in(b.base, b.size, pa, len).map(|off| Loc { space, off })
    }

    pub(crate) fn space(&self, s: Space) -> &MemSpace {
        match s {
            Space::Host => self.host.space(),
            Space::Hbm => &self.hbm.space,
        }
    }

    /// CPU pointer of a decoded location.
    pub(crate) fn ptr(&self, loc: Loc) -> *mut u8 {
        // SAFETY: every `Loc` is built by `decode`, which checked its offset against the space's size, and the
        // mapping is that long.
        unsafe { self.bounds[loc.space.index()].ptr.add(loc.off) }
    }

    /// A V3 device's view of a fresh host DRAM and HBM of `size` bytes each (for unit tests).
    #[cfg(test)]
    pub(crate) fn for_test(size: usize) -> Self {
        let host = Arc::new(HostMemory::new(size as u64).unwrap());
        let hbm = Arc::new(Hbm::new(size as u64).unwrap());
        AddrMap::new(Arch::V3, host, hbm)
    }

    pub(crate) fn hbm(&self) -> &Hbm {
        &self.hbm
    }
    pub(crate) fn host(&self) -> &Arc<HostMemory> {
        &self.host
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HBM_BASE, HOST_DRAM_BASE};

    #[test]
    fn host_bits_select_host_dram() {
        let host = Arc::new(HostMemory::new(1 << 20).unwrap());
        let hbm = Arc::new(Hbm::new(1 << 20).unwrap());
        for arch in Arch::ALL {
            let m = AddrMap::new(arch, host.clone(), hbm.clone());
            let h = arch.pci_host_base() | HOST_DRAM_BASE;
            assert_eq!(m.decode(h + 16, 16), Some(Loc { space: Space::Host, off: 16 }));
            assert_eq!(m.decode(HBM_BASE + 32, 16), Some(Loc { space: Space::Hbm, off: 32 }));
            assert_eq!(m.decode(0, 4), None, "PA 0 is a wild pointer");
            assert_eq!(m.decode(HOST_DRAM_BASE, 4), None, "a host PA without pci_host_base is not host memory");
            assert_eq!(m.decode(h + (1 << 20) - 4, 8), None);
            assert_eq!(m.decode(u64::MAX, 8), None);
        }
    }
}
