//! The CLI's error: what failed, with the errno the op layer (or device model) reported, and the process
//! exit code its failure class maps to ([`ExitCode`]).

use ndma::NdmaError;
use ndma_emu::test_utils::HarnessError;
use ndma_emu::TestbedError;

/// The process exit status of `ndma`, one per failure class. The errno, when there is one, is in the message
/// on stderr (`… (errno -110, ETIMEDOUT)`), not in the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitCode {
    /// The command did what it was asked and every byte checked was right.
    Success = 0,
    /// A DMA operation failed: the op layer returned an error (timeout, invalid argument, no memory, …).
    Dma = 1,
    /// Bad usage: an unknown option or value, or arguments that cannot work together (clap's own errors
    /// exit with this code too).
    Usage = 2,
    /// A transfer completed but its bytes (data or guards) are wrong, or a scenario did not behave as the
    /// contract says.
    Verify = 3,
    /// The emulated instance could not be built, or the device model refused a back-door access.
    Device = 4,
    /// An output file (`--json`, `trace --out`, `man --out-dir`) could not be written.
    Io = 5,
}

impl ExitCode {
    /// Every code, in order (for the documentation and its test).
    pub const ALL: [ExitCode; 6] =
        [ExitCode::Success, ExitCode::Dma, ExitCode::Usage, ExitCode::Verify, ExitCode::Device, ExitCode::Io];

    /// The numeric status.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// A short name of the class.
    pub fn name(self) -> &'static str {
        match self {
            ExitCode::Success => "success",
            ExitCode::Dma => "DMA error",
            ExitCode::Usage => "usage error",
            ExitCode::Verify => "verification failure",
            ExitCode::Device => "emulated device error",
            ExitCode::Io => "output error",
        }
    }
}

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Bad user input the argument parser could not catch ([`ExitCode::Usage`]).
    Usage(String),
    /// An op-layer call failed ([`ExitCode::Dma`]).
    Op {
        /// What the CLI was doing.
        what: String,
        /// The op layer's error.
        err: NdmaError,
    },
    /// The emulated instance could not be built ([`ExitCode::Device`]).
    Setup(TestbedError),
    /// The device model refused a back-door access ([`ExitCode::Device`]); `errno` is negative.
    Emu {
        /// What the CLI was doing.
        what: String,
        /// The model's message.
        msg: String,
        /// The errno.
        errno: i32,
    },
    /// Bytes did not match after a transfer, or a scenario's outcome was not the expected one
    /// ([`ExitCode::Verify`]).
    Verify(String),
    /// Writing an output file failed ([`ExitCode::Io`]).
    Io(String),
}

impl CliError {
    /// Wraps an op-layer error with what the CLI was doing.
    pub fn op(what: impl Into<String>, err: NdmaError) -> Self {
        CliError::Op { what: what.into(), err }
    }

    /// Wraps a device-model error with what the CLI was doing.
    pub fn emu(what: impl Into<String>, err: &ndma_emu::EmuError) -> Self {
        CliError::Emu { what: what.into(), msg: err.to_string(), errno: err.errno() }
    }

    /// The negative errno behind the failure, if it has one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            CliError::Op { err, .. } => Some(err.errno()),
            CliError::Setup(TestbedError::Ndma(e)) => Some(e.errno()),
            CliError::Setup(TestbedError::Emu(e)) => Some(e.errno()),
            CliError::Emu { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The failure class.
    pub fn class(&self) -> ExitCode {
        match self {
            CliError::Usage(_) => ExitCode::Usage,
            CliError::Op { .. } => ExitCode::Dma,
            CliError::Verify(_) => ExitCode::Verify,
            CliError::Setup(_) | CliError::Emu { .. } => ExitCode::Device,
            CliError::Io(_) => ExitCode::Io,
        }
    }

    /// The process exit code of the failure class.
    pub fn exit_code(&self) -> i32 {
        self.class().code()
    }
}

/// The symbolic name of a (negative or positive) errno.
pub fn errno_name(errno: i32) -> &'static str {
    match errno.abs() {
        1 => "EPERM",
        2 => "ENOENT",
        3 => "ESRCH",
        5 => "EIO",
        12 => "ENOMEM",
        14 => "EFAULT",
        16 => "EBUSY",
        17 => "EEXIST",
        22 => "EINVAL",
        110 => "ETIMEDOUT",
        _ => "errno",
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Usage(m) | CliError::Io(m) => f.write_str(m)?,
            CliError::Verify(m) => write!(f, "verification failed: {m}")?,
            CliError::Op { what, err } => write!(f, "{what}: {err}")?,
            CliError::Setup(e) => write!(f, "building the emulated instance: {e}")?,
            CliError::Emu { what, msg, .. } => write!(f, "{what}: {msg}")?,
        }
        if let Some(errno) = self.errno() {
            write!(f, " (errno {errno}, {})", errno_name(errno))?;
        }
        Ok(())
    }
}

impl std::error::Error for CliError {}

impl From<HarnessError> for CliError {
    fn from(e: HarnessError) -> Self {
        match e {
            HarnessError::Ndma { what, err } => CliError::Op { what, err },
            HarnessError::Emu { what, err } => CliError::emu(what, &err),
            HarnessError::TooLarge { .. } => CliError::Usage(e.to_string()),
            HarnessError::Mismatch { .. } => CliError::Verify(e.to_string()),
        }
    }
}

impl From<TestbedError> for CliError {
    fn from(e: TestbedError) -> Self {
        CliError::Setup(e)
    }
}

/// Shorthand for CLI results.
pub type CliResult<T = ()> = Result<T, CliError>;

/// Adds context to op-layer results.
pub trait OpContext<T> {
    /// Maps an [`NdmaError`] to [`CliError::Op`] with `what` (evaluated only on error).
    fn op_ctx<S: Into<String>>(self, what: impl FnOnce() -> S) -> CliResult<T>;
}

impl<T> OpContext<T> for ndma::Result<T> {
    fn op_ctx<S: Into<String>>(self, what: impl FnOnce() -> S) -> CliResult<T> {
        self.map_err(|e| CliError::op(what(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_class_has_its_own_exit_code() {
        let op = CliError::op("copy", NdmaError::InvalidNc { nc: 9, ncs: 2 });
        let emu = CliError::Emu { what: "fill".into(), msg: "out of range".into(), errno: -14 };
        let cases = [
            (CliError::Usage("bad".into()), 2),
            (op, 1),
            (CliError::Verify("byte 3".into()), 3),
            (emu, 4),
            (CliError::Io("disk full".into()), 5),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_code(), code, "{e}");
        }
        let codes: Vec<i32> = ExitCode::ALL.iter().map(|c| c.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn the_errno_stays_in_the_message() {
        let e = CliError::op("copy", NdmaError::InvalidNc { nc: 9, ncs: 2 });
        assert!(e.to_string().ends_with("(errno -22, EINVAL)"), "{e}");
    }
}
