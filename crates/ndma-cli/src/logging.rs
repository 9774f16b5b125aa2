//! The log on stderr: its level from `-q`/`-v` with `RUST_LOG` on top, and colour only where a person reads it.
//!
//! - Level: warnings and errors by default; `-q` errors only; `-v` info, `-vv` debug, `-vvv` trace.
//! - `RUST_LOG`, when set, is applied after that level, so its directives win for what they name
//!   (`RUST_LOG=ndma::classic=debug` adds one module; `RUST_LOG=off` silences the log).
//! - Colour (ANSI escapes) only when stderr is a terminal and `NO_COLOR` is unset or empty (no-color.org):
//!   `ndma faults hang 2>log` writes plain text.

use std::ffi::OsString;
use std::io::IsTerminal;

use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::cli::{Cli, Command};
use crate::util::timeline::{install, Timeline};

/// The level `-q`/`-v` ask for.
pub fn level(verbose: u8, quiet: bool) -> LevelFilter {
    match (quiet, verbose) {
        (true, _) => LevelFilter::ERROR,
        (false, 0) => LevelFilter::WARN,
        (false, 1) => LevelFilter::INFO,
        (false, 2) => LevelFilter::DEBUG,
        (false, _) => LevelFilter::TRACE,
    }
}

/// The filter directives: the flags' level, then `rust_log` (the value of `RUST_LOG`) if it is non-empty.
pub fn directives(verbose: u8, quiet: bool, rust_log: Option<&str>) -> String {
    let base = level(verbose, quiet).to_string().to_ascii_lowercase();
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(env) => format!("{base},{env}"),
        None => base,
    }
}

/// Should the log use ANSI colour? Only on a terminal, and never when `NO_COLOR` holds a non-empty value.
pub fn use_color(stderr_is_terminal: bool, no_color: Option<OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber for this run: the stderr log, and for `ndma trace` the timeline recorder.
pub fn init(cli: &Cli) {
    let rust_log = std::env::var("RUST_LOG").ok();
    // Lossy: a malformed RUST_LOG directive is dropped (and reported by tracing) rather than failing the command.
    let mut d = directives(cli.verbose, cli.quiet, None);
    // `verify` judges every error the op layer and the model meet (thousands, with faults): their own log
    // lines stay off unless -v asks for them.
    if matches!(cli.command, Some(Command::Verify(_))) && cli.verbose == 0 {
        d.push_str(",ndma=off,ndma_emu=off");
    }
    if let Some(env) = rust_log.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        d = format!("{d},{env}");
    }
    let filter = EnvFilter::builder().parse_lossy(d);
    let ansi = use_color(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR"));
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi).with_filter(filter);
    // Only `ndma trace` records the op layer's debug spans: elsewhere their callsites stay disabled.
    let timeline = matches!(cli.command, Some(Command::Trace(_))).then(|| {
        let t = Timeline::default();
        install(t.clone());
        t.with_filter(Targets::new().with_target("ndma", Level::DEBUG))
    });
    tracing_subscriber::registry().with(log).with(timeline).init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_map_onto_levels() {
        assert_eq!(level(0, false), LevelFilter::WARN);
        assert_eq!(level(1, false), LevelFilter::INFO);
        assert_eq!(level(2, false), LevelFilter::DEBUG);
        assert_eq!(level(3, false), LevelFilter::TRACE);
        assert_eq!(level(9, false), LevelFilter::TRACE);
        assert_eq!(level(0, true), LevelFilter::ERROR);
    }

    #[test]
    fn rust_log_comes_after_the_flags() {
        assert_eq!(directives(0, false, None), "warn");
        assert_eq!(directives(1, false, Some("")), "info");
        assert_eq!(directives(0, true, Some("ndma::classic=debug")), "error,ndma::classic=debug");
        assert_eq!(directives(2, false, Some(" off ")), "debug,off");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_color(true, None));
        assert!(use_color(true, Some(OsString::new())), "an empty NO_COLOR does not count (no-color.org)");
        assert!(!use_color(true, Some("1".into())));
        assert!(!use_color(false, None));
        assert!(!use_color(false, Some("1".into())));
    }
}
