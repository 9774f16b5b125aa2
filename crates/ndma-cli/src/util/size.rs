//! Byte sizes on the command line: plain bytes or a binary suffix (K/KB/KiB, M/MB/MiB, G/GB/GiB; all powers
//! of 1024, case-insensitive), and their display.
//!
//! The arithmetic is `parse-size`'s (binary units); this module decides which forms are accepted, because
//! `parse-size` accepts more than a DMA size should be written as (fractions such as `1.5M`, exponents such as
//! `1e6`, `T`/`P`/`E` units, `_` digit groups), and words the errors.

/// The units `parse-size` is asked to apply: every prefix a power of 1024, `KB` as much as `KiB`.
const UNITS: parse_size::Config = parse_size::Config::new().with_binary();

/// Parses a size such as `4096`, `4K`, `64KiB`, `256m`, `1G`. Whitespace around the number and between the
/// number and the suffix is allowed.
///
/// # Errors
///
/// A message naming the input when it is empty, not a whole number, has an unknown suffix or overflows u64.
pub fn parse_size(input: &str) -> Result<u64, String> {
    let s = input.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, suffix) = s.split_at(digits);
    if num.is_empty() {
        return Err(format!(
            "invalid size {input:?}: expected a whole number of bytes, optionally with a suffix K, KB, KiB, M, MB, \
             MiB, G, GB or GiB (e.g. 4096, 64K, 256MiB, 1G)"
        ));
    }
    let suffix = suffix.trim();
    if !matches!(
        suffix.to_ascii_lowercase().as_str(),
        "" | "b" | "k" | "kb" | "kib" | "m" | "mb" | "mib" | "g" | "gb" | "gib"
    ) {
        return Err(format!(
            "invalid size {input:?}: unknown suffix {:?} (use K, KB, KiB, M, MB, MiB, G, GB or GiB; all are \
             powers of 1024)",
            suffix.to_ascii_lowercase()
        ));
    }
    UNITS.parse_size(format!("{num}{suffix}")).map_err(|e| match e {
        parse_size::Error::PosOverflow if num.parse::<u64>().is_err() => {
            format!("invalid size {input:?}: number too large")
        }
        parse_size::Error::PosOverflow => format!("invalid size {input:?}: does not fit in 64 bits"),
        // Unreachable for the forms checked above; kept as a message rather than a panic.
        other => format!("invalid size {input:?}: {other}"),
    })
}

/// Clap value parser for sizes.
///
/// # Errors
///
/// As [`parse_size()`].
pub fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
}

/// A size for people: `4 KiB`, `1.5 MiB`, `200000 B`. Exact multiples print without decimals.
pub fn fmt_size(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, scale) in UNITS {
        if n >= scale {
            return if n % scale == 0 {
                format!("{} {unit}", n / scale)
            } else {
                format!("{:.2} {unit}", n as f64 / scale as f64)
            };
        }
    }
    format!("{n} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_bytes_and_every_suffix() {
        let cases = [
            ("0", 0),
            ("4096", 4096),
            ("200000", 200_000),
            ("7b", 7),
            ("4K", 4096),
            ("4k", 4096),
            ("64KB", 65536),
            ("64KiB", 65536),
            ("64kib", 65536),
            ("100K", 102_400),
            ("1M", 1 << 20),
            ("256M", 256 << 20),
            ("256MiB", 256 << 20),
            ("2mb", 2 << 20),
            ("1G", 1 << 30),
            ("1GB", 1 << 30),
            ("3GiB", 3 << 30),
            (" 8 K ", 8192),
        ];
        for (s, want) in cases {
            assert_eq!(parse_size(s), Ok(want), "{s:?}");
        }
    }

    #[test]
    fn rejects_garbage_with_a_message() {
        for s in ["", "K", "abc", "-1", "1.5M", "4KX", "4 T", "0x10", "1e6", "99999999999999999999", "17179869184G"] {
            let err = parse_size(s).expect_err(s);
            assert!(err.contains("invalid size"), "{s:?}: {err}");
        }
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let cases = [
            ("", "expected a whole number of bytes"),
            ("1.5M", "unknown suffix \".5m\""),
            ("4 T", "unknown suffix \"t\""),
            ("1e6", "unknown suffix \"e6\""),
            ("1_000", "unknown suffix \"_000\""),
            ("99999999999999999999", "number too large"),
            ("17179869184G", "does not fit in 64 bits"),
        ];
        for (s, want) in cases {
            let err = parse_size(s).expect_err(s);
            assert!(err.starts_with(&format!("invalid size {s:?}: ")) && err.contains(want), "{s:?}: {err}");
        }
    }

    #[test]
    fn the_largest_sizes_that_fit() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_size("17179869183G"), Ok(17_179_869_183 << 30));
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(fmt_size(4096), "4 KiB");
        assert_eq!(fmt_size(256 << 20), "256 MiB");
        assert_eq!(fmt_size(1 << 30), "1 GiB");
        assert_eq!(fmt_size(200_000), "195.31 KiB");
        assert_eq!(fmt_size(100), "100 B");
    }
}
