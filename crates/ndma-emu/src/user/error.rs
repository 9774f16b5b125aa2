//! Why a user-address-space operation (mapping, CPU access) was refused.

use crate::EmuError;

/// A refused address-space operation. Pins report their failures as [`ndma::NdmaError::Pin`] instead, as
/// the op layer expects.
#[derive(Debug, thiserror::Error)]
pub enum MmError {
    /// The page at `va` is not mapped (a hole, or never mapped).
    #[error("user address {va:#x} is not mapped")]
    Unmapped {
        /// The first unmapped address of the access.
        va: u64,
    },
    /// A write to a read-only page.
    #[error("user page at {va:#x} is read-only")]
    ReadOnly {
        /// The first read-only address of the access.
        va: u64,
    },
    /// The process exited: its address space has no mappings any more.
    #[error("the address space of process {pid} is gone (the process exited)")]
    Exited {
        /// The process.
        pid: u32,
    },
    /// A range that is not page-aligned where it must be, or that overflows the address space.
    #[error("invalid user range {va:#x} + {len:#x}")]
    InvalidRange {
        /// Start.
        va: u64,
        /// Length in bytes.
        len: u64,
    },
    /// A mapping request that cannot be honoured (no pages, a run length of 0, a hole outside the mapping).
    #[error("invalid mapping request: {0}")]
    InvalidMapping(&'static str),
    /// Host DRAM could not supply the frames.
    #[error("no frames for the mapping: {0}")]
    Host(#[from] EmuError),
}

impl MmError {
    /// The negative errno the kernel would report: `-EFAULT` for an access to a hole or a write to a
    /// read-only page, `-ESRCH` once the process exited, `-EINVAL` for a bad request, `-ENOMEM` when memory
    /// runs out.
    pub fn errno(&self) -> i32 {
        match self {
            MmError::Unmapped { .. } | MmError::ReadOnly { .. } => -libc::EFAULT,
            MmError::Exited { .. } => -libc::ESRCH,
            MmError::InvalidRange { .. } | MmError::InvalidMapping(_) => -libc::EINVAL,
            MmError::Host(_) => -libc::ENOMEM,
        }
    }
}
