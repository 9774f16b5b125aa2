//! The DHAL: everything that differs between device generations, behind one trait as the driver's
//! `ndhal` vtable (FACTS §4). The op layer asks the DHAL and never branches on the arch itself — except at
//! the one place the driver does (the zero-copy barrier, `zerocopy::build`; the fence that closes a failed
//! zero-copy request, a departure, places its barrier by the same rule).
//!
//! ```
//! use ndma::arch::{dhal, Dhal, WaitBudget};
//! use udma::{Arch, Barrier};
//!
//! let v2: &dyn Dhal = dhal(Arch::V2);
//! assert_eq!((v2.h2t_eng_id(1), v2.h2t_def_qid(1)), (33, 0));
//! assert_eq!(v2.m2m_barrier(true), Barrier::WriteBarrier);
//! assert!(v2.retry_memcpy() && !dhal(Arch::V3).retry_memcpy(), "only V2 retries in reset windows");
//! // The marker-poll budget of a full batch (2031 data descriptors + the marker), FACTS §4's worked example.
//! assert_eq!(v2.wait_budget(2032, false), WaitBudget { first_wait_us: 8121, following_us: 80_427_900 });
//! ```

mod v2;
mod v3;

use udma::{Arch, Barrier};

pub use v2::V2;
pub use v3::V3;

/// The marker-poll budget for one batch, in µs (`ndma_get_wait_for_completion_time`); see
/// [`Dhal::wait_budget`] and [`poll_plan`](crate::poll_plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitBudget {
    /// Delay before the first poll.
    pub first_wait_us: u64,
    /// The following wait: the poll loop makes `following_us + 2` polls, 1 µs apart.
    pub following_us: u64,
}

/// The engine id [`Dhal::h2t_eng_id`] answers for an NC the device lacks: no arch has it.
///
/// ```
/// use ndma::arch::{dhal, NO_SUCH_ENGINE};
/// use udma::Arch;
///
/// let v3 = dhal(Arch::V3);
/// assert_eq!(v3.h2t_eng_id(8), NO_SUCH_ENGINE, "V3 has NCs 0..8");
/// assert_eq!(v3.engine_base(NO_SUCH_ENGINE), None);
/// assert_eq!(v3.h2t_def_qid(8), udma::DMA_MAX_Q, "a queue id every lookup refuses");
/// ```
pub const NO_SUCH_ENGINE: u32 = u32::MAX;

