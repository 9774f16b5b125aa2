//! `ndma`: see `ndma --help`.

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let cli = ndma_cli::cli::Cli::parse();
    if let Err(e) = ndma_cli::cli::run(cli) {
        eprintln!("ndma: error: {e}");
        std::process::exit(e.exit_code());
    }
}
