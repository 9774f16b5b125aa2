//! Memory chunks and the per-device pool they come from (the driver's `mem_chunk` and mempool, FACTS §7.1).
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//! # let (_bed, dev) = doctest::device();
//! use ndma::memory::{MemChunk, MemLocation};
//!
//! let host = dev.alloc_host(4096, 0)?; // an `Arc<MemChunk>` in host DRAM
//! let hbm = dev.alloc_device(4096, 0)?; // one in device memory
//! assert_eq!((host.location(), hbm.location()), (MemLocation::Host, MemLocation::Device));
//! // The CPU reaches host chunks only; device chunks are reached by DMA.
//! host.write(0, b"abc")?;
//! assert!(hbm.write(0, b"abc").is_err());
//! # Ok::<(), ndma::NdmaError>(())
//! ```

mod chunk;
mod pool;

pub use chunk::{MemChunk, MemLocation};
pub(crate) use pool::HostDomain;
pub use pool::{MemPool, PoolUsage};
