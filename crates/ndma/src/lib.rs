//! `ndma` — the AWS Neuron driver's DMA op layer (`neuron_dma.c`) in Rust.
//!
//! It moves bytes host↔device, device↔device and host↔host by writing descriptor pairs into UDMA rings
//! through the [`udma`] HAL, ringing doorbells, and learning of completion **only** by polling a host marker
//! word that a final 4-byte self-copy writes. Spec: `spec/000_d550a74167054786.txt`; facts: `spec/FACTS.md`.
//!
//! - [`System`] / [`NeuronDevice`]: devices brought up over a back end ([`DeviceHw`] + [`Platform`]).
//! - Classic path: [`NeuronDevice::memcpy`], [`NeuronDevice::memcpy_mc`], [`NeuronDevice::memcpy_buf_to_mc`],
//!   [`NeuronDevice::memcpy_buf_from_mc`], [`NeuronDevice::memset`].
//! - Validation: [`NeuronDevice::copy_descriptors`], [`NeuronDevice::is_valid_host_mem`],
//!   [`validate::bar0_blocked_one_engine`], [`validate::bar0_write_blocked`].
//! - Per-arch behaviour: [`arch`] (the DHAL).

pub mod arch;
mod classic;
mod context;
mod device;
mod error;
pub mod memory;
mod memset;
mod platform;
mod ring;
mod stats;
mod system;
mod usage;
pub mod validate;
pub mod zerocopy;

pub use arch::{dhal, Dhal, Instance, WaitBudget};
pub use classic::marker::{DMA_COMPLETION_MARKER, DMA_COMPLETION_MARKER_SIZE};
pub use classic::split::{MAX_BATCH_BYTES, SYNC_THRESHOLD};
pub use classic::wait::poll_plan;
pub use classic::{AsyncPipeline, InFlight, Transfer, MAX_RESET_WINDOW_REPLAYS};
pub use context::CtxHandle;
pub use device::{mc_pair_to_nc, DeviceHw, NeuronDevice, ResetClock, ALL_NCS, MEMSET_HOST_BUF_SIZE};
pub use error::{NdmaError, Result};
pub use memory::{MemChunk, MemLocation, PoolUsage};
pub use platform::{HostBuf, Platform, UserMm, PAGE_SIZE};
pub use ring::{DMA_H2T_DESC_COUNT, H2T_RING_SIZE};
pub use stats::StatsSnapshot;
pub use system::System;
pub use usage::RingUsage;
pub use zerocopy::BatchOp;
