//! Command-line definition and dispatch.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use ndma::Instance;

use crate::cmd;
use crate::error::{CliError, CliResult};
use crate::util::bed::{BedOpts, Dir};
use crate::util::size::size_arg;

/// The AWS Neuron DMA op layer on an emulated device: inspect what it writes, copy, memset, benchmark.
#[derive(Debug, Parser)]
#[command(name = "ndma", version, about, long_about = None)]
pub struct Cli {
    /// Instance preset to emulate (trn1.2xlarge, trn1.32xlarge, inf2.xlarge, inf2.48xlarge, trn2.48xlarge).
    #[arg(long, global = true, default_value = "trn1.2xlarge", value_name = "NAME")]
    pub instance: String,
    /// Use silicon marker-poll budgets instead of the driver's emulation-platform scaling (×100000). The
    /// emulated engines run on host threads the OS may deschedule for milliseconds, longer than the silicon
    /// budget of a small device-to-device batch (~210 µs), so the CLI declares itself an emulation platform
    /// as the driver would on an emulator. `faults` always uses silicon budgets (with inline engines).
    #[arg(long, global = true)]
    pub silicon_budgets: bool,
    /// The command (default: demo).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// A verified tour of every copy direction and memset at 4 KiB … 256 MiB, with throughput vs memcpy.
    Demo,
    /// Run one copy on an inline engine and print the descriptor pairs the op layer wrote into the H2T ring.
    Inspect(InspectArgs),
    /// One verified copy (or a stream of async copies), with counters and throughput.
    Copy(CopyArgs),
    /// Memset a window of a device chunk, verifying it and the guard bytes around it.
    Memset(MemsetArgs),
    /// End-to-end throughput and latency figures beside single-thread memcpy, as a table and optionally JSON.
    Bench(BenchArgs),
    /// Scripted failure scenarios: a copy inside a NeuronCore reset window, a hung queue.
    Faults(FaultsArgs),
    /// Run a copy on threaded engines and write a Chrome/Perfetto timeline of the op layer and the engines.
    Trace(TraceArgs),
}

/// `ndma trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Copy direction.
    #[arg(long, value_enum, default_value = "h2d")]
    pub dir: Dir,
    /// Bytes per copy.
    #[arg(long, value_parser = size_arg, default_value = "1M")]
    pub size: u64,
    /// NeuronCore whose H2T ring the copy uses.
    #[arg(long, default_value_t = 0)]
    pub nc: u32,
    /// Issue N copies of SIZE through the async pipeline instead of one sync copy.
    #[arg(long = "async", value_name = "N")]
    pub async_count: Option<u64>,
    /// Where to write the trace (Chrome trace-event JSON).
    #[arg(long, default_value = "ndma-trace.json")]
    pub out: PathBuf,
}

/// `ndma faults`.
#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// Which scenario.
    #[arg(value_enum)]
    pub scenario: FaultScenario,
    /// NeuronCore whose H2T ring the scenario uses.
    #[arg(long, default_value_t = 0)]
    pub nc: u32,
    /// Length of the NeuronCore reset, in jiffies (ms), for `reset-window`.
    #[arg(long, default_value_t = 100)]
    pub reset_ms: u64,
}

/// A failure scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultScenario {
    /// A copy whose doorbell rings during a reset of its NC: on V2 it hangs, times out inside the reset window,
    /// and the op layer re-initialises the ring and replays it; V3 has neither the bug nor the retry.
    ResetWindow,
    /// A hung queue outside any reset window: -ETIMEDOUT without a retry, and the device stays usable.
    Hang,
}

/// `ndma inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Bytes to copy (e.g. 200000, 64K, 1M).
    #[arg(long, value_parser = size_arg)]
    pub size: u64,
    /// NeuronCore whose chunks (and so whose H2T ring) the copy uses.
    #[arg(long, default_value_t = 0)]
    pub nc: u32,
    /// Copy direction.
    #[arg(long, value_enum, default_value = "h2d")]
    pub dir: Dir,
    /// Also print each descriptor's raw words (len_ctrl, word 1, address).
    #[arg(long)]
    pub raw: bool,
}

