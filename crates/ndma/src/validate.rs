//! The validation surfaces (spec §6, FACTS §6): user-authored descriptor rings are validated before anything
//! is copied, host addresses must belong to an attached process's chunk, and BAR0 writes that could ring a
//! doorbell or repoint a ring are refused.
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//! # let (_bed, dev) = doctest::device();
//! use ndma::validate::{bar0_write_blocked, NEURON_DMA_QUEUE_TYPE_TX};
//! use ndma::NdmaError;
//! use udma::{Barrier, Desc};
//! use zerocopy::IntoBytes;
//!
//! // A user-authored TX descriptor may only read host memory an attached process allocated.
//! dev.attach_process(4242);
//! let ours = dev.alloc_host(4096, 0)?;
//! let good = Desc::m2m_tx(dev.mc_to_pa(&ours), 4096, 1, Barrier::None)?;
//! let stray = Desc::m2m_tx(dev.dhal().pci_host_base() | 0x10_0000_0000, 4096, 1, Barrier::None)?;
//! let ring = dev.alloc_device(4096, 0)?;
//! dev.copy_descriptors(good.as_bytes(), 0, &ring, 0, 16, NEURON_DMA_QUEUE_TYPE_TX)?;
//! let both = [good, stray];
//! let err = dev.copy_descriptors(both.as_bytes(), 0, &ring, 0, 32, NEURON_DMA_QUEUE_TYPE_TX).unwrap_err();
//! assert!(matches!(err, NdmaError::InvalidDescriptorAddress { index: 1, .. }));
//! // And userspace may not ring a doorbell through BAR0.
//! let (eng, qid) = dev.h2t_queue(0)?;
//! let base = dev.dhal().engine_base(eng).unwrap();
//! let doorbell = udma::regs::queue_base(base, udma::Direction::Tx, qid) + udma::regs::q::DRTP_INC;
//! assert!(bar0_write_blocked(dev.dhal().arch(), doorbell, 4));
//! # Ok::<(), NdmaError>(())
//! ```

use udma::{regs, Arch, Desc, Direction};
use zerocopy::FromBytes;

use crate::device::NeuronDevice;
use crate::memory::MemChunk;
use crate::{NdmaError, Result};

/// `NEURON_DMA_QUEUE_TYPE_TX`: [`NeuronDevice::copy_descriptors`] checks each descriptor's source (`buf_ptr`);
/// with `NEURON_DMA_QUEUE_TYPE_RX`, its destination (`buf1_ptr`). Any other value is refused with
/// [`NdmaError::InvalidQueueType`] (example on [`NeuronDevice::copy_descriptors`]).
pub const NEURON_DMA_QUEUE_TYPE_TX: u32 = 0;
/// `NEURON_DMA_QUEUE_TYPE_RX`; see [`NEURON_DMA_QUEUE_TYPE_TX`].
pub const NEURON_DMA_QUEUE_TYPE_RX: u32 = 1;

impl NeuronDevice {
    /// `ndma_is_valid_host_mem`: is `[pa, pa + len)` a host chunk of an attached process on this device, then
    /// device −1, then +1, then every other device?
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (model, platform) = doctest::model(udma::Arch::V2, 3); // a three-device model and its platform
    /// use ndma::System;
    ///
    /// let hw = model.devices().iter().map(|d| ndma_emu::device_hw(d).expect("free")).collect();
    /// let system = System::new(udma::Arch::V2, platform, hw)?;
    /// let (dev0, dev2) = (system.device(0).unwrap(), system.device(2).unwrap());
    /// let on_dev2 = dev2.alloc_host(8192, 0)?;
    /// assert!(!dev0.is_valid_host_mem(on_dev2.pa(), 8192), "no process has device 2 open");
    /// dev2.attach_process(4242);
    /// assert!(dev0.is_valid_host_mem(on_dev2.pa(), 8192), "found on another device");
    /// assert!(!dev0.is_valid_host_mem(on_dev2.pa() + 4096, 8192), "runs past the chunk");
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    pub fn is_valid_host_mem(&self, pa: u64, len: u64) -> bool {
        let Some(registry) = self.registry.upgrade() else {
            return self.holds_valid_host_mem(pa, len);
        };
        let me = self.index;
        let mut order = vec![me];
        if me > 0 {
            order.push(me - 1);
        }
        order.push(me + 1);
        order.extend((0..registry.len()).filter(|&i| i != me && i + 1 != me && i != me + 1));
        let found = order.into_iter().any(|i| match i == me {
            true => self.holds_valid_host_mem(pa, len),
            false => registry.get(i).is_some_and(|d| d.holds_valid_host_mem(pa, len)),
        });
        if !found {
            tracing::error!(device = me, pa, "invalid host memory in DMA descriptor");
        }
        found
    }

