//! `ndma`: see `ndma --help`.

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let cli = ndma_cli::cli::Cli::parse();
    let emulation_budgets = cli.emulation_budgets;
    if let Err(e) = ndma_cli::cli::run(cli) {
        eprintln!("ndma: error: {e}");
        if e.errno() == Some(-110) && !emulation_budgets {
            eprintln!(
                "ndma: hint: with silicon poll budgets a small device→device batch must complete within ~210 µs; on a \
                 loaded or 2-core machine the emulated engine's worker thread can be descheduled for longer. Retry, or \
                 pass --emulation-budgets."
            );
        }
        std::process::exit(e.exit_code());
    }
}
