//! `ndma`: see `ndma --help`.

use clap::Parser;
use ndma_cli::cli::{Cli, Command};
use ndma_cli::util::timeline::{install, Timeline};
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

fn main() {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter);
    // Only `ndma trace` records the op layer's debug spans: elsewhere their callsites stay disabled.
    let timeline = matches!(cli.command, Some(Command::Trace(_))).then(|| {
        let t = Timeline::default();
        install(t.clone());
        t.with_filter(Targets::new().with_target("ndma", Level::DEBUG))
    });
    tracing_subscriber::registry().with(log).with(timeline).init();
    if let Err(e) = ndma_cli::cli::run(cli) {
        eprintln!("ndma: error: {e}");
        std::process::exit(e.exit_code());
    }
}
