//! The CLI's error: what failed, with the errno the op layer (or device model) reported, and the process
//! exit code it maps to.

use ndma::NdmaError;
use ndma_emu::TestbedError;

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Bad user input the argument parser could not catch (exit 2).
    Usage(String),
    /// An op-layer call failed (exit 1).
    Op {
        /// What the CLI was doing.
        what: String,
        /// The op layer's error.
        err: NdmaError,
    },
    /// The emulated instance could not be built (exit 1).
    Setup(TestbedError),
    /// The device model refused a back-door access (exit 1); `errno` is negative.
    Emu {
        /// What the CLI was doing.
        what: String,
        /// The model's message.
        msg: String,
        /// The errno.
        errno: i32,
    },
    /// Bytes did not match after a transfer (exit 3).
    Verify(String),
    /// Writing an output file failed (exit 1).
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

    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Verify(_) => 3,
            _ => 1,
        }
    }
}

/// The symbolic name of a (negative or positive) errno.
pub fn errno_name(errno: i32) -> &'static str {
    match errno.abs() {
        1 => "EPERM",
        2 => "ENOENT",
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
