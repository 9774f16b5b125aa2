//! `copy_descriptors` and the rings it accepts, run on the device model: see
//! `ndma_emu::test_utils::fuzz::descriptors`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ndma_emu::test_utils::fuzz::descriptors::{check, DescriptorsInput};

fuzz_target!(|input: DescriptorsInput| {
    check(&input);
});
