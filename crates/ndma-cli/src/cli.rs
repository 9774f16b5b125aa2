//! Command-line definition and dispatch.

use std::path::{Path, PathBuf};

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{ArgAction, Args, Parser, Subcommand};
use ndma::Instance;
use ndma_emu::test_utils::Dir;
use ndma_emu::{ExecPolicy, Testbed, TestbedConfig, WaitTiming};

use crate::cmd;
use crate::error::{CliError, CliResult};
use crate::util::output::{check_writable, JsonArg};
use crate::util::size::size_arg;
use crate::util::user::{layout_arg, Layout, UserDir};

/// The instance emulated when `--instance` is not given.
pub const DEFAULT_INSTANCE: &str = "trn1.2xlarge";

/// How to build the instance a command runs on: the global options.
#[derive(Debug, Clone, Copy)]
pub struct BedOpts {
    /// The instance preset.
    pub instance: Instance,
    /// Scale poll budgets as on an emulation platform (×100000) instead of silicon budgets.
    pub emulation_budgets: bool,
    /// How the platform times the op layer's marker waits (`--driver-timing`: [`WaitTiming::Driver`]).
    pub timing: WaitTiming,
}

/// Builds the instance with `exec` engines, the default (relaxed) fabric ordering, a real clock and
/// `opts.timing`.
///
/// # Errors
///
/// The model's or the op layer's refusal.
pub fn testbed(opts: BedOpts, exec: ExecPolicy) -> CliResult<Testbed> {
    let mut cfg = TestbedConfig::new(opts.instance);
    cfg.exec = exec;
    cfg.emulation_budgets = opts.emulation_budgets;
    cfg.timing = opts.timing;
    tracing::debug!(
        instance = opts.instance.name,
        ?exec,
        emulation_budgets = opts.emulation_budgets,
        timing = ?opts.timing,
        "building testbed"
    );
    Ok(Testbed::new(cfg)?)
}

/// `--dir`: a copy direction by name (`h2d`, `d2h`, `d2d`, `h2h`).
fn dir_arg() -> impl TypedValueParser<Value = Dir> {
    PossibleValuesParser::new(Dir::ALL.map(|d| PossibleValue::new(d.name()).help(d.long_name())))
        .try_map(|s| s.parse::<Dir>())
}

/// The end of `ndma --help` and of the man page: exit codes and environment.
pub const AFTER_HELP: &str = "\
Exit status:
  0  success: the command did what it was asked and every byte checked was right
  1  DMA error: an op-layer call failed (timeout, invalid argument, no memory, ...); the errno is in the message
  2  usage error: an unknown option or value, or arguments that cannot work together
  3  verification failure: wrong bytes after a transfer, or a scenario that did not behave as the contract says
  4  emulated device error: the instance could not be built, or the device model refused a back-door access
  5  output error: a --json, --out or --out-dir file could not be written

Environment:
  RUST_LOG   tracing filter directives, applied after -q/-v (e.g. RUST_LOG=ndma::classic=debug, RUST_LOG=off)
  NO_COLOR   when non-empty, no colour anywhere; colour is used only when the stream is a terminal anyway

Results go to stdout, the log and progress bars to stderr. --json FILE writes one JSON document per run
(schema: `ndma <command> --help`); --json - writes it to stdout instead of the human report.";