/// `ndma copy`.
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// Copy direction.
    #[arg(long, value_enum)]
    pub dir: Dir,
    /// Bytes per copy (e.g. 4K, 1M, 256M).
    #[arg(long, value_parser = size_arg)]
    pub size: u64,
    /// NeuronCore whose chunks (and so whose H2T ring) the copy uses.
    #[arg(long, default_value_t = 0)]
    pub nc: u32,
    /// Issue N copies of SIZE through the async pipeline (each must fit one batch, ndma::MAX_BATCH_BYTES).
    #[arg(long = "async", value_name = "N")]
    pub async_count: Option<u64>,
}

/// `ndma memset`.
#[derive(Debug, Args)]
pub struct MemsetArgs {
    /// Bytes to set.
    #[arg(long, value_parser = size_arg)]
    pub size: u64,
    /// Byte value: decimal or 0x-prefixed hex, 0..=255.
    #[arg(long, value_parser = byte_arg)]
    pub value: u8,
    /// NeuronCore owning the device chunk.
    #[arg(long, default_value_t = 0)]
    pub nc: u32,
}

/// `ndma bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Write the figures as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Fewer repetitions and no 256 MiB cases (finishes in seconds; for tests and smoke runs).
    #[arg(long)]
    pub quick: bool,
}

/// Parses a byte value: decimal, `0x` hex, `0o` octal or `0b` binary, within 0..=255.
///
/// # Errors
///
/// A message for anything else.
pub fn byte_arg(s: &str) -> Result<u8, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let parsed = if let Some(h) = lower.strip_prefix("0x") {
        u64::from_str_radix(h, 16)
    } else if let Some(o) = lower.strip_prefix("0o") {
        u64::from_str_radix(o, 8)
    } else if let Some(b) = lower.strip_prefix("0b") {
        u64::from_str_radix(b, 2)
    } else {
        t.parse::<u64>()
    };
    match parsed {
        Ok(v) => u8::try_from(v).map_err(|_| format!("invalid byte value {s:?}: must be 0..=255 (0x00..=0xff)")),
        Err(_) => Err(format!("invalid byte value {s:?}: expected a number such as 90 or 0x5a")),
    }
}

/// Resolves `--instance`.
///
/// # Errors
///
/// [`CliError::Usage`] listing the valid names.
pub fn instance_by_name(name: &str) -> CliResult<Instance> {
    Instance::by_name(name).ok_or_else(|| {
        let names: Vec<&str> = Instance::ALL.iter().map(|i| i.name).collect();
        CliError::Usage(format!("unknown instance {name:?}; valid instances: {}", names.join(", ")))
    })
}

/// Runs the parsed command line.
///
/// # Errors
///
/// The command's failure.
pub fn run(cli: Cli) -> CliResult {
    let opts = BedOpts { instance: instance_by_name(&cli.instance)?, emulation_budgets: !cli.silicon_budgets };
    match cli.command.unwrap_or(Command::Demo) {
        Command::Demo => cmd::demo::run(opts),
        Command::Inspect(a) => cmd::inspect::run(opts, &a),
        Command::Copy(a) => cmd::copy::run(opts, &a),
        Command::Memset(a) => cmd::memset::run(opts, &a),
        Command::Bench(a) => cmd::bench::run(opts, &a),
        Command::Faults(a) => cmd::faults::run(opts, &a),
        Command::Trace(a) => cmd::trace::run(opts, &a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_values() {
        assert_eq!(byte_arg("0x5a"), Ok(0x5a));
        assert_eq!(byte_arg("0X5A"), Ok(0x5a));
        assert_eq!(byte_arg("255"), Ok(255));
        assert_eq!(byte_arg("0b101"), Ok(5));
        assert!(byte_arg("256").is_err());
        assert!(byte_arg("0x100").is_err());
        assert!(byte_arg("z").is_err());
        assert!(byte_arg("-1").is_err());
    }

    #[test]
    fn unknown_instance_lists_the_valid_ones() {
        let err = instance_by_name("p4d.24xlarge").unwrap_err().to_string();
        assert!(err.contains("trn1.2xlarge") && err.contains("trn2.48xlarge"), "{err}");
    }
}