/// Per-generation behaviour of the DMA op layer. The op layer asks the DHAL of its device
/// ([`NeuronDevice::dhal`](crate::NeuronDevice::dhal)); [`dhal`] gives the one of an arch.
///
/// ```
/// use ndma::arch::{dhal, WaitBudget};
/// use udma::Arch;
///
/// for arch in Arch::ALL {
///     let d = dhal(arch);
///     assert_eq!((d.arch(), d.pci_host_base(), d.num_engines()), (arch, arch.pci_host_base(), arch.num_engines()));
///     // Every NC's H2T queue is on an engine the device has.
///     for nc in 0..d.ncs_per_device() {
///         assert!(d.engine_base(d.h2t_eng_id(nc)).is_some());
///     }
/// }
/// // V3 async zero-copy: the completion thread's bit of queue 1 of IO engine 129.
/// assert_eq!((dhal(Arch::V3).ctx_queue_bit(129, 1), dhal(Arch::V2).ctx_queue_bit(33, 0)), (Some(17), None));
/// // An async batch waits 1 µs first; the silicon budget is small for a small batch.
/// assert_eq!(dhal(Arch::V3).wait_budget(3, true), WaitBudget { first_wait_us: 1, following_us: 159_900 });
/// // `validate_pa`: only host addresses must belong to a chunk.
/// let v2 = dhal(Arch::V2);
/// assert!(v2.validate_pa(0x1000, &|_| false), "HBM is not checked");
/// assert!(!v2.validate_pa(v2.pci_host_base() | 0x1000, &|_| false));
/// ```
pub trait Dhal: Send + Sync + 'static {
    /// The generation.
    fn arch(&self) -> Arch;

    /// The host-BAR window bits OR-ed into every host PA (bit 44 on V2, bit 46 on V3).
    fn pci_host_base(&self) -> u64 {
        self.arch().pci_host_base()
    }

    /// NeuronCores per device.
    fn ncs_per_device(&self) -> u32 {
        self.arch().ncs_per_device()
    }

    /// UDMA engines per device.
    fn num_engines(&self) -> u32 {
        self.arch().num_engines()
    }

    /// BAR0 offset of engine `eng`.
    fn engine_base(&self, eng: u32) -> Option<u64> {
        self.arch().engine_base(eng)
    }

    /// `ndmar_get_h2t_eng_id`: the engine hosting NC `nc`'s host-to-tensor ring (a hardware fact,
    /// [`Arch::h2t_engine`]). For an NC the device lacks: [`NO_SUCH_ENGINE`], which every engine lookup
    /// refuses.
    fn h2t_eng_id(&self, nc: u32) -> u32 {
        self.arch().h2t_engine(nc).unwrap_or(NO_SUCH_ENGINE)
    }

    /// `ndmar_get_h2t_def_qid`: the default H2T queue of NC `nc` on that engine ([`Arch::h2t_default_qid`]).
    /// For an NC the device lacks: [`udma::DMA_MAX_Q`], which every queue lookup refuses.
    fn h2t_def_qid(&self, nc: u32) -> u32 {
        self.arch().h2t_default_qid(nc).unwrap_or(udma::DMA_MAX_Q)
    }

    /// `ndma_get_m2m_barrier_type`: the barrier of a classic-path data descriptor; `last` is true for the
    /// last data descriptor of a batch. WRITE_BARRIER on both V2 and V3 (FACTS §7.4.1).
    fn m2m_barrier(&self, last: bool) -> Barrier {
        if last {
            Barrier::WriteBarrier
        } else {
            Barrier::None
        }
    }

    /// `ndma_get_wait_for_completion_time`: the budget for a batch of `count` descriptors (marker included).
    /// Saturating: a count of 0 or 1 cannot underflow (the C V2 formula does).
    fn wait_budget(&self, count: u32, is_async: bool) -> WaitBudget;

    /// `ndma_retry_memcpy`: does this generation need the reset-window retry (V2 only)?
    fn retry_memcpy(&self) -> bool;

    /// `ndmar_ctx_queue_bit` (\[N\]): the bit of queue (`eng`, `qid`) in the completion thread's non-empty-queue
    /// bitmap, or `None` where the arch has no async zero-copy (V2: the driver's bit is always 0 there).
    fn ctx_queue_bit(&self, eng: u32, qid: u32) -> Option<u32>;

    /// `ndma_validate_pa`: a host address (per the arch's host mask) must be host memory some process
    /// allocated (`is_valid_host_mem`); every other address passes.
    fn validate_pa(&self, pa: u64, is_valid_host_mem: &dyn Fn(u64) -> bool) -> bool {
        !self.arch().is_host_addr(pa) || is_valid_host_mem(pa)
    }
}

/// The DHAL of `arch` (examples on the [module](self) and [`Dhal`]).
pub fn dhal(arch: Arch) -> &'static dyn Dhal {
    match arch {
        Arch::V2 => &V2,
        Arch::V3 => &V3,
    }
}

/// An EC2 instance type and the Neuron devices it carries.
///
/// ```
/// use ndma::Instance;
/// use udma::Arch;
///
/// let i = Instance::by_name("trn2.48xlarge").unwrap();
/// assert_eq!((i.arch, i.devices), (Arch::V3, 16));
/// assert_eq!(Instance::by_name("p4d.24xlarge"), None);
/// assert!(Instance::ALL.iter().all(|i| Instance::by_name(i.name) == Some(*i)));
/// // A preset of your own, e.g. one device of a generation (what the crate's examples use).
/// let one = Instance { name: "trn2-1", arch: Arch::V3, devices: 1 };
/// assert_eq!(one.arch.ncs_per_device(), 8);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    /// Instance type name.
    pub name: &'static str,
    /// Device generation.
    pub arch: Arch,
    /// Neuron devices.
    pub devices: u32,
}

impl Instance {
    /// trn1.2xlarge: one V2 device.
    pub const TRN1_2XLARGE: Instance = Instance { name: "trn1.2xlarge", arch: Arch::V2, devices: 1 };
    /// trn1.32xlarge: 16 V2 devices.
    pub const TRN1_32XLARGE: Instance = Instance { name: "trn1.32xlarge", arch: Arch::V2, devices: 16 };
    /// inf2.xlarge: one V2 device.
    pub const INF2_XLARGE: Instance = Instance { name: "inf2.xlarge", arch: Arch::V2, devices: 1 };
    /// inf2.48xlarge: 12 V2 devices.
    pub const INF2_48XLARGE: Instance = Instance { name: "inf2.48xlarge", arch: Arch::V2, devices: 12 };
    /// trn2.48xlarge: 16 V3 devices.
    pub const TRN2_48XLARGE: Instance = Instance { name: "trn2.48xlarge", arch: Arch::V3, devices: 16 };