/// The AWS Neuron DMA op layer on an emulated device: inspect what it writes, copy, memset, benchmark.
#[derive(Debug, Parser)]
#[command(name = "ndma", version, about, long_about = None, after_long_help = AFTER_HELP)]
pub struct Cli {
    /// Instance preset to emulate (trn1.2xlarge, trn1.32xlarge, inf2.xlarge, inf2.48xlarge, trn2.48xlarge;
    /// default trn1.2xlarge; `verify` also takes `all`; `inspect --zerocopy` without it shows trn1.2xlarge and trn2.48xlarge side by side).
    #[arg(long, global = true, value_name = "NAME")]
    pub instance: Option<String>,
    /// Scale the marker-poll budgets ×100000 as the driver does on an emulation platform, instead of the
    /// silicon budgets (the default, which the emulated engines hold on a loaded machine: a waiting thread
    /// executes pending work itself when the engine's worker is not running). `faults` always uses silicon
    /// budgets (with inline engines).
    #[arg(long, global = true)]
    pub emulation_budgets: bool,
    /// Wait for markers with the driver's timing: the first wait and every 1 µs poll interval run to their
    /// end before the marker is looked at (the faithful baseline). By default a wait returns the moment the
    /// engine writes the marker; poll counts and budgets are the driver's either way.
    #[arg(long, global = true)]
    pub driver_timing: bool,
    /// More log output on stderr: -v info, -vv debug, -vvv trace (default: warnings and errors).
    #[arg(short, long, global = true, action = ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Less output on stderr: errors only in the log, and no progress bar.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// The command (default: demo).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// A verified tour of every copy direction and memset at 4 KiB … 256 MiB, with throughput vs memcpy.
    #[command(after_long_help = cmd::demo::JSON_SCHEMA)]
    Demo(DemoArgs),
    /// Run one copy on an inline engine and print the descriptor pairs the op layer wrote into the H2T ring.
    #[command(after_long_help = cmd::inspect::JSON_SCHEMA)]
    Inspect(InspectArgs),
    /// One verified copy (or a stream of async copies), with counters and throughput.
    #[command(after_long_help = cmd::copy::JSON_SCHEMA)]
    Copy(CopyArgs),
    /// Memset a window of a device chunk, verifying it and the guard bytes around it.
    #[command(after_long_help = cmd::memset::JSON_SCHEMA)]
    Memset(MemsetArgs),
    /// End-to-end throughput and latency figures beside single-thread memcpy, as a table and optionally JSON.
    #[command(after_long_help = cmd::bench::JSON_SCHEMA)]
    Bench(BenchArgs),
    /// Scripted failure scenarios: a copy inside a NeuronCore reset window, a hung queue, and zero-copy ones
    /// (a hole, a pin failure in the completion thread, a hang, process exit, a full completion queue).
    #[command(after_long_help = cmd::faults::JSON_SCHEMA)]
    Faults(FaultsArgs),
    /// A verified zero-copy transfer of a user buffer: pieces, runs, descriptors, doorbells, pins, completions
    /// and the leak check.
    #[command(after_long_help = cmd::zerocopy::JSON_SCHEMA)]
    Zerocopy(ZerocopyArgs),
    /// Run a copy on threaded engines and write a Chrome/Perfetto timeline of the op layer and the engines.
    Trace(TraceArgs),
    /// A seeded randomized campaign of pattern-checked transfers on every path and direction, with faults
    /// mixed in and leak accounting; --instance all runs it on every preset.
    #[command(after_long_help = cmd::verify::JSON_SCHEMA)]
    Verify(cmd::verify::VerifyArgs),
    /// Print a shell completion script for ndma to stdout (e.g. `ndma completions bash > ndma.bash`).
    Completions(CompletionsArgs),
    /// Print ndma's man page (roff) to stdout, or write one page per command into a directory.
    Man(ManArgs),
}

impl Command {
    /// The files the command writes its results to (`--json FILE`, `--plot`, `trace --out`).
    pub fn output_files(&self) -> Vec<&Path> {
        let json = match self {
            Command::Demo(a) => &a.json,
            Command::Inspect(a) => &a.json,
            Command::Copy(a) => &a.json,
            Command::Memset(a) => &a.json,
            Command::Bench(a) => &a.json,
            Command::Faults(a) => &a.json,
            Command::Zerocopy(a) => &a.json,
            Command::Verify(a) => &a.json,
            Command::Trace(a) => return vec![a.out.as_path()],
            Command::Completions(_) | Command::Man(_) => return Vec::new(),
        };
        let plot = match self {
            Command::Bench(a) => a.plot.as_deref(),
            _ => None,
        };
        json.file().into_iter().chain(plot).collect()
    }
}

/// `ndma demo`.
#[derive(Debug, Default, Args)]
pub struct DemoArgs {
    /// One sample per case and sizes up to 1 MiB only (finishes in seconds; for tests and smoke runs).
    #[arg(long)]
    pub quick: bool,
    /// Where the JSON report goes (`--json`).
    #[command(flatten)]
    pub json: JsonArg,
}

/// `ndma completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `ndma man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `ndma.1` and `ndma-<command>.1` for every command into this directory instead of printing
    /// `ndma.1`.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// `ndma trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Copy direction.
    #[arg(long, value_parser = dir_arg(), default_value = "h2d")]
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
    /// Length of the NeuronCore reset, in jiffies (ms), for `reset-window`: 1 to 3,600,000 (an hour).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub reset_ms: u64,
    /// Where the JSON report goes (`--json`).
    #[command(flatten)]
    pub json: JsonArg,
}

