//! `ndma completions SHELL`: a completion script generated from the clap definition (`clap_complete`), so it
//! always offers exactly the commands, options and values the binary accepts.

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::error::CliResult;

/// Runs `ndma completions`: the script for `a.shell` on stdout.
///
/// # Errors
///
/// None today; the signature matches the other commands.
pub fn run(a: &CompletionsArgs) -> CliResult {
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "ndma", &mut std::io::stdout().lock());
    Ok(())
}
