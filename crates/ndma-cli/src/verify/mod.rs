//! `ndma verify`: a seeded, randomized verifier of the op layer — dmatest's pattern-checked random transfers,
//! with faults mixed in and everything the op layer owns accounted for afterwards.
//!
//! A campaign is `N` operations numbered `0..N`. Operation `K` is drawn from its own RNG, seeded from the
//! campaign seed and `K` alone ([`rng::op_rng`]), so `--replay K` re-runs exactly it without running the
//! operations before it. Each operation:
//!
//! 1. is drawn ([`op::OpSpec`]): a path ([`path::PathKind`]), a direction, a device and NC (half of them on
//!    one hot ring, so several threads meet on it), segment sizes from a distribution that hits the edges
//!    ([`size`]), unaligned offsets on both sides, and — with `--faults mix` — a fault ([`fault::FaultSpec`]);
//! 2. gets its memory ([`buffers`]): every source holds a pattern that encodes each byte's position and
//!    has bit 7 set, every destination a poison with bit 7 clear ([`pattern`]), with guard bytes around each
//!    window;
//! 3. runs on the op layer (inside `catch_unwind`), its fault installed on its ring just before;
//! 4. is judged ([`expect`], [`check`]): the outcome against the one its inputs and fault call for, then the
//!    window, the guards and the untouched source byte for byte ([`check`]); a failed transfer may leave only
//!    poison or the right byte at each position;
//! 5. after any failure, and at the end of the run, the device is accounted for ([`leaks`]): ring slots,
//!    contexts, pool chunks, zero-copy state, engine queues.
//!
//! Faulted operations run alone on their device ([`campaign`]'s device gate), so a fault hits exactly the
//! operation it was drawn for and the counters it moves can be measured. At the end the ring counters of
//! every ring must equal what the successful operations should have staged ([`plan`]) plus what the
//! faulted ones were measured to stage, and every timeout must have been injected.
//!
//! With `--bystanders` a faulted operation of a classic path runs with an unfaulted async copy in flight on
//! its ring, staged before its fault is armed ([`bystander`]): the recovery of the other transfers on a failed
//! ring (re-stage, complete in place, abort) is judged by what the fault calls for, byte for byte.

pub mod buffers;
pub mod bystander;
pub mod campaign;
pub mod check;
pub mod config;
pub mod exec;
pub mod expect;
pub mod fault;
pub mod fuzz;
pub mod leaks;
pub mod op;
pub mod path;
pub mod pattern;
pub mod plan;
pub mod progress;
pub mod record;
pub mod replay;
pub mod rng;
pub mod size;
pub mod summary;
