//! `ndma`: see `ndma --help`. Exit status: 0 on success, otherwise the failure class of
//! [`ndma_cli::error::ExitCode`].

use clap::Parser;
use ndma_cli::cli::Cli;

fn main() {
    let cli = Cli::parse();
    ndma_cli::logging::init(&cli);
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
