//! The HAL's error type and the Linux errno values the driver returns.

/// Linux errno values used by the driver (positive; the driver returns their negation).
///
/// ```
/// use udma::{errno, UdmaError};
///
/// assert_eq!(UdmaError::InvalidQueueSize { size: 48 }.errno(), -errno::EINVAL);
/// assert_eq!((errno::ENOMEM, errno::ETIMEDOUT), (12, 110));
/// ```
pub mod errno {
    /// `EPERM`: the driver's bare `-1`.
    pub const EPERM: i32 = 1;
    /// `ENOENT`.
    pub const ENOENT: i32 = 2;
    /// `EIO`.
    pub const EIO: i32 = 5;
    /// `ENOMEM`.
    pub const ENOMEM: i32 = 12;
    /// `EFAULT`.
    pub const EFAULT: i32 = 14;
    /// `EBUSY`.
    pub const EBUSY: i32 = 16;
    /// `EEXIST`.
    pub const EEXIST: i32 = 17;
    /// `EINVAL`.
    pub const EINVAL: i32 = 22;
    /// `ETIMEDOUT`.
    pub const ETIMEDOUT: i32 = 110;
}

/// Everything a HAL entry point can refuse. [`UdmaError::errno`] gives the value the C HAL returns.
///
/// ```
/// use udma::{Arch, Barrier, Desc, Direction, UdmaError};
///
/// let e = Desc::m2m_tx(0, 0, 1, Barrier::None).unwrap_err();
/// assert_eq!(e, UdmaError::InvalidLength { len: 0 });
/// assert_eq!(e.to_string(), "descriptor length 0 is outside 1..=65536");
/// assert_eq!(e.errno(), -1, "the driver's bare -1");
/// assert_eq!(UdmaError::RingFull { qid: 0, dir: Direction::Rx }.errno(), -12);
/// assert_eq!(UdmaError::NoSuchEngine { engine: 40, num_engines: Arch::V2.num_engines() }.errno(), -2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UdmaError {
    /// An engine id the device's arch does not have (`-ENOENT`, as the driver answers for a missing engine,
    /// FACTS §3.4).
    #[error("engine {engine} does not exist (the device has {num_engines})")]
    NoSuchEngine {
        /// The rejected engine id.
        engine: u32,
        /// Engines on the device.
        num_engines: u32,
    },
    /// qid ≥ the engine's number of queues at queue init (`-EINVAL`).
    #[error("queue id {qid} is out of range: the engine has {num_queues} queues")]
    InvalidQueue {
        /// The rejected queue id.
        qid: u32,
        /// Queues on the engine.
        num_queues: u32,
    },
    /// A descriptor length above `MAX_DMA_DESC_SIZE` (`-1`) or of zero bytes (which the hardware would read
    /// as 64 KiB; the C HAL accepts it, we refuse it).
    #[error("descriptor length {len} is outside 1..=65536")]
    InvalidLength {
        /// The rejected length.
        len: u32,
    },
    /// No free slot on one of the two rings of the pair (`-ENOMEM`): nothing was written.
    #[error("no free descriptor slot on the {dir} ring of queue {qid}")]
    RingFull {
        /// Queue id.
        qid: u32,
        /// The ring that is full.
        dir: crate::Direction,
    },
    /// A raw barrier value outside NONE/DMB/WRITE_BARRIER/SOW (`-EINVAL`).
    #[error("invalid barrier type {0}")]
    InvalidBarrier(u32),
    /// A doorbell count of zero or above the ring size (`-1`).
    #[error("doorbell count {count} is invalid for a ring of {size} descriptors")]
    InvalidDoorbellCount {
        /// The rejected count.
        count: u32,
        /// Ring size in descriptors.
        size: u32,
    },
    /// Ring size outside 32..=2^24−16, not a multiple of 16 or not a power of two (`-EINVAL`).
    #[error("invalid ring size {size} descriptors")]
    InvalidQueueSize {
        /// The rejected size.
        size: u32,
    },
    /// Ring base or end not 256-byte aligned (`-EINVAL`).
    #[error("ring at {addr:#x} is not 256-byte aligned")]
    MisalignedRing {
        /// The rejected device address.
        addr: u64,
    },
    /// The ring's memory is smaller than `size` descriptors (`-EINVAL`).
    #[error("ring memory of {len} bytes cannot hold {size} descriptors")]
    RingMemoryTooSmall {
        /// Bytes available.
        len: usize,
        /// Descriptors requested.
        size: u32,
    },
    /// An access outside a [`crate::DmaMemory`] region (`-EINVAL`).
    #[error("access of {len} bytes at offset {offset:#x} is outside a region of {size} bytes")]
    OutOfBounds {
        /// Offset of the access.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Region size.
        size: usize,
    },
}

impl UdmaError {
    /// The negative errno the driver returns for this failure (`-1` where the driver returns a bare -1); example
    /// on [`UdmaError`].
    pub fn errno(&self) -> i32 {
        match self {
            UdmaError::NoSuchEngine { .. } => -errno::ENOENT,
            UdmaError::InvalidLength { .. } | UdmaError::InvalidDoorbellCount { .. } => -errno::EPERM,
            UdmaError::RingFull { .. } => -errno::ENOMEM,
            UdmaError::InvalidQueue { .. }
            | UdmaError::InvalidBarrier(_)
            | UdmaError::InvalidQueueSize { .. }
            | UdmaError::MisalignedRing { .. }
            | UdmaError::RingMemoryTooSmall { .. }
            | UdmaError::OutOfBounds { .. } => -errno::EINVAL,
        }
    }
}
