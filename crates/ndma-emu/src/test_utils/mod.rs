//! The test harness every crate of the workspace shares (feature `test-utils`): what the op layer's tests,
//! the model's own tests and the `ndma` command all need to build an emulated instance, fill and check
//! memory, and wait with a bound.
//!
//! - [`bed`]: instances and [`Testbed`](crate::Testbed)s with the tests' sizes and silicon budgets, which
//!   bound every marker wait of a test;
//! - [`pattern`](mod@pattern): a seeded byte stream any window of which regenerates independently;
//! - [`chunk`]: reading, writing, filling and checking an op-layer [`MemChunk`](ndma::MemChunk) (host chunks
//!   through the CPU, device chunks through the model's back door);
//! - [`Dir`]: the four copy directions; [`Window`]: a guarded source/destination pair (dmatest-style: a
//!   pattern inside, guard bytes before and after);
//! - [`rig`]: a HAL-only rig (one engine, one M2M queue pair, a marker) for the model's own tests;
//! - `fuzz` (feature `fuzzing`): the bodies of the cargo-fuzz targets under `fuzz/`;
//! - [`take_completions`]: completions taken from a zero-copy completion queue, with a bound;
//! - [`HarnessError`]: why a harness step failed, including the first wrong byte of a check.
//!
//! Like vm-virtio's `mock` module, it is compiled only when asked for: the crates' tests take `ndma-emu` as a
//! dev-dependency with `features = ["test-utils"]`.

pub mod bed;
pub mod chunk;
mod completions;
mod dir;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzz;
pub mod pattern;
pub mod rig;
mod window;

pub use bed::{adversarial, bounded, instance, testbed, testbed_config};
pub use chunk::{alloc, fill_chunk, read_chunk, read_vec, verify_chunk, write_chunk, write_pattern, Expect};
pub use completions::take_completions;
pub use dir::{Dir, ParseDirError};
pub use error::HarnessError;
pub use pattern::{fill_pattern, pattern};
pub use window::{Window, DST_FILL, GUARD};
