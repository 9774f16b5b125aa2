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
//! - The idiomatic layer over the spec-shaped calls: [`Transfer`], [`InFlight`], [`AsyncPipeline`].
//! - Zero-copy DMA over pinned user pages, with a completion queue: [`zerocopy`].
//!
//! # Example
//!
//! A round trip through device memory. `dev` is a [`NeuronDevice`] of a [`System`] brought up over a back end:
//! here (in a hidden line) the device model of the `ndma-emu` crate; the crate's `examples/` show the whole
//! set-up, and `examples/custom_backend.rs` a back end written from scratch. Throughout this documentation, a
//! `dev` that an example does not define is such a device: device 0 of an emulated trn1.2xlarge (V2).
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//! # let (_bed, dev) = doctest::device();
//! let data: Vec<u8> = (0..64 << 10).map(|i| (i % 251) as u8).collect();
//! let host = dev.alloc_host(64 << 10, 0)?; // host DRAM the device can reach, owned by NC 0
//! let hbm = dev.alloc_device(64 << 10, 0)?; // device memory
//! let back = dev.alloc_host(64 << 10, 0)?;
//! host.write(0, &data)?;
//! dev.memcpy_mc(&host, &hbm, 0, 0, 64 << 10)?; // host → device
//! dev.memcpy_mc(&hbm, &back, 0, 0, 64 << 10)?; // device → host
//! let mut out = vec![0; 64 << 10];
//! back.read(0, &mut out)?;
//! assert_eq!(out, data);
//! // Each copy was one 64 KiB descriptor pair and its completion marker, in one batch.
//! let stats = dev.ring_stats(0)?;
//! assert_eq!((stats.transfers, stats.descriptors, stats.batches), (2, 4, 2));
//! # Ok::<(), ndma::NdmaError>(())
//! ```
#![warn(missing_docs)]

pub mod arch;
mod classic;
mod context;
mod device;
mod error;
pub mod memory;
mod memset;
mod platform;
mod ring;
mod ring_lock;
mod ring_state;
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
pub use error::{NdmaError, Result, RingSnapshot};
pub use memory::{MemChunk, MemLocation, PoolUsage};
pub use platform::{HostBuf, Platform, UserMm, PAGE_SIZE};
pub use ring::{DMA_H2T_DESC_COUNT, H2T_RING_SIZE};
pub use ring_state::{ContextState, QueueState, RingState, SlotRole, SlotState, ZeroCopyState, RING_STATE_WINDOW};
pub use stats::StatsSnapshot;
pub use system::System;
pub use usage::RingUsage;
pub use zerocopy::BatchOp;
