//! `udma` — the hardware-abstraction layer for the Annapurna/Alpine UDMA engine, as the AWS Neuron kernel
//! driver drives it in memory-to-memory (M2M) mode.
//!
//! It owns exactly what the driver's `udma/*` owns and nothing above it:
//! - the 16-byte [`Desc`] with its TX (M2S) and RX (S2M) views and the `len_ctrl` / `meta_ctrl` bit layouts;
//! - the per-queue software state ([`Queue`]): producer cursor, phase (ring id), the lock-free completion
//!   counter and the `available` arithmetic;
//! - the M2M pair operations ([`M2mQueue::copy_prepare_one`], [`M2mQueue::copy_start`],
//!   [`M2mQueue::ack`]);
//! - engine and queue bring-up, one way for everyone: [`Udma::init`], then [`Udma::init_queue`];
//! - the register map, declared once for the HAL and a device model ([`regs`]), and the per-generation
//!   facts both need — BAR0 layout, host addressing, which NC owns which engine and queue ([`arch`]).
//!
//! Hardware is reached only through two traits: [`Mmio`] (32-bit BAR0 register access) and [`DmaMemory`]
//! (device-visible memory the CPU can read and write). Facts come from `spec/FACTS.md` §1–§2.
#![no_std]
#![warn(missing_docs)]

pub mod arch;
pub mod desc;
mod engine;
mod error;
mod memory;
mod mmio;
mod queue;
pub mod regs;
mod sync;

pub use arch::Arch;
pub use desc::{Barrier, Desc, LenCtrl, MetaCtrl, RxDesc, TxDesc};
pub use engine::{M2mQueue, Ring, Udma};
pub use error::{errno, UdmaError};
pub use memory::DmaMemory;
pub use mmio::Mmio;
pub use queue::{CompletionCounter, Direction, Queue, QueueStatus};
pub use regs::UdmaState;

/// Largest byte count one descriptor can carry (`MAX_DMA_DESC_SIZE`); the 16-bit length field writes it as 0.
pub const MAX_DMA_DESC_SIZE: u32 = 65536;
/// Permanent guard gap between producer and consumer (`UDMA_MAX_NUM_CDESC_PER_CACHE_LINE`, FACTS §2.2).
pub const UDMA_MAX_NUM_CDESC_PER_CACHE_LINE: u32 = 16;
/// Phase every queue starts in after (re)initialisation (`UDMA_INITIAL_RING_ID`, FACTS §1.2).
pub const UDMA_INITIAL_RING_ID: u8 = 1;
/// Mask of the 2-bit ring id (`DMA_RING_ID_MASK`).
pub const DMA_RING_ID_MASK: u8 = 0x3;
/// Queues per engine (`DMA_MAX_Q_V4`, FACTS §2.3).
pub const DMA_MAX_Q: u32 = 16;
/// Smallest ring, in descriptors (`UDMA_MIN_Q_SIZE`).
pub const UDMA_MIN_Q_SIZE: u32 = 32;
/// Largest ring, in descriptors (`UDMA_MAX_Q_SIZE` = 2^24 − 16).
pub const UDMA_MAX_Q_SIZE: u32 = (1 << 24) - 16;
/// Required alignment of a descriptor ring's start and end (`UDMA_QUEUE_ADDR_BYTE_ALIGNMENT`).
pub const UDMA_QUEUE_ADDR_BYTE_ALIGNMENT: u64 = 256;
