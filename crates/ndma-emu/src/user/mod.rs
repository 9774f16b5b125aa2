//! User address spaces in the model: what the op layer's zero-copy path pins (DESIGN §8, issue 8 §1).
//!
//! - [`AddressSpace`] (`mm.rs`): a process's page table from 4 KiB user pages to host-DRAM frames, built
//!   by [`AddressSpace::map`] with a [`MapSpec`] — a [`Placement`] (contiguous, scattered, runs of K), holes
//!   and read-only pages — plus `munmap`/`mprotect`, CPU access through the page table and process exit;
//! - `placement.rs`: how frames are chosen for a placement policy;
//! - `pin.rs`: [`ndma::UserMm`] for [`AddressSpace`] — fast and slow pins, unpin with the dirty flag;
//! - [`FrameTable`] (`frames.rs`): per-frame pin counts and dirty flags, frames kept alive while pinned,
//!   and the leak check;
//! - `current.rs`: the calling thread's current address space ([`AddressSpace::enter`]), which
//!   [`crate::EmuPlatform`] reports as `current_mm`;
//! - pin faults to inject are in [`crate::faults`] ([`crate::PinFault`]).

mod current;
mod error;
mod frames;
mod mm;
mod pin;
mod placement;

pub(crate) use current::current_mm_on;
pub use current::{current, EnterGuard};
pub use error::MmError;
pub use frames::{FrameInfo, FrameTable, LeakCheck};
pub use mm::{AddressSpace, MapSpec, PageInfo, USER_VA_BASE};
pub use pin::{unpin_user_pages, PinStats};
pub use placement::Placement;
