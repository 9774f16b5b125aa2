//! The four copy directions.

use std::fmt;
use std::str::FromStr;

/// A copy direction: which ends of a copy are host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Host → device.
    H2d,
    /// Device → host.
    D2h,
    /// Device → device.
    D2d,
    /// Host → host.
    H2h,
}

impl Dir {
    /// Every direction.
    pub const ALL: [Dir; 4] = [Dir::H2d, Dir::D2h, Dir::D2d, Dir::H2h];

    /// Is the source host memory?
    pub fn src_host(self) -> bool {
        matches!(self, Dir::H2d | Dir::H2h)
    }

    /// Is the destination host memory?
    pub fn dst_host(self) -> bool {
        matches!(self, Dir::D2h | Dir::H2h)
    }

    /// `h2d`, `d2h`, `d2d` or `h2h`.
    pub fn name(self) -> &'static str {
        match self {
            Dir::H2d => "h2d",
            Dir::D2h => "d2h",
            Dir::D2d => "d2d",
            Dir::H2h => "h2h",
        }
    }

    /// `host→device`, …
    pub fn long_name(self) -> &'static str {
        match self {
            Dir::H2d => "host→device",
            Dir::D2h => "device→host",
            Dir::D2d => "device→device",
            Dir::H2h => "host→host",
        }
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that names no direction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown direction {0:?}: expected h2d, d2h, d2d or h2h")]
pub struct ParseDirError(pub String);

impl FromStr for Dir {
    type Err = ParseDirError;

    /// Parses [`Dir::name`] (case-insensitive).
    ///
    /// ```
    /// use ndma_emu::test_utils::Dir;
    ///
    /// assert_eq!("D2H".parse::<Dir>(), Ok(Dir::D2h));
    /// assert!("up".parse::<Dir>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Dir, ParseDirError> {
        Dir::ALL.into_iter().find(|d| d.name().eq_ignore_ascii_case(s)).ok_or_else(|| ParseDirError(s.to_string()))
    }
}
