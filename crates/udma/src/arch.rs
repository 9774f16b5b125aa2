//! Per-generation facts the HAL and a device model both need: where each engine's registers sit in BAR0
//! and how a device address selects host memory (FACTS §4). The op layer's DHAL (`ndma::arch`) builds on
//! these; everything about policy (barriers, wait budgets, retries) lives there, not here.

/// A Neuron device generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Trn1 / Inf2.
    V2,
    /// Trn2.
    V3,
}

/// `V2_PCIE_A0_BASE`: bit 44.
pub const V2_PCI_HOST_BASE: u64 = 0x0000_1000_0000_0000;
/// `V3_PCIE_A0_BASE`: bit 46.
pub const V3_PCI_HOST_BASE: u64 = 0x0000_4000_0000_0000;
/// The bits V2's `ndma_validate_pa` compares against `pci_host_base`.
pub const V2_HOST_ADDR_MASK: u64 = 0x0001_F000_0000_0000;

/// V2: engines of SENG0 sit at this BAR0 offset, `V2_APB_SENG_UDMA_SIZE` apart.
const V2_SENG0_BASE: u64 = 0x3000_0000;
/// V2: engines of SENG1.
const V2_SENG1_BASE: u64 = 0x3070_0000;
/// V2: the D2H engine (id 32).
const V2_D2H_BASE: u64 = 0x3060_0000;
/// V2: the H2D engine (id 33).
const V2_H2D_BASE: u64 = 0x30D0_0000;
/// V2: stride between SENG engines.
const V2_SENG_UDMA_SIZE: u64 = 0x4_0000;
/// V3: SE0..SE3 BAR0 bases.
const V3_SE_BASE: [u64; 4] = [0x8200_0000, 0x9400_0000, 0xA200_0000, 0xB400_0000];
/// V3: stride between engines of one SE (`V3_APB_SDMA_DIST`).
const V3_SDMA_DIST: u64 = 0x10_0000;
/// V3: IO engines 128..=131 (D2H_0, H2D_0, D2H_1, H2D_1).
const V3_IO_BASE: [u64; 4] = [0x0680_0000, 0x0690_0000, 0x4680_0000, 0x4690_0000];

impl Arch {
    /// Every arch, in order.
    pub const ALL: [Arch; 2] = [Arch::V2, Arch::V3];

    /// The bits OR-ed into a host physical address so the device routes it across PCIe to host memory.
    pub const fn pci_host_base(self) -> u64 {
        match self {
            Arch::V2 => V2_PCI_HOST_BASE,
            Arch::V3 => V3_PCI_HOST_BASE,
        }
    }

    /// The bits compared against [`Arch::pci_host_base`] to decide "this address is host memory".
    pub const fn host_addr_mask(self) -> u64 {
        match self {
            Arch::V2 => V2_HOST_ADDR_MASK,
            Arch::V3 => V3_PCI_HOST_BASE,
        }
    }

    /// True when the device routes `addr` to host memory.
    pub const fn is_host_addr(self, addr: u64) -> bool {
        addr & self.host_addr_mask() == self.pci_host_base()
    }

    /// UDMA engines per device: 34 on V2 (32 SENG + D2H + H2D), 132 on V3 (128 SENG + 4 IO).
    pub const fn num_engines(self) -> u32 {
        match self {
            Arch::V2 => 34,
            Arch::V3 => 132,
        }
    }

    /// NeuronCores per device.
    pub const fn ncs_per_device(self) -> u32 {
        match self {
            Arch::V2 => 2,
            Arch::V3 => 8,
        }
    }

    /// BAR0 offset of engine `eng`'s register block, or `None` for an id the arch does not have.
    pub const fn engine_base(self, eng: u32) -> Option<u64> {
        match self {
            Arch::V2 => match eng {
                0..=15 => Some(V2_SENG0_BASE + eng as u64 * V2_SENG_UDMA_SIZE),
                16..=31 => Some(V2_SENG1_BASE + (eng as u64 - 16) * V2_SENG_UDMA_SIZE),
                32 => Some(V2_D2H_BASE),
                33 => Some(V2_H2D_BASE),
                _ => None,
            },
            Arch::V3 => match eng {
                0..=127 => Some(V3_SE_BASE[(eng / 32) as usize] + (eng % 32) as u64 * V3_SDMA_DIST),
                128..=131 => Some(V3_IO_BASE[(eng - 128) as usize]),
                _ => None,
            },
        }
    }

    /// The engine whose register block contains BAR0 offset `off`, with the offset inside that block.
    pub fn engine_at(self, off: u64) -> Option<(u32, u64)> {
        (0..self.num_engines()).find_map(|eng| {
            let base = self.engine_base(eng)?;
            (off >= base && off < base + crate::regs::ENGINE_REGS_SIZE).then(|| (eng, off - base))
        })
    }
}

impl core::fmt::Display for Arch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Arch::V2 => "v2",
            Arch::V3 => "v3",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_bases_match_facts() {
        assert_eq!(Arch::V2.engine_base(0), Some(0x3000_0000));
        assert_eq!(Arch::V2.engine_base(15), Some(0x303C_0000));
        assert_eq!(Arch::V2.engine_base(16), Some(0x3070_0000));
        assert_eq!(Arch::V2.engine_base(32), Some(0x3060_0000));
        assert_eq!(Arch::V2.engine_base(33), Some(0x30D0_0000));
        assert_eq!(Arch::V2.engine_base(34), None);
        assert_eq!(Arch::V3.engine_base(0), Some(0x8200_0000));
        assert_eq!(Arch::V3.engine_base(33), Some(0x9410_0000));
        assert_eq!(Arch::V3.engine_base(127), Some(0xB400_0000 + 31 * 0x10_0000));
        assert_eq!(Arch::V3.engine_base(128), Some(0x0680_0000));
        assert_eq!(Arch::V3.engine_base(131), Some(0x4690_0000));
        assert_eq!(Arch::V3.engine_base(132), None);
    }

    #[test]
    fn engine_blocks_never_overlap() {
        for arch in Arch::ALL {
            let mut bases: [u64; 132] = [0; 132];
            let n = arch.num_engines() as usize;
            for (eng, slot) in bases.iter_mut().enumerate().take(n) {
                *slot = arch.engine_base(eng as u32).unwrap();
            }
            let bases = &mut bases[..n];
            bases.sort_unstable();
            for w in bases.windows(2) {
                assert!(w[0] + crate::regs::ENGINE_REGS_SIZE <= w[1], "{arch}: {:#x} overlaps {:#x}", w[0], w[1]);
            }
            for eng in 0..arch.num_engines() {
                let base = arch.engine_base(eng).unwrap();
                assert_eq!(arch.engine_at(base + 0x21038), Some((eng, 0x21038)));
            }
        }
    }

    #[test]
    fn host_addresses_decode_per_arch() {
        assert!(Arch::V2.is_host_addr(V2_PCI_HOST_BASE | 0x1234));
        assert!(!Arch::V2.is_host_addr(0x1234));
        assert!(!Arch::V2.is_host_addr(V2_PCI_HOST_BASE | (1 << 45)));
        assert!(Arch::V3.is_host_addr(V3_PCI_HOST_BASE | (1 << 44)));
        assert!(!Arch::V3.is_host_addr(V2_PCI_HOST_BASE));
    }
}