    fn holds_valid_host_mem(&self, pa: u64, len: u64) -> bool {
        self.has_attached_process() && self.pool.holds_host_range(pa, len)
    }

    /// `ndma_memcpy_dma_copy_descriptors`: validate every descriptor of `buf[src_off..src_off + size]` —
    /// TX: `buf_ptr`, RX: `buf1_ptr`, each with its length — through the DHAL, **then** copy the bytes into
    /// `dst_mc` at `dst_off` (CPU copy for a host chunk, DMA through a bounce buffer for a device chunk).
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidQueueType`] (`-1`) for a type other than TX/RX, [`NdmaError::PartialDescriptor`]
    /// for a size that is not a multiple of 16, [`NdmaError::OutOfRange`], and
    /// [`NdmaError::InvalidDescriptorAddress`] for the first descriptor that fails validation,
    /// [`NdmaError::ForeignChunk`] for a device destination of another device's pool (a host destination is
    /// written by the CPU, from any pool); for a device destination, the
    /// bounce copy's errors ([`NeuronDevice::memcpy_buf_to_mc`]: no memory for the bounce buffer, the wait's
    /// errors). Nothing is copied on a refusal; a failed bounce copy may have written part of the window.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::validate::{NEURON_DMA_QUEUE_TYPE_RX, NEURON_DMA_QUEUE_TYPE_TX};
    /// use ndma::NdmaError;
    /// use udma::{Barrier, Desc};
    /// use zerocopy::IntoBytes;
    ///
    /// dev.attach_process(4242);
    /// let (host, hbm) = (dev.alloc_host(1 << 16, 0)?, dev.alloc_device(1 << 16, 0)?);
    /// // An RX descriptor writing the process's host chunk, and one writing HBM (never checked).
    /// let descs = [
    ///     Desc::m2m_rx(dev.mc_to_pa(&host), 4096, 1, Barrier::None, false)?,
    ///     Desc::m2m_rx(hbm.pa(), 4096, 1, Barrier::None, false)?,
    /// ];
    /// let ring = dev.alloc_device(4096, 0)?; // a device chunk: the copy goes by DMA through a bounce buffer
    /// dev.copy_descriptors(descs.as_bytes(), 0, &ring, 256, 32, NEURON_DMA_QUEUE_TYPE_RX)?;
    /// let back = dev.alloc_host(32, 0)?;
    /// dev.memcpy_mc(&ring, &back, 256, 0, 32)?;
    /// let mut out = [0u8; 32];
    /// back.read(0, &mut out)?;
    /// assert_eq!(out, descs.as_bytes());
    /// let err = dev.copy_descriptors(descs.as_bytes(), 0, &ring, 0, 20, NEURON_DMA_QUEUE_TYPE_RX).unwrap_err();
    /// assert_eq!(err, NdmaError::PartialDescriptor(20));
    /// let err = dev.copy_descriptors(descs.as_bytes(), 0, &ring, 0, 32, 2).unwrap_err();
    /// assert_eq!((err.clone(), err.errno()), (NdmaError::InvalidQueueType(2), -1));
    /// # Ok::<(), NdmaError>(())
    /// ```
    pub fn copy_descriptors(
        &self,
        buf: &[u8],
        src_off: u64,
        dst_mc: &MemChunk,
        dst_off: u64,
        size: u64,
        queue_type: u32,
    ) -> Result<()> {
        if queue_type != NEURON_DMA_QUEUE_TYPE_TX && queue_type != NEURON_DMA_QUEUE_TYPE_RX {
            return Err(NdmaError::InvalidQueueType(queue_type));
        }
        if size % 16 != 0 {
            return Err(NdmaError::PartialDescriptor(size));
        }
        let window = src_off
            .checked_add(size)
            .filter(|&end| end <= buf.len() as u64)
            .map(|end| &buf[src_off as usize..end as usize])
            .ok_or(NdmaError::OutOfRange {
                what: "descriptor buffer",
                offset: src_off,
                size,
                limit: buf.len() as u64,
            })?;
        dst_mc.check_range("descriptor destination", dst_off, size)?;
        if !dst_mc.is_host() {
            // The bounce copy's own refusals, before anything is validated or copied.
            self.check_own_chunk("descriptor destination", dst_mc)?;
        }
        for index in 0..window.len() / 16 {
            let at = index * 16;
            let desc = Desc::read_from_bytes(&window[at..at + 16]).map_err(|_| NdmaError::PartialDescriptor(size))?;
            let (pa, len) = match queue_type {
                NEURON_DMA_QUEUE_TYPE_TX => (desc.tx().src, desc.tx().len_ctrl.len_bytes()),
                _ => (desc.rx().dst, desc.rx().len_ctrl.len_bytes()),
            };
            if !self.dhal.validate_pa(pa, &|pa| self.is_valid_host_mem(pa, u64::from(len))) {
                return Err(NdmaError::InvalidDescriptorAddress { index, pa });
            }
        }
        if dst_mc.is_host() {
            return dst_mc.write(dst_off, window);
        }
        let bounce = crate::platform::alloc_coherent(&*self.platform, window.len().max(1))?;
        bounce.write_bytes(0, window)?;
        self.memcpy_buf_to_mc(&*bounce, 0, dst_mc, dst_off, size)
    }
}

