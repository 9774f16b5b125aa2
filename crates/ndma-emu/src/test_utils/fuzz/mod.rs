//! The bodies of the coverage-guided fuzz targets (DESIGN §7; `fuzz/` at the repository root, feature
//! `fuzzing`): each target is one line that hands its [`arbitrary`] input to a `check` here, and
//! `tests/fuzz_targets.rs` runs the same `check`s on stable over the committed seeds and seeded random inputs,
//! so the targets cannot rot while nobody runs nightly.
//!
//! Every `check` panics on a broken invariant (libFuzzer reports a panic as a crash), and compares the code
//! under test with an independent model written from FACTS rather than from the code:
//!
//! - [`decode`]: the descriptor and register decoders of `udma` never panic, agree with the FACTS bit
//!   layouts, and round-trip through their encoders;
//! - [`bar0`]: the BAR0 write gate never panics, refuses exactly the writes that overlap a blocked register,
//!   and a write it lets through decodes to no blocked register;
//! - [`descriptors`]: `copy_descriptors` gives exactly the outcome its contract calls for, leaves a refused
//!   ring byte-identical, and a ring it accepted, run on an engine, touches only memory the caller owns.

pub mod bar0;
pub mod decode;
pub mod descriptors;
