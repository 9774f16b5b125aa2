//! `ndma`: see `ndma --help`. Exit status: 0 on success, otherwise the failure class of
//! [`ndma_cli::error::ExitCode`].

use clap::Parser;
use ndma_cli::cli::Cli;

fn main() {
    let cli = Cli::parse();
    ndma_cli::logging::init(&cli);
    if let Err(e) = ndma_cli::cli::run(cli) {
        eprintln!("ndma: error: {e}");
        std::process::exit(e.exit_code());
    }
}
