//! The BAR0 write gate: see `ndma_emu::test_utils::fuzz::bar0`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ndma_emu::test_utils::fuzz::bar0::{check, Bar0Input};

fuzz_target!(|input: Bar0Input| {
    check(&input);
});
