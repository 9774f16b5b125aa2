//! One module per command.

pub mod bench;
pub mod completions;
pub mod copy;
pub mod demo;
pub mod faults;
pub mod inspect;
pub mod man;
pub mod memset;
pub mod trace;
pub mod verify;
pub mod zerocopy;
