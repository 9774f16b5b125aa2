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
pub use cq::{CqConsumer, CqEntry, CqHeader, NDMA_H2D_COMPL_QUEUE_CAPACITY, NDMA_H2D_COMPL_QUEUE_SIZE};
pub use prepinned::PinnedRange;
pub use sizing::{calc_pin_size, descs_available};
pub use status::ZcStatus;
pub use submit::{BatchOp, NEURON_DMA_H2T_DEFAULT_QID};

pub(crate) use complete::ZcRing;
pub(crate) use thread::CompletionThread;

/// Contexts in the queue (`NDMA_CTX_QUEUE_DEFAULT_CAPACITY`): a power of two, so at most 1023 are usable.
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
