//! Memory chunks and the per-device pool they come from (the driver's `mem_chunk` and mempool, FACTS §7.1).

mod chunk;
mod pool;

pub use chunk::{MemChunk, MemLocation};
pub use pool::{MemPool, PoolUsage};
