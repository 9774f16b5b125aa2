//! The command that replays one operation, and the text a failure prints.

use super::config::{Config, FaultMode};
use super::record::OpRecord;
use super::size::DEFAULT_BIG_RATE;
use ndma_emu::WaitTiming;

/// `ndma verify --seed S --replay K` with every option that shapes what operation `K` draws or how it runs.
pub fn command(cfg: &Config, index: u64) -> String {
    let paths: Vec<&str> = cfg.paths.iter().map(|p| p.name()).collect();
    let mut c = format!(
        "ndma verify --seed {} --replay {index} --instance {} --paths {} --engines {} --budgets {} --ordering {}",
        cfg.seed,
        cfg.instance.name,
        paths.join(","),
        cfg.engines.name(),
        cfg.budgets.name(),
        cfg.ordering.name()
    );
    if cfg.big_rate != DEFAULT_BIG_RATE {
        c.push_str(&format!(" --big-rate {}", cfg.big_rate));
    }
    if cfg.faults == FaultMode::Mix {
        c.push_str(&format!(" --faults mix --fault-rate {}", cfg.fault_rate));
        if cfg.bystanders {
            c.push_str(" --bystanders");
        }
    }
    if cfg.timing == WaitTiming::Driver {
        // A global option: it goes before the subcommand.
        c.insert_str("ndma ".len(), "--driver-timing ");
    }
    c
}

/// What a failed operation prints on stderr: the seed, the operation, each finding, the replay command.
pub fn failure_text(cfg: &Config, rec: &OpRecord) -> String {
    let spec = &rec.spec;
    let mut t = format!(
        "ndma verify: operation {} failed (seed {}, {}): {}\n  operation: {}\n  outcome: {}, op-layer time {:.3} ms",
        spec.index,
        cfg.seed,
        cfg.instance.name,
        rec.findings.iter().map(|f| f.kind.name()).collect::<Vec<_>>().join(", "),
        spec.describe(),
        rec.outcome,
        rec.elapsed.as_secs_f64() * 1e3
    );
    for f in &rec.findings {
        t.push_str(&format!("\n  {}: {}", f.kind.name(), f.message));
    }
    t.push_str(&format!("\n  replay: {}", command(cfg, spec.index)));
    t
}