/// `ndma_bar0_blocked_one_engine`, the driver's rule: is `off` exactly one of the blocked registers (ring
/// bases, completion bases, doorbell) of any of the 16 queues, in either direction, of the engine at `base`?
///
/// ```
/// use ndma::validate::bar0_blocked_one_engine;
/// use udma::{regs, Arch, Direction};
///
/// let base = Arch::V2.engine_base(32).unwrap();
/// let rx5 = regs::queue_base(base, Direction::Rx, 5);
/// assert!(bar0_blocked_one_engine(base, rx5 + regs::q::DRBP_LOW));
/// assert!(!bar0_blocked_one_engine(base, rx5 + regs::q::CFG));
/// // The driver's rule compares exact offsets: a write 2 bytes into the doorbell slips through.
/// assert!(!bar0_blocked_one_engine(base, rx5 + regs::q::DRTP_INC + 2));
/// assert!(!bar0_blocked_one_engine(u64::MAX - 0x1000, 0x28), "any base: an offset below it is not blocked");
/// ```
pub fn bar0_blocked_one_engine(base: u64, off: u64) -> bool {
    // Compared engine-relative, so any `base` works (a register offset from 0 never overflows).
    let Some(rel) = off.checked_sub(base) else { return false };
    [Direction::Tx, Direction::Rx].into_iter().any(|dir| {
        (0..udma::DMA_MAX_Q).any(|q| regs::q::BLOCKED.iter().any(|reg| regs::queue_base(0, dir, q) + reg == rel))
    })
}

