//! The `ndma` command: the Neuron DMA op layer (`ndma`) driven over the emulated device (`ndma-emu`).
//!
//! - [`cli`]: the command line and dispatch;
//! - [`cmd`]: one module per command (`demo`, `inspect`, `copy`, `memset`, `bench`, `faults`, `trace`,
//!   `completions`, `man`, `verify`);
//! - [`util`]: size parsing, timing and the memcpy baseline, tables, the human/JSON output (patterns, chunk
//!   I/O, copy directions and guarded windows come from `ndma_emu::test_utils`, the workspace's harness);
//! - [`verify`]: the randomized verifier behind `ndma verify` (operations, patterns, faults, leak accounting);
//! - [`logging`]: the stderr log's level and colour;
//! - [`error`]: the CLI error with errno and exit code.

#![warn(missing_docs)]

pub mod cli;
pub mod cmd;
pub mod error;
pub mod logging;
pub mod util;
pub mod verify;
