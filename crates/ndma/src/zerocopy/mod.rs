//! The zero-copy path (spec §4, FACTS §5): pin the user's pages and DMA directly over them, overlapping
//! pinning with DMA through a four-cursor context queue; async requests complete through a shared completion
//! queue filled by a per-device completion thread.
//!
//! One concept a file:
//! - [`context`]: a context (one piece of a request: at most 64 pinned pages) and its five states;
//! - `queue`: the circular context queue, its cursors and regions;
//! - [`sizing`]: how much to pin at once, and when to wait for descriptors;
//! - [`pin`]: pinned pages and who releases them; [`prepinned`]: ranges pinned once per process;
//! - [`build`]: the descriptors a piece writes (run coalescing, the per-arch barrier);
//! - `submit`, `complete`: the submit path and the steps that complete what is queued;
//! - [`cq`]: the completion queue shared with user space; `thread`: the completion thread.
//!
//! # Example
//!
//! A process moves 10,000 bytes of its own memory to the device and back without a staging copy. (Here the
//! process is one of the device model's user address spaces, entered on this thread: the platform pins the
//! pages of the calling task, as the kernel does.)
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//! # let bed = doctest::testbed(udma::Arch::V3);
//! # let user = doctest::user(&bed, 16); // 16 pages mapped at `user.va`, this thread runs as the process
//! use ndma::zerocopy::NEURON_DMA_H2T_DEFAULT_QID as DEFAULT_QUEUE;
//! use ndma::BatchOp;
//!
//! let dev = &bed.system.devices()[0];
//! let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
//! user.write(100, &data); // the buffer, 100 bytes into the process's first page
//! let hbm = dev.alloc_device(1 << 20, 0)?;
//! // To the device: one op, `size` bytes from the user buffer to `offset` in the chunk. Sequence number 0
//! // makes the request synchronous: done when the call returns.
//! let to_dev = BatchOp { offset: 4096, size: 10_000, buffer: user.va + 100 };
//! dev.zerocopy_submit(0, &[to_dev], &hbm, 0, DEFAULT_QUEUE, true, 0, 0)?;
//! // And back, 8 pages further into the user buffer.
//! let to_host = BatchOp { offset: 4096, size: 10_000, buffer: user.va + 8 * 4096 };
//! dev.zerocopy_submit(0, &[to_host], &hbm, 0, DEFAULT_QUEUE, false, 0, 0)?;
//! assert_eq!(user.read(8 * 4096, 10_000), data);
//! assert!(dev.zerocopy_status(0)?.is_idle(), "nothing left queued or pinned");
//! # Ok::<(), ndma::NdmaError>(())
//! ```

pub mod build;
mod complete;
pub mod context;
pub mod cq;
pub mod pin;
pub mod prepinned;
pub(crate) mod queue;
pub mod sizing;
mod status;
mod submit;
mod thread;

pub use build::{plan_descriptors, ZcDesc};
pub use context::ZcState;
pub use cq::{
    CqConsumer, CqEntry, CqHeader, NDMA_H2D_COMPL_BACKLOG_MAX, NDMA_H2D_COMPL_QUEUE_CAPACITY, NDMA_H2D_COMPL_QUEUE_SIZE,
};
pub use prepinned::PinnedRange;
pub use sizing::{calc_pin_size, descs_available};
pub use status::ZcStatus;
pub use submit::{BatchOp, NEURON_DMA_H2T_DEFAULT_QID};

pub(crate) use complete::ZcRing;
pub(crate) use thread::CompletionThread;

/// Contexts in the queue (`NDMA_CTX_QUEUE_DEFAULT_CAPACITY`): a power of two, so at most 1023 are usable.
///
/// The driver's sizing constants, and how they shape a request:
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device_of(udma::Arch::V3);
/// use ndma::zerocopy::*;
/// use ndma::PAGE_SIZE;
///
/// // The pin budget starts at the driver's constant: 2 GiB of 4 KiB pages.
/// assert_eq!(dev.zerocopy_pin_budget(), NDMA_CTX_QUEUE_MAX_PINNED_PAGES);
/// assert_eq!(NDMA_CTX_QUEUE_MAX_PINNED_PAGES * PAGE_SIZE, 2 << 30);
/// // A large request is pinned one piece of 64 pages at a time.
/// assert_eq!(calc_pin_size(16 << 20), NDMA_ZC_PAGES_PER_XFER * PAGE_SIZE);
/// assert!(NDMA_ZC_MIN_PAGES_PER_XFER <= NDMA_ZC_PAGES_PER_XFER);
/// // A sync submit waits for descriptors below the low threshold, until the high one is free again.
/// assert_eq!((NDMA_ZC_DESC_WAIT_THRESHOLD_LO, NDMA_ZC_DESC_WAIT_THRESHOLD_HI), (65, 520));
/// assert!(NDMA_CTX_QUEUE_DEFAULT_CAPACITY.is_power_of_two());
/// ```
pub const NDMA_CTX_QUEUE_DEFAULT_CAPACITY: u32 = 1024;
/// Pages the queue may hold pinned at once (`NDMA_CTX_QUEUE_MAX_PINNED_PAGES`, 2 GiB of 4 KiB pages).
pub const NDMA_CTX_QUEUE_MAX_PINNED_PAGES: u64 = 524_288;
/// Pages per piece (`NDMA_ZC_PAGES_PER_XFER`).
pub const NDMA_ZC_PAGES_PER_XFER: u64 = 64;
/// Smallest piece, in pages (`NDMA_ZC_MIN_PAGES_PER_XFER`).
pub const NDMA_ZC_MIN_PAGES_PER_XFER: u64 = 64;
/// Descriptors that must be free before a sync submit stops waiting (`NDMA_ZC_DESC_WAIT_THRESHOLD_LO`).
pub const NDMA_ZC_DESC_WAIT_THRESHOLD_LO: u32 = 64 + 1;
/// Once waiting, descriptors that must be free before it stops (`NDMA_ZC_DESC_WAIT_THRESHOLD_HI`).
pub const NDMA_ZC_DESC_WAIT_THRESHOLD_HI: u32 = NDMA_ZC_DESC_WAIT_THRESHOLD_LO * 8;

const _: () = assert!(NDMA_CTX_QUEUE_DEFAULT_CAPACITY.is_power_of_two());
const _: () = assert!(NDMA_ZC_DESC_WAIT_THRESHOLD_HI == 520);
