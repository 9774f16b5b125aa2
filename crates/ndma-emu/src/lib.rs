//! `ndma-emu` — a software model of an AWS Neuron device and its Annapurna/Alpine UDMA engines, so the
//! `udma` HAL and the `ndma` op layer run and are tested with no hardware (DESIGN §3).
//!
//! An [`EmuSystem`] owns one [`HostMemory`] (host DRAM) and N [`EmuDevice`]s. A device has its own HBM, a
//! BAR0 register file (it implements [`udma::Mmio`]) and UDMA engines that learn about work only from
//! descriptors in memory and doorbell writes, as silicon does. [`HostBuf`] implements [`udma::DmaMemory`].
//!
//! Map of the crate:
//! - [`memory`]: a lazily committed physical memory space; [`host`], [`hbm`]: host DRAM and HBM;
//! - `addr_map`: how an engine address selects host DRAM or HBM;
//! - `bar0`: register decode and storage; `engine`: descriptor execution; `worker`: the threaded policy and
//!   `handoff` its doorbell → worker signal;
//! - [`EmuPlatform`]: the op layer's platform; `clock`: real or virtual time; `delay`: how a waiting thread
//!   waits, watching the marker and executing pending work (`activity`: the doorbells' marks; `waiters`);
//! - [`ordering`]: the fabric ordering model; [`faults`]: recorded faults and the fault plan;
//! - [`system`]: configuration and the instance; [`stats`]: counters; `trace`: an optional engine timeline;
//! - [`user`]: user address spaces (page tables over host-DRAM frames, pinning) for zero-copy;
//! - [`shared`]: host memory mapped by another process (memfd + offset);
//! - `test_utils` (feature `test-utils`): the test harness the workspace's tests and the `ndma` command share.
#![warn(missing_docs)]

mod activity;
mod addr_map;
mod bar0;
mod bulk;
mod claim;
mod clock;
mod copy;
mod delay;
mod device;
mod engine;
mod error;
pub mod escape;
pub mod faults;
mod footprint;
mod handoff;
pub mod hbm;
pub mod host;
mod lock;
pub mod memory;
mod nc_reset;
pub mod ordering;
mod platform;
pub mod shared;
pub mod stats;
mod sync;
pub mod system;
mod testbed;
mod trace;
pub mod user;
mod waiters;
mod worker;

#[cfg(any(test, feature = "test-utils"))]
pub mod test_utils;

pub use addr_map::Space;
pub use bar0::engine_state;
pub use claim::DeviceClaim;
pub use clock::{ClockKind, HZ};
pub use delay::WaitTiming;
pub use device::EmuDevice;
pub use error::EmuError;
pub use escape::{AccessWindow, Escape};
pub use faults::{
    CorruptField, CorruptOutcome, CorruptionReport, DmaFault, FaultKind, FaultPlan, PlannedFault, QUEUE_STATUS_HALTED,
};
pub use faults::{HangCause, QueueStop, StopKind};
pub use faults::{PinFault, PinFaultPlan, PinPath};
pub use hbm::{HbmRange, DEFAULT_HBM_SIZE_V2, DEFAULT_HBM_SIZE_V3, HBM_BASE};
pub use host::{HostBuf, HostMemory, DEFAULT_HOST_DRAM_SIZE, HOST_DRAM_BASE};
pub use memory::MemSpace;
pub use nc_reset::JiffiesClock;
pub use ordering::OrderingMode;
pub use platform::EmuPlatform;
pub use shared::{SharedMapping, SharedRange};
pub use stats::EngineStats;
pub use system::{EmuConfig, EmuSystem, ExecPolicy, MAX_DEVICES};
pub use testbed::{device_hw, Testbed, TestbedConfig, TestbedError};
pub use trace::{EngineEvent, EngineEventKind};
pub use user::{AddressSpace, LeakCheck, MapSpec, MmError, Placement};

/// The two hand-off protocols, public only for the loom models in `tests/loom_*.rs`.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_api {
    pub use crate::handoff::{Doze, WorkerSignal};
    pub use crate::waiters::{Registration, Waiters};
}
