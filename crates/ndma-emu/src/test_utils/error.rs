//! Why a harness step failed.

use ndma::NdmaError;

use crate::EmuError;

/// Why a harness step failed.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// An op-layer call (an allocation, a host-chunk access) failed.
    #[error("{what}: {err}")]
    Ndma {
        /// What the harness was doing.
        what: String,
        /// The op layer's error.
        #[source]
        err: NdmaError,
    },
    /// The device model refused a back-door access.
    #[error("{what}: {err}")]
    Emu {
        /// What the harness was doing.
        what: String,
        /// The model's error.
        #[source]
        err: EmuError,
    },
    /// A checked region held a byte it should not.
    #[error("{what}: byte at offset {offset} is {found:#04x}, expected {expected:#04x}")]
    Mismatch {
        /// The region checked.
        what: String,
        /// Chunk offset of the first wrong byte.
        offset: u64,
        /// The byte found there.
        found: u8,
        /// The byte that belongs there.
        expected: u8,
    },
    /// A window of `len` bytes plus its guards does not fit 64 bits.
    #[error("a window of {len} bytes plus guards does not fit 64 bits")]
    TooLarge {
        /// The payload asked for.
        len: u64,
    },
}
