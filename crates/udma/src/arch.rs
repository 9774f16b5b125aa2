//! Per-generation facts the HAL and a device model both need (FACTS §4): where each engine's registers sit
//! in BAR0, how a device address selects host memory, and the topology — which NeuronCore owns which engine
//! and queue. The op layer's DHAL (`ndma::arch`) builds on these; everything about policy (barriers, wait
//! budgets, retries) lives there, not here.
//!
//! # Topology
//!
//! Each NC has [`ENGINES_PER_NC`] SENG engines of its own: engine `e < 16·NCs` belongs to NC `e / 16`, with
//! all its queues. The remaining engines are the host-facing (D2H/H2D) ones, each hosting the default H2T
//! queue of one or two NCs:
//!
//! | | V2 (2 NCs, 34 engines) | V3 (8 NCs, 132 engines) |
//! |---|---|---|
//! | H2T engine of NC `nc` | 32 (D2H) for NC 0, 33 (H2D) for NC 1 | `[128, 129, 130, 131][nc / 2]` |
//! | default H2T queue | 0 | `nc % 2` (two NCs share an engine) |
//!
//! ```
//! use udma::arch::{Arch, ENGINES_PER_NC};
//!
//! // Where NC 3 of a Trn2 device sends its host-to-tensor copies, and who owns that queue.
//! let (eng, qid) = (Arch::V3.h2t_engine(3).unwrap(), Arch::V3.h2t_default_qid(3).unwrap());
//! assert_eq!((eng, qid), (129, 1));
//! assert_eq!(Arch::V3.queue_owner(eng, qid), Some(3));
//! assert_eq!(Arch::V3.engine_nc(3 * ENGINES_PER_NC + 5), Some(3), "a SENG engine of NC 3");
//! ```

/// A Neuron device generation: its engine layout in BAR0, how it addresses host memory, and its topology.
///
/// ```
/// use udma::Arch;
///
/// // 16 SENG engines per NC, plus the host-facing (D2H/H2D) engines.
/// let host_facing = |a: Arch| a.num_engines() - a.seng_engines();
/// assert_eq!((host_facing(Arch::V2), host_facing(Arch::V3)), (2, 4));
/// assert_eq!((Arch::V2.ncs_per_device(), Arch::V2.num_engines(), Arch::V2.to_string()), (2, 34, "v2".into()));
/// assert_eq!((Arch::V3.ncs_per_device(), Arch::V3.num_engines(), Arch::V3.to_string()), (8, 132, "v3".into()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Trn1 / Inf2.
    V2,
    /// Trn2.
    V3,
}

/// `V2_PCIE_A0_BASE`: bit 44. These three constants are what [`Arch::pci_host_base`] and
/// [`Arch::host_addr_mask`] return; [`Arch::is_host_addr`] shows them at work.
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

