//! The emulator's error type.

/// Everything an emulator entry point can refuse. Faults a *descriptor* causes are not errors: they are
/// recorded on the device as [`crate::DmaFault`]s, as silicon would.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// The kernel refused the anonymous mapping backing a memory space.
    #[error("cannot map {len:#x} bytes of {what}: {source}")]
    Map {
        /// Which space ("host DRAM", "HBM").
        what: &'static str,
        /// Requested size in bytes.
        len: u64,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A CPU-side access outside a memory space.
    #[error("{what} access [{pa:#x}, +{len:#x}) is outside [{base:#x}, +{size:#x})")]
    OutOfBounds {
        /// Which space.
        what: &'static str,
        /// First physical address of the access.
        pa: u64,
        /// Length of the access.
        len: u64,
        /// First physical address of the space.
        base: u64,
        /// Size of the space.
        size: u64,
    },
    /// No free range large enough.
    #[error("cannot allocate {len:#x} bytes aligned to {align:#x} from {what}")]
    OutOfMemory {
        /// Which space.
        what: &'static str,
        /// Requested length.
        len: u64,
        /// Requested alignment.
        align: u64,
    },
    /// A zero length or an alignment that is not a power of two.
    #[error("invalid allocation request: {len} bytes aligned to {align}")]
    InvalidAlloc {
        /// Requested length.
        len: u64,
        /// Requested alignment.
        align: u64,
    },
    /// A free that does not match a live allocation (double free, wrong range).
    #[error("free of [{pa:#x}, +{len:#x}) does not match an allocation in {what}")]
    BadFree {
        /// Which space.
        what: &'static str,
        /// Start of the range.
        pa: u64,
        /// Length of the range.
        len: u64,
    },
    /// A configuration the model cannot build.
    #[error("invalid emulator configuration: {0}")]
    InvalidConfig(&'static str),
    /// The device is bound to an op layer already ([`crate::DeviceClaim`]).
    #[error("device {device} is already bound to an op layer")]
    DeviceClaimed {
        /// The device's index.
        device: usize,
    },
    /// An engine id the arch does not have.
    #[error("engine {engine} does not exist (the device has {num_engines})")]
    NoSuchEngine {
        /// The rejected id.
        engine: u32,
        /// Engines on the device.
        num_engines: u32,
    },
}

impl EmuError {
    /// The negative Linux errno a driver would report for this condition (the sign every `errno()` of the
    /// workspace uses).
    pub fn errno(&self) -> i32 {
        -match self {
            EmuError::Map { .. } | EmuError::OutOfMemory { .. } => udma::errno::ENOMEM,
            EmuError::OutOfBounds { .. } => udma::errno::EFAULT,
            EmuError::DeviceClaimed { .. } => udma::errno::EBUSY,
            EmuError::InvalidAlloc { .. }
            | EmuError::BadFree { .. }
            | EmuError::InvalidConfig(_)
            | EmuError::NoSuchEngine { .. } => udma::errno::EINVAL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_are_negative_like_every_other_errno() {
        let map = EmuError::Map { what: "HBM", len: 1, source: std::io::Error::from_raw_os_error(12) };
        let oob = EmuError::OutOfBounds { what: "HBM", pa: 0, len: 1, base: 1, size: 1 };
        let cases = [
            (map, -12),
            (EmuError::OutOfMemory { what: "HBM", len: 1, align: 64 }, -12),
            (oob, -14),
            (EmuError::InvalidAlloc { len: 0, align: 64 }, -22),
            (EmuError::BadFree { what: "HBM", pa: 0, len: 1 }, -22),
            (EmuError::InvalidConfig("no devices"), -22),
            (EmuError::NoSuchEngine { engine: 40, num_engines: 34 }, -22),
            (EmuError::DeviceClaimed { device: 3 }, -16),
        ];
        for (e, want) in cases {
            assert_eq!(e.errno(), want, "{e}");
        }
    }
}
