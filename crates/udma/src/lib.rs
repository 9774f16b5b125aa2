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
//!
//! # Example
//!
//! Bring up queue 0 of the V2 D2H engine with two 32-descriptor rings, stage one 4 KiB host → device copy and
//! hand it to the engine. (The examples in this crate run over a register file that only stores what is
//! written and heap memory posing as DMA memory; `ndma`'s examples run a device model.)
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
//! use udma::{regs, Arch, Barrier, Direction, Ring, Udma};
//!
//! let bar0 = Regs::default(); // anything that implements `Mmio`
//! let host = Arch::V2.pci_host_base(); // how the device addresses host memory
//! let engine = Udma::init(&bar0, Arch::V2, 32)?;
//! let tx = Ring { mem: Mem::new(32 * 16, 0x10_0000), dma_addr: 0x10_0000 | host };
//! let rx = Ring { mem: Mem::new(32 * 16, 0x20_0000), dma_addr: 0x20_0000 | host };
//! let mut queue = engine.init_queue(&bar0, 0, tx, rx, 32)?;
//!
//! queue.copy_prepare_one(0x4000 | host, 0x8000, 4096, Barrier::WriteBarrier, false)?;
//! queue.copy_start(&bar0, 1, 1)?; // the doorbells: RX, then TX
//! let doorbell = regs::queue_base(engine.base(), Direction::Tx, 0) + regs::q::DRTP_INC;
//! assert_eq!(bar0.read32(doorbell), 1);
//! let pair = (queue.tx().read_desc(0).tx(), queue.rx().read_desc(0).rx());
//! assert_eq!((pair.0.src, pair.1.dst, pair.0.len_ctrl.len_bytes()), (0x4000 | host, 0x8000, 4096));
//!
//! // The slot is the engine's until its completion is acknowledged (16 slots are a permanent guard gap).
//! assert_eq!(queue.available(), 32 - 16 - 1);
//! queue.ack(1);
//! assert_eq!(queue.available(), 32 - 16);
//! # Ok::<(), udma::UdmaError>(())
//! ```
#![no_std]
#![warn(missing_docs)]

pub mod arch;
pub mod desc;
mod engine;
mod error;
mod memory;
mod mmio;
mod queue;
mod queue_regs;
pub mod regs;
mod sync;

pub use arch::Arch;
pub use desc::{Barrier, Desc, LenCtrl, MetaCtrl, RxDesc, TxDesc};
pub use engine::{M2mQueue, Ring, Udma};
pub use error::{errno, UdmaError};
pub use memory::DmaMemory;
pub use mmio::Mmio;
pub use queue::{CompletionCounter, Direction, Queue, QueueStatus};
pub use queue_regs::{QueueRegsView, RingPos};
pub use regs::UdmaState;

/// Largest byte count one descriptor can carry (`MAX_DMA_DESC_SIZE`); the 16-bit length field writes it as 0.
///
/// The constants below are the HAL's limits (FACTS §1–§2); the ring arithmetic they imply:
///
/// ```
/// use udma::*;
///
/// let d = Desc::m2m_tx(0x1000, MAX_DMA_DESC_SIZE, UDMA_INITIAL_RING_ID, Barrier::None)?;
/// assert_eq!((d.len_ctrl().len_field(), d.len_ctrl().len_bytes()), (0, 65536));
/// assert_eq!(d.len_ctrl().ring_id(), 1);
/// // A ring of the smallest size holds this many descriptors in flight: the guard gap is never handed out.
/// assert_eq!(UDMA_MIN_Q_SIZE - UDMA_MAX_NUM_CDESC_PER_CACHE_LINE, 16);
/// assert_eq!((UDMA_MAX_Q_SIZE % 16, DMA_MAX_Q, DMA_RING_ID_MASK), (0, 16, 3));
/// assert_eq!(UDMA_QUEUE_ADDR_BYTE_ALIGNMENT, 256);
/// # Ok::<(), UdmaError>(())
/// ```
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