/// A failure scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultScenario {
    /// A copy whose doorbell rings during a reset of its NC: on V2 it hangs, times out inside the reset window,
    /// and the op layer re-initialises the ring and replays it; V3 has neither the bug nor the retry.
    ResetWindow,
    /// A hung queue outside any reset window: -ETIMEDOUT without a retry, and the device stays usable.
    Hang,
    /// Zero-copy: a synchronous request over a user buffer with a hole in the middle fails with the partial
    /// pin's -ENOMEM, releases every pin, and the next request succeeds.
    ZcHole,
    /// Zero-copy (V3): an async request whose deferred piece (over a pin budget of 64 pages) fails its remote
    /// pin in the completion thread completes with that errno; the next request completes fine.
    ZcPinFail,
    /// Zero-copy (V3): a queue hang during an async sequence: an error completion for the hung request, its
    /// other pieces drained, the requests behind it and the next ones complete.
    ZcHang,
    /// Zero-copy (V3): the process exits with async requests in flight (deferred, holding its address space):
    /// each completes with -ESRCH, nothing stays pinned, and another process's request succeeds.
    ZcExit,
    /// Zero-copy (V3): more completions than the completion queue holds, with no consumer for a while: the
    /// rest wait in the backlog until it is full, one more request is refused -EBUSY, then every completion is
    /// delivered, in order.
    ZcCqFull,
}

impl FaultScenario {
    /// The scenario's name on the command line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            FaultScenario::ResetWindow => "reset-window",
            FaultScenario::Hang => "hang",
            FaultScenario::ZcHole => "zc-hole",
            FaultScenario::ZcPinFail => "zc-pin-fail",
            FaultScenario::ZcHang => "zc-hang",
            FaultScenario::ZcExit => "zc-exit",
            FaultScenario::ZcCqFull => "zc-cq-full",
        }
    }
}

/// `ndma inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Bytes to copy (e.g. 200000, 64K, 1M); with --zerocopy at most one piece: 256 KiB minus the page offset.
    /// Required, except with --state (default there: 200000).
    #[arg(long, value_parser = size_arg, required_unless_present = "state")]
    pub size: Option<u64>,
    /// NeuronCore whose chunks (and so whose H2T ring) the copy uses.
    #[arg(long, default_value_t = 0)]
    pub nc: u32,
    /// Copy direction.
    #[arg(long, value_parser = dir_arg(), default_value = "h2d")]
    pub dir: Dir,
    /// Also print each descriptor's raw words (len_ctrl, word 1, address).
    #[arg(long)]
    pub raw: bool,
    /// Inspect one zero-copy piece of a user buffer instead (--dir h2d or d2h): its coalesced runs, its data
    /// descriptors and their barriers, and its marker, for V2 and V3 side by side (or the --instance given).
    #[arg(long)]
    pub zerocopy: bool,
    /// With --zerocopy: how the user buffer's frames are laid out: contiguous, scattered or runs:K.
    #[arg(long, value_parser = layout_arg, default_value = "runs:4", value_name = "LAYOUT", requires = "zerocopy")]
    pub layout: Layout,
    /// With --zerocopy: where the piece starts, in bytes past the start of a page (its page offset).
    #[arg(long, value_parser = size_arg, default_value = "0", value_name = "BYTES", requires = "zerocopy")]
    pub offset: u64,
    /// Print the state of every H2T ring of the device (software cursors, the engine's registers, contexts,
    /// counters, the descriptors around the cursors, what the model recorded) after a scripted scenario: two
    /// verified copies of --size bytes on --nc's ring (--dir, then back), then an async copy left in flight.
    #[arg(long, conflicts_with_all = ["zerocopy", "raw"])]
    pub state: bool,
    /// Where the JSON report goes (`--json`).
    #[command(flatten)]
    pub json: JsonArg,
}

