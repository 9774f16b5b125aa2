//! The descriptor and register decoders of `udma`: see `ndma_emu::test_utils::fuzz::decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ndma_emu::test_utils::fuzz::decode::{check, DecodeInput};

fuzz_target!(|input: DecodeInput| check(&input));
