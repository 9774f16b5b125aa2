//! `ndma verify`: a seeded randomized campaign of pattern-checked transfers over every path and direction,
//! with faults mixed in and leak accounting (see [`crate::verify`]).

use std::time::{Duration, Instant};

use clap::Args;
use ndma::Instance;
use ndma_emu::WaitTiming;

use crate::cli::instance_by_name;
use crate::error::{CliError, CliResult};
use crate::util::output::JsonArg;
use crate::verify::campaign::{self, Selection};
use crate::verify::config::{Bound, Budgets, Config, Engines, FaultMode, Ordering, DEFAULT_FAULT_RATE};
use crate::verify::path::PathKind;
use crate::verify::record::FindingKind;
use crate::verify::rng::random_seed;
use crate::verify::size::DEFAULT_BIG_RATE;
use crate::verify::summary::{Header, Report, Tally};

/// The `--json` schema, shown by `ndma verify --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object, written also when the run
failed (the command then exits 3)
  command              \"verify\"
  seed                 the campaign seed; replay the operation at index K with --seed S --replay K
  replay               the operation replayed (--replay), else null
  instances            instance presets run, in order (a campaign stops after the first that fails; a
                       descriptor fuzz runs the first preset of each arch)
  engines              \"threaded\" or \"inline\"
  faults               \"none\" or \"mix\"; fault_rate: share of faulted operations under mix
  big_rate             share of transfers drawn from the large sizes (batch boundary, several batches)
  budgets              \"silicon\" or \"emulation\"
  timing               marker-wait timing: \"marker\", or \"driver\" with --driver-timing
  ordering             \"adversarial\", \"relaxed\" or \"strict\"
  threads              threads issuing operations
  paths                paths drawn from: \"classic-sync\", \"async\", \"memset\", \"copy-descriptors\",
                       \"zero-copy-sync\", \"zero-copy-async\"
  operations           operations run
  bytes                bytes moved and verified
  corrupt              regions (window, guard or source) found holding wrong bytes
  leaks                ring slots, contexts, pool chunks, zero-copy state, engine queues or host memory
                       still held with nothing running
  uninjected_timeouts  timeouts nobody injected
  escapes              engine accesses outside the memory copy_descriptors accepted (--fuzz-descriptors)
  panics               panics caught around an operation
  unexpected           outcomes other than the one the inputs and the fault call for
  aborted              operations aborted (-EIO) by a failure elsewhere on their ring (one that could not
                       be re-staged after the ring re-initialisation)
  faults_missed        injected faults the operation never met
  device_faults        engine faults nobody injected
  unusable             devices that could not serve a copy after a fault
  accounting           rings whose counters differ from the work asked of them
  setup                operations that could not be set up
  benign_corruptions   corruptions the model reported benign, accounted for descriptor by descriptor
  outcomes             operations by outcome: ok, timeout, retry_exhausted, aborted, async_too_large,
                       partial_descriptor, invalid_descriptor_address, invalid_queue_type, out_of_range,
                       context_in_use, pin, failed (an async completion's errno), async_zerocopy_unsupported,
                       panic, ... (the op layer's error kinds)
  faults_injected      faults that took effect, by kind: hang, delay, bandwidth, corrupt, drop_final_write,
                       reset_window, and on the zero-copy paths hole, pin_fail, short_pin
  per_path             one object per path and direction: path, dir (h2d, d2h, d2d, h2h), operations, bytes
  slowest              the slowest operation: index, instance, path, dir, size, fault, elapsed_ms (the
                       op-layer calls alone)
  elapsed_s            wall time; ops_per_sec: operations per second
  failures             the first 20 findings: index (null for end-of-run checks), instance, kind, message,
                       op (the operation as drawn), replay (the command that replays it)
  bystanders           with --bystanders (else null): staged, and what became of them: completed (landed
                       before any recovery), replayed (re-staged by the recovery of a failure on their ring
                       and completed byte-exact), aborted (abandoned: a copy over its own source)
  fuzz_descriptors     with --fuzz-descriptors (else null), summed over the archs fuzzed: iterations,
                       descriptors (written through copy_descriptors), copies (executed from accepted rings,
                       each checked against the accepted windows), written_despite_refusal (refused rings
                       whose chunk changed); outcomes then counts iterations: executed, engine_fault, or the
                       refusal's kind
  passed               true when nothing was found";

/// `ndma verify`.
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// Campaign seed, decimal or 0x hex (default: random; printed either way).
    #[arg(long, value_parser = seed_arg)]
    pub seed: Option<u64>,
    /// Operations to run (default 10000).
    #[arg(long, conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Run for this long instead (e.g. 30s, 10m, 1h); each operation started finishes.
    #[arg(long, value_parser = duration_arg)]
    pub duration: Option<Duration>,
    /// Threads issuing operations.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Paths to draw from, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = PathKind::ALL)]
    pub paths: Vec<PathKind>,
    /// Engine execution: a worker thread per engine, or inline on the doorbell write.
    #[arg(long, value_enum, default_value = "threaded")]
    pub engines: Engines,
    /// Inject faults into a share of the operations (--fault-rate): hang, delay, bandwidth, corrupt,
    /// drop_final_write, reset_window; on the zero-copy paths hole, pin_fail, short_pin.
    #[arg(long, value_enum, default_value = "none")]
    pub faults: FaultMode,
    /// With --faults mix: a faulted classic-sync, memset or copy-descriptors operation runs while an unfaulted
    /// async copy (a bystander, staged first on its ring, one in four a copy over its own source) is in
    /// flight on the same ring. The op layer's recovery must re-stage the bystander (then it completes
    /// byte-exact) or abort it (Aborted, only a copy over its own source), as the fault calls for; the report
    /// counts bystanders completed in place, replayed and aborted.
    #[arg(long)]
    pub bystanders: bool,
    /// Share of operations that get a fault under --faults mix (0..=1).
    #[arg(long, default_value_t = DEFAULT_FAULT_RATE, value_parser = rate_arg)]
    pub fault_rate: f64,
    /// Share of transfers drawn from the large sizes: the 2031-descriptor batch boundary ± 1 byte and ± one
    /// descriptor, and several batches (0..=1).
    #[arg(long, default_value_t = DEFAULT_BIG_RATE, value_parser = rate_arg)]
    pub big_rate: f64,
    /// Marker-poll budgets: the driver's silicon budgets, or ×100000 as on an emulation platform. Under
    /// emulation budgets the fault mix holds only the kinds that need no timeout (delay, bandwidth, the pin
    /// faults hole, pin_fail and short_pin, and reset_window on V3): an injected hang would take minutes to
    /// time out.
    #[arg(long, value_enum, default_value = "silicon")]
    pub budgets: Budgets,
    /// Fabric ordering of the model: adversarial makes a missing write barrier show at once.
    #[arg(long, value_enum, default_value = "adversarial")]
    pub ordering: Ordering,
    /// Re-run exactly operation K of the seed's campaign and report it.
    #[arg(long, value_name = "K")]
    pub replay: Option<u64>,
    /// Instead of transfers: N iterations of random and adversarial descriptor rings written through
    /// copy_descriptors and run on an engine, counting escapes (engine accesses outside what the validation
    /// accepted) and panics. Runs on two devices of the --instance's arch, inline engines (with `--instance all`:
    /// N iterations for each arch).
    #[arg(long, value_name = "N", conflicts_with_all = ["count", "duration", "replay"])]
    pub fuzz_descriptors: Option<u64>,
    /// With --fuzz-descriptors: start at iteration K (replays iteration K with --fuzz-descriptors 1).
    #[arg(long, value_name = "K", default_value_t = 0, requires = "fuzz_descriptors")]
    pub fuzz_from: u64,
    /// Where the JSON report goes (`--json`).
    #[command(flatten)]
    pub json: JsonArg,
}

/// Parses a seed: decimal or `0x` hex.
///
/// # Errors
///
/// A message for anything else.
pub fn seed_arg(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| format!("invalid seed {s:?}: expected a decimal or 0x-prefixed hex number"))
}