    /// Every preset.
    pub const ALL: [Instance; 5] = [
        Instance::TRN1_2XLARGE,
        Instance::TRN1_32XLARGE,
        Instance::INF2_XLARGE,
        Instance::INF2_48XLARGE,
        Instance::TRN2_48XLARGE,
    ];

    /// The preset called `name` (example on [`Instance`]).
    pub fn by_name(name: &str) -> Option<Instance> {
        Instance::ALL.into_iter().find(|i| i.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_examples_of_facts_section_4() {
        assert_eq!(V2.wait_budget(2032, false), WaitBudget { first_wait_us: 8121, following_us: 80_427_900 });
        assert_eq!(V3.wait_budget(2032, false), WaitBudget { first_wait_us: 4061, following_us: 162_073_900 });
    }

    #[test]
    fn async_first_wait_is_one_microsecond() {
        assert_eq!(V2.wait_budget(2, true), WaitBudget { first_wait_us: 1, following_us: (400 - 1) * 100 });
        assert_eq!(V3.wait_budget(3, true), WaitBudget { first_wait_us: 1, following_us: (1600 - 1) * 100 });
    }

    #[test]
    fn small_counts_cannot_underflow() {
        for d in [dhal(Arch::V2), dhal(Arch::V3)] {
            for count in 0..3 {
                let b = d.wait_budget(count, false);
                assert!(b.first_wait_us <= 1 && b.following_us <= 80_000, "{:?} {count}: {b:?}", d.arch());
            }
        }
        assert_eq!(V2.wait_budget(1, false), WaitBudget { first_wait_us: 0, following_us: 0 });
        assert_eq!(V2.wait_budget(2, false), WaitBudget { first_wait_us: 1, following_us: 39_900 });
    }

    #[test]
    fn h2t_engines_and_queues() {
        assert_eq!((V2.h2t_eng_id(0), V2.h2t_def_qid(0)), (32, 0));
        assert_eq!((V2.h2t_eng_id(1), V2.h2t_def_qid(1)), (33, 0));
        let v3: Vec<_> = (0..8).map(|nc| (V3.h2t_eng_id(nc), V3.h2t_def_qid(nc))).collect();
        assert_eq!(v3, [(128, 0), (128, 1), (129, 0), (129, 1), (130, 0), (130, 1), (131, 0), (131, 1)]);
    }

    #[test]
    fn an_nc_the_device_lacks_has_no_h2t_engine_or_queue() {
        for d in [dhal(Arch::V2), dhal(Arch::V3)] {
            for nc in [d.ncs_per_device(), u32::MAX] {
                assert_eq!(d.h2t_eng_id(nc), NO_SUCH_ENGINE);
                assert_eq!(d.engine_base(d.h2t_eng_id(nc)), None);
                assert_eq!(d.h2t_def_qid(nc), udma::DMA_MAX_Q);
            }
        }
    }

    #[test]
    fn barrier_policy_and_retry_flag() {
        for d in [dhal(Arch::V2), dhal(Arch::V3)] {
            assert_eq!(d.m2m_barrier(true), Barrier::WriteBarrier);
            assert_eq!(d.m2m_barrier(false), Barrier::None);
        }
        assert!(V2.retry_memcpy());
        assert!(!V3.retry_memcpy());
    }

    #[test]
    fn validate_pa_checks_only_host_addresses() {
        let never = |_| false;
        let always = |_| true;
        assert!(V2.validate_pa(0x10_0000_0000, &never));
        assert!(!V2.validate_pa(udma::arch::V2_PCI_HOST_BASE | 0x1000, &never));
        assert!(V2.validate_pa(udma::arch::V2_PCI_HOST_BASE | 0x1000, &always));
        // A V2 address with bit 45 set is not a host address on V2: passes without the host check.
        assert!(V2.validate_pa(udma::arch::V2_PCI_HOST_BASE | (1 << 45), &never));
        assert!(!V3.validate_pa(udma::arch::V3_PCI_HOST_BASE | 0x1000, &never));
        assert!(V3.validate_pa(udma::arch::V2_PCI_HOST_BASE | 0x1000, &never));
    }

    #[test]
    fn instance_presets() {
        assert_eq!(Instance::by_name("trn1.32xlarge").map(|i| (i.arch, i.devices)), Some((Arch::V2, 16)));
        assert_eq!(Instance::by_name("inf2.48xlarge").map(|i| i.devices), Some(12));
        assert_eq!(Instance::by_name("trn2.48xlarge").map(|i| (i.arch, i.devices)), Some((Arch::V3, 16)));
        assert_eq!(Instance::by_name("p4d.24xlarge"), None);
    }
}