/// The hardened BAR0 gate: refuse a userspace write of `len` bytes at `off` if any byte of it overlaps a
/// blocked register of any engine of the arch (the driver only refuses exact offsets). A `len` of 0 is judged
/// as one byte at `off`: a zero-length write aimed at a doorbell is refused like the write it names.
///
/// ```
/// use ndma::validate::bar0_write_blocked;
/// use udma::{regs, Arch, Direction};
///
/// let rx5 = regs::queue_base(Arch::V2.engine_base(32).unwrap(), Direction::Rx, 5);
/// assert!(bar0_write_blocked(Arch::V2, rx5 + regs::q::DRTP_INC + 2, 2), "overlaps the doorbell");
/// assert!(bar0_write_blocked(Arch::V2, rx5 + regs::q::DRTP_INC - 4, 8));
/// assert!(!bar0_write_blocked(Arch::V2, rx5 + regs::q::CFG, 4));
/// assert!(bar0_write_blocked(Arch::V2, u64::MAX - 1, 4), "an end that overflows is refused");
/// assert!(bar0_write_blocked(Arch::V2, rx5 + regs::q::DRTP_INC, 0), "0 bytes: judged as one");
/// ```
pub fn bar0_write_blocked(arch: Arch, off: u64, len: u64) -> bool {
    let Some(end) = off.checked_add(len.max(1)) else {
        return true;
    };
    (0..arch.num_engines()).filter_map(|e| arch.engine_base(e)).any(|base| {
        if end <= base || off >= base + regs::ENGINE_REGS_SIZE {
            return false;
        }
        [Direction::Tx, Direction::Rx].into_iter().any(|dir| {
            (0..udma::DMA_MAX_Q).any(|q| {
                regs::q::BLOCKED.iter().any(|reg| {
                    let r = regs::queue_base(base, dir, q) + reg;
                    off < r + 4 && r < end
                })
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked_registers(arch: Arch) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for eng in 0..arch.num_engines() {
            let base = arch.engine_base(eng).unwrap();
            for dir in [Direction::Tx, Direction::Rx] {
                for q in 0..udma::DMA_MAX_Q {
                    for reg in regs::q::BLOCKED {
                        out.push((base, regs::queue_base(base, dir, q) + reg));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_blocked_register_of_every_engine_is_refused() {
        for arch in Arch::ALL {
            let all = blocked_registers(arch);
            assert_eq!(all.len(), arch.num_engines() as usize * 2 * 16 * 5);
            for (base, off) in all {
                assert!(bar0_blocked_one_engine(base, off), "{arch}: {off:#x} exact");
                assert!(bar0_write_blocked(arch, off, 4), "{arch}: {off:#x} 4 bytes");
                // Hardened rule: a write overlapping the register's bytes is refused too.
                assert!(bar0_write_blocked(arch, off - 2, 4), "{arch}: {off:#x} straddling start");
                assert!(bar0_write_blocked(arch, off + 3, 1), "{arch}: {off:#x} last byte");
                assert!(bar0_write_blocked(arch, off - 4, 8), "{arch}: {off:#x} 8-byte write");
                // The driver's exact-offset rule misses the straddling write.
                assert!(!bar0_blocked_one_engine(base, off + 2));
            }
        }
    }

    #[test]
    fn allowed_offsets_pass() {
        for arch in Arch::ALL {
            for eng in [0, arch.num_engines() / 2, arch.num_engines() - 1] {
                let base = arch.engine_base(eng).unwrap();
                for dir in [Direction::Tx, Direction::Rx] {
                    for q in [0, 7, 15] {
                        let qb = regs::queue_base(base, dir, q);
                        for reg in [
                            regs::q::CFG,
                            regs::q::STATUS,
                            regs::q::DRL,
                            regs::q::DRHP,
                            regs::q::DRTP,
                            regs::q::DCP,
                            regs::q::CRHP,
                        ] {
                            assert!(!bar0_blocked_one_engine(base, qb + reg), "{arch} eng {eng}: {:#x}", qb + reg);
                            assert!(!bar0_write_blocked(arch, qb + reg, 4), "{arch} eng {eng}: {:#x}", qb + reg);
                        }
                    }
                }
                assert!(!bar0_write_blocked(arch, base + regs::M2S_CHANGE_STATE, 4));
            }
            // Outside every engine block.
            assert!(!bar0_write_blocked(arch, 0x10, 4));
            // A write whose end overflows is refused.
            assert!(bar0_write_blocked(arch, u64::MAX - 1, 4));
        }
        // The queue block base itself (desc_pref_cfg) and the register right after drtp_inc are allowed.
        let base = Arch::V2.engine_base(32).unwrap();
        assert!(!bar0_blocked_one_engine(base, base + 0x1000));
        assert!(!bar0_blocked_one_engine(base, base + 0x1000 + regs::q::DRTP_INC + 4));
        assert!(!bar0_write_blocked(Arch::V2, base + 0x1000 + regs::q::DRTP_INC + 4, 4));
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// Reference: every byte of the write, checked against every blocked register of every engine.
    fn reference(arch: Arch, off: u64, len: u64) -> bool {
        let len = len.max(1);
        (0..arch.num_engines()).any(|eng| {
            let base = arch.engine_base(eng).unwrap();
            [Direction::Tx, Direction::Rx].into_iter().any(|dir| {
                (0..udma::DMA_MAX_Q).any(|q| {
                    regs::q::BLOCKED.iter().any(|reg| {
                        let r = regs::queue_base(base, dir, q) + reg;
                        (off..off + len).any(|b| (r..r + 4).contains(&b))
                    })
                })
            })
        })
    }

    fn near_a_queue_register(arch: Arch) -> impl Strategy<Value = u64> {
        let engines = arch.num_engines();
        (0..engines, 0u64..2, 0u64..16, 0u64..0x100).prop_map(move |(eng, dir, q, reg)| {
            arch.engine_base(eng).unwrap() + [0x1000, 0x21000][dir as usize] + q * 0x1000 + reg
        })
    }

    proptest! {
        #[test]
        fn hardened_gate_matches_a_byte_by_byte_reference(
            v3: bool,
            pick in any::<proptest::sample::Index>(),
            delta in 0u64..0x100,
            len in 0u64..12,
        ) {
            let arch = if v3 { Arch::V3 } else { Arch::V2 };
            let engines = arch.num_engines();
            let eng = pick.index(engines as usize) as u32;
            let off = arch.engine_base(eng).unwrap() + 0x1000 + (delta % 2) * 0x20000 + delta * 0x1000 % 0x10000 + delta;
            prop_assert_eq!(bar0_write_blocked(arch, off, len), reference(arch, off, len), "{} {:#x}+{}", arch, off, len);
        }

        #[test]
        fn exact_rule_is_the_hardened_rule_for_aligned_word_writes(off in near_a_queue_register(Arch::V2)) {
            let off = off & !3;
            let (eng, _) = Arch::V2.engine_at(off).unwrap();
            let base = Arch::V2.engine_base(eng).unwrap();
            prop_assert_eq!(bar0_blocked_one_engine(base, off), bar0_write_blocked(Arch::V2, off, 4));
        }
    }
}