/// Parses a duration such as `30s`, `10m`, `1h 30m`.
///
/// # Errors
///
/// `humantime`'s message.
pub fn duration_arg(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e} (e.g. 30s, 10m, 1h)"))
}

fn rate_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("invalid rate {s:?}: expected a number from 0 to 1")),
    }
}

/// The instances `--instance` names: one preset, or `all` of them.
///
/// # Errors
///
/// [`CliError::Usage`] for an unknown name.
pub fn instances(name: &str) -> CliResult<Vec<Instance>> {
    if name == "all" {
        return Ok(Instance::ALL.to_vec());
    }
    Ok(vec![instance_by_name(name)?])
}

/// Runs `ndma verify` on `--instance` `instance`.
///
/// # Errors
///
/// Usage errors, set-up failures, and [`CliError::Verify`] when anything was found (after the report and the
/// JSON are written).
pub fn run(instance: &str, emulation_flag: bool, timing: WaitTiming, progress: bool, a: &VerifyArgs) -> CliResult {
    // The global `--emulation-budgets` is `--budgets emulation`.
    let budgets = if emulation_flag { Budgets::Emulation } else { a.budgets };
    let instances = instances(instance)?;
    if a.bystanders && a.faults != FaultMode::Mix {
        return Err(CliError::Usage("--bystanders needs --faults mix (a bystander meets a faulted operation)".into()));
    }
    let seed = a.seed.unwrap_or_else(random_seed);
    let out = a.json.out();
    let bound = match (a.count, a.duration) {
        (_, Some(d)) => Bound::Duration(d),
        (Some(n), None) => Bound::Count(n),
        (None, None) => Bound::Count(10_000),
    };
    let paths = {
        let mut p = a.paths.clone();
        p.sort_unstable();
        p.dedup();
        p
    };
    let config = |inst: Instance| Config {
        bound,
        threads: a.threads as usize,
        paths: paths.clone(),
        engines: a.engines,
        faults: a.faults,
        fault_rate: a.fault_rate,
        bystanders: a.bystanders,
        big_rate: a.big_rate,
        budgets,
        ordering: a.ordering,
        progress,
        timing,
        ..Config::new(seed, inst)
    };
    let names: Vec<String> = instances.iter().map(|i| i.name.to_string()).collect();
    let mut header = Header {
        seed,
        replay: a.replay,
        instances: names.clone(),
        engines: a.engines.name(),
        faults: if a.faults == FaultMode::Mix { "mix" } else { "none" },
        fault_rate: a.fault_rate,
        big_rate: a.big_rate,
        budgets: budgets.name(),
        timing: if timing == WaitTiming::Driver { "driver" } else { "marker" },
        ordering: a.ordering.name(),
        threads: a.threads as usize,
        paths: paths.clone(),
        bystanders: a.bystanders,
    };
    let by = if a.bystanders { "; bystanders" } else { "" };
    let banner = format!(
        "ndma verify: seed {seed} · {} · {} engines · {} budgets · {} timing · {} ordering · faults {}{} · {} threads · {}",
        names.join(", "),
        header.engines,
        header.budgets,
        header.timing,
        header.ordering,
        header.faults,
        match (a.faults, budgets) {
            (FaultMode::None, _) => String::new(),
            (FaultMode::Mix, Budgets::Silicon) => format!(" ({}{})", a.fault_rate, by),
            (FaultMode::Mix, Budgets::Emulation) => {
                format!(" ({}; no kind that needs a timeout{})", a.fault_rate, by)
            }
        },
        a.threads,
        match (a.replay, bound) {
            _ if a.fuzz_descriptors.is_some() => format!(
                "descriptor fuzz: iterations {}..{} on two devices of {} each",
                a.fuzz_from,
                a.fuzz_from.saturating_add(a.fuzz_descriptors.unwrap_or(0)),
                fuzz_instances(&instances).iter().map(|i| i.arch.to_string()).collect::<Vec<_>>().join(" and ")
            ),
            (Some(k), _) => format!("replaying operation {k}"),
            (None, Bound::Count(n)) => format!("{n} operations per instance"),
            (None, Bound::Duration(d)) => format!("{} per instance", humantime::format_duration(d)),
        }
    );
    // The seed is printed whatever else is: in the report, or on stderr when stdout carries the JSON.
    if a.json.to_stdout() {
        eprintln!("{banner}");
    } else {
        out.say(&banner);
    }
    let started = Instant::now();
    let mut total = Tally::default();
    let mut fuzz = None;
    // The instances the report names are those that ran: one per arch for the fuzz (it is per arch), and a
    // campaign's up to the first that failed.
    let mut ran = Vec::new();
    if let Some(n) = a.fuzz_descriptors {
        let progress = progress && std::io::IsTerminal::is_terminal(&std::io::stderr());
        let mut sum = crate::verify::summary::FuzzReport::default();
        for inst in fuzz_instances(&instances) {
            let f = crate::verify::fuzz::run(seed, inst.arch, a.fuzz_from, n, |done| {
                if progress {
                    eprint!("\rndma verify: {} {done}/{n} fuzz iterations", inst.arch);
                }
            })?;
            if progress {
                eprintln!();
            }
            total.merge(f.tally(seed, inst.name));
            sum.iterations += f.iterations;
            sum.descriptors += f.descriptors;
            sum.copies += f.copies;
            sum.written_despite_refusal += f.written_despite_refusal;
            ran.push(inst.name.to_string());
        }
        fuzz = Some(sum);
    }
    for inst in instances.into_iter().filter(|_| a.fuzz_descriptors.is_none()) {
        let which = a.replay.map_or(Selection::All, Selection::One);
        let t = campaign::run(&config(inst), which)?;
        let failed = !t.passed();
        total.merge(t);
        ran.push(inst.name.to_string());
        if failed {
            break;
        }
    }
    header.instances = ran;
    let mut report = Report::new(header, &total, started.elapsed().as_secs_f64());
    report.fuzz_descriptors = fuzz;
    out.text(&report.render());
    if let Some(f) =
        report.failures.iter().find(|f| f.kind != FindingKind::UninjectedTimeout).or(report.failures.first())
    {
        if let Some(r) = &f.replay {
            out.say(format_args!("first failure: {} — replay: {r}", f.kind.name()));
        }
    }
    out.wrote(a.json.write(&report)?);
    if report.passed {
        return Ok(());
    }
    let first = report.failures.first().map_or(String::new(), |f| {
        format!(
            "; first: {} in {}{}",
            f.kind.name(),
            f.index.map_or("the end-of-run checks".to_string(), |i| format!("operation {i}")),
            f.replay.as_ref().map(|r| format!(" (replay: {r})")).unwrap_or_default()
        )
    });
    Err(CliError::Verify(format!(
        "seed {seed}: {} corrupt, {} leaks, {} uninjected timeouts, {} escapes, {} panics, {} other findings{first}",
        report.corrupt,
        report.leaks,
        report.uninjected_timeouts,
        report.escapes,
        report.panics,
        report.unexpected
            + report.faults_missed
            + report.device_faults
            + report.unusable
            + report.accounting
            + report.setup
    )))
}

/// The instances a descriptor fuzz runs on: the first of each arch (the fuzz depends on the arch alone).
fn fuzz_instances(instances: &[Instance]) -> Vec<Instance> {
    let mut first = Vec::<Instance>::new();
    for &i in instances {
        if !first.iter().any(|f| f.arch == i.arch) {
            first.push(i);
        }
    }
    first
}
