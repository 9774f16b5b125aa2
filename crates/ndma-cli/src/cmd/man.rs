//! `ndma man`: the man page generated from the clap definition (`clap_mangen`): `ndma.1` on stdout, or with
//! `--out-dir DIR` one page per command (`ndma.1`, `ndma-copy.1`, …) written there.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::{Cli, ManArgs};
use crate::error::{CliError, CliResult};

/// Runs `ndma man`.
///
/// # Errors
///
/// [`CliError::Io`] when the page cannot be written.
pub fn run(a: &ManArgs) -> CliResult {
    let cmd = Cli::command();
    match &a.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .and_then(|()| clap_mangen::generate_to(cmd, dir))
                .map_err(|e| CliError::Io(format!("writing man pages to {}: {e}", dir.display())))?;
            println!("wrote man pages to {}", dir.display());
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .map_err(|e| CliError::Io(format!("rendering the man page: {e}")))?;
            std::io::stdout()
                .lock()
                .write_all(&page)
                .map_err(|e| CliError::Io(format!("writing the man page: {e}")))?;
        }
    }
    Ok(())
}
