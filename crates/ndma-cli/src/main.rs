//! `ndma`: see `ndma --help`.

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let cli = ndma_cli::cli::Cli::parse();
    let silicon_budgets = cli.silicon_budgets;
    if let Err(e) = ndma_cli::cli::run(cli) {
        eprintln!("ndma: error: {e}");
        if e.errno() == Some(-110) && silicon_budgets {
            eprintln!(
                "ndma: hint: with silicon poll budgets a small device→device batch must complete within ~210 µs; on a \
                 loaded or 2-core machine the emulated engine's worker thread can be descheduled for longer. Retry without \
                 --silicon-budgets."
            );
        }
        std::process::exit(e.exit_code());
    }
}