/// SENG engines per NeuronCore (FACTS §4: "16 per NC").
pub const ENGINES_PER_NC: u32 = 16;
/// V2: the D2H engine, which hosts NC 0's H2T queue (`ndmar_get_h2t_eng_id`).
const V2_D2H_ENGINE: u32 = 32;
/// V2: the H2D engine, which hosts every other NC's H2T queue.
const V2_H2D_ENGINE: u32 = 33;
/// V3: the IO engines hosting H2T queues, indexed by `nc / 2` (each serves two NCs, one queue each).
const V3_H2T_ENGINES: [u32; 4] = [128, 129, 130, 131];

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
    ///
    /// ```
    /// use udma::arch::{Arch, V2_PCI_HOST_BASE, V3_PCI_HOST_BASE};
    ///
    /// let host_pa = 0x8_0000_1000;
    /// assert!(Arch::V2.is_host_addr(host_pa | Arch::V2.pci_host_base()));
    /// assert!(!Arch::V2.is_host_addr(host_pa), "HBM");
    /// // V2 compares five bits (48:44), so bit 45 set makes an address that is not host memory there.
    /// assert!(!Arch::V2.is_host_addr(V2_PCI_HOST_BASE | 1 << 45));
    /// assert_eq!(Arch::V2.host_addr_mask(), 0x1F << 44);
    /// // V3 looks at bit 46 only.
    /// assert!(Arch::V3.is_host_addr(V3_PCI_HOST_BASE | 1 << 45));
    /// ```
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

    /// SENG engines on the device (ids `0..seng_engines()`): [`ENGINES_PER_NC`] per NC.
    pub const fn seng_engines(self) -> u32 {
        ENGINES_PER_NC * self.ncs_per_device()
    }

    /// The NC whose SENG engine `eng` is (`eng / 16`); `None` for a host-facing engine or an id the arch
    /// lacks.
    pub const fn engine_nc(self, eng: u32) -> Option<u32> {
        if eng < self.seng_engines() {
            Some(eng / ENGINES_PER_NC)
        } else {
            None
        }
    }

    /// `ndmar_get_h2t_eng_id`: the engine hosting NC `nc`'s host-to-tensor queue — V2: 32 (D2H) for NC 0,
    /// 33 (H2D) for NC 1; V3: `[128, 129, 130, 131][nc / 2]`. `None` for an NC the device lacks.
    pub const fn h2t_engine(self, nc: u32) -> Option<u32> {
        if nc >= self.ncs_per_device() {
            return None;
        }
        Some(match self {
            Arch::V2 if nc == 0 => V2_D2H_ENGINE,
            Arch::V2 => V2_H2D_ENGINE,
            Arch::V3 => V3_H2T_ENGINES[(nc / 2) as usize],
        })
    }

    /// `ndmar_get_h2t_def_qid`: NC `nc`'s default queue on its H2T engine — 0 on V2, `nc % 2` on V3 (an
    /// engine serves two NCs). `None` for an NC the device lacks.
    pub const fn h2t_default_qid(self, nc: u32) -> Option<u32> {
        if nc >= self.ncs_per_device() {
            return None;
        }
        Some(match self {
            Arch::V2 => 0,
            Arch::V3 => nc % 2,
        })
    }

    /// The NC that owns queue `qid` of engine `eng`: every queue of a SENG engine belongs to that engine's
    /// NC; on a host-facing engine only an NC's default H2T queue has a fixed owner. `None` for any other
    /// queue (the driver hands those out at run time), a qid ≥ 16, or an engine the arch lacks.
    ///
    /// ```
    /// use udma::Arch;
    ///
    /// assert_eq!(Arch::V2.queue_owner(17, 9), Some(1), "every queue of NC 1's SENG engine 17");
    /// assert_eq!(Arch::V2.queue_owner(33, 0), Some(1), "NC 1's H2T queue on the H2D engine");
    /// assert_eq!(Arch::V2.queue_owner(33, 1), None, "handed out at run time");
    /// assert_eq!(Arch::V2.queue_owner(34, 0), None, "no engine 34 on V2");
    /// assert_eq!((Arch::V2.h2t_engine(0), Arch::V2.h2t_engine(2)), (Some(32), None));
    /// assert_eq!((Arch::V2.engine_nc(31), Arch::V2.engine_nc(32)), (Some(1), None));
    /// ```
    pub fn queue_owner(self, eng: u32, qid: u32) -> Option<u32> {
        if qid >= crate::DMA_MAX_Q {
            return None;
        }
        if let Some(nc) = self.engine_nc(eng) {
            return Some(nc);
        }
        (0..self.ncs_per_device()).find(|&nc| self.h2t_engine(nc) == Some(eng) && self.h2t_default_qid(nc) == Some(qid))
    }

    /// BAR0 offset of engine `eng`'s register block, or `None` for an id the arch does not have.
    ///
    /// ```
    /// use udma::{regs, Arch};
    ///
    /// assert_eq!(Arch::V2.engine_base(33), Some(0x30D0_0000));
    /// assert_eq!(Arch::V3.engine_base(128), Some(0x0680_0000));
    /// assert_eq!(Arch::V3.engine_base(132), None);
    /// // The inverse: which engine a BAR0 offset falls in, and where inside its block.
    /// let h2d = Arch::V2.engine_base(33).unwrap();
    /// let doorbell = regs::queue_base(h2d, udma::Direction::Rx, 0) + regs::q::DRTP_INC;
    /// assert_eq!(Arch::V2.engine_at(doorbell), Some((33, 0x2_1038)));
    /// assert_eq!(Arch::V2.engine_at(0x10), None);
    /// ```
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

    /// The engine whose register block contains BAR0 offset `off`, with the offset inside that block (example
    /// on [`Arch::engine_base`]).
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
                // The block's edges: its first and last byte are its own, the byte past it is not.
                let last = crate::regs::ENGINE_REGS_SIZE - 1;
                assert_eq!(arch.engine_at(base), Some((eng, 0)), "{arch} engine {eng}");
                assert_eq!(arch.engine_at(base + last), Some((eng, last)), "{arch} engine {eng}");
                let past = arch.engine_at(base + crate::regs::ENGINE_REGS_SIZE);
                assert!(past.is_none_or(|(e, off)| e != eng && off == 0), "{arch} engine {eng}: {past:x?}");
            }
        }
    }

    #[test]
    fn h2t_engines_and_default_queues_match_facts() {
        assert_eq!([0, 1].map(|nc| Arch::V2.h2t_engine(nc)), [Some(32), Some(33)]);
        assert_eq!([0, 1].map(|nc| Arch::V2.h2t_default_qid(nc)), [Some(0), Some(0)]);
        let v3 = [0, 1, 2, 3, 4, 5, 6, 7].map(|nc| (Arch::V3.h2t_engine(nc), Arch::V3.h2t_default_qid(nc)));
        let want = [(128, 0), (128, 1), (129, 0), (129, 1), (130, 0), (130, 1), (131, 0), (131, 1)];
        assert_eq!(v3, want.map(|(e, q)| (Some(e), Some(q))));
        for arch in Arch::ALL {
            let ncs = arch.ncs_per_device();
            for nc in [ncs, ncs + 1, u32::MAX] {
                assert_eq!((arch.h2t_engine(nc), arch.h2t_default_qid(nc)), (None, None), "{arch} nc {nc}");
            }
        }
    }

    /// Every engine and queue of both arches against an owner table written out independently of the
    /// functions under test.
    #[test]
    fn queue_owners_cover_every_engine_and_queue() {
        fn expected(arch: Arch, eng: u32, qid: u32) -> Option<u32> {
            match (arch, eng, qid) {
                (_, _, 16..) => None,
                (Arch::V2, 0..=15, _) => Some(0),
                (Arch::V2, 16..=31, _) => Some(1),
                (Arch::V2, 32, 0) => Some(0),
                (Arch::V2, 33, 0) => Some(1),
                (Arch::V3, 0..=127, _) => Some(eng / 16),
                (Arch::V3, 128..=131, 0 | 1) => Some((eng - 128) * 2 + qid),
                _ => None,
            }
        }
        for arch in Arch::ALL {
            for eng in 0..arch.num_engines() + 2 {
                for qid in 0..18 {
                    assert_eq!(arch.queue_owner(eng, qid), expected(arch, eng, qid), "{arch} engine {eng} queue {qid}");
                }
                let seng = eng < arch.seng_engines();
                assert_eq!(arch.engine_nc(eng), seng.then_some(eng / 16), "{arch} engine {eng}");
            }
            // Every NC owns its H2T queue, and that queue sits on an engine the arch has.
            for nc in 0..arch.ncs_per_device() {
                let (eng, qid) = (arch.h2t_engine(nc).unwrap(), arch.h2t_default_qid(nc).unwrap());
                assert!(arch.engine_base(eng).is_some());
                assert_eq!(arch.queue_owner(eng, qid), Some(nc));
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