/// `ndma zerocopy`.
#[derive(Debug, Args)]
pub struct ZerocopyArgs {
    /// Direction: h2d (user buffer → device) or d2h (device → user buffer).
    #[arg(long, value_enum)]
    pub dir: UserDir,
    /// Bytes to move (e.g. 4K, 1M, 256M), over all requests.
    #[arg(long, value_parser = size_arg)]
    pub size: u64,
    /// How the user buffer's frames are laid out: contiguous, scattered (every page on its own frame) or runs:K
    /// (runs of K contiguous frames).
    #[arg(long, value_parser = layout_arg, default_value = "contiguous", value_name = "LAYOUT")]
    pub layout: Layout,
    /// Where the transfer starts in the user buffer, in bytes past the start of a page (its page offset is
    /// BYTES mod 4096).
    #[arg(long, value_parser = size_arg, default_value = "0", value_name = "BYTES")]
    pub offset: u64,
    /// Batch ops per request (the buffer is cut into REQUESTS × OPS consecutive parts).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub ops: u64,
    /// Requests (sync: one zerocopy_submit after another; --async: sequence numbers 1..=N, one completion each).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub requests: u64,
    /// Submit asynchronously (sequence numbers ≠ 0) and take the completions from the ring's completion queue.
    /// V2 has no async zero-copy: refused with the op layer's -EINVAL.
    #[arg(long = "async")]
    pub is_async: bool,
    /// Pre-pin the user window once (pin_host_memory) before the transfer, and unpin it after.
    #[arg(long)]
    pub prepinned: bool,
    /// NeuronCore whose H2T ring (and so whose queue and completion queue) the transfer uses.
    #[arg(long, default_value_t = 0)]
    pub nc: u32,
    /// Seed of the frame placement (scattered, runs:K) and of the data pattern.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the JSON report goes (`--json`).
    #[command(flatten)]
    pub json: JsonArg,
}

/// `ndma copy`.
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// Copy direction.
    #[arg(long, value_parser = dir_arg())]
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
    /// Where the JSON report goes (`--json`).
    #[command(flatten)]
    pub json: JsonArg,
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
    /// Where the JSON report goes (`--json`).
    #[command(flatten)]
    pub json: JsonArg,
}

/// `ndma bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Where the JSON report goes (`--json`).
    #[command(flatten)]
    pub json: JsonArg,
    /// Fewer repetitions and no 256 MiB cases (finishes in seconds; for tests and smoke runs).
    #[arg(long)]
    pub quick: bool,
    /// Also draw GB/s against copy size for each direction beside memcpy, as an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
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
    let command = cli.command.unwrap_or(Command::Demo(DemoArgs::default()));
    // Before any work: a bench or a campaign must not run for minutes and then fail to write its results.
    command.output_files().into_iter().try_for_each(check_writable)?;
    let instance = cli.instance.as_deref().unwrap_or(DEFAULT_INSTANCE);
    // `verify` takes `--instance all` and chooses its own budgets.
    let timing = if cli.driver_timing { WaitTiming::Driver } else { WaitTiming::Marker };
    if let Command::Verify(a) = &command {
        return cmd::verify::run(instance, cli.emulation_budgets, timing, !cli.quiet, a);
    }
    let opts = BedOpts { instance: instance_by_name(instance)?, emulation_budgets: cli.emulation_budgets, timing };
    match command {
        Command::Demo(a) => cmd::demo::run(opts, &a),
        Command::Inspect(a) => cmd::inspect::run(opts, &a, cli.instance.is_some()),
        Command::Copy(a) => cmd::copy::run(opts, &a, !cli.quiet),
        Command::Memset(a) => cmd::memset::run(opts, &a),
        Command::Bench(a) => cmd::bench::run(opts, &a),
        Command::Faults(a) => cmd::faults::run(opts, &a),
        Command::Zerocopy(a) => cmd::zerocopy::run(opts, &a),
        Command::Trace(a) => cmd::trace::run(opts, &a),
        Command::Completions(a) => cmd::completions::run(&a),
        Command::Man(a) => cmd::man::run(&a),
        Command::Verify(_) => unreachable!("handled above"),
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
    fn the_definition_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn the_help_lists_every_exit_code() {
        for c in crate::error::ExitCode::ALL {
            let line = format!("  {}  {}: ", c.code(), c.name());
            assert!(AFTER_HELP.contains(&line), "{line:?} missing from the help");
        }
    }

    #[test]
    fn unknown_instance_lists_the_valid_ones() {
        let err = instance_by_name("p4d.24xlarge").unwrap_err().to_string();
        assert!(err.contains("trn1.2xlarge") && err.contains("trn2.48xlarge"), "{err}");
    }
}
